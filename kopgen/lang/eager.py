"""This module decides which ops the typed API (ops.py) runs without the dispatcher in plain eager calls,
and writes what it takes: per op, the kernel of each device and an autograd.Function (_registration.py),
the call in ops.py, and the check of _support.py.

A Python route's op (custom_op, library, triton_op) costs torch's dispatcher hop into Python, and with
grad torch.library's Python autograd wrapper, above its kernel: on an H200, 28 and 49 µs a call against
eager PyTorch's 15 and 17 µs. As flash-attn and xformers do, ops.py calls the kernel (or, with grad, an
autograd.Function made of the op's registered formulas) where nothing could see the op, and the operator
everywhere else: torch.compile and export, modes, functorch transforms, autocast, the profiler, tensor
subclasses and fake tensors, and a device the op has no kernel for (which must still raise).

An op whose Autograd kernel is Python (torch.library.register_autograd: a compiled route's op whose
formulas have no C++ translation, and every stable_abi op, whose ABI has no autograd) but which ops.py
cannot run directly is called below that kernel in a plain eager call, as the kernel itself would
redispatch (with grad through the same autograd.Function of its formulas): the dispatcher's hop into Python
and the boxed redispatch are 4 of stable_abi's 8 µs a call on a CPU (benchmarks/compiled_layers.py).
"""

from __future__ import annotations

from ..model import Op, Route
from ..names import locals_for, module_name
from . import layout, norms, python
from .layout import literal, statement, wrap

_PYTHON_ROUTES = (Route.CUSTOM_OP, Route.LIBRARY, Route.TRITON_OP)


def direct(op: Op) -> bool:
    """Whether ops.py calls the op's kernel directly in plain eager calls: a Python route's functional op
    whose kernels are all Python, with no keyword-only argument (autograd.Function.apply takes none) and
    no list of Tensors (the check reads each Tensor argument)."""
    return (
        op.registration in _PYTHON_ROUTES
        and not op.is_mutating
        and op.kernels == op.python_kernels
        and not op.keyword_only_names
        and not _takes_tensor_list(op)
    )


def _takes_tensor_list(op: Op) -> bool:
    return any("Tensor" in str(a.schema.type) for a in op.args if not a.is_tensor)


def below_autograd(op: Op) -> bool:
    """Whether ops.py calls the op below its Autograd key in plain eager calls without grad: a functional
    op whose Autograd kernel is Python and that ops.py does not run directly, with no list of Tensors."""
    return (
        not direct(op)
        and not op.is_mutating  # no autograd kernel at all
        and not op.cpp_autograd
        and not _takes_tensor_list(op)
    )


def direct_calls(op: Op, ops) -> tuple[tuple[str, str], ...]:
    """The namespace's ops the op's backward formulas call that its Python backward may run without the
    dispatcher, as ops.py does (a fused backward kernel's launch, not the custom op's layers around it),
    each with its dict of kernels: resolved once (model.Backward.direct_calls)."""
    if op.backward is None or op.cpp_autograd:
        return ()
    called = {name for g in op.backward.gradients if g.formula for name in g.formula.own_ops_called}
    return tuple((o.name, kernels_name(o)) for o in ops if o.name in called and direct(o))


def any_direct(ops) -> bool:
    return any(direct(op) for op in ops)


def any_below_autograd(ops) -> bool:
    return any(below_autograd(op) for op in ops)


def support(package) -> bool:
    """Whether _support.py has the checks of plain eager calls (_support/eager.py.j2)."""
    return any_direct(package.ops) or any_below_autograd(package.ops)


def differentiable(op: Op) -> bool:
    """Whether the op has registered formulas, which its autograd.Function reuses."""
    return op.backward is not None and not op.cpp_autograd


def kernels_name(op: Op) -> str:
    """_registration.py's dict of the op's kernel per device type."""
    return module_name(op, "eager_kernels")


def function_name(op: Op) -> str:
    """_registration.py's autograd.Function of the op: `_MulAddFunction` for op mul_add."""
    return "_" + "".join(part.capitalize() for part in op.stem.split("_")) + "Function"


def _kernel(op: Op, kernel) -> str:
    """The function the op registers for the kernel's device (a triton_op's eager kernel)."""
    return python._eager_kernel(op, kernel) if op.is_triton_op else python.registered_kernel(op, kernel)


def registration(op: Op) -> list[str]:
    """The lines of _registration.py after the op's autograd: for an op ops.py runs directly, its kernels by
    device type; for one it runs directly or below its Autograd kernel with registered formulas, the
    autograd.Function of those formulas."""
    lines = []
    if direct(op):
        pairs = [f"{literal(k.device)}: {_kernel(op, k)}" for k in op.kernels]
        lines += ["", "", "# The typed API (ops.py) calls these directly in plain eager calls, without the dispatcher.",
                  wrap(f"{kernels_name(op)} = {{", pairs, "}")]
    if has_function(op):
        lines += _function(op)
    return lines


