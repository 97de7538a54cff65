"""This module writes the DTensor sharding rules of the ops whose kind makes them known (issue 17): a pointwise
op (`compute`) is sharded as its inputs, each output dimension as the inputs that hold it; a row op (`reduce`,
`normalize`, and `split`, whose last dimension holds the halves) the same along every dimension but the last,
which each shard keeps whole. It writes each such op's registration (_registration.py, on every route: the rule
is Python that DTensor calls), the helpers it calls (_support.py), the contract's check and the suite's mesh.

The rules are given to DTensor once torch.distributed.tensor is imported (`_support.after_import`, an import hook):
importing it with the package would add half to the package's import time, torch's included (`python -X importtime`
here: torch.distributed.tensor 2.1-2.6 s, the muladd package with torch 5.2-5.7 s).

Left without a rule (DTensor then refuses the op): mutating ops (a DTensor written in place keeps its placement,
which the rule would have to follow) and custom kernels (kopgen does not know their shapes).
"""

from __future__ import annotations

import textwrap

from ..backward_kernel import RowGradient
from ..model import Device, Op, PointwiseCompute, RowNormalization, RowReduction
from ..split import GatedSplit
from . import norm_sums, norms
from .layout import literal, statement

# Kinds sharded along every dimension but the last: a reduction's, a normalisation's and the halves' rows,
# and a row reduction's backward kernel's (whose grad and result hold a value per row).
_ROW_KINDS = (GatedSplit, RowReduction, RowNormalization, RowGradient)


def shards(op: Op) -> bool:
    """Whether the op gets a sharding rule: a functional pointwise op, row reduction or row normalisation
    (backward kernels included: they are pointwise, and a DTensor's backward calls them)."""
    return isinstance(op.body, (PointwiseCompute, *_ROW_KINDS)) and not op.is_mutating


def tested(op: Op) -> bool:
    """Whether the op's suite checks its rule: the check runs on a CPU mesh, so on the op's CPU kernel."""
    return shards(op) and Device.CPU in op.devices


def registration(op: Op) -> list[str]:
    """The op's sharding rule in _registration.py (after two blank lines), where it has one."""
    if not shards(op):
        return []
    rows = isinstance(op.body, _ROW_KINDS)
    how = ", never splitting a row" if rows else ""
    per_row = tuple(a.index for a in op.tensor_args if a.name in getattr(op.body, "per_row", ()))
    # a normalisation's backward kernel's gradients summed over the rows: each placed as its input
    index = {a.name: a.index for a in op.args}
    summed = tuple(index[c.like] for c in norm_sums.column_sums(op))
    call = (
        f"_support.shard_as_inputs(torch.ops.{op.namespace}.{op.name}.default, "
        f"tensors={literal(tuple(a.index for a in op.tensor_args))}, outputs={op.num_outputs}"
        + (", rows=True" if rows else "")
        + (f", per_row={literal(per_row)}" if per_row else "")
        + (f", summed={literal(summed)})" if summed else ")")
    )
    lines = ["", "",
             *textwrap.wrap(f"DTensor shards {op.qualname} as its inputs{how}.", 86, initial_indent="# ",
                            subsequent_indent="# "),
             statement(call, 0)]
    saved = norms.saved_stats(op)
    if saved:  # its internal `_<op>_forward`, which a call with grad runs: the output and a value per row of each
        namespace, name = norms.forward_qualname(op).split("::")
        lines.append(statement(
            f"_support.shard_as_inputs(torch.ops.{namespace}.{name}.default, "
            f"tensors={literal(tuple(a.index for a in op.tensor_args))}, outputs={1 + len(saved)}, rows=True)", 0))
    return lines


def any_sharded(ops) -> bool:
    return any(shards(op) for op in ops)


def any_tested(ops) -> bool:
    return any(tested(op) for op in ops)


def support_imports(package) -> list[str]:
    """The standard modules _support.py's helpers of the rules import (after_import's)."""
    return ["importlib.util", "sys"] if any_sharded(package.ops) else []


