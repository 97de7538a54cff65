"""The C++ and CUDA around `kernel: custom` ops on the compiled routes (torch_library, stable_abi).

The user writes one function per op and device (csrc/<stem>.cpp, csrc/cuda/<stem>.cu, skeletons
kopgen creates once) or binds an existing one (`kernel: {source: ...}`); kopgen declares each in
csrc/kernels.h and writes the host function torch calls (csrc/ops.cpp, csrc/cuda/ops.cpp): device
checks, contiguity, the device guard, outputs allocated as `fake` says, the empty early return and
the current stream. The user's convention (design14.md): the arguments in schema order (a mutated
Tensor by non-const reference), then the outputs kopgen allocated, then (CUDA) the stream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..expr.emitters import cpp_metadata
from ..model import Arg, FakeOutput, Op, Package, Route
from ..names import locals_for
from .cpp import CppOp, wrap
from .cpp_types import INCLUDES, cpp_parameter

# The user's Tensor type, by route: the function declarations of kernels.h name it in full.
TENSOR_TYPES = {Route.TORCH_LIBRARY: "at::Tensor", Route.STABLE_ABI: "torch::stable::Tensor"}


def _tensor(op: Op) -> str:
    return TENSOR_TYPES[op.registration]


def _parameter(op: Op, arg: Arg) -> str:
    """An argument as the user's function takes it (cpp_types.py): a mutated Tensor by non-const reference."""
    return cpp_parameter(arg.schema, op.registration)


def _return_type(op: Op, tensor: str) -> str:
    count = len(op.output_names)
    if count == 0:
        return "void"
    return tensor if count == 1 else f"std::tuple<{', '.join([tensor] * count)}>"


@dataclass(frozen=True)
class CustomCppOp(CppOp):
    """A custom op as the C++ templates print it: its host functions call the user's kernels."""

    # -- the user's function (declared in kernels.h, defined in the skeleton or the bound file)

    def kernel_name(self, device: str) -> str:
        """`pairsum_cpu`, or the bound function (in the op's namespace, as the skeletons' are)."""
        bound = self.op.bound_kernel(device)
        return bound.function if bound else f"{self.op.stem}_{device}"

    def kernel_signature(self, device: str) -> str:
        """The user's function: the op's own signature where it is bound, else the skeleton's
        convention (the arguments, the outputs kopgen allocated, the CUDA stream)."""
        tensor = _tensor(self.op)
        parameters = [_parameter(self.op, a) for a in self.op.args]
        if self.op.bound_kernel(device):
            return wrap(f"{_return_type(self.op, tensor)} {self.kernel_name(device)}(", parameters, ")", after=1)
        parameters += [f"{tensor}& {name}" for name in self.op.output_names]
        if device == "cuda":
            parameters.append(f"cudaStream_t {locals_for(self.op).stream}")
        return wrap(f"void {self.kernel_name(device)}(", parameters, ")", after=2)

    def skeleton_message(self, package: Package, device: str) -> str:
        """What the skeleton throws until its body is written: the op, and the file to write it in."""
        path = f"{package.name}/{self.op.user_source(device)}"
        text = f"{self.op.qualname}: write its {'CPU' if device == 'cpu' else 'CUDA'} kernel in {path}"
        return wrap(f"{'STD_TORCH_CHECK' if package.stable_abi else 'TORCH_CHECK'}(", ["false", json.dumps(text)],
                    ");", indent=2)

    # -- the host function torch calls (csrc/ops.cpp, csrc/cuda/ops.cpp)

    @property
    def host_signature(self) -> str:
        """As CppOp's, but a mutated Tensor by non-const reference on TORCH_LIBRARY (the user's kernel takes it so)."""
        by_value = self.op.registration == "stable_abi"
        parameters = []
        for arg in self.op.args:
            if by_value and arg.is_tensor:
                parameters.append(f"{'std::optional<Tensor>' if arg.is_optional else 'Tensor'} {arg.name}")
            else:  # the Tensor type as csrc/custom.h names it
                parameters.append(re.sub(rf"\b{_tensor(self.op)}\b", "Tensor", _parameter(self.op, arg)))
        return wrap(f"{_return_type(self.op, 'Tensor')} {self.name}(", parameters, ")", after=2)

    def host_body(self, device: str) -> list[str]:
        op = self.op
        name = json.dumps(op.qualname)
        lead = op.lead.name
        statements = [f'check_device({name}, "{a.name}", {a.name}, {lead});'
                      for a in op.args if (a.is_tensor or a.is_tensor_list) and a != op.lead]
        bound = op.bound_kernel(device)
        dense = set() if bound else set(op.body.contiguous)
        statements += [f'check_contiguous({name}, "{a.name}", {a.name});'
                       for a in op.tensor_args if a.is_mutated and a.name in dense]
        if device == "cuda":
            statements.append(self._guard(lead))
        call = self._kernel_call(device, dense, lead)
        if bound:
            return [*statements, f"return {call};" if op.output_names else f"{call};"]
        statements += [self._allocation(out, fake, lead) for out, fake in zip(op.output_names, op.body.outputs)]
        # Nothing to launch when every Tensor it writes (each mutated argument that is always given, each
        # output) is empty; one empty among them is not enough (a weight's gradient over no rows is zeros).
        written = [a.name for a in op.tensor_args if a.is_mutated and not a.is_optional] + list(op.output_names)
        if written:  # an op that writes only a Tensor!? calls its kernel whatever its size
            empty = " && ".join(f"{name}.numel() == 0" for name in written)
            statements += [f"if ({empty}) {{", f"  {self._return}", "}"]
        statements.append(f"{call};")
        return statements + ([self._return] if op.output_names else [])

    @property
    def _return(self) -> str:
        names = self.op.output_names
        if not names:
            return "return;"
        return f"return {names[0] if len(names) == 1 else '{' + ', '.join(names) + '}'};"

    def _guard(self, lead: str) -> str:
        guard = locals_for(self.op).guard
        if self.op.registration == "stable_abi":
            return f"const torch::stable::accelerator::DeviceGuard {guard}({lead}.get_device_index());"
        return f"const c10::cuda::CUDAGuard {guard}({lead}.device());"

    def _kernel_call(self, device: str, dense: set[str], lead: str) -> str:
        """The user's kernel called on the arguments (read ones in `dense` made contiguous), the
        outputs and the stream; qualified where an argument's name hides it."""
        arguments = [f"as_dense({a.name})" if not a.is_mutated and a.name in dense else a.name
                     for a in self.op.args]
        if not self.op.bound_kernel(device):
            arguments += list(self.op.output_names)
            arguments += [f"current_stream({lead})"] if device == "cuda" else []
        function = self.kernel_name(device)
        if self.op.bound_kernel(device):  # a name of the user's choosing: the op's own hides it in <ns>::cpu
            function = f"::{self.op.namespace}::{function}"
        elif function in {a.name for a in self.op.args}:
            function = f"{self.op.namespace}::{function}"
        return wrap(f"{function}(", arguments, ")", indent=2, after=1)

    @staticmethod
    def _allocation(out: str, fake: FakeOutput, lead: str) -> str:
        """`Tensor out = new_output(x, SHAPE, DTYPE);`: an output as its `fake` says, on the lead's device."""
        shape, dtype = cpp_metadata(fake.shape), cpp_metadata(fake.dtype)
        if fake.strides is None:
            return wrap(f"Tensor {out} = new_output(", [lead, shape, dtype], ");", indent=2)
        strides = cpp_metadata(fake.strides)
        return wrap(f"Tensor {out} = new_strided_output(", [lead, shape, strides, dtype], ");", indent=2)