def has_function(op: Op) -> bool:
    """Whether _registration.py has an autograd.Function of the op's registered formulas, which ops.py applies
    in plain eager calls with grad: an op it runs directly, or one it calls below its Python Autograd kernel
    (whose forward then saves no statistics: the operator returns none), with no keyword-only argument
    (autograd.Function.apply takes none)."""
    below = below_autograd(op) and not norms.saved_stats(op) and not op.keyword_only_names
    return differentiable(op) and (direct(op) or below)


def _function(op: Op) -> list[str]:
    """The op's autograd.Function: its forward the kernel (or the operator below its Autograd kernel), then
    the registered setup_context; its backward the registered one."""
    names = locals_for(op)
    args = ", ".join(a.name for a in op.args)
    stats = "".join(f", {name}" for name in norms.saved_stats(op))  # a normalisation's, for backward (lang/norms.py)
    setup = f"{python.setup_context_function(op)}({names.ctx}, ({args}), {names.output}{stats})"
    if len(op.args) == 1:  # `(x,)`, which statement would take for a magic trailing comma
        setup = f"{python.setup_context_function(op)}({names.ctx}, ({args},), {names.output}{stats})"
    else:
        setup = statement(setup, 8)
    if direct(op):
        kernel = f"{kernels_name(op)}[{op.lead.name}.device.type]"
        if len({_kernel(op, k) for k in op.kernels}) == 1:  # one for every device: no lookup per call
            kernel = _kernel(op, op.kernels[0])
        output = names.output
        if norms.saved_stats(op):  # the kernel that also returns the statistics backward reads (lang/norms.py)
            kernel, output = norms.eager_forward(op, kernel), ", ".join([names.output, *norms.saved_stats(op)])
        what = "its kernel"
        forward = ["        " + layout.assign(output, python.call_text(kernel, op), 8)]
    else:
        handle = f"torch.ops.{op.qualname.replace('::', '.')}.default"
        what = "the operator below autograd"
        forward = ["        with _support.BelowAutograd():",
                   "            " + layout.assign(names.output, python.call_text(handle, op), 12)]
    return ["", "", f"class {function_name(op)}(torch.autograd.Function):",
            f'    """{op.qualname} with grad in plain eager calls: {what}, its registered formulas."""',
            "", "    @staticmethod",
            "    " + wrap("def forward(", [names.ctx, *(a.name for a in op.args)], "):", 4),
            *forward,
            "        # setup_context called here, as torch.library calls it: a Function with a setup_context",
            "        # of its own binds its arguments through inspect.signature on every call.",
            "        " + setup,
            f"        return {names.output}", "",
            f"    backward = staticmethod({python.backward_function(op)})",
            "", "",
            f"{apply_name(op)} = _support.function_apply({function_name(op)})"]


def apply_name(op: Op) -> str:
    """_registration.py's apply of the op's autograd.Function, which ops.py calls (_support.function_apply)."""
    return module_name(op, "function_apply")


def any_function(ops) -> bool:
    return any(has_function(op) for op in ops)


def _tensors(op: Op) -> str:
    return ", ".join(a.name for a in op.tensor_args)


def _below_autograd_call(op: Op, indent: int) -> list[str]:
    """The operator called below its Autograd kernel, returned, at `indent`."""
    return [" " * indent + "with _support.BelowAutograd():",
            " " * (indent + 4) + python.call(python.handle(op), op, indent + 4, prefix="return ")]


def api_body(op: Op) -> list[str]:
    """The body of the op's function in ops.py after its docstring."""
    kernel, grad = locals_for(op).kernel, locals_for(op).grad  # unless an argument has the name
    operator = "        " + python.call(python.handle(op), op, 8, prefix="return ")
    if below_autograd(op) and has_function(op):
        return ["    # Its Autograd kernel is Python: a plain eager call goes below it, with grad through an",
                "    # autograd.Function of its formulas. Anything unusual goes to the operator, which must see it.",
                "    " + statement(f"{grad} = _support.plain_call({_tensors(op)})", 4),
                f"    if {grad} is None:", operator,
                f"    if {grad}:",
                "        " + python.call(f"_registration.{apply_name(op)}", op, 8, prefix="return "),
                *_below_autograd_call(op, 4)]
    if below_autograd(op):
        return ["    # Its Autograd kernel is Python, which would only redispatch a call without grad.",
                "    " + statement(f"if _support.plain_call({_tensors(op)}) is False:", 4),
                *_below_autograd_call(op, 8),
                "    " + python.call(python.handle(op), op, 4, prefix="return ")]
    if not direct(op):
        return ["    " + python.call(python.handle(op), op, 4, prefix="return ")]
    check = wrap(f"{kernel} = _support.eager_kernel(", [f"_registration.{kernels_name(op)}", _tensors(op)], ")", 4)
    lines = [f"    {check}"]
    if differentiable(op):
        lines += ["    # Anything unusual (tracing, a mode, a subclass...) goes to the operator, which it must see.",
                  f"    if {kernel} is None:", operator,
                  f"    if _support.grad_wanted({_tensors(op)}):",
                  "        " + python.call(f"_registration.{apply_name(op)}", op, 8, prefix="return ")]
    else:
        lines += ["    # Anything unusual goes to the operator, as does grad (the op has no backward: it raises).",
                  "    " + statement(f"if {kernel} is None or _support.grad_wanted({_tensors(op)}):", 4), operator]
    return [*lines, "    " + python.call(kernel, op, 4, prefix="return ")]


