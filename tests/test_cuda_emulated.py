"""The CUDA kernels run where no GPU is: the generated csrc/cuda/kernels.cu and pointwise.cuh built
as host C++, each CUDA thread a std::thread (tests/cuda_emu/emu.h), on odd shapes and layouts
(tests/cuda_emu/check.cpp): row reductions a warp and a block a row, tiles for transposed inputs,
row normalisations held in registers and looped, with 16-byte vectors and without, rms_norm's backward
kernel summing w's and b's gradients over the rows (partial rows per block, then column_sums_kernel; held
sums in shared memory or in registers) or writing them at every element, and a split op's backward kernel writing the two halves of one output. It checks the kernels' indexing, not their speed; on a GPU,
benchmarks/cuda_kernels.py checks the same and times them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kopgen import generate

EMU = Path(__file__).parent / "cuda_emu"
NVCC = shutil.which("nvcc")
SPEC = """\
kopgen: 1
package: kemu
defaults:
  registration: torch_library
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [bfloat16, float32, float64]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {op: sum}
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {op: max}
  - schema: "rowdot(Tensor a, Tensor? w) -> Tensor"
    reduce: {op: mean, expr: "a * w if present(w) else a"}
  - schema: "layer_norm(Tensor x, Tensor w, Tensor? b=None, float eps=1e-5) -> Tensor"
    normalize:
      stats: {mu: "mean(x)", rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"}
      compute: "(x - mu) * rstd * w + (b if present(b) else 0.0)"
  - schema: "softmax(Tensor x) -> Tensor"
    normalize: {stats: {top: "max(x)", sum_exp: "sum(exp(x - top))"}, compute: "exp(x - top) / sum_exp"}
  - schema: "rms_norm(Tensor x, Tensor w, Tensor b, float eps=1e-6) -> Tensor"
    normalize: {stats: {rstd: "rsqrt(mean(x * x) + eps)"}, compute: "x * rstd * w + b"}
    tests: {shapes: [{x: [4, 10], w: [10], b: [10]}]}
    backward:
      x: "torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (grad * w - x * (grad * w * x).mean(-1, keepdim=True) / ((x * x).mean(-1, keepdim=True) + eps))"
      w: "grad * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)"
      b: "grad"
  - schema: "fatrelu_and_mul(Tensor x, float threshold=0.0) -> Tensor"
    split: {x: [gate, up]}
    compute: "where(gate > threshold, gate, 0.0) * up"
    backward:
      x: "torch.cat([torch.where(gate > threshold, grad * up, 0.0), torch.where(gate > threshold, grad * gate, 0.0)], -1)"
"""
# kernel<FIRST, ...><<<grid, block, shared, stream>>>(args);
LAUNCH = re.compile(r"(\w+)<(\w+)([^<>;]*)><<<(.*?)>>>\((.*?)\);", re.DOTALL)
EMULATED = r'::emu::launch("\1<" + std::to_string(\2) + ">", \4, [&] { \1<\2\3>(\5); });'


def emulated(pointwise: str) -> str:
    """pointwise.cuh with emu.h first and its kernel launches as emu::launch calls."""
    text, launches = LAUNCH.subn(EMULATED, pointwise)
    assert launches and "<<<" not in text, "a launch the pattern does not match"
    return '#include "emu.h"\n' + text


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit's headers)")
def test_cuda_kernels_compute_the_reference_when_emulated(tmp_path):
    spec = tmp_path / "kemu.yaml"
    spec.write_text(SPEC)
    cuda = generate(spec, tmp_path / "repo") / "kemu/csrc/cuda"
    build = tmp_path / "build"
    build.mkdir()
    (build / "pointwise.cuh").write_text(emulated((cuda / "pointwise.cuh").read_text()))
    for name in ("kernels.cu", "kernels.h"):
        shutil.copy(cuda / name, build / name)
    for path in EMU.iterdir():
        shutil.copy(path, build / path.name)
    # nvcc as the host compiler's driver: it adds the CUDA headers; nothing links the CUDA runtime.
    compiled = subprocess.run(
        [NVCC, "-x", "c++", "-std=c++20", "-O1", "-cudart", "none", "-Xcompiler", "-pthread", "-I", str(build),
         str(build / "check.cpp"), "-o", str(build / "check")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    # A guard against a hang (a barrier some thread never reaches), not a bound on speed: 2-5 minutes of a
    # thread a CUDA thread on 2 cores, beyond 5 on a slow day with other tests beside it.
    ran = subprocess.run([str(build / "check")], capture_output=True, text=True, check=False, timeout=1200)
    assert ran.returncode == 0 and ran.stdout.endswith("0 failures\n"), ran.stdout + ran.stderr
    launched = set(re.findall(r"launched (\S+)", ran.stdout))
    for kernel in ("rows_kernel", "tiled_kernel", "norms_kernel"):
        for vec in (1, 2, 4, 8):  # scalars, then 16 bytes of float64, float32, bfloat16
            assert f"{kernel}<{vec}>" in launched, ran.stdout
    assert "column_sums_kernel<2>" in launched, ran.stdout  # rms_norm_backward's w and b, summed over the rows
