"""Backward kernels (issue 16, Build 3): backward time and kernels launched per backward, with the
generated backward kernel (`<op>_backward`, one launch for every gradient) and with today's eager
formulas, side by side in one run, for muladd, a broadcast bias_relu and the gated silu_and_mul.

    python benchmarks/backward_kernels.py [--device cpu|cuda] [--workdir DIR] [--routes ROUTE ...]

Generates two packages per route from the same ops, built and installed into DIR (reused when there):
`kernel`, whose formulas are in the pointwise language, so kopgen gives each op a backward kernel, and
`eager`, the same formulas written with torch.mul, which kopgen leaves as torch ops (the path of every
op before backward kernels). Then, per op: the median time of one backward (the forward done once,
its graph retained) and of forward + backward, against eager PyTorch and torch.compile of the same
eager code, and the number of kernels one backward launches (torch.profiler: device kernels on CUDA;
on the CPU, the operators that ran, as it has no kernel launches to count). Every candidate's
gradients are checked against eager PyTorch's first.

muladd(a, b, c) = a * b + c at 2^26 float32 elements (2^22 on the CPU); bias_relu(x, bias) =
relu(x + bias), x of 4096 x 4096 (1024 x 1024 on the CPU), bias of one row, broadcast;
silu_and_mul(x) = silu(gate) * up over x's halves, x of 4096 x (2 * 4096) (256 x (2 * 1024) on the
CPU) in float32 and bfloat16: its backward kernel writes both halves of x's gradient in one launch,
where the formula is a torch.cat of the halves' gradients; rowsum and rowmax of x 4096 x 4096 float32
(1024 x 1024 on the CPU): rowmax's backward kernel reads grad and result as columns, rowsum keeps its
formula in both variants (grad expanded: a view). A candidate is labelled with what its backward runs:
a compiled route's row reductions keep their formulas (`kopgen check` says why); its split ops get the
C++/CUDA backward kernel, which writes the halves of x's gradient row by row.
Routes: custom_op (cpu: python, cuda: triton; on the CPU its kernel is the PyTorch reference),
torch_library and stable_abi (cpu: cpp, cuda: cuda), all three by default.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import interleaved_medians

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = {"custom_op": "{cpu: python, cuda: triton}", "torch_library": "{cpu: cpp, cuda: cuda}",
            "stable_abi": "{cpu: cpp, cuda: cuda}"}
SILU_GATE = "grad * up * torch.sigmoid(gate) * (1 + gate * (1 - torch.sigmoid(gate)))"
FORMULAS = {  # variant: (muladd's a, b; bias_relu's x and bias; silu_and_mul's x; rowmax's x)
    "kernel": ("grad * b", "grad * a", "torch.where(result > 0, grad, 0.0)",
               f"torch.cat([{SILU_GATE}, grad * torch.nn.functional.silu(gate)], -1)",
               "torch.where(x == result.unsqueeze(-1), grad.unsqueeze(-1), 0.0)"),
    "eager": ("torch.mul(grad, b)", "torch.mul(grad, a)", "torch.where(result > 0, grad, torch.zeros_like(grad))",
              f"torch.cat([{SILU_GATE}, torch.mul(grad, torch.nn.functional.silu(gate))], -1)",
              "grad.unsqueeze(-1) * (x == result.unsqueeze(-1))"),
}
SPEC = """\
kopgen: 1
package: {package}
defaults:
  registration: {route}
  backends: {backends}
  dtypes: [float32, bfloat16]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
    backward: {{a: "{0}", b: "{1}"}}
  - schema: "bias_relu(Tensor x, Tensor bias) -> Tensor"
    compute: "relu(x + bias)"
    backward: {{x: "{2}", bias: "{2}"}}
  - schema: "silu_and_mul(Tensor x) -> Tensor"
    split: {{x: [gate, up]}}
    compute: "silu(gate) * up"
    backward: {{x: "{3}"}}
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {{op: sum}}
    backward: {{x: "grad.unsqueeze(-1).expand(x.shape)"}}
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {{op: max}}
    backward: {{x: "{4}"}}
