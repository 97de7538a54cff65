"""This module writes the vmap rules of the ops whose kind makes batching known (issue 17): a pointwise op
(`compute`, `split` included) or a row reduction (`reduce`) runs a batch in one call with each batched
Tensor's batch dimension in front, as its broadcasting and its last-dimension rows allow. It writes the rule of each such op (_registration.py), the helper it calls (_support.py) and the contract's
check that torch.vmap gives what a loop of calls gives.

On the compiled routes (torch_library, stable_abi) the rule is registered from Python too, in the
FuncTorchBatched key of the op that the extension defines: vmap runs it above the op's autograd and
kernels, which then see one call on the whole batch.

Left without a rule (torch.vmap then refuses the op): mutating ops, custom kernels (kopgen does not know
their shapes), row normalisations and backward kernels.
"""

from __future__ import annotations

from ..model import Op, PointwiseCompute, RowReduction
from ..names import module_name
from ..split import GatedSplit
from . import layout

_BATCHED_KINDS = (PointwiseCompute, GatedSplit, RowReduction)


def batches(op: Op) -> bool:
    """Whether the op gets a vmap rule: a functional pointwise op or row reduction (not a backward
    kernel: a gradient summed over a broadcast input's batch has no batch dimension)."""
    return (
        isinstance(op.body, _BATCHED_KINDS)
        and not op.is_mutating
        and not op.backward_of  # a backward kernel sums an input's gradient to that input's shape
    )


def any_batched(ops) -> bool:
    return any(batches(op) for op in ops)


def registration(op: Op) -> list[str]:
    """The op's vmap rule in _registration.py (after two blank lines), where it has one."""
    if not batches(op):
        return []
    out_dims = "0" if op.num_outputs == 1 else "(" + ", ".join(["0"] * op.num_outputs) + ")"
    return ["", "",
            layout.statement(f'@torch.library.register_vmap("{op.qualname}")', 0),
            f"def {module_name(op, 'vmap')}(info, in_dims, *args, **kwargs):",  # names.VMAP_RULE_PARAMETERS
            "    # One call for the batch: batch dimensions in front, the rest aligned at the right.",
            "    args = _support.batch_in_front(in_dims, args)",
            "    " + layout.statement(f"return torch.ops.{op.namespace}.{op.name}.default(*args, **kwargs), {out_dims}", 4)]


# _support.py's helper of the rules (after two blank lines), in a package with one.
SUPPORT = '''

def batch_in_front(in_dims: tuple, args: tuple) -> tuple:
    """vmap's arguments with each batched Tensor's batch dimension moved in front and size-1
    dimensions after it up to the others' rank, so that broadcasting pairs batch with batch and
    aligns the rest at the right as unbatched calls do; other arguments as they are."""
    pairs = list(zip(args, in_dims, strict=True))
    rank = max(a.dim() - (d is not None) for a, d in pairs if isinstance(a, Tensor))
    moved = []
    for arg, dim in pairs:
        if dim is not None:
            arg = arg.movedim(dim, 0)
            for _ in range(rank + 1 - arg.dim()):
                arg = arg.unsqueeze(1)
        moved.append(arg)
    return tuple(moved)'''


def support(package) -> tuple[str, ...]:
    return tuple(SUPPORT.split("\n")) if any_batched(package.ops) else ()


# The contract's check of an op with a vmap rule (after two blank lines), in a package that has one.
CONTRACT = '''

class Batched(Contract):
    """An op with a vmap rule: torch.vmap runs a batch in one call of the op, with the values a
    loop of calls gives."""

    def vmapped(self, calls: list[tuple], dims: list[int | None]) -> tuple:
        """The op under torch.vmap, in one call, on `calls` stacked: argument i along dims[i]
        (None: unbatched, the first call's)."""
        args = tuple(
            arg if dim is None else torch.stack([call[i] for call in calls], dim)
            for i, (arg, dim) in enumerate(zip(calls[0], dims, strict=True))
        )
        positional, keywords = self.split(args)

        def op(*positional):
            return self.data.op(*positional, **keywords)

        # vmap's rule makes one call; its fallback, one a sample.
        with Calls() as under_vmap:
            outputs = torch.vmap(op, tuple(dims[: len(positional)]))(*positional)
        made = under_vmap.seen.count(self.data.op)
        assert made == 1, f"{made} calls for a batch of 3: no vmap rule ran"
        return as_tuple(outputs)

    def test_vmap_matches_a_loop(self):
        samples = [self.normal_args() for _ in range(3)]
        tensors = [i for i, a in enumerate(samples[0]) if isinstance(a, torch.Tensor)]
        first = tensors[0]
        # The first Tensor batched in its last dimension and the others in front; then the
        # first Tensor alone, the others shared by the calls.
        everything = {i: samples[0][i].dim() if i == first else 0 for i in tensors}
        for batched in (everything, {first: 0}):
            calls = [
                tuple(arg if i in batched else samples[0][i] for i, arg in enumerate(s))
                for s in samples
            ]
            got = self.vmapped(calls, [batched.get(i) for i in range(len(calls[0]))])
            outputs = [self.run(self.data.op, call) for call in calls]
            want = [torch.stack(column) for column in zip(*outputs, strict=True)]
            assert_all_close(got, want, **self.data.tolerances)'''


def contract(package) -> tuple[str, ...]:
    return tuple(CONTRACT.split("\n")) if any_batched(package.ops) else ()
