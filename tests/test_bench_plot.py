"""The generated benchmark's `--plot`: bandwidth per op and size against a copy of the same bytes.

Run on the muladd golden tree (kept equal to what kopgen generates by test_generate.py) in a
subprocess, at tiny sizes on the CPU. matplotlib is optional: where it is missing, `--plot` must
stop at once with a clear message, and the drawing is checked on an Axes-like recorder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

REPO = ROOT / "tests/golden/muladd"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'benchmarks'}", "PYTHONDONTWRITEBYTECODE": "1"}

# Measures muladd at two tiny sizes and draws it on a recorder of the Axes calls it gets.
SWEEP_AND_DRAW = """
import json, sys
import bench_ops

class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append([name, list(args), kwargs])

points = bench_ops.sweep("muladd", "cpu", [1024, 4096], min_time=0.01)
axes = Recorder()
bench_ops.draw(axes, "muladd", points)
if len(sys.argv) > 1:  # matplotlib is here: draw the real figure too
    bench_ops.plot(sys.argv[1], ["muladd"], "cpu", [1024], min_time=0.01)
print(json.dumps({"points": points, "calls": axes.calls}))
"""


@pytest.mark.skipif(HAS_MATPLOTLIB, reason="matplotlib is installed: the message cannot be shown")
def test_plot_without_matplotlib_stops_before_measuring(tmp_path):
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_ops.py", "--device", "cpu", "--plot", str(tmp_path / "bw.png")],
        cwd=REPO, env=ENV, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "--plot needs matplotlib (pip install matplotlib)" in result.stderr
    assert result.stdout == ""  # not one timing ran
    assert not (tmp_path / "bw.png").exists()


def test_sweep_measures_op_and_copy_and_draws_them(tmp_path):
    figure = tmp_path / "bw.png"
    result = subprocess.run(
        [sys.executable, "-c", SWEEP_AND_DRAW, *([str(figure)] if HAS_MATPLOTLIB else [])],
        env=ENV, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    drawn = json.loads(result.stdout.splitlines()[-1])
    # muladd reads x and y and writes out: 3 float32 tensors per call.
    assert [moved for moved, _, _ in drawn["points"]] == [3 * 4 * 1024, 3 * 4 * 4096]
    assert all(op > 0 and copy > 0 for _, op, copy in drawn["points"])
    plots = [call for call in drawn["calls"] if call[0] == "plot"]
    megabytes = [3 * 4 * 1024 / 1e6, 3 * 4 * 4096 / 1e6]
    assert [call[1][0] for call in plots] == [megabytes, megabytes]
    assert [call[1][1] for call in plots] == [[p[1] for p in drawn["points"]], [p[2] for p in drawn["points"]]]
    assert [call[2]["label"] for call in plots] == ["muladd", "copy (roofline)"]
    assert ["set_xscale", ["log"], {}] in drawn["calls"] and ["set_yscale", ["log"], {}] in drawn["calls"]
    assert drawn["calls"][-1][0] == "legend"
    if HAS_MATPLOTLIB:
        assert figure.read_bytes().startswith(b"\x89PNG")


def test_bytes_moved_count_an_argument_read_and_written_in_place_twice():
    """norms' fused_add_rms_norm reads x and residual and writes both in place (and returns nothing): a
    call moves x and residual twice and the weight once, whichever variant is timed. An out= argument
    (gated's silu_and_mul_out) is only written: once."""
    norms = ROOT / "tests/golden/norms"
    program = (
        "import bench_ops\n"
        "args = bench_ops.make_args('fused_add_rms_norm', 1024, 'cpu')\n"
        "print(bench_ops.READ_AND_WRITTEN['fused_add_rms_norm'], bench_ops.bytes_moved('fused_add_rms_norm', args))"
    )
    env = {**ENV, "PYTHONPATH": f"{norms}{os.pathsep}{norms / 'benchmarks'}", "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", program], cwd=norms, env=env, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["(0,", "1)", str(5 * 1024 * 4)]  # x, residual twice; weight once
    gated = (ROOT / "tests/golden/gated/benchmarks/bench_ops.py").read_text()
    assert '"silu_and_mul_out": ()' in gated
