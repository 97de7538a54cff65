"""The generated benchmark's arguments of `kernel` ops (benchmarks/bench_ops.py's make_args): drawn as the
op's tests draw them (the spec's dtypes, bounds and shape relations), with rows enough for the benchmark's
size. They were float32 matrices of 1024 columns for every Tensor, which the bundled examples/llm's
kernels refuse (silu_and_mul: out must be input's shape with the last dimension halved)."""

from __future__ import annotations

import ast

import pytest
import torch

from kopgen.pipeline import load_spec_text
from kopgen.plan import plan
from kopgen.render import render

from .conftest import ROOT


def make_args():
    """make_args of the benchmark of examples/llm, taken out of the rendered file and run here."""
    package = load_spec_text((ROOT / "examples/llm/kopgen.yaml").read_text(), str(ROOT / "examples/llm/kopgen.yaml"))
    (bench,) = [f for f in plan(package) if f.path == "benchmarks/bench_ops.py"]
    tree = ast.parse(render(bench, package))
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "make_args"]
    scope = {"torch": torch}
    exec(compile(ast.Module([function], []), "bench_ops.py", "exec"), scope)  # noqa: S102 - kopgen's own output
    return scope["make_args"]


@pytest.mark.parametrize("numel", [1, 1024, 1 << 16])
def test_a_kernel_ops_arguments_keep_its_tests_relations_dtypes_and_bounds(numel):
    make = make_args()
    out, x = make("silu_and_mul", numel, "cpu")
    assert out.shape == x.shape[:-1] + (x.shape[-1] // 2,) and x.dtype == torch.float32
    x, w, eps = make("rms_norm", numel, "cpu")
    assert w.shape == (x.shape[-1],) and eps == 1e-5
    positions, query, key, head_size, cache, neox = make("rotary_embedding", numel, "cpu")
    assert positions.dtype == torch.int64 and 0 <= positions.min() and positions.max() < 20
    assert query.shape == (positions.shape[0], 4 * head_size) and key.shape == (positions.shape[0], 2 * head_size)
    assert cache.shape == (20, head_size - 4) and neox is True
    result, x, scale = make("static_scaled_fp8_quant", numel, "cpu")
    assert result.dtype == torch.float8_e4m3fn and result.shape == x.shape and scale.shape == (1,)
    assert -1000 <= x.min() and x.max() <= 1000 and 0.5 <= scale.item() <= 2.0
    # the rows follow the size: about `numel` elements in the largest Tensor (a row at least)
    assert query.numel() == max(1, numel // query.shape[1]) * query.shape[1]
    assert x.numel() <= max(numel, x.shape[1])


def test_a_relation_that_refuses_more_rows_keeps_the_samples_shapes(tmp_path):
    """`w`'s rows are 16 less x's: no number of rows but the sample's suits it, and generating stopped on it."""
    spec = (
        "kopgen: 1\npackage: krel\ndefaults: {backends: {cpu: python}}\nops:\n"
        '  - schema: "f(Tensor x, Tensor w) -> Tensor"\n    kernel: custom\n    reference: "x[:8] * w"\n'
        "    fake: {shape: w.shape}\n    tests:\n      shapes: [{x: [8, 6], w: [8, 6]}]\n"
        '      args:\n        w: {shape: "(16 - x.shape[0], x.shape[1])"}\n'
    )
    package = load_spec_text(spec, "kopgen.yaml")
    (bench,) = [f for f in plan(package) if f.path == "benchmarks/bench_ops.py"]
    assert '"f": lambda: (drawn(8, 6), drawn(8, 6)),' in render(bench, package)
