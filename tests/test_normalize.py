"""The `normalize` kind: its resolution, and both forms of its Triton kernel (one pass, looped) against
the reference, in Triton's interpreter on rows the generated suite does not draw."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kopgen import generate, load_spec
from kopgen.model_kinds import RowNormalization

from .conftest import EXAMPLES
from .test_backward_kernel import LAYER_NORM_WITH_BIAS


def test_the_statistics_are_resolved_in_order_with_what_they_read():
    ops = {op.name: op for op in load_spec(EXAMPLES / "norms.yaml").ops}
    assert all(isinstance(op.body, RowNormalization) for op in ops.values())
    layer_norm = ops["layer_norm"].body
    assert layer_norm.stat_names == ("mu", "rstd")
    mu, rstd = layer_norm.stats
    assert (mu.reduction.kind, mu.reduced.text, mu.outer) == ("mean", "x", None)
    assert (rstd.reduction.kind, rstd.reduced.text, rstd.outer.text) == ("mean", "(x - mu) * (x - mu)", "rsqrt(rstd + eps)")
    # eps is read only by a statistic: the kernel takes it all the same
    rms_norm = ops["rms_norm"]
    assert [a.name for a in rms_norm.read_args] == ["x", "weight"]
    assert [a.name for a in rms_norm.kernel_scalars] == ["eps"]
    assert [a.name for a in ops["layer_norm"].tested_optionals] == ["bias"]



RUNS = """\
kopgen: 1
package: kruns
ops:
  - schema: "runs(Tensor x) -> Tensor"
    normalize:
      stats: {a: "mean(x)", b: "sum(x * x)", c: "max(x)", d: "mean(x - a)", e: "sum(x)", f: "sum(x * e)"}
      compute: "x * a + b + c + d + e + f"
"""


def test_independent_sums_and_means_are_reduced_in_runs(tmp_path):
    """Consecutive sums and means none of which reads another share a run; a max stands alone, and a
    statistic that reads one of the run starts the next."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(RUNS)
    runs = load_spec(spec).ops[0].body.stat_groups
    assert [[s.name for s in run] for run in runs] == [["a", "b"], ["c"], ["d", "e"], ["f"]]
    ops = {op.name: op for op in load_spec(EXAMPLES / "norms.yaml").ops}
    assert [[s.name for s in run] for run in ops["layer_norm_backward"].body.stat_groups] == [["mean0", "mean1"]]
    assert [len(run) for run in ops["softmax"].body.stat_groups] == [1, 1]  # sum(exp(x - x_max)) reads x_max