# _support.py's helpers of the rules (after two blank lines), in a package with one.
SUPPORT = '''

# The package's DTensor sharding rules, by op (shard_as_inputs); the suite checks them.
SHARDING_RULES: dict[torch._ops.OpOverload, Callable[..., list]] = {}


def shard_as_inputs(
    op: torch._ops.OpOverload,
    tensors: tuple[int, ...],
    outputs: int,
    rows: bool = False,
    per_row: tuple[int, ...] = (),
    summed: tuple[int, ...] = (),
) -> None:
    """Gives DTensor the sharding rule of `op`, whose Tensor arguments are at `tensors` and whose
    `outputs` have their broadcast shape (rows: with the last dimension their own; the Tensors at
    `per_row` hold a value per row, so all their dimensions are the rows'; the last outputs, one per
    argument at `summed`, a gradient summed to that argument's shape), once
    torch.distributed.tensor is imported: its import takes seconds, which a package not used on
    DTensors does not pay."""

    def rule(*args, **kwargs):
        # Keyword-only arguments are never Tensors: a None (no placement) for each.
        args = (*args, *[None] * len(kwargs))
        return shardings(tensors, outputs, rows, args, per_row, summed)

    SHARDING_RULES[op] = rule
    if "torch.distributed.tensor" in sys.modules:
        register_sharding_rules({op: rule})
    elif len(SHARDING_RULES) == 1:
        # The package's first rule: one hook registers them all.
        after_import(
            "torch.distributed.tensor", lambda: register_sharding_rules(SHARDING_RULES)
        )


def register_sharding_rules(rules: dict) -> None:
    from torch.distributed.tensor.experimental import register_sharding

    for op, rule in rules.items():
        register_sharding(op)(rule)


def shardings(
    tensors: tuple[int, ...],
    outputs: int,
    rows: bool,
    args: tuple,
    per_row: tuple[int, ...] = (),
    summed: tuple[int, ...] = (),
) -> list[tuple[list, list]]:
    """register_sharding's strategies, (output placements, input placements), for a call on `args`
    (DTensor passes a spec with the shape of each Tensor; the Tensors themselves do too): all
    replicated, then for each dimension d of the broadcast shape (a row op's but the last) the
    outputs sharded along d and each input along its dimension aligned with d, replicated where it
    broadcasts there (a smaller size: each shard reads all of it). An output summed to the shape of
    the argument at `summed` is placed as that argument, or a partial sum where it is replicated."""
    # DTensor calls it: imported
    from torch.distributed.tensor import Partial, Replicate, Shard

    given = [arg if i in tensors else None for i, arg in enumerate(args)]
    # Each Tensor's sizes that may be sharded: a row op's all but the last (all of a value per row).
    cut = [rows and i not in per_row for i in range(len(given))]
    sizes = [
        () if t is None else tuple(t.shape)[: t.ndim - last]
        for t, last in zip(given, cut, strict=True)
    ]
    shape = torch.broadcast_shapes(*sizes)
    replicated = [None if t is None else Replicate() for t in given]
    strategies = [([Replicate()] * outputs, replicated)]
    for d in range(len(shape)):
        inputs = []
        for t, own_sizes in zip(given, sizes, strict=True):
            # Its dimension aligned with d: broadcasting aligns sizes at the right.
            own = d - len(shape) + len(own_sizes)
            sharded = own >= 0 and own_sizes[own] == shape[d]
            inputs.append(None if t is None else Shard(own) if sharded else Replicate())
        sums = [inputs[i] if inputs[i].is_shard() else Partial() for i in summed]
        strategies.append(([Shard(d)] * (outputs - len(summed)) + sums, inputs))
    return strategies


def after_import(module: str, call: Callable[[], object]) -> None:
    """Calls `call` now if `module` is imported, else right after its first import has run."""
    if module in sys.modules:
        call()
    else:
        sys.meta_path.insert(0, _AfterImport(module, call))


class _AfterImport:
    """An import hook: it finds `module` as the finders after it do, and has its loader call `call`
    once the module's code has run; it leaves sys.meta_path on its first find."""

    def __init__(self, module: str, call: Callable[[], object]):
        self.module, self.call = module, call

    def find_spec(self, name, path, target=None):
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def run_then_call(module):
                run(module)
                self.call()

            spec.loader.exec_module = run_then_call
        return spec'''


def support(package) -> tuple[str, ...]:
    return tuple(SUPPORT.split("\n")) if any_sharded(package.ops) else ()


