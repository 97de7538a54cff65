"""_support.DenseLaunches, DenseRows and DenseHalves: a pointwise, row reduction or split launcher's dense
CUDA tensors straight to the kernel. Here, on CPU tensors made to look like tensors of GPU 0, the
launches they make are recorded: the same kernel, grid, arguments and constexprs as the general path's,
the direct launcher reused once known, and nothing for tensors that are not dense, of one shape and
dtype. The launches themselves run on the GPU machine (docs/gpu.md)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.conftest import ROOT

triton = pytest.importorskip("triton")

NAMES = ("BLOCK_ROWS", "BLOCK_COLS", "COMPUTE_DTYPE")


@triton.jit
def _kernel(a_ptr, b_ptr, out_ptr, c, n_rows, n_cols, s0, s1, s2, s3, s4, s5, BLOCK_ROWS: triton.language.constexpr,
            BLOCK_COLS: triton.language.constexpr, COMPUTE_DTYPE: triton.language.constexpr):  # fmt: skip
    pass


@pytest.fixture
def support(monkeypatch):
    """The golden muladd package's _support.py, loaded on its own, with CPU tensors on "GPU 0" and its
    general launch recorded."""
    return _recorded_support(monkeypatch, "muladd/kbook")


@pytest.fixture
def rows_support(monkeypatch):
    """The same of the golden rows package (row reductions on Triton)."""
    return _recorded_support(monkeypatch, "rows/krows")


@pytest.fixture
def gated_support(monkeypatch):
    """The same of the golden gated package (split ops on Triton)."""
    return _recorded_support(monkeypatch, "gated/kgated")


def _recorded_support(monkeypatch, package: str):
    path = ROOT / "tests/golden" / package / "_support.py"
    spec = importlib.util.spec_from_file_location(f"_dense_support_{package.split('/')[0]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda tensor: True))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda tensor: 0)
    monkeypatch.setattr(module, "_current_gpu", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 7, raising=False)
    module.general = []
    monkeypatch.setattr(module, "launch", lambda kernel, grid, *args, **constexprs: module.general.append(
        (kernel, grid, args, constexprs)))  # fmt: skip
    return module


def test_a_dense_call_launches_as_the_general_path(support):
    a, b = torch.rand(1000), torch.rand(1000)
    out = support.DenseLaunches(_kernel, 1024, 1, NAMES)((a, b), (0.5,))
    assert out.shape == (1000,) and out.dtype == torch.float32
    ((kernel, grid, args, constexprs),) = support.general
    n_rows, n_cols, strides, block_rows, block_cols = support.tiles(out.shape, 1024, a, b, out)  # the general path's
    assert kernel is _kernel
    assert grid == ((n_rows + block_rows - 1) // block_rows * ((n_cols + block_cols - 1) // block_cols),)
    assert args[:3] == (a, b, out) and args[3:] == (0.5, n_rows, n_cols, *strides)
    assert constexprs == {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols,
                          "COMPUTE_DTYPE": triton.language.float32}  # fmt: skip


def test_the_direct_launcher_is_reused_once_the_general_path_made_it(support):
    a, b = torch.rand(1024), torch.rand(1024)
    direct = []
    dense = support.DenseLaunches(_kernel, 1024, 1, NAMES)
    out = dense((a, b), (0.5,))
    ((_, grid, args, constexprs),) = support.general
    support._LAUNCHERS[support._launch_key(_kernel, args, constexprs)] = lambda *launch: direct.append(launch)
    dense((a, b), (0.5,))  # the general path again: this key had no direct launcher when first seen
    dense = support.DenseLaunches(_kernel, 1024, 1, NAMES)
    dense((a, b), (0.5,))  # learns the launcher the general path made
    assert len(support.general) == 3 and not direct
    out = dense((a, b), (0.5,))
    assert len(support.general) == 3
    ((launch_grid, stream, launch_args),) = direct
    assert (launch_grid, stream) == (grid, 7)
    assert launch_args[:2] == (a, b) and launch_args[2] is out and launch_args[3:] == args[3:]


def test_the_key_follows_what_triton_specialises(support):
    dense = support.DenseLaunches(_kernel, 1024, 1, NAMES)
    x = torch.rand(2048)
    dense((x[:1000], x[:1000]), (0.5,))
    dense((x[:1024], x[:1024]), (0.5,))  # a multiple of 16 elements
    dense((x[1:1001], x[:1000]), (0.5,))  # an input off 16-byte alignment
    dense((x[:1000], x[:1000]), (2,))  # an int scalar (a multiple of 16 once it is 16)
    dense((x[:1000].double(), x[:1000].double()), (0.5,))
    dense((x[:1000], x[:1000]), (0.25,))  # the same key as the first
    assert len(dense.launchers) == 5
    assert support.general[4][3]["COMPUTE_DTYPE"] == triton.language.float64


def test_two_outputs(support):
    x = torch.rand(3, 5)
    out0, out1 = support.DenseLaunches(_kernel, 1024, 2, NAMES)((x,), ())
    ((_, _, args, _),) = support.general
    assert out0.shape == out1.shape == (3, 5) and out0.data_ptr() != out1.data_ptr()
    assert args == (x, out0, out1, 1, 15, 0, 1, 0, 1, 0, 1)


@pytest.mark.parametrize(
    "shapes", [((64, 1000), (1000,)), ((3, 5, 16), (5, 16), (3, 5, 16)), ((7, 3000), (3000,)), ((4096,), (8, 4096))],
    ids=str,
)
def test_inputs_broadcast_along_rows_launch_as_the_general_path(support, shapes):
    """Inputs of the full shape beside inputs of its last dimensions (a weight, a bias): rows of those."""
    inputs = tuple(torch.rand(shape) for shape in shapes)[:2]
    out = support.DenseLaunches(_kernel, 1024, 1, NAMES)(inputs, (0.5,))
    full = torch.broadcast_shapes(*(t.shape for t in inputs))
    assert out.shape == full and out.is_contiguous()
    ((kernel, grid, args, constexprs),) = support.general
    n_rows, n_cols, strides, block_rows, block_cols = support.tiles(full, 1024, *inputs, out)  # the general path's
    assert kernel is _kernel
    assert grid == ((n_rows + block_rows - 1) // block_rows * ((n_cols + block_cols - 1) // block_cols),)
    assert args[:2] == inputs and args[2] is out and args[3:] == (0.5, n_rows, n_cols, *strides)
    assert constexprs == {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols,
                          "COMPUTE_DTYPE": triton.language.float32}  # fmt: skip


def test_broadcast_rows_key_on_which_input_is_broadcast(support):
    dense = support.DenseLaunches(_kernel, 1024, 1, NAMES)
    x, w = torch.rand(8, 64), torch.rand(64)
    dense((x, w), (0.5,))
    dense((w, x), (0.5,))  # the other input broadcast
    dense((x, torch.rand(8, 64)), (0.5,))  # dense: the other path
    dense((torch.rand(8, 60), torch.rand(60)), (0.5,))  # a row length not a multiple of 16
    dense((x, w), (0.25,))  # the first key again
    assert len(dense.launchers) == 4 and len(support.general) == 5


@pytest.mark.parametrize(
    "make",
    [
        lambda: ((torch.rand(1, 8), torch.rand(8)), (0.5,)),  # broadcast to one row
        lambda: ((torch.rand(4, 8), torch.rand(4, 1)), (0.5,)),  # broadcast along a row
        lambda: ((torch.rand(4, 8), torch.rand(1, 8)), (0.5,)),  # a leading one, not only the last dimensions
        lambda: ((torch.rand(4, 8), torch.rand(8).double()), (0.5,)),  # broadcast, another dtype
        lambda: ((torch.rand(4, 8), torch.rand(16)[::2]), (0.5,)),  # broadcast, strided
        lambda: ((torch.rand(8, 4).t(), torch.rand(4, 8)), (0.5,)),  # transposed
        lambda: ((torch.rand(2, 3), torch.rand(3, 2)), (0.5,)),  # as many elements, another shape
        lambda: ((torch.rand(8), torch.rand(8).double()), (0.5,)),  # two dtypes
        lambda: ((torch.rand(0), torch.rand(0)), (0.5,)),  # empty
        lambda: ((torch.rand(8), torch.rand(8)), (2**40,)),  # an int beyond 32 bits: Triton's own path
    ],
    ids=["one_row", "along_a_row", "leading_one", "broadcast_two_dtypes", "broadcast_strided", "transposed",
         "other_shape", "two_dtypes", "empty", "int64_scalar"],
)
def test_anything_else_is_the_general_paths(support, make):
    inputs, scalars = make()
    assert support.DenseLaunches(_kernel, 1024, 1, NAMES)(inputs, scalars) is None
    assert not support.general


def test_another_gpu_or_a_cpu_tensor_is_the_general_paths(support, monkeypatch):
    dense = support.DenseLaunches(_kernel, 1024, 1, NAMES)
    monkeypatch.setattr(support, "_current_gpu", lambda: 1)  # Triton launches on the current GPU
    assert dense((torch.rand(8), torch.rand(8)), (0.5,)) is None
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda tensor: False))
    monkeypatch.setattr(support, "_current_gpu", lambda: 0)
    assert dense((torch.rand(8), torch.rand(8)), (0.5,)) is None
    assert not support.general


ROW_NAMES = ("BLOCK_ROWS", "BLOCK_COLS", "CONST_COLS", "COMPUTE_DTYPE")


@triton.jit
def _row_kernel(a_ptr, b_ptr, out_ptr, scale, n_rows, n_cols, s0, s1, s2, s3, BLOCK_ROWS: triton.language.constexpr,
                BLOCK_COLS: triton.language.constexpr, CONST_COLS: triton.language.constexpr,
                COMPUTE_DTYPE: triton.language.constexpr):  # fmt: skip
    pass


@pytest.mark.parametrize("shape", [(6, 1000), (2, 3, 4096), (5, 70000)], ids=str)
def test_rows_launch_as_the_general_path(rows_support, shape):
    a, b = torch.rand(shape), torch.rand(shape)
    out = rows_support.DenseRows(_row_kernel, ROW_NAMES)((a, b), (2.0,))
    assert out.shape == shape[:-1] and out.dtype == torch.float32
    ((kernel, grid, args, constexprs),) = rows_support.general
    # The general path's layout and block, as the launcher works them out (templates/package/kernels/_reduction.py.j2)
    n_rows, n_cols, strides = rows_support.row_layout(torch.Size(shape), a, b)
    block_rows, block_cols, num_warps = rows_support.row_blocks(n_rows, n_cols, 4)
    assert kernel is _row_kernel and grid == ((n_rows + block_rows - 1) // block_rows,)
    assert args[:2] == (a, b) and args[2] is out and args[3:] == (2.0, n_rows, n_cols, *strides)
    assert constexprs == {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols, "CONST_COLS": None,
                          "COMPUTE_DTYPE": triton.language.float32, "num_warps": num_warps}  # fmt: skip


def test_rows_reuse_the_direct_launcher_and_key_on_the_row_length(rows_support):
    dense = rows_support.DenseRows(_row_kernel, ROW_NAMES)
    a = torch.rand(8, 1024)
    dense((a, a), (2.0,))
    ((_, grid, _, _),) = rows_support.general
    direct = []
    dense.launchers[next(iter(dense.launchers))] = lambda *launch: direct.append(launch)
    out = dense((a, a), (3.0,))
    assert len(rows_support.general) == 1 and direct[0][0] == grid and direct[0][2][2] is out
    dense((torch.rand(8, 1000), torch.rand(8, 1000)), (2.0,))  # not a multiple of 16
    dense((torch.rand(8, 65536), torch.rand(8, 65536)), (2.0,))  # another block
    assert len(dense.launchers) == 3 and len(rows_support.general) == 3


@pytest.mark.parametrize(
    "inputs",
    [
        (torch.rand(8), torch.rand(8)),  # one row: its output has no dimension
        (torch.rand(4, 8), torch.rand(8)),  # broadcast
        (torch.rand(8, 4).t(), torch.rand(4, 8)),  # transposed
        (torch.rand(4, 0), torch.rand(4, 0)),  # empty rows
    ],
    ids=["one_row", "broadcast", "transposed", "empty"],
)
def test_other_rows_are_the_general_paths(rows_support, inputs):
    assert rows_support.DenseRows(_row_kernel, ROW_NAMES)(inputs, (2.0,)) is None
    assert not rows_support.general


@triton.jit
def _split_kernel(gate_ptr, up_ptr, out_ptr, n_rows, n_cols, s0, s1, s2, s3, s4, s5,
                  BLOCK_ROWS: triton.language.constexpr, BLOCK_COLS: triton.language.constexpr,
                  COMPUTE_DTYPE: triton.language.constexpr):  # fmt: skip
    pass


@pytest.mark.parametrize("shape", [(6, 2000), (2, 3, 16), (4096, 8192)], ids=str)
def test_halves_launch_as_the_general_path(gated_support, shape):
    x = torch.rand(shape)
    out = gated_support.DenseHalves(_split_kernel, 1024, 1, NAMES)((x,), ())
    assert out.shape == (*shape[:-1], shape[-1] // 2)
    ((kernel, grid, args, constexprs),) = gated_support.general
    gate, up = gated_support.split_halves("kgated::silu_and_mul", x)
    n_rows, n_cols, strides, block_rows, block_cols = gated_support.tiles(out.shape, 1024, gate, up, out)
    assert kernel is _split_kernel
    assert grid == ((n_rows + block_rows - 1) // block_rows * ((n_cols + block_cols - 1) // block_cols),)
    assert [t.data_ptr() for t in args[:2]] == [gate.data_ptr(), up.data_ptr()] and args[2] is out
    assert args[3:] == (n_rows, n_cols, *strides)
    assert constexprs == {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols,
                          "COMPUTE_DTYPE": triton.language.float32}  # fmt: skip


def test_halves_pass_the_second_half_by_its_address_to_the_direct_launcher(gated_support):
    dense = gated_support.DenseHalves(_split_kernel, 1024, 1, NAMES)
    x = torch.rand(8, 64)
    dense((x,), ())
    ((_, grid, args, _),) = gated_support.general
    direct = []
    dense.launchers[next(iter(dense.launchers))] = lambda *launch: direct.append(launch)
    out = dense((x,), ())
    ((launch_grid, _, launch_args),) = direct
    assert launch_grid == grid and launch_args[0] is x and launch_args[1] == x.data_ptr() + 32 * 4
    assert launch_args[2] is out and launch_args[3:] == args[3:]
    dense((torch.rand(8, 62),), ())  # a half width not a multiple of 16, the second half off 16 bytes
    assert len(dense.launchers) == 2


@pytest.mark.parametrize(
    "x", [torch.rand(8), torch.rand(1, 64), torch.rand(8, 2), torch.rand(8, 7), torch.rand(8, 64).t()],
    ids=["one_row", "one_row_of_two_dims", "halves_of_one", "odd_width", "transposed"],
)
def test_other_halves_are_the_general_paths(gated_support, x):
    assert gated_support.DenseHalves(_split_kernel, 1024, 1, NAMES)((x,), ()) is None
    assert not gated_support.general


@pytest.fixture
def norms_support(monkeypatch):
    """The same of the golden norms package (row normalisations on Triton)."""
    return _recorded_support(monkeypatch, "norms/knorms")


NORM_NAMES = ("BLOCK_ROWS", "BLOCK_COLS", "CONST_COLS", "ONE_PASS", "SAVE_STATS", "COMPUTE_DTYPE")


@triton.jit
def _norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, mu_ptr, rstd_ptr, eps, n_rows, n_cols, s0, s1, s2, s3, s4, s5, s6, s7,
                 BLOCK_ROWS: triton.language.constexpr, BLOCK_COLS: triton.language.constexpr,
                 CONST_COLS: triton.language.constexpr, ONE_PASS: triton.language.constexpr,
                 SAVE_STATS: triton.language.constexpr, COMPUTE_DTYPE: triton.language.constexpr,
                 HAS_b: triton.language.constexpr):  # fmt: skip
    pass


@pytest.mark.parametrize(
    ("shape", "weight", "bias", "save_stats"),
    [((6, 1000), "row", "row", True), ((2, 3, 4096), "row", None, False), ((5, 9000), "full", None, True),
     ((64, 512), "full", "full", False), ((4, 16), None, None, True)],
    ids=["row_weight_and_bias", "row_weight_no_bias", "long_rows_full_weight", "full_inputs", "absent_inputs"],
)  # fmt: skip
def test_norms_launch_as_the_general_path(norms_support, shape, weight, bias, save_stats):
    x = torch.rand(shape)

    def like(kind):
        return None if kind is None else torch.rand(shape[-1:] if kind == "row" else shape)

    inputs = (x, like(weight), like(bias))
    out, mu, rstd = norms_support.DenseNorms(_norm_kernel, 2, NORM_NAMES, ((2, "HAS_b"),))(inputs, (1e-5,), save_stats)
    assert out.shape == shape and out.is_contiguous()
    assert (mu is None) is (rstd is None) is (not save_stats)
    if save_stats:
        assert mu.shape == rstd.shape == (*shape[:-1], 1) and rstd.dtype == torch.float32
    ((kernel, grid, args, constexprs),) = norms_support.general
    # The general path's layout and block, as the launcher works them out (kernels/_normalization.py.j2)
    n_rows, n_cols, strides = norms_support.row_layout(torch.Size(shape), *inputs, out)
    block_rows, block_cols, one_pass, num_warps = norms_support.norm_blocks(n_rows, n_cols, 4)
    assert kernel is _norm_kernel and grid == ((n_rows + block_rows - 1) // block_rows,)
    assert args[:4] == (*inputs, out) and args[4:6] == (mu, rstd)
    assert args[6:] == (1e-5, n_rows, n_cols, *strides)
    assert constexprs == {"BLOCK_ROWS": block_rows, "BLOCK_COLS": block_cols, "CONST_COLS": None, "ONE_PASS": one_pass,
                          "SAVE_STATS": save_stats, "COMPUTE_DTYPE": triton.language.float32, "num_warps": num_warps,
                          "HAS_b": bias is not None}  # fmt: skip


def test_norms_reuse_the_direct_launcher_and_key_on_the_inputs_kinds(norms_support):
    dense = norms_support.DenseNorms(_norm_kernel, 2, NORM_NAMES, ((2, "HAS_b"),))
    x, w = torch.rand(8, 256), torch.rand(256)
    dense((x, w, None), (1e-5,), False)
    ((_, grid, _, _),) = norms_support.general
    direct = []
    dense.launchers[next(iter(dense.launchers))] = lambda *launch: direct.append(launch)
    out, _, _ = dense((x, w, None), (1e-6,), False)
    assert len(norms_support.general) == 1 and direct[0][0] == grid and direct[0][2][3] is out
    dense((x, w, None), (1e-5,), True)  # saving the statistics
    dense((x, w, w), (1e-5,), False)  # a bias
    dense((x, torch.rand(8, 256), None), (1e-5,), False)  # a weight of the full shape
    assert len(dense.launchers) == 4


@pytest.mark.parametrize(
    "inputs",
    [
        (torch.rand(256), torch.rand(256), None),  # one row
        (torch.rand(8, 1), torch.rand(1), None),  # rows of one element
        (torch.rand(8, 256), torch.rand(1, 256), None),  # a weight of two dimensions
        (torch.rand(8, 256), torch.rand(256).double(), None),  # another dtype
        (torch.rand(8, 256).t().contiguous().t(), torch.rand(256), None),  # x strided
        (torch.rand(8, 256), torch.rand(512)[::2], None),  # the weight strided
    ],
    ids=["one_row", "rows_of_one", "weight_2d", "two_dtypes", "x_strided", "weight_strided"],
)
def test_other_norm_inputs_are_the_general_paths(norms_support, inputs):
    assert norms_support.DenseNorms(_norm_kernel, 2, NORM_NAMES, ((2, "HAS_b"),))(inputs, (1e-5,), False) is None
    assert not norms_support.general


BIAS_ONLY_TESTED = """\
kopgen: 1
package: kflag
defaults: {backends: {cpu: triton, cuda: triton}}
ops:
  - schema: "ln(Tensor x, Tensor? bias=None) -> Tensor"
    normalize: {stats: {rstd: "rsqrt(mean(x * x))"}, compute: "x * rstd + (1.0 if present(bias) else 0.0)"}
  - schema: "pw(Tensor x, Tensor? bias=None) -> Tensor"
    compute: "x + (1.0 if present(bias) else 0.0)"
  - schema: "rmax(Tensor x, Tensor? bias=None) -> Tensor"
    reduce: {op: max, expr: "x + (1.0 if present(bias) else 0.0)"}
  - schema: "glu(Tensor x, Tensor? bias=None) -> Tensor"
    split: {x: [gate, up]}
    compute: "gate * up + (1.0 if present(bias) else 0.0)"
"""


def test_an_optional_only_tested_by_present_takes_the_general_path(tmp_path):
    """`present(bias)` with bias never read: the kernel takes HAS_bias, which no dense helper is given bias to
    set (a normalisation's failed to render; the others launched without the flag), so no dense path."""
    from kopgen.lang import dense_launch
    from kopgen.pipeline import generate, load_spec_text

    package = load_spec_text(BIAS_ONLY_TESTED, "spec.yaml")
    assert [op.name for op in package.ops if dense_launch.applies(op) or dense_launch.definition(op)] == []
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(BIAS_ONLY_TESTED)
    repo = generate(spec, tmp_path / "out")
    for op in ("ln", "pw", "rmax", "glu"):
        launcher = (repo / "kflag/kernels" / f"{op}.py").read_text()
        assert "HAS_bias=bias is not None" in launcher and "DENSE_LAUNCHES" not in launcher
