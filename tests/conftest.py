import functools
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`-n`, with `--dist loadgroup` from pyproject.toml), the tests that share a
    module-scoped fixture (a generated package built once, a suite run once) go to one worker, so that
    the fixture is not built again on the other; a test that names its group itself keeps it. First:
    xdist's worker reads the groups in its own modifyitems hook, which ran before this one otherwise,
    and no test was grouped (a fresh clone's CI built examples/llm's package and test_traps'
    torch_library package on both workers; pyproject.toml also keeps pytest below 9.2, where xdist
    3.8 groups nothing). `-v` shows each grouped test's nodeid ending in @ and its group."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        params = item.callspec.params if hasattr(item, "callspec") else {}
        shared = [
            f"{name}={params[name]}" if name in params else name
            for name, definitions in item._fixtureinfo.name2fixturedefs.items()
            if definitions[-1].scope == "module"
        ]
        if shared:
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{','.join(sorted(shared))}"))
    # The slow tests and the groups first, the quick ones after: xdist hands tests out in this order, and
    # a suite of a minute or two that starts last keeps one worker busy while the other has nothing left.
    items.sort(key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("xdist_group")))


_BUILT: dict = {}


def built_once(key, build):
    """`build()`'s value, made once per test process for `key`: a module-scoped fixture that builds a
    generated package calls it, because pytest tears such a fixture down whenever its worker runs a test
    of another module in between (pytest-xdist sends a worker tests of several modules), and a rebuild
    costs up to a minute and a half here."""
    if key not in _BUILT:
        _BUILT[key] = build()
    return _BUILT[key]


@pytest.fixture
def muladd_spec() -> Path:
    return EXAMPLES / "muladd.yaml"


def write_pairsum_kernel(path: Path) -> None:
    """Do what a user of examples/custom.yaml does: write the kernel body, drop the launcher's `raise`.

    Also run on the GPU machine (docs/gpu.md), on a copy of the golden tree.
    """
    text = path.read_text()
    text = re.sub(r"    raise NotImplementedError\(\n.*\n    \)\n", "", text)
    text = text.replace(
        "    out = tl.full((BLOCK_SIZE,), 0.0, dtype=COMPUTE_DTYPE)\n",
        "    pairs = 2 * offsets\n"
        "    out = tl.load(x_ptr + pairs, mask=mask).to(COMPUTE_DTYPE)"
        " + tl.load(x_ptr + pairs + 1, mask=mask).to(COMPUTE_DTYPE)\n",
    )
    assert "raise NotImplementedError" not in text and "pairs = 2 * offsets" in text
    path.write_text(text)


def cpu_seconds(command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """Run `command` to its end, with the CPU seconds (user + system) it took: a bound on its work, not on
    how busy the machine is (the README's test command runs a test on every core)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


# CPU seconds of `python_workload` on the quiet machine the CPU-time bounds of the tests were set on.
QUIET_WORKLOAD_SECONDS = 0.08


def python_workload() -> float:
    """CPU seconds of this thread for a fixed piece of pure Python work."""
    start = time.thread_time()
    sum(i * i for i in range(2_000_000))
    return time.thread_time() - start


@functools.cache
def slowness() -> float:
    """How many times slower this machine runs Python than the quiet one the CPU-time bounds were set on, never
    below 1. A shared CI machine ran the same commands 2-3x slower on some days (stop 28's CI: `kopgen new` in
    1.58 s of CPU, 0.6-0.85 s on a quiet day): a bound scaled by it still catches a regression of kopgen's own."""
    return max(1.0, min(python_workload() for _ in range(3)) / QUIET_WORKLOAD_SECONDS)


def cpu_bound(seconds: float) -> float:
    """A CPU-time bound set on the quiet machine, for this one."""
    return seconds * slowness()


def pip_install(repo: Path, site: Path) -> None:
    """Build and install a generated repo into `site` (pip, no build isolation, C++ warnings as errors)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(repo)],
        check=True,
        env={**os.environ, "CFLAGS": "-Werror"},
    )


def run_suite(
    repo: Path, env: dict, *pytest_args: str, aoti: bool = False, wheel: bool = False
) -> subprocess.CompletedProcess:
    """The generated suite against the installed package: `python -P` keeps the repo's own
    sources (which hold no built extension) off sys.path. Warnings are errors: the generated
    conftest.py filters the few of torch's own code that the suite cannot avoid, as marks,
    which take precedence over `-W error`. Two costly files run only where asked (test_end_to_end
    runs both on the examples): the AOTInductor test (15-17 s of CPU, a C++ compile), and the
    wheel's test (a build, a venv and the suite again; it runs where the package is imported
    from its sources)."""
    skipped = () if aoti else ("--ignore=tests/test_aoti.py",)
    skipped += () if wheel else ("--ignore=tests/test_wheel.py",)
    return subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-W", "error", *skipped,
         *pytest_args],
        cwd=repo, env=env, capture_output=True, text=True, check=False,
    )


def installed_suite_passes(repo: Path, site: Path, *pytest_args: str, at_least: int = 0) -> subprocess.CompletedProcess:
    """Install `repo` into `site`, run its generated suite against it, and assert that it passes
    (at least `at_least` tests, where given)."""
    pip_install(repo, site)
    result = run_suite(repo, {**os.environ, "PYTHONPATH": str(site)}, *pytest_args)
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed.group(1)) >= at_least, result.stdout[-2000:]
    return result
