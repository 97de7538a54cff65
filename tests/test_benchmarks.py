"""benchmarks/perf.py, the one command for issue 15's tables: each table prints every candidate with
numbers, a candidate that computes the wrong result is left out and said so, and the command runs end
to end on the generated packages (slow: it builds the Python routes)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from .conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"


def tables(text: str) -> dict[str, dict[str, list[str]]]:
    """{title: {first cell: the other cells}} of what perf.py printed: a title line starts with '## ',
    a blank line follows, then the table's lines up to the next blank line."""
    found, rows, title = {}, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            title, found[line[3:]], rows = line[3:], {}, None
        elif title and rows is None and not line.strip():
            rows = found[title]  # the blank line under the title: the table starts
        elif rows is not None and line.strip():
            name, *cells = split_row(line)
            rows[name] = cells
        else:
            title = rows = None  # the table has ended; what follows until the next title is not in it
    return found


def split_row(line: str) -> tuple[str, ...]:
    """A row's first cell (which may hold spaces) and its numbers: cells are 2+ spaces apart."""
    return tuple(cell.strip() for cell in line.split("  ") if cell.strip())


def numbers(cells: list[str]) -> list[float]:
    return [float(cell) for cell in cells if cell != "—"]


@pytest.fixture(scope="module")
def perf():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import perf

        yield perf
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def bench(perf):
    import torch

    def muladd(a, b, c):
        return a * b + c

    def wrong(a, b, c):
        return a * b - c

    rows = types.SimpleNamespace(
        rowsum=lambda x: x.sum(-1),
        rowmean=lambda x: x.mean(-1),
        rowmax=lambda x: x.amax(-1),
        rowmin=lambda x: x.amin(-1),
    )
    ops = {"custom_op": muladd, "wrong": wrong}
    return perf.Bench(torch, "cpu", perf.sizes_for("cpu", quick=True), ops, muladd, {"custom_op": rows})


def test_per_call_table_has_every_candidate_with_and_without_grad(perf, bench, capsys):
    perf.per_call(bench)
    out = capsys.readouterr().out
    assert "per call: wrong API, no grad left out: AssertionError" in out
    assert "per call: wrong API, grad left out: AssertionError" in out
    (table,) = tables(out).values()
    assert table["candidate"] == ["no grad µs", "x eager", "x bare", "requires grad µs", "x eager"]
    # The stand-ins register no operator: only their API rows.
    assert set(table) == {"candidate", "eager a * b + c", "bare launcher", "custom_op API"}
    assert len(numbers(table["custom_op API"])) == 5 and min(numbers(table["custom_op API"])) > 0
    assert table["bare launcher"][3:] == ["—", "—"]  # a launcher has no autograd
    assert numbers(table["eager a * b + c"])[1] == 1.0  # its own ratio


def test_bandwidth_tables_cover_contiguous_broadcast_and_transposed(perf, bench, capsys):
    perf.bandwidth(bench)
    found = tables(capsys.readouterr().out)
    assert [title.split(",")[0] for title in found] == [
        "Bandwidth: contiguous 4096 float32",
        "Bandwidth: contiguous 4096 bfloat16",
        "Bandwidth: contiguous x[64",
        "Bandwidth: broadcast x[64",
        "Bandwidth: transposed x[256",
    ]
    for title, table in found.items():
        assert set(table) == {"candidate", "custom_op API", "eager a * b + c", "device copy"}, title
        width = 4 if "contiguous" in title else 5  # ms, GB/s, x eager, x copy (, x contiguous)
        assert all(len(numbers(table[name])) == width for name in table if name != "candidate"), title
        assert numbers(table["device copy"])[3] == 1.0


def test_reduction_tables_compare_each_op_with_torch_and_the_copy(perf, bench, capsys):
    perf.reductions(bench)
    found = tables(capsys.readouterr().out)
    assert len(found) == 6  # 3 shapes x float32, bfloat16
    for table in found.values():
        assert list(table) == ["op", "sum", "mean", "max", "min"]
        assert all(len(numbers(table[op])) == 5 for op in ("sum", "mean", "max", "min"))


@pytest.mark.slow
def test_the_command_builds_the_python_routes_and_prints_its_tables(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, str(BENCHMARKS / "perf.py"), "--quick", "--device", "cpu", "--workdir", str(tmp_path)]
    command += ["--only", "percall", "backward", "--routes", "custom_op", "library"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "left out" not in result.stdout
    found = tables(result.stdout)
    per_call, backward = found.values()
    assert {"custom_op operator", "library operator", "bare launcher"} <= set(per_call)
    assert {"custom_op API", "library API", "torch.compile(eager)"} <= set(backward)
    assert all(value > 0 for value in numbers(backward["library API"]))


def test_cuda_kernels_check_reports_each_wrong_value_and_nothing_else(perf, monkeypatch):
    """benchmarks/cuda_kernels.py's value check (on the GPU it checks the CUDA kernels), here on
    CPU against torch's own functions, then with one op wrong."""
    import cuda_kernels  # beside perf, whose fixture puts benchmarks/ on the path
    import torch

    monkeypatch.setattr(cuda_kernels, "DEVICE", "cpu")
    monkeypatch.setattr(cuda_kernels, "ROW_SHAPES", [(5, 7), (4, 0)])
    monkeypatch.setattr(cuda_kernels, "TILE_SHAPES", [(70, 33)])
    right = types.SimpleNamespace(
        muladd=lambda a, b, c: a * b + c,
        rowsum=lambda x: x.sum(-1),
        rowmean=lambda x: x.mean(-1),
        rowmax=lambda x: x.amax(-1),
        rowmin=lambda x: x.amin(-1),
        rowdot=lambda a, w: (a if w is None else a * w).sum(-1),
    )
    assert cuda_kernels.check_values(torch, right) == []
    wrong = cuda_kernels.check_values(torch, types.SimpleNamespace(**{**vars(right), "rowmean": right.rowsum}))
    # 2 shapes (an empty row: sum 0, mean nan), 2 offsets, 4 dtypes
    assert len(wrong) == 16 and all(line.startswith("rowmean ") for line in wrong), wrong


def test_triton_norms_kernels_reports_each_cases_fastest_round_against_the_copy(monkeypatch, capsys):
    """benchmarks/triton_norms_kernels.py's table: per case and label the fastest round, the fastest copy of
    the shape, the bandwidth as the tensors the kernel moves against that copy, and now / before."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import triton_norms_kernels

    triton_norms_kernels.report([
        "before|bfloat16|8192|33.5|softmax|41.0|1", "now|bfloat16|8192|33.6|softmax|36.0|1",
        "before|bfloat16|8192|33.4|softmax|40.0|1", "now|bfloat16|8192|34.0|softmax|34.0|1",
        "before|bfloat16|8192|33.4|rms_norm_backward|100.2|1.5", "now|bfloat16|8192|33.4|rms_norm_backward|93.5|1.5",
    ])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["dtype | hidden | copy | op | before | now | now / before", "--- | --- | --- | --- | --- | --- | ---"]
    assert lines[2:] == ["bfloat16 | 8192 | 33.4 us | rms_norm_backward | 100.2 us (50%) | 93.5 us (54%) | 0.933",
                         "bfloat16 | 8192 | 33.4 us | softmax | 40.0 us (84%) | 34.0 us (98%) | 0.850"]
