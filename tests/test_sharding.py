"""DTensor sharding rules (kopgen/lang/sharding.py): which ops get one, the line that registers it, the
strategies each kind implies, and the registration that waits for torch.distributed.tensor's import."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from kopgen.lang import sharding
from kopgen.pipeline import load_spec

from .conftest import EXAMPLES


def ops_of(example: str) -> dict:
    return {op.name: op for op in load_spec(EXAMPLES / f"{example}.yaml").ops}


@pytest.mark.parametrize(
    ("example", "sharded", "not_sharded"),
    [
        ("muladd", {"muladd", "muladd_backward"}, set()),
        ("rows", {"rowsum", "rowmax", "rowmax_backward", "rowdot", "bias_leaky", "bias_leaky_backward", "scale_shift",
                  "scale_shift_backward", "weighted_rowsum"}, set()),
        ("norms", {"rms_norm", "layer_norm", "softmax", "log_softmax", "rms_norm_backward", "layer_norm_backward",
                   "softmax_backward", "log_softmax_backward"}, {"fused_add_rms_norm"}),
        ("gated", {"silu_and_mul", "silu_and_mul_backward", "gelu_tanh_and_mul", "gelu_tanh_and_mul_backward",
                   "fatrelu_and_mul", "fatrelu_and_mul_backward"}, {"silu_and_mul_out"}),
        ("fused", {"muladd", "muladd_backward", "mul", "square", "rms_norm", "rms_norm_backward", "layer_norm",
                   "layer_norm_backward", "softmax", "softmax_backward"}, {"muladd_out", "scale_", "fused_add_rms_norm"}),
        ("custom", set(), {"pairsum"}),
    ],
)
def test_pointwise_and_row_ops_get_a_rule_on_every_route_mutating_and_custom_ops_none(example, sharded, not_sharded):
    ops = ops_of(example)
    assert {name for name, op in ops.items() if sharding.shards(op)} == sharded
    assert not_sharded <= set(ops) - sharded


def test_the_registration_names_the_tensors_outputs_and_rows():
    rows, norms, gated = ops_of("rows"), ops_of("norms"), ops_of("gated")
    assert sharding.registration(rows["bias_leaky"])[2:] == [
        "# DTensor shards krows::bias_leaky as its inputs.",
        "_support.shard_as_inputs(torch.ops.krows.bias_leaky.default, tensors=(0, 1), outputs=1)",
    ]
    assert sharding.registration(rows["rowdot"])[3].endswith("tensors=(0, 1), outputs=1, rows=True\n)")
    assert "tensors=(0, 1, 2), outputs=1, rows=True" in sharding.registration(norms["layer_norm"])[3]
    assert "tensors=(0,), outputs=1, rows=True" in sharding.registration(gated["silu_and_mul"])[3]
    assert sharding.registration(norms["fused_add_rms_norm"]) == []


def test_an_op_without_a_cpu_kernel_gets_the_rule_and_no_check(tmp_path):
    spec = (EXAMPLES / "muladd.yaml").read_text().replace("backends: {cpu: triton, cuda: triton}", "backends: {cuda: triton}")
    assert "backends: {cuda: triton}" in spec
    (tmp_path / "kopgen.yaml").write_text(spec)
    op = load_spec(tmp_path / "kopgen.yaml").ops[0]
    assert sharding.shards(op) and not sharding.tested(op)


def support_helpers() -> dict:
    """_support.py's helpers of the rules, run as the generated module runs them."""
    import torch

    namespace = {"torch": torch, "sys": sys, "importlib": importlib, "Callable": Callable}
    exec(sharding.SUPPORT, namespace)  # noqa: S102 - kopgen's own text
    return namespace


class Like:
    """What DTensor passes the rule for a Tensor: something with a shape."""

    def __init__(self, *shape: int):
        self.shape, self.ndim = shape, len(shape)


def short(placement) -> str | None:
    return None if placement is None else "R" if placement.is_replicate() else f"S({placement.dim})"


R, S0, S1 = "R", "S(0)", "S(1)"