def custom_ops(package: Package) -> tuple[CustomCppOp, ...]:
    """The ops whose C++/CUDA kernels the user writes or binds."""
    return tuple(CustomCppOp(op) for op in package.compiled_custom_ops)


def takes_tensor_lists(package: Package) -> bool:
    """Whether custom.h needs its overloads for lists of Tensors (their devices checked, made dense)."""
    return any(a.is_tensor_list for op in package.compiled_custom_ops for a in op.args)


def declarations(package: Package, device: str) -> list[str]:
    """kernels.h's declarations of the user's functions on `device`."""
    ops = [op for op in custom_ops(package) if op.op.has_kernel(device, "cpp" if device == "cpu" else "cuda")]
    return [op.kernel_signature(device) + ";" for op in ops]


def header_includes(package: Package) -> list[str]:
    """kernels.h's includes: the headers of every C++ type an argument may have (cpp_types.py), torch's first."""
    headers = INCLUDES[package.compiled_route]
    standard = sorted({"cstdint", "tuple", *(h for h in headers if "/" not in h)})  # int64_t; several outputs
    return [f"#include <{h}>" for h in headers if "/" in h] + [""] + [f"#include <{h}>" for h in standard]


def user_sources(package: Package, device: str) -> list[str]:
    """The user's files the extension compiles on `device`: skeletons, and bound files (relative to the repo)."""
    sources = []
    language = "cpp" if device == "cpu" else "cuda"
    for op in package.compiled_custom_ops:
        if op.has_kernel(device, language):
            bound = op.bound_kernel(device)
            sources.append(bound.path if bound else f"{package.name}/{op.user_source(device)}")
    return sorted(set(sources))


def cpu_ops(package: Package) -> tuple[CustomCppOp, ...]:
    """The custom ops with a C++ CPU kernel (their host functions include custom.h and kernels.h)."""
    return tuple(op for op in custom_ops(package) if op.op.has_kernel("cpu", "cpp"))


def cuda_ops(package: Package) -> tuple[CustomCppOp, ...]:
    return tuple(op for op in custom_ops(package) if op.op.has_kernel("cuda", "cuda"))


def skeleton(op: Op) -> CustomCppOp:
    """The op as its skeleton (csrc/<stem>.cpp, csrc/cuda/<stem>.cu) prints it."""
    return CustomCppOp(op)
