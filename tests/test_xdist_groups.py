"""The README's test command runs the tests on every core (pytest-xdist, `--dist loadgroup`): the tests
that share a module-scoped fixture must run on one worker, or each worker builds the fixture's package
again (tests/conftest.py's pytest_collection_modifyitems)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_tests_sharing_a_module_fixture_run_on_one_worker():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:cacheprovider", "tests/test_names.py", "-k",
         "generate_and_every_local or stay_as_written"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    passed = [line.split()[-1] for line in result.stdout.splitlines() if " PASSED " in line]
    assert len(passed) == 2, result.stdout[-3000:] + result.stderr[-2000:]
    # xdist names a grouped test's node `NODEID@GROUP`, and sends a group to one worker
    assert all(nodeid.endswith("@tests.test_names:colliding") for nodeid in passed), result.stdout[-3000:]
    workers = {line.split()[0] for line in result.stdout.splitlines() if " PASSED " in line}
    assert len(workers) == 1, result.stdout[-3000:]
