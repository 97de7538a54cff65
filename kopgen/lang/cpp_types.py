"""The C++ type of each schema argument as a kernel parameter, on both compiled ABIs.

`torch_library`: the types a kernel registered with `m.impl` receives, as torchgen's api/cpp.py
writes them (without SymInt: a SymInt arrives as `int64_t`, which the dispatcher converts, as for
ATen's non-symint kernels). `stable_abi`: the types TORCH_BOX unboxes on torch 2.10's stable ABI
(`torch/csrc/stable/stableivalue_conversions.h` at TORCH_TARGET_VERSION 2.10); a type it has no
conversion for gets a reason instead, which resolution reports at the argument (one type has
none on either ABI: a bare `Generator`, which the dispatcher passes to a kernel only as `Generator?`).

Each type below was checked by building an extension that registers a kernel taking it and calling
it through torch.ops (tests/test_cpp_types.py, torch 2.13); torch 2.11 took the same types in a
one-off build of one op taking most of them, on each ABI.
"""

from __future__ import annotations

from ..schema import Argument, ListType, OptionalType, Type

TORCH_LIBRARY = "torch_library"
STABLE_ABI = "stable_abi"
ABIS = (TORCH_LIBRARY, STABLE_ABI)


class NoCppType(ValueError):
    """A schema type an ABI cannot pass to a kernel; `reason` says why, and what to declare instead."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# Scalars passed by value; Tensor and Scalar by const reference (ATen's convention).
_ATEN = {
    "int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool",
    "str": "c10::string_view", "ScalarType": "at::ScalarType", "Scalar": "at::Scalar",
    "Device": "at::Device", "Layout": "at::Layout", "MemoryFormat": "at::MemoryFormat",
}  # fmt: skip
_STABLE = {
    "int": "int64_t", "SymInt": "int64_t", "float": "double", "bool": "bool",
    "str": "std::string_view", "ScalarType": "torch::headeronly::ScalarType",
    "Device": "torch::stable::Device", "Layout": "torch::headeronly::Layout",
    "MemoryFormat": "torch::headeronly::MemoryFormat",
}  # fmt: skip
# Why a kernel cannot take a bare Generator on either ABI, and the stable ABI (as kopgen targets
# it, torch 2.10) a Scalar or a Generator at all.
_GENERATOR = (
    "torch passes a Generator to a C++ kernel only as an optional "
    "(std::optional<at::Generator>): declare it Generator?"
)
_STABLE_LACKS = {
    "Scalar": "the stable ABI has no Scalar type: declare the argument float (or int)",
    "Generator": "the stable ABI passes a Generator from torch 2.13 on only, and kopgen's stable_abi "
    "builds for torch 2.10: draw the random numbers in Python and pass a Tensor or int seed",
}


def cpp_parameter_type(arg: Argument, abi: str) -> str:
    """The C++ type a kernel of `abi` takes `arg` as: `const at::Tensor&`, `at::IntArrayRef`,
    `torch::stable::Tensor&`, ...; raise NoCppType where the ABI has none."""
    if abi == TORCH_LIBRARY:
        return _aten(arg.type, arg.is_mutated)
    if abi == STABLE_ABI:
        return _stable(arg.type, arg.is_mutated)
    raise ValueError(f"no C++ ABI {abi!r} (one of {', '.join(ABIS)})")


def cpp_type_problem(arg: Argument, abi: str) -> str | None:
    """Why a kernel of `abi` cannot take `arg` (a message for the argument's column), or None."""
    try:
        cpp_parameter_type(arg, abi)
    except NoCppType as error:
        return f"argument {arg.name!r} of type {arg.type}: {error.reason}"
    return None


def cpp_parameter(arg: Argument, abi: str) -> str:
    """`arg` as a parameter of a kernel declaration: `const at::Tensor& input`."""
    return f"{cpp_parameter_type(arg, abi)} {arg.name}"


def cpp_parameters(args: tuple[Argument, ...] | list[Argument], abi: str) -> list[str]:
    """Every argument in schema order, as `cpp_parameter` writes it (for `cpp.wrap`)."""
    return [cpp_parameter(arg, abi) for arg in args]


# The headers a declaration with these types needs (every type above is declared in one of them).
INCLUDES = {
    TORCH_LIBRARY: ("ATen/core/Tensor.h", "ATen/core/List.h", "c10/core/Scalar.h", "optional"),
    STABLE_ABI: (
        "torch/csrc/stable/device.h", "torch/csrc/stable/tensor.h",
        "torch/headeronly/core/Layout.h", "torch/headeronly/core/MemoryFormat.h",
        "torch/headeronly/core/ScalarType.h", "optional", "string_view", "vector",
    ),
}  # fmt: skip


# ------------------------------------------------------------------ torch_library (ATen)


def _aten(type: Type, mutated: bool) -> str:
    if isinstance(type, OptionalType):
        return _aten_optional(type.elem)
    if isinstance(type, ListType):
        return _aten_list(type)
    if type.name == "Tensor":
        return "at::Tensor&" if mutated else "const at::Tensor&"
    if type.name == "Scalar":
        return "const at::Scalar&"
    if type.name == "Generator":  # at::Generator itself registers as Generator?
        raise NoCppType(_GENERATOR)
    return _ATEN[type.name]


def _aten_optional(elem: Type) -> str:
    if str(elem) == "Tensor":  # a mutated Tensor? too: torchgen passes it by const reference
        return "const std::optional<at::Tensor>&"
    if str(elem) == "Generator":
        return "std::optional<at::Generator>"
    if isinstance(elem, ListType) and str(elem.elem) in ("int", "SymInt"):
        return "at::OptionalIntArrayRef"
    inner = _aten(elem, False)
    if inner.startswith("const "):  # Scalar?: by const reference, like the Scalar itself
        return f"const std::optional<{inner.removeprefix('const ').removesuffix('&')}>&"
    return f"std::optional<{inner}>"


def _aten_list(type: ListType) -> str:
    elem = str(type.elem)
    if elem == "Tensor":
        return "at::TensorList"
    if elem == "Tensor?":  # what the dispatcher passes: an owning list (ATen's index(), say)
        return "const c10::List<std::optional<at::Tensor>>&"
    if elem in ("int", "SymInt"):
        return "at::IntArrayRef"
    if elem == "bool":
        # c10::List<bool> holds no contiguous bools to view: a fixed size as std::array, else a List.
        return "const c10::List<bool>&" if type.size is None else f"std::array<bool, {type.size}>"
    if elem == "str":
        return "const c10::List<std::string>&"
    return f"at::ArrayRef<{_aten(type.elem, False).removeprefix('const ').removesuffix('&')}>"


# ---------------------------------------------------------------------- stable_abi


def _stable(type: Type, mutated: bool) -> str:
    if isinstance(type, OptionalType):
        inner = _stable_owned(type.elem)
        return f"const std::optional<{_bare(inner)}>&" if _by_reference(inner) else f"std::optional<{inner}>"
    if isinstance(type, ListType):
        # TORCH_BOX unboxes every list into an owning std::vector (none is a view into the stack).
        return f"const std::vector<{_bare(_stable_owned(type.elem))}>&"
    if type.name == "Tensor":
        return "torch::stable::Tensor&" if mutated else "const torch::stable::Tensor&"
    if type.name in _STABLE_LACKS:
        raise NoCppType(_STABLE_LACKS[type.name])
    return _STABLE[type.name]


def _stable_owned(type: Type) -> str:
    """The type inside an optional or a list, which owns its value: TORCH_BOX turns only a bare
    `std::string_view` parameter into an owned string, not one inside a std::optional or vector."""
    text = _stable(type, False)
    return "std::string" if text == "std::string_view" else text


def _bare(text: str) -> str:
    """`const torch::stable::Tensor&` as a template argument: `torch::stable::Tensor`."""
    return text.removeprefix("const ").removesuffix("&")


def _by_reference(text: str) -> bool:
    """Whether an optional of `text` goes by const reference: all but the one-word values."""
    return text not in _STABLE.values()