# Each op's Triton launcher against its reference, with the block chosen by the package (one pass
# for these rows) and forced to 16 columns (the looped form: three blocks for a row of 40; a backward
# kernel's programs then add each block's column sums to their partial rows).
CHECK = """
import torch
from triton.runtime.interpreter import InterpretedFunction
from knorms import _support, reference
from knorms.kernels import fused_add_rms_norm, layer_norm, log_softmax, rms_norm, softmax
from knorms.kernels import layer_norm_backward, log_softmax_backward, rms_norm_backward, softmax_backward

# layer_norm and log_softmax run their `python` kernels on the CPU: their Triton kernels are
# interpreted here by hand.
layer_norm.layer_norm_kernel = InterpretedFunction(layer_norm.layer_norm_kernel.fn)
log_softmax.log_softmax_kernel = InterpretedFunction(log_softmax.log_softmax_kernel.fn)
for module in (layer_norm_backward, log_softmax_backward):
    name = module.__name__.rpartition(".")[2] + "_kernel"
    setattr(module, name, InterpretedFunction(getattr(module, name).fn))

def one_pass(n_rows, n_cols, element_size):
    return BLOCKS(n_rows, n_cols, element_size)

def looped(n_rows, n_cols, element_size):
    return 2, 16, False, 1

def looped_sums(n_rows, n_cols, element_size):  # a backward kernel with column sums: 1 program a multiprocessor
    return (*looped(n_rows, n_cols, element_size), 1)

def fused(x, residual, weight):  # what fused_add_rms_norm writes in place, as the reference returns it
    x, residual = x.clone(), residual.clone()
    fused_add_rms_norm.fused_add_rms_norm_triton(x, residual, weight)
    return x, residual

BLOCKS, SUM_BLOCKS = _support.norm_blocks, _support.norm_sum_blocks
torch.manual_seed(0)
x = torch.randn(5, 40, dtype=torch.float32) * 3
w, b = torch.randn(40), torch.randn(40)
strided = torch.randn(40, 5).t()  # transposed: rows read (and written) through their strides
cases = {
    "rms_norm": (rms_norm.rms_norm_triton, reference.rms_norm, (x, w)),
    "layer_norm": (layer_norm.layer_norm_triton, reference.layer_norm, (x, w, b)),
    "layer_norm_strided": (layer_norm.layer_norm_triton, reference.layer_norm, (strided, w, None)),
    "softmax": (softmax.softmax_triton, reference.softmax, (x,)),
    "log_softmax": (log_softmax.log_softmax_triton, reference.log_softmax, (x.double(),)),
    "fused_add_rms_norm": (fused, reference.fused_add_rms_norm, (x, strided, w)),  # in place, residual strided
}
for form in (one_pass, looped):
    _support.norm_blocks = form
    _support.norm_sum_blocks = SUM_BLOCKS if form is one_pass else looped_sums
    for name, (kernel, oracle, args) in cases.items():
        torch.testing.assert_close(kernel(*args), oracle(*args), msg=lambda m: f"{name}, {form.__name__}: {m}")
    # The launchers of _<op>_forward: the same output, and each row's statistics as backward reads them.
    mu = x.mean(-1, keepdim=True)
    stats = {
        "rms_norm": (rms_norm.rms_norm_forward_triton(x, w), (torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6),)),
        "layer_norm": (layer_norm.layer_norm_forward_triton(x, w, b),
                       (mu, torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5))),
    }
    for name, ((out, *got), want) in stats.items():
        torch.testing.assert_close(out, cases[name][1](*cases[name][2]))
        torch.testing.assert_close(tuple(got), want, msg=lambda m: f"{name}'s statistics, {form.__name__}: {m}")
        assert all(s.dtype == torch.float32 and s.shape == (5, 1) for s in got)
    # The backward kernels: x's gradient against autograd through the reference, from the statistics
    # as the forward saves them (float32, also beside bfloat16 grad and x: their dtype apart).
    for dtype in (torch.float32, torch.bfloat16):
        g, xd, wd, bd = (t.to(dtype) for t in (torch.randn(5, 40), x, w, b))
        saved = {"rms_norm": rms_norm.rms_norm_forward_triton(xd, wd),
                 "layer_norm": layer_norm.layer_norm_forward_triton(xd, wd, bd)}
        backward = {
            "rms_norm": (rms_norm_backward.rms_norm_backward_triton(g, xd, wd, saved["rms_norm"][1]), (xd, wd)),
            "layer_norm": (layer_norm_backward.layer_norm_backward_triton(g, xd, wd, *saved["layer_norm"][1:]),
                           (xd, wd, bd)),
            "softmax": (softmax_backward.softmax_backward_triton(g, softmax.softmax_triton(xd)), (xd,)),
            "log_softmax": (log_softmax_backward.log_softmax_backward_triton(g, log_softmax.log_softmax_triton(xd)),
                            (xd,)),
        }
        for name, (got, args) in backward.items():
            # rms_norm's and layer_norm's kernels return weight's gradient too, summed over the rows
            got = got if isinstance(got, tuple) else (got,)
            leaves = [a.detach().float().requires_grad_() for a in args[: len(got)]]
            rest = [a.float() for a in args[len(got):]]
            want = torch.autograd.grad(cases[name][1](*leaves, *rest), leaves, g.float())
            assert [t.dtype for t in got] == [dtype] * len(got), (name, got)
            tolerances = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
            torch.testing.assert_close(tuple(t.float() for t in got), want, **tolerances,
                                       msg=lambda m: f"{name}_backward, {form.__name__}, {dtype}: {m}")
    # weight's gradient over many programs (their partial rows summed), for a weight of each shape: one
    # row [N] or [1, N], one value [1] (summed along the row too), rows of its own (the formula in
    # torch), and no rows at all (zeros)
    for rows, weight_shape in [(300, (40,)), (300, (1, 40)), (300, (1,)), (300, (300, 40)), (0, (40,))]:
        xr, wr = torch.randn(rows, 40, dtype=torch.float64), torch.randn(weight_shape, dtype=torch.float64)
        gr = torch.randn(rows, 40, dtype=torch.float64)
        leaves = [xr.clone().requires_grad_(), wr.clone().requires_grad_()]
        want = torch.autograd.grad(reference.rms_norm(*leaves), leaves, gr)
        rstd = rms_norm.rms_norm_forward_triton(xr, wr)[1]
        got = rms_norm_backward.rms_norm_backward_triton(gr, xr, wr, rstd)
        assert got[1].shape == wr.shape and got[1].dtype == wr.dtype
        torch.testing.assert_close(got, want, msg=lambda m: f"rows {rows}, weight {weight_shape}, {form.__name__}: {m}")
    assert form is looped or BLOCKS(5, 40, 4)[2], "rows of 40 take one pass"
# A statistic of a value per element, not per row, would be read as its first column: refused
try:
    rms_norm_backward.rms_norm_backward_triton(x, x, w, x)
except RuntimeError as error:
    assert "a saved statistic holds one float per row" in str(error), error
else:
    raise AssertionError("a statistic of x's shape was taken")
print("ok")
"""