@pytest.mark.parametrize(
    ("what", "tensors", "outputs", "rows", "args", "expected", "per_row"),
    [
        # Pointwise: each output dimension, every input that holds it sharded along it.
        ("same shapes", (0, 1), 1, False, (Like(8, 6), Like(8, 6), 1.25),
         [([R], [R, R, None]), ([S0], [S0, S0, None]), ([S1], [S1, S1, None])], ()),
        # An input of fewer dimensions is aligned at the right; a size-1 dimension broadcasts: replicated.
        ("broadcast", (0, 1), 1, False, (Like(8, 6), Like(6)), [([R], [R, R]), ([S0], [S0, R]), ([S1], [S1, S0])], ()),
        ("size 1", (0, 1), 1, False, (Like(1, 6), Like(8, 1)), [([R], [R, R]), ([S0], [R, S0]), ([S1], [S1, R])], ()),
        ("two outputs", (0,), 2, False, (Like(4, 5),), [([R, R], [R]), ([S0, S0], [S0]), ([S1, S1], [S1])], ()),
        # A 0-d input: one strategy, all replicated.
        ("0-d", (0,), 1, False, (Like(),), [([R], [R])], ()),
        # Row ops: never along the last dimension (rowdot's a and b; rms_norm's x and its weight of the rows' width).
        ("reduce", (0, 1), 1, True, (Like(8, 6), Like(6), 1.0), [([R], [R, R, None]), ([S0], [S0, R, None])], ()),
        ("normalize", (0, 1, 2), 1, True, (Like(2, 4, 16), Like(16), None, 1e-5),
         [([R], [R, R, None, None]), ([S0], [S0, R, None, None]), ([S1], [S1, R, None, None])], ()),
        # A split op's halves share x's last dimension: the same as a row op.
        ("split", (0,), 1, True, (Like(8, 12),), [([R], [R]), ([S0], [S0])], ()),
        # A row reduction's backward kernel (grad, x, result): grad and result hold a value per row.
        ("row gradient", (0, 1, 2), 1, True, (Like(2, 4), Like(2, 4, 16), Like(2, 4)),
         [([R], [R, R, R]), ([S0], [S0, S0, S0]), ([S1], [S1, S1, S1])], (0, 2)),
    ],
)
def test_the_strategies_are_what_the_kind_implies(what, tensors, outputs, rows, args, expected, per_row):
    shardings = support_helpers()["shardings"]
    strategies = shardings(tensors, outputs, rows, args, per_row)
    assert [([short(p) for p in out], [short(p) for p in ins]) for out, ins in strategies] == expected, what


# A process that defines an op, has the helper register its rule before torch.distributed.tensor is imported,
# then imports it and runs the op on DTensors of a one-process gloo mesh.
AFTER_IMPORT = """
import sys
import torch

@torch.library.custom_op("ksharded::mul", mutates_args=())
def mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * b

@torch.library.custom_op("ksharded::rowsum", mutates_args=())
def rowsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(-1)

mul.register_fake(lambda a, b: torch.empty(torch.broadcast_shapes(a.shape, b.shape)))
rowsum.register_fake(lambda x: x.new_empty(x.shape[:-1]))
namespace = {"torch": torch}
exec(HELPERS, namespace)
# Two rules: two hooks, each finding DTensor through the other.
namespace["shard_as_inputs"](torch.ops.ksharded.mul.default, tensors=(0, 1), outputs=1)
namespace["shard_as_inputs"](torch.ops.ksharded.rowsum.default, tensors=(0,), outputs=1, rows=True)
assert "torch.distributed.tensor" not in sys.modules, "registering imported DTensor"

import torch.distributed as dist
from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
a, b = torch.randn(8, 6), torch.randn(6)
out = torch.ops.ksharded.mul.default(distribute_tensor(a, mesh, [Shard(1)]), distribute_tensor(b, mesh, [Shard(0)]))
assert out.placements == (Shard(1),), out.placements
torch.testing.assert_close(out.full_tensor(), a * b)
out = torch.ops.ksharded.rowsum.default(distribute_tensor(a, mesh, [Shard(0)]))
assert out.placements == (Shard(0),), out.placements
torch.testing.assert_close(out.full_tensor(), a.sum(-1))
assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)  # it left
dist.destroy_process_group()
print("registered after the import")
"""


def test_the_rule_is_registered_when_dtensor_is_imported_after_the_package():
    helpers = "import importlib.util\nimport sys\nfrom collections.abc import Callable\n" + sharding.SUPPORT
    script = f"HELPERS = {helpers!r}\n" + textwrap.dedent(AFTER_IMPORT)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "registered after the import" in result.stdout