def api_imports(package) -> list[str]:
    """ops.py's imports of the package's modules."""
    if any(has_function(op) or direct(op) for op in package.ops):  # ops.py reads _registration's
        return ["from . import _registration, _support"]
    if any_below_autograd(package.ops):
        return ["from . import (",
                "    _registration,  # noqa: F401  (defines the operators before they are looked up)",
                "    _support,",
                ")"]
    return ["from . import _registration  # noqa: F401  (defines the operators before they are looked up)"]


# The contract's checks (each after two blank lines): an op whose typed API applies an autograd.Function with grad,
WITH_GRAD_CONTRACT = '''

class DirectInEagerWithGrad(Contract):
    """A differentiable op whose typed API, in plain eager calls with grad, applies an autograd.Function
    of the registered formulas (its forward the op's kernel, or the operator below its Autograd kernel):
    the same values and gradients as the operator. (An op without a backward calls the operator
    whenever grad is wanted.)"""

    def test_python_api_matches_the_operator_with_grad(self, device):
        args = self.make_args(self.data.backward_sample, device, torch.float64, True)
        inputs = requiring_grad(args)
        got = as_tuple(self.call(self.data.python_api, args))
        want = as_tuple(self.call(self.data.op, args))
        assert_all_close(got, want, rtol=0, atol=0)
        got_grads = torch.autograd.grad(total(got), inputs)
        want_grads = torch.autograd.grad(total(want), inputs)
        assert_all_close(got_grads, want_grads, rtol=0, atol=0)'''

# one whose typed API runs its kernel directly,
DIRECT_CONTRACT = '''

class DirectInEager(Contract):
    """An op whose typed API runs its kernel directly in plain eager calls (no dispatcher): the
    operator wherever something intercepts calls."""

    def test_modes_see_the_operator(self):
        """Under a TorchDispatchMode (as under torch.compile, export, FakeTensorMode) the API's
        call reaches the operator, by name."""
        args = self.normal_args()
        with Calls() as calls:
            self.call(self.data.python_api, args)
        assert self.data.op in calls.seen, calls.seen'''

# and one it calls below its Python Autograd kernel.
BELOW_AUTOGRAD_CONTRACT = '''

class BelowAutogradInEager(Contract):
    """An op whose Autograd kernel is Python: the typed API calls it below that kernel in a plain
    eager call without grad (the guard it enters is counted here), the operator where something
    intercepts the call, and records autograd where grad is wanted; the operator's values."""

    def test_python_api_goes_below_autograd_only_without_grad(self, monkeypatch):
        support = self.data.python_api.__globals__["_support"]
        guard = support.BelowAutograd
        entered = []

        class Counted:
            def __enter__(self):
                entered.append(True)
                self.inner = guard()
                return self.inner.__enter__()

            def __exit__(self, *exc):
                return self.inner.__exit__(*exc)

        monkeypatch.setattr(support, "BelowAutograd", Counted)
        args = self.normal_args()
        got = self.run(self.data.python_api, self.copy_args(args))
        assert len(entered) == 1
        assert_all_close(got, self.run(self.data.op, args), rtol=0, atol=0)
        with Calls() as calls:
            self.run(self.data.python_api, self.copy_args(args))
        assert len(entered) == 1 and self.data.op in calls.seen, calls.seen
        if self.data.gradient_inputs:
            with_grad = self.normal_args(requires_grad=True)
            outputs = self.run(self.data.python_api, with_grad)
            assert all(o.requires_grad for o in outputs if o.is_floating_point())'''


def contract(package) -> tuple[str, ...]:
    """The lines of the contract's classes for the ops the typed API calls without the dispatcher, or below
    their Autograd kernel, where the package has them."""
    ops = package.ops
    parts = [(WITH_GRAD_CONTRACT, any(has_function(op) and op.has_gradients for op in ops)),
             (DIRECT_CONTRACT, any_direct(ops)), (BELOW_AUTOGRAD_CONTRACT, any_below_autograd(ops))]
    return tuple(line for text, applies in parts if applies for line in text.split("\n"))


def api_docstring(package) -> str:
    """ops.py's docstring: what its functions call."""
    text = f"The typed Python API: one function per operator, calling torch.ops.{package.namespace}.*"
    if any_direct(package.ops):
        return text + "\n(plain eager calls of the Python routes' ops run their kernels directly)."
    return text + "."