@pytest.mark.slow
def test_the_looped_kernel_matches_the_one_pass_kernel_and_the_reference(tmp_path):
    repo = generate(EXAMPLES / "norms.yaml", tmp_path / "repo")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CHECK)], cwd=repo, capture_output=True, text=True,
                            check=False, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


# A normalisation that saves no statistics, on the triton_op route: its backward kernel sums weight's
# gradient (which reads result) over the rows all the same; _support.py has what its launcher calls.
WEIGHTED_SOFTMAX = """\
kopgen: 1
package: kws
defaults:
  registration: triton_op
  backends: {cpu: triton, cuda: triton}
ops:
  - schema: "wsoftmax(Tensor x, Tensor weight) -> Tensor"
    normalize:
      stats: {x_max: "max(x)", sum_exp: "sum(exp(x - x_max))"}
      compute: "exp(x - x_max) / sum_exp * weight"
    tests:
      shapes: [{x: [4, 10], weight: [10]}]
    backward:
      x: "(result / weight) * (grad * weight - (grad * result).sum(-1, keepdim=True))"
      weight: "grad * result / weight"
"""

WEIGHTED_CHECK = """
import torch
from kws import reference
from kws.kernels import wsoftmax, wsoftmax_backward

torch.manual_seed(0)
for rows, shape in [(70, (10,)), (70, (1, 10)), (70, (70, 10)), (0, (10,))]:
    x, w, g = torch.randn(rows, 10), torch.rand(shape) + 0.5, torch.randn(rows, 10)
    leaves = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    want = torch.autograd.grad(reference.wsoftmax(*leaves), leaves, g)
    got = wsoftmax_backward.wsoftmax_backward_triton(g, w, wsoftmax.wsoftmax_triton(x, w))
    assert got[1].shape == w.shape, (rows, shape, got[1].shape)
    torch.testing.assert_close(got, want, msg=lambda m: f"rows {rows}, weight {shape}: {m}")
print("ok")
"""


def _generated(tmp_path, spec_text: str):
    """The repo kopgen generates from `spec_text`."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(spec_text)
    return generate(spec, tmp_path / "repo")


def _passes(repo, check: str) -> None:
    """`check`, a script that prints ok, run in `repo`."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(check)], cwd=repo, capture_output=True, text=True,
                            check=False, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.slow
