"""The gated-split kind (`split: {x: [gate, up]}` beside `compute`): what the model, `kopgen check` and
the generated code make of it. The generated suite of examples/gated.yaml runs every kernel
(tests/test_end_to_end.py); test_compiled.py compiles and runs split ops in C++ and CUDA."""

from __future__ import annotations

import importlib
import shutil
import sys

import pytest

from kopgen import generate, load_spec
from kopgen.report import describe_plan

from .conftest import EXAMPLES

GATED = EXAMPLES / "gated.yaml"


def test_kernels_read_the_halves_and_the_schema_keeps_the_argument():
    ops = {op.name: op for op in load_spec(GATED).ops}
    silu = ops["silu_and_mul"]
    assert [a.name for a in silu.args] == ["x"]
    assert [a.name for a in silu.read_args] == ["gate", "up"]
    assert [t.name for t in silu.kernel_tensors] == ["gate", "up", "out"]
    out = ops["silu_and_mul_out"]
    assert [(t.name, t.read, t.written) for t in out.kernel_tensors] == [
        ("gate", True, False), ("up", True, False), ("out", False, True)]


def test_a_formula_that_reads_the_halves_saves_the_argument():
    backward = {op.name: op for op in load_spec(GATED).ops}["fatrelu_and_mul"].backward
    assert [(s.name, s.source) for s in backward.saved_tensors] == [("x", "x")]
    assert backward.scalars == ("threshold",)


def test_check_names_the_halves():
    plan = describe_plan(load_spec(GATED), "gated.yaml")  # what `kopgen check` prints
    # the four ops, and the backward kernels of the three with a backward (two on Python routes, fatrelu_and_mul
    # on stable_abi), which read x's halves too
    assert plan.count("  split:    x in halves, read in place: gate = x[..., :d], up = x[..., d:]\n") == 7


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """The generated references and _support, alone in a package (the whole one needs its C++ built)."""
    root = tmp_path_factory.mktemp("gated")
    repo = generate(GATED, root / "repo")
    alone = root / "site" / "kgated_alone"
    alone.mkdir(parents=True)
    (alone / "__init__.py").write_text("")
    for module in ("reference.py", "_support.py"):
        shutil.copyfile(repo / "kgated" / module, alone / module)
    sys.path.insert(0, str(alone.parent))
    try:
        yield importlib.import_module("kgated_alone.reference"), importlib.import_module("kgated_alone._support")
    finally:
        sys.path.remove(str(alone.parent))
        for name in [m for m in sys.modules if m.startswith("kgated_alone")]:
            del sys.modules[name]


def test_references_compute_over_the_halves(gated):
    import torch

    reference, _ = gated
    x = torch.randn(3, 4, 10, dtype=torch.float64)
    gate, up = x[..., :5], x[..., 5:]
    torch.testing.assert_close(reference.silu_and_mul(x), gate * torch.sigmoid(gate) * up)
    gelu = 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate**3)))
    torch.testing.assert_close(reference.gelu_tanh_and_mul(x), gelu * up)
    torch.testing.assert_close(reference.fatrelu_and_mul(x, 0.25), torch.where(gate > 0.25, gate, 0.0) * up)


def test_halves_are_views_and_an_odd_width_is_refused(gated):
    import torch

    _, support = gated
    x = torch.randn(4, 6)
    gate, up = support.split_halves("kgated::silu_and_mul", x)
    assert gate.data_ptr() == x.data_ptr() and up.data_ptr() == x[:, 3:].data_ptr() and gate.stride() == (6, 1)
    with pytest.raises(RuntimeError, match=r"kgated::silu_and_mul: the last dimension is split in halves, so its "
                                           r"size must be even; got 5 \(shape \[4, 5\]\)"):
        support.split_halves("kgated::silu_and_mul", x[:, :5])
    with pytest.raises(RuntimeError, match="got none"):
        support.split_halves("kgated::silu_and_mul", torch.tensor(1.0))
