"""This module writes the autocast rules of the ops (issue 17): under torch.autocast an op's floating
inputs on the autocast device (float64 aside, which autocast leaves alone) are cast as its spec's
`autocast` says, then the op runs with autocast off, as torch's own ops do. It chooses each op's
policy (`autocast:`, default by kind), writes the rule of each op that has one (_registration.py),
the helper that registers it (_support.py), the kernels' dtypes it needs and the contract's check.

- `promote` (pointwise and split ops): the widest dtype of the inputs, so that an activation in bfloat16
  meets a weight in float32 (the kernels take one dtype); an op of one input runs in its dtype.
- `fp32` (row reductions and normalisations): float32, as autocast runs torch.sum and layer_norm.
- `lower_precision`: autocast's dtype (bfloat16, float16), as autocast runs matmuls.
- `none` (custom kernels, whose dtypes kopgen does not know; mutating ops, which would write a
  cast copy): no rule, the op runs on its inputs as they come.

Every route registers the rule from Python, at the AutocastCPU and AutocastCUDA keys, as it registers
the fake kernel: the rule runs only under autocast (where it costs a call into Python, about 1.7x eager's
casts and op on a small torch_library op: docs/format.md), so a C++ rule would save nothing elsewhere; the
stable ABI (torch/csrc/stable of 2.10 to 2.13) has no autocast API to write one in: nothing reads
autocast's dtype, and no dispatch-key guard calls the op with autocast off.
torch.library.register_autocast is not used: it casts to one dtype fixed at registration (lower_precision
needs the caller's, promote the inputs') and raises on keyword arguments (`*, float scale`).
"""

from __future__ import annotations

from ..choices import Autocast
from ..model import Op, PointwiseCompute, RowNormalization, RowReduction
from . import layout

# What each policy does, said in the comment above the op's rule.
_SAYS = {
    Autocast.FP32: "its floating inputs in float32, as autocast runs sums and norms",
    Autocast.LOWER_PRECISION: "its floating inputs in autocast's dtype, as autocast runs matmuls",
    Autocast.PROMOTE: "its floating inputs in the widest of their dtypes",
}


def by_kind(body) -> Autocast:
    """The policy of an op whose spec sets none."""
    if isinstance(body, PointwiseCompute):  # a split op too
        return Autocast.PROMOTE
    if isinstance(body, (RowReduction, RowNormalization)):
        return Autocast.FP32
    return Autocast.NONE


def resolve(resolver, body, schema) -> Autocast:
    """The op's policy: its own `autocast`, else `defaults`', else its kind's; a mutating op takes none."""
    node = resolver.setting("autocast")
    if node is None:
        return Autocast.NONE if schema.mutated_arguments else by_kind(body)
    policy = Autocast(node.value)  # check_format allows only these
    if policy is not Autocast.NONE and schema.mutated_arguments:
        written = " and ".join(f"'{a.name}'" for a in schema.mutated_arguments)
        where = "" if resolver.node.get("autocast") else f" (set it on '{schema.name}'; defaults set {policy})"
        resolver.error(
            node.value_position,
            f"a mutating op takes autocast: none{where}: {policy} casts an input to a copy in another dtype, "
            f"and '{schema.name}' would write the copy of {written}, not the argument",
        )
    return policy


def policy(op: Op) -> Autocast:
    """The op's policy (a backward kernel has none: autocast is off in backward)."""
    return Autocast.NONE if op.backward_of else op.autocast


def describe(op: Op) -> str:
    """The op's policy as `kopgen check` prints it."""
    return f"{policy(op)} ({_SAYS.get(policy(op), 'no rule: it runs on its inputs as they come')})"


def casts(op: Op) -> bool:
    """Whether the op gets an autocast rule."""
    return policy(op) is not Autocast.NONE


def checked_dtype(op: Op) -> str:
    """The dtype of torch.autocast in the contract's check (`Autocasts.low` there): the op's bfloat16 or
    float16, else bfloat16."""
    return next((d for d in ("bfloat16", "float16") if d in op.dtypes), "bfloat16")


def kernel_dtypes(op: Op) -> frozenset[str]:
    """The dtypes autocast runs the op's compiled kernels in, which they take beside its `dtypes`: float32
    (fp32); bfloat16 and float16, the caller's choice (lower_precision); the inputs' (promote): under
    autocast an activation comes in its dtype, those of the contract's check float32 and checked_dtype."""
    return frozenset({
        Autocast.FP32: ("float32",),
        Autocast.LOWER_PRECISION: ("bfloat16", "float16"),
        Autocast.PROMOTE: ("float32", checked_dtype(op)),
        Autocast.NONE: (),
    }[policy(op)])


def registration(op: Op) -> list[str]:
    """The op's autocast rule in _registration.py (after two blank lines), where it has one."""
    if not casts(op):
        return []
    return ["", "", f"# Under torch.autocast: {_SAYS[policy(op)]}, then the op.",
            layout.statement(f'_support.register_autocast("{op.qualname}", "{policy(op)}")', 0)]


def data(op: Op) -> list[list[str]]:
    """The op's OpData arguments of the contract's check."""
    if not casts(op):
        return []
    return [[f'autocast="{policy(op)}",']]


def any_cast(ops) -> bool:
    return any(casts(op) for op in ops)