def test_a_normalisation_without_saved_statistics_sums_the_weights_gradient_in_its_kernel(tmp_path):
    repo = _generated(tmp_path, WEIGHTED_SOFTMAX)
    assert "summed=(1,)" in (repo / "kws" / "_registration.py").read_text()
    _passes(repo, WEIGHTED_CHECK)


# The triton_op's body on FakeTensors of a CUDA device (no GPU needed), as torch.compile and opcheck's AOT
# dispatch trace it: every kernel goes through wrap_triton, the column sums' too (launched compiled there, it
# read the FakeTensors' data pointers: an illegal memory access on an H100, docs/gpu.md 2026-12-05).
WEIGHTED_FAKE_CHECK = """
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from kws import _support

_support._multiprocessors = lambda device: 132  # a GPU's, which this machine may not have
launched = []
column_sum = _support.norm_column_sum
_support.norm_column_sum = lambda *args: launched.append(type(args[-1]).__name__) or column_sum(*args)
with FakeTensorMode():
    g, x = torch.empty(64, 10, device="cuda"), torch.empty(64, 10, device="cuda")
    w = torch.empty(10, device="cuda")
    dx, dw = torch.ops.kws.wsoftmax_backward(g, w, x)
assert (dx.shape, dw.shape, dw.device.type) == ((64, 10), (10,), "cuda"), (dx, dw)
assert launched == ["TraceableTritonKernelWrapper"], launched
print("ok")
"""


@pytest.mark.slow
def test_a_traced_triton_op_body_sums_the_columns_through_wrap_triton(tmp_path):
    _passes(_generated(tmp_path, WEIGHTED_SOFTMAX), WEIGHTED_FAKE_CHECK)


# Two inputs read by all rows (a bias that is not optional): two column sums, each its own part of the
# partial rows (partials[program, k, columns]), summed over many programs by _support.norm_column_sum, in
# one pass and looped (blocks of 16 columns), in float32 and bfloat16, against autograd through the reference.
TWO_SUMS = "kopgen: 1\npackage: ktwo\ndefaults:\n  backends: {cpu: triton, cuda: triton}\nops:\n" + LAYER_NORM_WITH_BIAS
TWO_SUMS_CHECK = """
import torch
from ktwo import _support, reference
from ktwo.kernels import layer_norm, layer_norm_backward

SUM_BLOCKS = _support.norm_sum_blocks
def looped(n_rows, n_cols, element_size):
    return 2, 16, False, 1, 1

torch.manual_seed(0)
for form in (SUM_BLOCKS, looped):
    _support.norm_sum_blocks = form
    for dtype in (torch.float32, torch.bfloat16):
        x, g = torch.randn(300, 40, dtype=dtype), torch.randn(300, 40, dtype=dtype)
        w, b = torch.randn(40, dtype=dtype), torch.randn(40, dtype=dtype)
        _, mu, rstd = layer_norm.layer_norm_forward_triton(x, w, b)
        got = layer_norm_backward.layer_norm_backward_triton(g, x, w, b, mu, rstd)
        leaves = [t.detach().float().requires_grad_() for t in (x, w, b)]
        want = torch.autograd.grad(reference.layer_norm(*leaves), leaves, g.float())
        assert [t.dtype for t in got] == [dtype] * 3 and got[2].data_ptr() != got[1].data_ptr()
        tolerances = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
        torch.testing.assert_close(tuple(t.float() for t in got), want, **tolerances,
                                   msg=lambda m: f"{form.__name__}, {dtype}: {m}")
print("ok")
"""


@pytest.mark.slow
def test_two_column_sums_are_each_summed_over_the_programs(tmp_path):
    _passes(_generated(tmp_path, TWO_SUMS), TWO_SUMS_CHECK)


def test_check_prints_the_statistics():
    from kopgen.report import describe_plan

    text = describe_plan(load_spec(EXAMPLES / "norms.yaml"), "norms.yaml")
    assert ("  stats:    rstd = rsqrt(mean(x * x) + eps) (per row, float32; float64 for float64 inputs, saved for "
            "backward by _rms_norm_forward)") in text
    assert "            rstd = rsqrt(mean((x - mu) * (x - mu)) + eps)" in text  # layer_norm's second
    # softmax's backward reads its result, not its statistics: they are not saved
    assert "  stats:    x_max = max(x) (per row, float32; float64 for float64 inputs)\n" in text


