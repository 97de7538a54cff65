"""The `fake` language of `kernel: custom` ops: shapes, strides and dtypes from metadata (kopgen.expr.metadata)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kopgen import generate
from kopgen.expr import ExprError
from kopgen.expr.metadata import TORCH_DTYPES, fake_source, is_dynamic, parse_metadata

TENSORS, INTS = ("x", "w"), ("n", "head_size")


def test_kopgen_knows_every_dtype_of_the_installed_torch():
    installed = {name for name in dir(torch) if isinstance(getattr(torch, name), torch.dtype)}
    assert installed <= TORCH_DTYPES, sorted(installed - TORCH_DTYPES)


@pytest.mark.parametrize("text", [
    "x.shape[:-1] + (x.shape[-1] // 2,)",
    "(n, head_size)",
    "x.shape[0] * 2",
    "(x.size(0), n * head_size)",
    "(x.numel(),)",
    "x.shape[:-1] + w.shape[1:]",
    "(1, x.size(1))",
    "x.stride()",
    "torch.float8_e4m3fn",
    "torch.float8_e5m2",
    "torch.int8",
    "torch.int64",
    "torch.bool",
    "torch.complex64",
    "torch.uint8",
    "w.dtype",
])
def test_metadata_accepts(text):
    assert parse_metadata(text, TENSORS, INTS) == text


@pytest.mark.parametrize(("text", "message"), [
    ("torch.flaot8_e4m3fn", "unknown dtype torch.flaot8_e4m3fn (did you mean 'torch.float8_e4m3fn'?)"),
    ("int64", "write a dtype as torch.int64"),
    ("torch.empty(3)", "the only calls allowed are x.size(), x.dim(), x.numel(), x.stride() of a Tensor argument"),
    ("(max(n, 2),)", "the only calls allowed are"),
    ("x.sum()", "the only calls allowed are"),
    ("x.shape[0] / 2", "only + - * // are allowed in a shape"),
    ("(m,)", "unknown name 'm'"),
    ("x", "use x.shape or x.dtype"),
])
def test_metadata_refuses(text, message):
    with pytest.raises(ExprError) as error:
        parse_metadata(text, TENSORS, INTS)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("text", ["(dynamic(),)", "(dynamic(max=1024), x.size(1))", "x.shape[:-1] + (dynamic(),)"])
def test_a_shape_may_have_sizes_the_data_decides(text):
    assert parse_metadata(text, TENSORS, INTS, dynamic=True) == text
    assert is_dynamic(text)
    assert fake_source(text, "ctx") == text.replace("dynamic(", "ctx.new_dynamic_size(")


@pytest.mark.parametrize(("text", "dynamic", "message"), [
    ("(dynamic(),)", False, "dynamic() is a size of a shape"),  # a dtype or strides
    ("(dynamic(max=x.numel()),)", True, "write dynamic() or dynamic(max=N), N an int"),  # torch refuses a SymInt max
    ("(dynamic(n),)", True, "write dynamic() or dynamic(max=N)"),
    ("(dynamic(min=2),)", True, "write dynamic() or dynamic(max=N)"),
])
def test_dynamic_sizes_refused(text, dynamic, message):
    with pytest.raises(ExprError) as error:
        parse_metadata(text, TENSORS, INTS, dynamic=dynamic)
    assert str(error.value).startswith(message)


SPEC = """\
kopgen: 1
package: kfake
defaults: {{backends: {{cpu: python}}}}
ops:
  - schema: "f(Tensor x) -> (Tensor, Tensor)"
    kernel: custom
    reference: "(x > 0, x.transpose(0, 1))"
    fake:
      - {{shape: x.shape, dtype: {dtype}}}
      - {{shape: "(x.size(1), x.size(0))", strides: "(1, x.size(1))"}}