# The contract's check of an op with a sharding rule (after two blank lines), in a package that has one.
CONTRACT = '''

class Sharded(Contract):
    """An op with a DTensor sharding rule (lang/sharding.py): each strategy it gives computes the
    op's output from shards of its inputs, and DTensor runs the op under it."""

    def strategies(self, args: tuple) -> list[tuple[list, list]]:
        """The rule's strategies for a call on `args`, which has the shapes a spec has."""
        # The package's, imported here: the contract itself imports no package.
        from {package}._support import SHARDING_RULES

        positional, keywords = self.split(args)
        return SHARDING_RULES[self.data.op](*positional, **keywords)

    def test_each_strategy_computes_its_shards(self, sample):
        """Run by hand on two shards (torch.tensor_split, as DTensor splits) of each input the
        strategy shards, the op gives the two shards of its outputs; a replicated output whole."""
        args = self.make_args(sample, "cpu", self.data.dtypes[0])
        want = self.run(self.data.op, args)
        close = {**self.data.tolerances, "equal_nan": self.data.equal_nan}
        for outputs, inputs in self.strategies(args):
            pairs = list(zip(args, inputs, strict=True))
            halves = [
                self.run(self.data.op, tuple(half(a, p, i) for a, p in pairs))
                for i in (0, 1)
            ]
            for k, placement in enumerate(outputs):
                first, second = halves[0][k], halves[1][k]
                if placement.is_shard():
                    first = torch.cat([first, second], placement.dim)
                else:
                    assert_close(second, want[k], **close)
                assert_close(first, want[k], **close)

    def test_dtensor_matches_the_local_call(self, mesh):
        """On a one-process mesh, DTensors placed as each strategy wants: the op's outputs are
        DTensors placed as the strategy says, with the local call's values and gradients."""
        args = self.normal_args("cpu", requires_grad=self.differentiable)
        want = self.run(self.data.op, args)
        if self.differentiable:
            want_grads = torch.autograd.grad(total(want), requiring_grad(args))
        for outputs, inputs in self.strategies(args):
            placed = tuple(place(a, p, mesh) for a, p in zip(args, inputs, strict=True))
            got = self.run(self.data.op, placed)
            assert [o.placements for o in got] == [(p,) for p in outputs], inputs
            full = [o.full_tensor() for o in got]
            assert_all_close(full, want, **self.data.tolerances)
            if self.differentiable:  # backward runs on DTensors too
                grads = torch.autograd.grad(total(got), requiring_grad(placed))
                full = [g.full_tensor() for g in grads]
                assert_all_close(full, want_grads, **self.data.tolerances)


def place(arg, placement, mesh):
    """`arg` as a DTensor that `placement` places on `mesh` (a leaf, requiring grad as `arg`
    does); where it has no placement, as it is."""
    # Imported here, as the mesh's modules: importing DTensor costs a second or more.
    from torch.distributed.tensor import distribute_tensor

    if placement is None:
        return arg
    dtensor = distribute_tensor(arg.detach(), mesh, [placement])
    return dtensor.requires_grad_(arg.requires_grad)


def half(arg, placement, i: int):
    """Shard i of two of `arg` as `placement` places it: all of it where it is not sharded."""
    if placement is None or not placement.is_shard():
        return arg
    return torch.tensor_split(arg, 2, placement.dim)[i]'''


def contract(package) -> tuple[str, ...]:
    if not any_tested(package.ops):
        return ()
    return tuple(CONTRACT.replace("{package}", package.name).split("\n"))


# The suite's one-process mesh (tests/conftest.py, after two blank lines), in a package whose suite checks a rule.
CONFTEST = '''

@pytest.fixture(scope="session")
def mesh():
    """A one-process gloo mesh on the CPU for the DTensor checks, torn down after the session."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield init_device_mesh("cpu", (1,))
    dist.destroy_process_group()'''


def conftest_imports(package) -> list[str]:
    """What the mesh fixture imports (torch imports them: no cost)."""
    if not any_tested(package.ops):
        return []
    return ["import torch.distributed as dist", "from torch.distributed.device_mesh import init_device_mesh"]


def conftest(package) -> tuple[str, ...]:
    return tuple(CONFTEST.split("\n")) if any_tested(package.ops) else ()