# OpData's fields of the contract's check, in a package that has one.
FIELDS = ('    autocast: str = ""  # Autocasts: its policy, fp32, lower_precision or promote',)


def fields(package) -> tuple[str, ...]:
    return FIELDS if any_cast(package.ops) else ()


# _support.py's helper of the rules (after two blank lines), in a package with one.
SUPPORT = '''

_AUTOCAST_LIBRARIES = []  # a registration lasts as long as its Library


def register_autocast(op: str, policy: str) -> None:
    """Registers `op`'s rule under torch.autocast on CPU and CUDA: its floating inputs on the
    autocast device, float64 aside (autocast leaves it alone), cast to float32 (`fp32`),
    autocast's dtype (`lower_precision`) or the widest of their dtypes (`promote`); then the
    op, with autocast off."""
    namespace, name = op.split("::")
    overload = getattr(getattr(torch.ops, namespace), name).default
    library = torch.library.Library(namespace, "FRAGMENT")
    _AUTOCAST_LIBRARIES.append(library)
    for device_type in ("cpu", "cuda"):
        kernel = _autocast_kernel(overload, device_type, policy)
        library.impl(name, kernel, "Autocast" + device_type.upper())


def _autocast_kernel(op, device_type: str, policy: str) -> Callable[..., object]:
    key = getattr(torch._C.DispatchKey, "Autocast" + device_type.upper())
    autocast_off = torch._C.DispatchKeySet(key)

    def on_device(tensor: Tensor) -> bool:
        # is_cpu and is_cuda cost a fifth of device.type
        return tensor.is_cpu if device_type == "cpu" else tensor.is_cuda

    def casts(value) -> bool:
        """Whether autocast casts `value`: a floating Tensor on its device, not float64."""
        return (
            isinstance(value, Tensor)
            and value.is_floating_point()
            and on_device(value)
            and value.dtype != torch.float64
        )

    def cast_to(dtype: torch.dtype, value):
        if isinstance(value, (list, tuple)):  # a Tensor[] argument
            return type(value)(cast_to(dtype, item) for item in value)
        # .to() of the dtype a Tensor has costs a dispatch: skipped
        return value.to(dtype) if casts(value) and value.dtype != dtype else value

    def kernel(*args, **kwargs):
        if policy == "fp32":
            dtype = torch.float32
        elif policy == "lower_precision":
            dtype = torch.get_autocast_dtype(device_type)
        else:
            dtypes = [t.dtype for t in _tensors((*args, *kwargs.values())) if casts(t)]
            dtype = functools.reduce(torch.promote_types, dtypes) if dtypes else None
        args = tuple(cast_to(dtype, arg) for arg in args)
        kwargs = {name: cast_to(dtype, value) for name, value in kwargs.items()}
        # As torch.library.register_autocast does: autocast off for the call below.
        with torch._C._ExcludeDispatchKeyGuard(autocast_off):
            return op(*args, **kwargs)

    return kernel


def _tensors(values) -> list[Tensor]:
    """The Tensors among `values`, those of Tensor lists too."""
    found = []
    for value in values:
        if isinstance(value, (list, tuple)):
            found += _tensors(value)
        elif isinstance(value, Tensor):
            found.append(value)
    return found'''


def support(package) -> tuple[str, ...]:
    return tuple(SUPPORT.split("\n")) if any_cast(package.ops) else ()


# The contract's check of an op with an autocast rule (after two blank lines), in a package that has one.
CONTRACT = '''

class Autocasts(Contract):
    """An op with an autocast rule: under torch.autocast its floating inputs are cast as its
    policy says (OpData.autocast), and it gives what its reference gives on them so cast."""

    def low(self) -> torch.dtype:
        """The dtype of torch.autocast: the op's bfloat16 or float16, else bfloat16."""
        listed = [d for d in (torch.bfloat16, torch.float16) if d in self.data.dtypes]
        return (listed or [torch.bfloat16])[0]

    def test_autocast_casts_as_its_policy(self, device):
        low, policy = self.low(), self.data.autocast
        args = self.normal_args(device, torch.float32)
        floating = [i for i, a in enumerate(args) if is_floating(a)]
        # One input in the dtype the policy casts away from, the others in float32, as a
        # model's activations meet its weights.
        away = torch.float32 if policy == "lower_precision" else low
        args = tuple(a.to(away) if i == floating[0] else a for i, a in enumerate(args))
        with torch.autocast(device, dtype=low):
            outputs = self.run(self.data.op, args)
        dtype = torch.float32 if policy == "fp32" else low
        if policy == "promote":  # the widest of the inputs' dtypes
            for i in floating:
                dtype = torch.promote_types(dtype, args[i].dtype)
        cast = tuple(a.to(dtype) if i in floating else a for i, a in enumerate(args))
        # assert_close compares dtypes too: the outputs are in the dtype the op ran in.
        assert_all_close(outputs, self.expected(cast), **self.data.tolerances)


def is_floating(arg) -> bool:
    """Whether autocast casts `arg`: a floating Tensor, not float64."""
    floating = isinstance(arg, torch.Tensor) and arg.is_floating_point()
    return floating and arg.dtype != torch.float64'''


def contract(package) -> tuple[str, ...]:
    return tuple(CONTRACT.split("\n")) if any_cast(package.ops) else ()
