"""The C++ parameter type of every schema type on both ABIs (kopgen/lang/cpp_types.py).

The unit table pins each spelling; the slow tests build one extension per ABI with a kernel per
type, registered with the table's parameter type, and call each through torch.ops: a type the
dispatcher (or TORCH_BOX) does not take fails to build or to register.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from kopgen.lang.cpp_types import (
    ABIS,
    INCLUDES,
    STABLE_ABI,
    TORCH_LIBRARY,
    NoCppType,
    cpp_parameter,
    cpp_parameter_type,
    cpp_type_problem,
)
from kopgen.schema import parse_schema

_TENSOR = "torch::stable::Tensor"
# schema type: (torch_library, stable_abi), each None where that ABI has no type for it
TABLE = {
    "Tensor": ("const at::Tensor&", f"const {_TENSOR}&"),
    "Tensor(a!)": ("at::Tensor&", f"{_TENSOR}&"),
    "Tensor!": ("at::Tensor&", f"{_TENSOR}&"),
    "Tensor?": ("const std::optional<at::Tensor>&", f"const std::optional<{_TENSOR}>&"),
    "Tensor!?": ("const std::optional<at::Tensor>&", f"const std::optional<{_TENSOR}>&"),
    "Tensor(a!)?": ("const std::optional<at::Tensor>&", f"const std::optional<{_TENSOR}>&"),
    "Tensor[]": ("at::TensorList", f"const std::vector<{_TENSOR}>&"),
    "Tensor?[]": (
        "const c10::List<std::optional<at::Tensor>>&",
        f"const std::vector<std::optional<{_TENSOR}>>&",
    ),
    "Tensor[]?": ("std::optional<at::TensorList>", f"const std::optional<std::vector<{_TENSOR}>>&"),
    "Tensor(a!)[]": ("at::TensorList", f"const std::vector<{_TENSOR}>&"),
    "Tensor?[]?": (
        "const std::optional<c10::List<std::optional<at::Tensor>>>&",
        f"const std::optional<std::vector<std::optional<{_TENSOR}>>>&",
    ),
    "int": ("int64_t", "int64_t"),
    "int?": ("std::optional<int64_t>", "std::optional<int64_t>"),
    "int[]": ("at::IntArrayRef", "const std::vector<int64_t>&"),
    "int[2]": ("at::IntArrayRef", "const std::vector<int64_t>&"),
    "int[]?": ("at::OptionalIntArrayRef", "const std::optional<std::vector<int64_t>>&"),
    "SymInt": ("int64_t", "int64_t"),
    "SymInt?": ("std::optional<int64_t>", "std::optional<int64_t>"),
    "SymInt[]": ("at::IntArrayRef", "const std::vector<int64_t>&"),
    "SymInt[]?": ("at::OptionalIntArrayRef", "const std::optional<std::vector<int64_t>>&"),
    "float": ("double", "double"),
    "float?": ("std::optional<double>", "std::optional<double>"),
    "float[]": ("at::ArrayRef<double>", "const std::vector<double>&"),
    "float[]?": ("std::optional<at::ArrayRef<double>>", "const std::optional<std::vector<double>>&"),
    "float[2]": ("at::ArrayRef<double>", "const std::vector<double>&"),
    "bool": ("bool", "bool"),
    "bool?": ("std::optional<bool>", "std::optional<bool>"),
    "bool[]": ("const c10::List<bool>&", "const std::vector<bool>&"),
    "bool[3]": ("std::array<bool, 3>", "const std::vector<bool>&"),
    "bool[3]?": ("std::optional<std::array<bool, 3>>", "const std::optional<std::vector<bool>>&"),
    "str": ("c10::string_view", "std::string_view"),
    "str?": ("std::optional<c10::string_view>", "const std::optional<std::string>&"),
    "str[]": ("const c10::List<std::string>&", "const std::vector<std::string>&"),
    "str[]?": ("const std::optional<c10::List<std::string>>&", "const std::optional<std::vector<std::string>>&"),
    "ScalarType": ("at::ScalarType", "torch::headeronly::ScalarType"),
    "ScalarType?": ("std::optional<at::ScalarType>", "std::optional<torch::headeronly::ScalarType>"),
    "Scalar": ("const at::Scalar&", None),
    "Scalar?": ("const std::optional<at::Scalar>&", None),
    "Scalar[]": ("at::ArrayRef<at::Scalar>", None),
    "Scalar[]?": ("std::optional<at::ArrayRef<at::Scalar>>", None),
    "Device": ("at::Device", "torch::stable::Device"),
    "Device?": ("std::optional<at::Device>", "std::optional<torch::stable::Device>"),
    "Layout": ("at::Layout", "torch::headeronly::Layout"),
    "Layout?": ("std::optional<at::Layout>", "std::optional<torch::headeronly::Layout>"),
    "MemoryFormat": ("at::MemoryFormat", "torch::headeronly::MemoryFormat"),
    "MemoryFormat?": (
        "std::optional<at::MemoryFormat>",
        "std::optional<torch::headeronly::MemoryFormat>",
    ),
    "Generator": (None, None),
    "Generator?": ("std::optional<at::Generator>", None),
}


def _arg(type_text: str):
    return parse_schema(f"f({type_text} x) -> ()").arguments[0]


@pytest.mark.parametrize("type_text", TABLE)
def test_parameter_type(type_text):
    arg = _arg(type_text)
    for abi, expected in zip(ABIS, TABLE[type_text]):
        if expected is None:
            with pytest.raises(NoCppType):
                cpp_parameter_type(arg, abi)
            assert cpp_type_problem(arg, abi).startswith(f"argument 'x' of type {arg.type}: ")
        else:
            assert cpp_parameter_type(arg, abi) == expected
            assert cpp_type_problem(arg, abi) is None


def test_declaration_and_reasons():
    arg = parse_schema("f(Tensor! out, Tensor input) -> ()").arguments[0]
    assert cpp_parameter(arg, TORCH_LIBRARY) == "at::Tensor& out"
    assert cpp_parameter(arg, STABLE_ABI) == "torch::stable::Tensor& out"
    assert "no Scalar type" in cpp_type_problem(_arg("Scalar?"), STABLE_ABI)
    assert "from torch 2.13 on" in cpp_type_problem(_arg("Generator?"), STABLE_ABI)
    assert "declare it Generator?" in cpp_type_problem(_arg("Generator"), TORCH_LIBRARY)
    with pytest.raises(ValueError, match="no C\\+\\+ ABI"):
        cpp_parameter_type(arg, "pybind")


# ------------------------------------------------ the real check: build, register, call

# A sample value per schema type (made by a function: torch is imported only by the slow tests),
# and the numbers a kernel's `put` overloads write for it (see _PUT_ATEN, _PUT_STABLE).
def _samples(torch):
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    generator = torch.Generator().manual_seed(1234)
    scalar = {
        "Tensor": (t, [6.0]), "int": (7, [7.0]), "SymInt": (8, [8.0]), "float": (2.5, [2.5]),
        "bool": (True, [1.0]), "str": ("ab", [2.0, 97.0, 98.0]), "ScalarType": (torch.int64, [4.0]),
        "Scalar": (1.5, [1.5]), "Device": (torch.device("cpu"), [0.0, -1.0]),
        "Layout": (torch.strided, [0.0]), "MemoryFormat": (torch.channels_last, [2.0]),
        "Generator": (generator, [1234.0]),
    }  # fmt: skip
    lists = {
        "Tensor[]": ([t, 2 * t], [2.0, 6.0, 12.0]), "Tensor?[]": ([t, None], [2.0, 1.0, 6.0, 0.0]),
        "int[]": ([1, 2], [2.0, 1.0, 2.0]), "int[2]": ([4, 5], [2.0, 4.0, 5.0]),
        "SymInt[]": ([3], [1.0, 3.0]), "float[]": ([0.5, 1.5], [2.0, 0.5, 1.5]),
        "bool[]": ([True, False], [2.0, 1.0, 0.0]), "bool[3]": ([False, True, True], [3.0, 0.0, 1.0, 1.0]),
        "str[]": (["a", "bc"], [2.0, 1.0, 97.0, 2.0, 98.0, 99.0]), "Scalar[]": ([1, 2.5], [2.0, 1.0, 2.5]),
    }  # fmt: skip
    return {**scalar, **lists}


def _cases(torch, abi):
    """(schema type, value, expected numbers): each type with its sample; each optional type with
    its sample and with None; only the types `abi` has."""
    samples = _samples(torch)
    cases = []
    for type_text in TABLE:
        if TABLE[type_text][ABIS.index(abi)] is None:
            continue
        # A mutated Tensor takes a Tensor's sample, a float[2] a float[]'s.
        base = re.sub(r"\(a!\)|!", "", type_text.removesuffix("?"))
        value, expected = samples.get(base) or samples[re.sub(r"\[\d+\]", "[]", base)]
        if type_text.endswith("?"):
            cases += [(type_text, value, [1.0, *expected]), (type_text, None, [0.0])]
        else:
            cases.append((type_text, value, expected))
    return cases


def _source(abi, types):
    """One C++ file: an op per type, `k<i>(Tensor anchor, <type> x) -> float[]`, whose kernel takes x in its
    cpp_types parameter type and returns the numbers `put` writes for it."""
    prelude, library, impl, box = (
        (_PUT_ATEN, "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "{}")
        if abi == TORCH_LIBRARY
        else (_PUT_STABLE, "STABLE_TORCH_LIBRARY", "STABLE_TORCH_LIBRARY_IMPL", "TORCH_BOX({})")
    )
    kernels, defs, impls = [], [], []
    for i, type_text in enumerate(types):
        # A Tensor first: the dispatcher picks the CPU kernel by the arguments' Tensors.
        anchor, arg = parse_schema(f"f(Tensor anchor, {type_text} x) -> ()").arguments
        parameters = f"{cpp_parameter(anchor, abi)}, {cpp_parameter(arg, abi)}"
        kernels.append(f"std::vector<double> k{i}({parameters}) {{ Out o; put(o, x); return o; }}")
        defs.append(f'  m.def("k{i}({anchor}, {arg}) -> float[]");')
        impls.append(f'  m.impl("k{i}", {box.format(f"&k{i}")});')
    return "\n".join([
        "#include <Python.h>", prelude, *kernels,
        f"{library}(kt_{abi}, m) {{", *defs, "}",
        f"{impl}(kt_{abi}, CPU, m) {{", *impls, "}",
        'extern "C" PyObject* PyInit_kt_' + abi + "(void) {",
        f'  static PyModuleDef module = {{PyModuleDef_HEAD_INIT, "kt_{abi}", nullptr, -1, nullptr}};',
        "  return PyModule_Create(&module);", "}",
    ])  # fmt: skip


# Writes each value as numbers: a scalar as itself, a Tensor (float64) as its sum, a string or a
# list as its length and then its items, an optional as 1 and its value or as 0, a Device as its
# type and index, a Generator as its seed, an enum as its number.
_PUT_COMMON = """
#include <optional>
#include <string>
#include <vector>
using Out = std::vector<double>;
template <typename T> void put(Out& o, const std::optional<T>& v);
template <typename T> void put(Out& o, const std::vector<T>& v);
void put(Out& o, double v) { o.push_back(v); }
void put(Out& o, std::string_view v) {
  o.push_back(v.size());
  for (char c : v) o.push_back(c);
}
void put(Out& o, const std::string& v) { put(o, std::string_view(v)); }
"""
_PUT_ATEN = "#include <torch/library.h>" + _PUT_COMMON + """
template <typename T> void put(Out& o, at::ArrayRef<T> v);
template <typename T> void put(Out& o, const c10::List<T>& v);
template <typename T, size_t N> void put(Out& o, const std::array<T, N>& v);
void put(Out& o, const at::Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += t.const_data_ptr<double>()[i];
  o.push_back(sum);
}
void put(Out& o, at::ScalarType v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, at::Layout v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, at::MemoryFormat v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, const at::Scalar& v) { o.push_back(v.toDouble()); }
void put(Out& o, at::Device v) { o.push_back(static_cast<int>(v.type())); o.push_back(v.index()); }
void put(Out& o, const at::Generator& v) { o.push_back(v.current_seed()); }
void put(Out& o, at::OptionalIntArrayRef v) {
  o.push_back(v.has_value());
  if (v.has_value()) put(o, *v);
}
template <typename T> void put(Out& o, const std::optional<T>& v) {
  o.push_back(v.has_value());
  if (v.has_value()) put(o, *v);
}
template <typename T> void put(Out& o, at::ArrayRef<T> v) {
  o.push_back(v.size());
  for (const auto& item : v) put(o, item);
}
template <typename T> void put(Out& o, const c10::List<T>& v) {
  o.push_back(v.size());
  for (size_t i = 0; i < v.size(); ++i) put(o, static_cast<T>(v.get(i)));
}
template <typename T, size_t N> void put(Out& o, const std::array<T, N>& v) {
  o.push_back(N);
  for (const auto& item : v) put(o, item);
}
"""
_STABLE_INCLUDES = ("library", "device", "tensor")
_PUT_STABLE = "\n".join(f"#include <torch/csrc/stable/{name}.h>" for name in _STABLE_INCLUDES) + _PUT_COMMON + """
void put(Out& o, const torch::stable::Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += static_cast<const double*>(t.data_ptr())[i];
  o.push_back(sum);
}
void put(Out& o, torch::headeronly::ScalarType v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, torch::headeronly::Layout v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, torch::headeronly::MemoryFormat v) { o.push_back(static_cast<int>(v)); }
void put(Out& o, torch::stable::Device v) {
  o.push_back(static_cast<int>(v.type()));
  o.push_back(v.index());
}
template <typename T> void put(Out& o, const std::optional<T>& v) {
  o.push_back(v.has_value());
  if (v.has_value()) put(o, *v);
}
template <typename T> void put(Out& o, const std::vector<T>& v) {
  o.push_back(v.size());
  for (size_t i = 0; i < v.size(); ++i) put(o, static_cast<T>(v[i]));
}
"""


def _build_and_call(abi, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils import cpp_extension

    cases = _cases(torch, abi)
    types = list(dict.fromkeys(type_text for type_text, _, _ in cases))
    source = tmp_path / f"kt_{abi}.cpp"
    source.write_text(_source(abi, types))
    flags = ["-O0", "-g0", "-Wall"]
    if abi == STABLE_ABI:
        flags.append("-DTORCH_TARGET_VERSION=0x020a000000000000")
    cpp_extension.load(
        f"kt_{abi}", [str(source)], extra_cflags=flags, build_directory=str(tmp_path), is_python_module=False
    )
    ops = getattr(torch.ops, f"kt_{abi}")
    got = {}
    for type_text, value, expected in cases:
        op = getattr(ops, f"k{types.index(type_text)}")
        got[(type_text, value is None)] = (op(torch.zeros(1), value), expected)
    wrong = {key: pair for key, pair in got.items() if pair[0] != pair[1]}
    assert not wrong, wrong
    return len(got)


@pytest.mark.slow
def test_torch_library_kernels_take_each_type(tmp_path):
    count = _build_and_call(TORCH_LIBRARY, tmp_path)
    print(f"torch_library: {count} calls, {len(TABLE)} types")


@pytest.mark.slow
def test_stable_abi_kernels_take_each_type(tmp_path):
    count = _build_and_call(STABLE_ABI, tmp_path)
    print(f"stable_abi: {count} calls")


@pytest.mark.slow
@pytest.mark.parametrize("abi", ABIS)
def test_includes_declare_every_type(abi, tmp_path):
    """A header holding only INCLUDES declares a function taking every type the ABI has."""
    pytest.importorskip("torch")
    from torch.utils import cpp_extension

    args = [_arg(t) for t, types in TABLE.items() if types[ABIS.index(abi)] is not None]
    header = tmp_path / "kernels.h"
    header.write_text(
        "".join(f"#include <{name}>\n" for name in INCLUDES[abi])
        + "".join(f"void f{i}({cpp_parameter(arg, abi)});\n" for i, arg in enumerate(args))
    )
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    flags = ["-DTORCH_TARGET_VERSION=0x020a000000000000"] if abi == STABLE_ABI else []
    command = ["g++", "-std=c++17", "-fsyntax-only", "-x", "c++", *includes, *flags, str(header)]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