# A keyword-only argument, statistics read by backward, `cpu: python`: forward, backward and a backward
# differentiated again, against autograd through the reference.
KEYWORD_ONLY = """\
kopgen: 1
package: ksx
ops:
  - schema: "softmax2(Tensor x, *, float scale=1.0) -> Tensor"
    registration: library
    backends: {cpu: python}
    normalize:
      stats: {x_max: "max(x * scale)", sum_exp: "sum(exp(x * scale - x_max))"}
      compute: "exp(x * scale - x_max) / sum_exp"
    backward:
      x: "scale * torch.exp(x * scale - x_max) / sum_exp * (grad - (grad * torch.exp(x * scale - x_max) / sum_exp).sum(-1, keepdim=True))"
"""
KEYWORD_ONLY_CHECK = """
import torch
import ksx
from ksx import reference
x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
op = lambda x: torch.ops.ksx.softmax2(x, scale=0.5)
grad = torch.randn(3, 5, dtype=torch.float64)
got = torch.autograd.grad(op(x), x, grad)
want = torch.autograd.grad(reference.softmax2(x, scale=0.5), x, grad)
torch.testing.assert_close(got, want)
assert torch.autograd.gradgradcheck(op, (x,))
print("ok")
"""


@pytest.mark.slow
def test_saved_statistics_with_a_keyword_only_argument(tmp_path):
    spec = tmp_path / "ksx.yaml"
    spec.write_text(KEYWORD_ONLY)
    repo = generate(spec, tmp_path / "repo")
    assert '_softmax2_setup_context(ctx, (x,), {"scale": scale}, output, x_max, sum_exp)' in (
        repo / "ksx" / "_registration.py").read_text()
    result = subprocess.run([sys.executable, "-c", KEYWORD_ONLY_CHECK], cwd=repo, capture_output=True, text=True,
                            check=False, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_backward_kernels_with_column_sums_take_blocks_of_4_rows_up_to_32_kib():
    """_support.norm_sum_blocks and norm_programs (the golden norms package's): a backward kernel with column
    sums over rows up to 32 KiB takes blocks of 4 rows, 8 to 32 KiB, on 64 bytes a thread, one program a
    multiprocessor at 32 KiB, else 2; longer rows 32 KiB of one row a step, one program a multiprocessor.
    Measured (docs/performance.md): on an H200 bfloat16 rms_norm's backward at hidden 8192 took 63.3 us, 81.8
    in blocks of one row on 4 programs a multiprocessor (2026-12-04, fifth session); on an H100 rows of 512 to
    2048 columns and over 32 KiB ran 1.1x to 1.8x faster than in norm_blocks' block (2026-12-05)."""
    import importlib.util

    import torch

    from .conftest import ROOT

    spec = importlib.util.spec_from_file_location("_norms_support", ROOT / "tests/golden/norms/knorms/_support.py")
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    assert support.norm_sum_blocks(4096, 8192, 2) == (2, 8192, True, 16, 1)  # bfloat16, hidden 8192
    assert support.norm_sum_blocks(4096, 4096, 2) == (4, 4096, True, 16, 1)
    assert support.norm_sum_blocks(4096, 8192, 4) == (1, 8192, True, 16, 1)  # float32
    assert support.norm_sum_blocks(4096, 5000, 4) == (1, 8192, True, 16, 1)  # a block of a whole row, padded
    assert support.norm_sum_blocks(3, 4096, 2) == (4, 4096, True, 16, 1)  # few rows: the block's rows padded
    assert support.norm_sum_blocks(4096, 2048, 4) == (4, 2048, True, 16, 1)
    assert support.norm_sum_blocks(4096, 1024, 2) == (4, 1024, True, 4, 2)  # 8 KiB on 4 warps, 2 a multiprocessor
    assert support.norm_sum_blocks(4096, 512, 2) == (8, 512, True, 4, 2)  # 8 KiB at least
    assert support.norm_sum_blocks(2, 16, 4) == (2, 16, True, 1, 2)
    assert support.norm_sum_blocks(4096, 16384, 4) == (1, 8192, False, 16, 1)  # longer rows: 32 KiB a step
    assert support.norm_sum_blocks(512, 32768, 2) == (1, 16384, False, 16, 1)
    # On the CPU (Triton's interpreter) 4 programs; the GPU's count comes from its multiprocessors
    assert support.norm_programs(2048, torch.empty(1), 1) == (4, 512)
    assert support.norm_programs(3, torch.empty(1), 1) == (3, 1)


HALF = """\
kopgen: 1
package: khalf
defaults:
  registration: triton_op
  backends: {cpu: triton, cuda: triton}
  dtypes: [float32, bfloat16]
ops:
  - schema: "layer_norm(Tensor x, Tensor weight, float eps=1e-5) -> Tensor"
    normalize:
      stats:
        mu: "mean(x)"
        rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"
      compute: "(x - mu) * rstd * weight"
    tests:
      shapes: [{x: [4, 10], weight: [10]}]
    backward:
      x: "torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps) * (grad * weight - (grad * weight).mean(-1, keepdim=True) - (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps) * (grad * weight * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps)).mean(-1, keepdim=True))"
      weight: "grad * (x - x.mean(-1, keepdim=True)) * torch.rsqrt(((x - x.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps)"
  - schema: "softmax(Tensor x) -> Tensor"
    normalize:
      stats: {x_max: "max(x)", sum_exp: "sum(exp(x - x_max))"}
      compute: "exp(x - x_max) / sum_exp"
    backward:
      x: "result * (grad - (grad * result).sum(-1, keepdim=True))"
"""


def test_bfloat16_gradients_in_torch_ops_and_opcheck_against_the_traced_reference(tmp_path):
    """In bfloat16: a gradient whose formula runs in torch ops (layer_norm's weight, its statistics recomputed)
    is computed in float32, as the reference (in bfloat16 it was 0.0425 where the reference gives 0.0293); and
    opcheck's AOT dispatch, which runs the traced reference where eager runs the kernel, compares softmax's
    gradients within the tolerances of a half dtype (they differ by units in the last place). Both failed."""
    spec = tmp_path / "khalf.yaml"
    spec.write_text(HALF)
    repo = generate(spec, tmp_path / "repo")
    chosen = "bfloat16 and (backward_kernel_matches_reference or opcheck)"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", chosen, "tests"],
                            cwd=repo, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0 and " passed" in result.stdout, result.stdout[-3000:]


def test_bfloat16_compiled_gradients_against_the_backward_kernel_take_a_half_dtypes_tolerances(tmp_path):
    """A bfloat16 temperature log-softmax whose backward reads `result`: the compiled graph differentiates the
    traced float32 reference where eager runs the backward kernel on the saved bfloat16 result, and where
    `1 - N * softmax` nearly cancels they differ by its rounding (abs 0.0098). The compile test compared them
    with the op's own tolerances and failed; it now takes the half dtype's, as opcheck does."""
    spec = tmp_path / "klsm.yaml"
    spec.write_text(
        "kopgen: 1\npackage: klsm\ndefaults:\n  dtypes: [bfloat16]\nops:\n"
        '  - schema: "lsm_t(Tensor x, float temperature=2.0) -> Tensor"\n    normalize:\n'
        '      stats: {m: "max(x / temperature)", lse: "log(sum(exp(x / temperature - m))) + m"}\n'
        '      compute: "x / temperature - lse"\n    backward:\n'
        '      x: "(grad - torch.exp(result) * grad.sum(-1, keepdim=True)) / temperature"\n'
    )
    repo = generate(spec, tmp_path / "repo")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                             "compile_fullgraph and aot_eager", "tests"],
                            cwd=repo, capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-3000:]