"""


def build(workdir: Path, route: str, variant: str) -> str:
    """The package of one route and variant, generated and installed into workdir/site (once)."""
    package = f"kbw_{route}_{variant}"
    site = workdir / "site"
    if (site / package).exists():
        return package
    spec = workdir / f"{package}.yaml"
    spec.write_text(SPEC.format(*FORMULAS[variant], package=package, route=route, backends=BACKENDS[route]))
    repo = workdir / package
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "kopgen", "new", str(spec), "-o", str(repo)], check=True, env=env)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(repo)], check=True)
    return package


class Bench:
    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def seconds(self, fn, calls: int) -> float:
        import time

        fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        self.sync()
        return (time.perf_counter() - start) / calls

    def kernels_per_backward(self, backward) -> int:
        """Device kernels one backward launches."""
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        activities = [ProfilerActivity.CUDA]
        backward()
        self.sync()
        with profile(activities=activities) as prof:
            backward()
            self.sync()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    def operators_per_backward(self, backward) -> int:
        """The operators one backward calls below autograd (a dispatch mode sees each once, not what
        runs inside it): on the CPU, which has no kernel launches to count."""
        from torch.utils._python_dispatch import TorchDispatchMode

        class Count(TorchDispatchMode):
            calls = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                Count.calls += 1
                return func(*args, **(kwargs or {}))

        with Count():
            backward()
        return Count.calls


def run_op(b: Bench, title: str, make, candidates: dict, calls: int, rounds: int) -> None:
    torch = b.torch
    inputs, grad = make()
    want = torch.autograd.grad(candidates["eager PyTorch"](*inputs), inputs, grad)
    # a broadcast's sum: any order; bfloat16 rounds each gradient's factors
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if grad.dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-3}
    rows = []
    backward_of, step_of = {}, {}
    for name, fn in candidates.items():
        out = fn(*inputs)
        got = torch.autograd.grad(out, inputs, grad, retain_graph=True)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, **tolerance)
        backward_of[name] = lambda out=out: torch.autograd.grad(out, inputs, grad, retain_graph=True)
        step_of[name] = lambda fn=fn: torch.autograd.grad(fn(*inputs), inputs, grad)
    backward = interleaved_medians(list(candidates), lambda n: b.seconds(backward_of[n], calls), rounds)
    step = interleaved_medians(list(candidates), lambda n: b.seconds(step_of[n], calls), rounds)
    for name in candidates:
        count_of = b.kernels_per_backward if b.device == "cuda" else b.operators_per_backward
        count = count_of(backward_of[name]) if b.device == "cuda" or "compile" not in name else "-"
        rows.append((name, backward[name] * 1e3, step[name] * 1e3, count))
    what = "kernels" if b.device == "cuda" else "operators"
    print(f"\n## {title}\n")
    print(f"{'candidate':<44}  {'backward ms':>11}  {'fwd+bwd ms':>10}  {what + ' per backward':>22}")
    for name, bw, st, count in rows:
        print(f"{name:<44}  {bw:>11.3f}  {st:>10.3f}  {count!s:>22}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--routes", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-backward-"))
    workdir.mkdir(parents=True, exist_ok=True)
    packages = {(r, v): build(workdir, r, v) for r in args.routes for v in FORMULAS}
    sys.path.insert(0, str(workdir / "site"))
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    b = Bench(torch, device)
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if device == "cuda" else f", {torch.get_num_threads()} threads"))
    modules = {key: importlib.import_module(name) for key, name in packages.items()}
    n = 2**26 if device == "cuda" else 2**22
    rows, cols = (4096, 4096) if device == "cuda" else (1024, 1024)
    calls = 20 if device == "cuda" else 3

    def make_muladd():
        a, bb = (torch.randn(n, device=device, requires_grad=True) for _ in range(2))
        return (a, bb), torch.randn(n, device=device)

    def make_bias_relu():
        x = torch.randn(rows, cols, device=device, requires_grad=True)
        bias = torch.randn(cols, device=device, requires_grad=True)
        return (x, bias), torch.randn(rows, cols, device=device)

    def eager_muladd(a, bb):
        return a * bb + 1.25

    def eager_bias_relu(x, bias):
        return torch.relu(x + bias)

    hidden, tokens = (4096, 4096) if device == "cuda" else (1024, 256)

    def make_silu(dtype):
        def make():
            x = torch.randn(tokens, 2 * hidden, device=device, dtype=dtype, requires_grad=True)
            return (x,), torch.randn(tokens, hidden, device=device, dtype=dtype)
        return make

    def eager_silu(x):
        return torch.nn.functional.silu(x[..., :hidden]) * x[..., hidden:]

    cases = [
        (f"muladd, {n} float32 elements, both inputs requiring grad", make_muladd, eager_muladd, "muladd"),
        (f"bias_relu, x {rows}x{cols} float32, bias [{cols}] broadcast", make_bias_relu, eager_bias_relu, "bias_relu"),
    ]
    cases += [(f"silu_and_mul, x {tokens}x{2 * hidden} {dtype}", make_silu(getattr(torch, dtype)), eager_silu,
               "silu_and_mul") for dtype in ("float32", "bfloat16")]
    def make_rows():
        x = torch.randn(rows, cols, device=device, requires_grad=True)
        return (x,), torch.randn(rows, device=device)

    cases += [(f"{op}, x {rows}x{cols} float32", make_rows, eager, op)
              for op, eager in (("rowsum", lambda x: x.sum(-1)), ("rowmax", lambda x: x.amax(-1)))]
    for title, make, eager, op in cases:
        candidates = {"eager PyTorch": eager, "torch.compile(eager)": torch.compile(eager)}
        for (route, variant), module in modules.items():
            fn = getattr(module, op)
            has_kernel = hasattr(getattr(torch.ops, packages[route, variant]), f"{op}_backward")
            label = f"{route}, {variant} spec: {'backward kernel' if has_kernel else 'eager formulas'}"
            candidates[label] = functools.partial(fn, c=1.25) if op == "muladd" else fn
        run_op(b, title, make, candidates, calls, args.rounds)


if __name__ == "__main__":
    main()