"""


def test_outputs_are_allocated_and_referenced_as_fake_says(tmp_path):
    """The allocator (which the fake kernel and the launcher share) takes the dtype and the strides;
    the reference returns each output in the dtype `fake` gives."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(dtype="torch.bool"))
    repo = generate(spec, tmp_path / "repo")
    support = " ".join((repo / "kfake/_support.py").read_text().split())  # as one line, whatever the layout
    assert "torch.empty(x.shape, dtype=torch.bool, device=x.device)" in support
    assert "torch.empty_strided( (x.size(1), x.size(0)), (1, x.size(1)), dtype=x.dtype, device=x.device )" in support
    reference = (repo / "kfake/reference.py").read_text()
    assert "import torch\n" in reference and "dtypes = (torch.bool, x.dtype)" in reference
    assert "contiguous_outputs = False" in (repo / "tests/test_f.py").read_text()


def test_an_output_sized_by_the_data_is_allocated_by_its_launcher(tmp_path):
    """`dynamic()`: the fake kernel asks the fake context for a new size, _support has no allocator
    for it, and the skeleton and the python kernel allocate the output themselves."""
    repo = generate(Path(__file__).parent / "specs/custom_dynamic.yaml", tmp_path / "repo")
    registration = (repo / "kdyn/_registration.py").read_text()
    assert "ctx = torch.library.get_ctx()" in registration
    assert "torch.empty((ctx.new_dynamic_size(),), dtype=x.dtype, device=x.device)" in registration
    assert "positive_values_output" not in (repo / "kdyn/_support.py").read_text()
    kernels = (repo / "kdyn/kernels/positive_values.py").read_text()
    assert "_support.positive_values_output" not in kernels
    assert "return reference.positive_values(x).clone()" in kernels
    assert "data_dependent_sizes = True" in (repo / "tests/test_positive_values.py").read_text()


OUT_DTYPE = """\
kopgen: 1
package: kcast
defaults:
  backends: {cpu: python}
ops:
  - schema: "cast_to(Tensor x, ScalarType out_dtype=float32) -> (Tensor, Tensor)"
    kernel: custom
    reference: "(x.to(out_dtype), x.abs().amax(-1))"
    fake: [{shape: x.shape, dtype: out_dtype}, {shape: "x.shape[:-1]", dtype: torch.float32}]
    tests:
      args:
        out_dtype: {value: float64}
"""

OUT_DTYPE_CHECK = """
import torch
import kcast

x = torch.randn(3, 4)
y, amax = kcast.cast_to(x, torch.float16)
assert y.dtype == torch.float16 and amax.dtype == torch.float32, (y.dtype, amax.dtype)
print("ok")
"""


def test_a_scalar_type_argument_gives_an_outputs_dtype(tmp_path):
    """`fake: {dtype: out_dtype}` for `ScalarType out_dtype`, as quantising kernels take their output's dtype:
    it was "unknown name 'out_dtype'"; the allocator, the C++ host function and the reference use the argument.
    A shape still takes no ScalarType."""
    from .test_normalize import _generated, _passes

    repo = _generated(tmp_path, OUT_DTYPE)
    assert "torch.empty(x.shape, dtype=out_dtype, device=x.device)" in (repo / "kcast/_support.py").read_text()
    _passes(repo, OUT_DTYPE_CHECK)
    compiled = generate_text(OUT_DTYPE.replace("backends: {cpu: python}", "registration: torch_library\n  backends: {cpu: cpp}"),
                             tmp_path / "compiled")
    assert "new_output(x, shape_of(x), out_dtype)" in (compiled / "kcast/csrc/ops.cpp").read_text()
    with pytest.raises(ExprError, match="unknown name 'out_dtype'"):
        parse_metadata("(out_dtype,)", TENSORS, INTS)
    assert parse_metadata("out_dtype", TENSORS, INTS, dtypes=["out_dtype"]) == "out_dtype"


def generate_text(spec: str, folder: Path) -> Path:
    folder.mkdir()
    (folder / "kopgen.yaml").write_text(spec)
    return generate(folder / "kopgen.yaml", folder / "repo")
