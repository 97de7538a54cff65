"""The backward of examples/norms.yaml's normalisations: the generated backward kernel beside the eager
formulas, eager PyTorch and Inductor, with the kernels one backward launches, in one run.

    python benchmarks/norms.py --generate-only --workdir DIR --before REV   (where git is)
    python benchmarks/norms_backward.py --workdir DIR [--device cuda|cpu] [--quick]
        [--hidden 1024 4096 8192] [--dtype float32 bfloat16] [--ops rms_norm layer_norm softmax log_softmax]

DIR/norms is the package of this checkout: rms_norm, layer_norm, softmax and log_softmax compute x's
gradient in one kernel of their own, `<op>_backward` (its row reductions, then the formula; rms_norm's and
layer_norm's weight gradient summed over the rows in the same launch, bias's a formula). DIR/norms_before, where present, is the package of kopgen at REV:
with REV bfa0f28 (before the normalisations' backward kernels) its backward runs the formulas as eager
torch ops over the statistics the forward saved. Each op is checked against PyTorch's own first
(F.rms_norm, F.layer_norm, softmax, log_softmax: the gradients of x, weight and bias), then, in
float32 and bfloat16, for rows R x hidden 1024, 4096 and 8192:
  bwd      torch.autograd.grad of one output gradient, the graph retained (the backward alone);
  fwd+bwd  the op called and its gradients taken;
  kernels  device kernels one backward launches (torch.profiler, CUDA), or on the CPU the operators
           it calls below autograd (a dispatch mode: an op of the package counts once).
Candidates run side by side in interleaved rounds (timing.py), medians shown. `--device cpu --quick`
is a smoke test of the script (Triton's interpreter; the times mean nothing there).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from norms import HIDDEN, generated, generated_before
from timing import interleaved_medians

OPS = ("rms_norm", "layer_norm", "softmax", "log_softmax")


def calls(ops, name: str, hidden: int):
    """The generated op over (x, weight, bias), and what it differentiates (the indices of its inputs)."""
    return {
        "rms_norm": (lambda x, w, b: ops.rms_norm(x, w, 1e-6), (0, 1)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5), (0, 1, 2)),
        "softmax": (lambda x, w, b: ops.softmax(x), (0,)),
        "log_softmax": (lambda x, w, b: ops.log_softmax(x), (0,)),
    }[name]


def torch_call(name: str, hidden: int):
    return {
        "rms_norm": lambda x, w, b: F.rms_norm(x, (hidden,), w, 1e-6),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (hidden,), w, b, 1e-5),
        "softmax": lambda x, w, b: torch.softmax(x, -1),
        "log_softmax": lambda x, w, b: torch.log_softmax(x, -1),
    }[name]


def seconds(fn, sync, count: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(count):
        fn()
    sync()
    return (time.perf_counter() - start) / count


def kernels_per_backward(backward, device: str) -> int:
    """Device kernels one backward launches (CUDA); on the CPU, the operators it calls below autograd."""
    if device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        backward()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            backward()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        backward()
    return Count.calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--hidden", type=int, nargs="+", default=list(HIDDEN), help="row lengths (default: all)")
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds: a smoke test")
    options = parser.parse_args()
    torch._dynamo.config.recompile_limit = 64  # a compile per op, dtype and hidden size
    packages = {"kopgen": generated(options.workdir)}
    before = generated_before(options.workdir)
    if before is not None:
        packages["before"] = before
    device = options.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows, hiddens, count, rounds = (8, (64,), 1, 1) if options.quick else (options.rows, options.hidden, 20, 7)
    print(f"# {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; rows {rows}")
    if before is not None:
        print(f"# before: {(options.workdir / 'BEFORE').read_text().strip()}")
    names = [*packages, "eager", "inductor"]
    print(f"op | dtype | hidden | pass | {' | '.join(names)} | kopgen/eager | kopgen/inductor"
          + (" | kopgen/before" if before else ""))
    torch.manual_seed(0)
    for dtype in (getattr(torch, name) for name in options.dtype):
        for hidden in hiddens:
            x = torch.randn(rows, hidden, device=device, dtype=dtype)
            w, b = torch.randn(hidden, device=device, dtype=dtype), torch.randn(hidden, device=device, dtype=dtype)
            grad = torch.randn_like(x)
            for name in options.ops:
                wanted = calls(packages["kopgen"], name, hidden)[1]
                eager = torch_call(name, hidden)
                fns = {key: calls(ops, name, hidden)[0] for key, ops in packages.items()}
                fns |= {"eager": eager, "inductor": torch.compile(eager, fullgraph=True, dynamic=False)}
                args = tuple(a.detach().requires_grad_(i in wanted) for i, a in enumerate((x, w, b)))
                row = f"{name} | {str(dtype)[6:]} | {hidden}"
                measure(row, fns, args, tuple(args[i] for i in wanted), grad, sync, count, rounds, device)


def measure(row: str, fns: dict, args: tuple, inputs: tuple, grad, sync, count: int, rounds: int, device: str) -> None:
    """One op's rows: each candidate's gradients checked against eager PyTorch's, then timed."""
    want = torch.autograd.grad(fns["eager"](*args), inputs, grad)
    backward, step, kernels = {}, {}, {}
    for key, fn in fns.items():
        out = fn(*args)
        got = torch.autograd.grad(out, inputs, grad, retain_graph=True)
        for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            # bfloat16: the formulas and PyTorch round their factors apart, and a weight's gradient sums
            # every row's: off by an ulp of the sum, far from 0, where a small entry cancelled
            scale = theirs.abs().max().item()
            tolerance = {"rtol": 5e-2, "atol": max(5e-2, 1e-2 * scale)} if grad.dtype == torch.bfloat16 else \
                {"rtol": 1e-4, "atol": 1e-3}
            torch.testing.assert_close(mine, theirs, **tolerance,
                                       msg=lambda m, key=key, index=index: f"{row}, {key}, gradient {index}: {m}")
        backward[key] = lambda out=out: torch.autograd.grad(out, inputs, grad, retain_graph=True)
        step[key] = lambda fn=fn: torch.autograd.grad(fn(*args), inputs, grad)
        kernels[key] = kernels_per_backward(backward[key], device)
    names, before = list(fns), "before" in fns
    for label, measured in (("bwd", backward), ("fwd+bwd", step)):
        medians = interleaved_medians(names, lambda key, m=measured: seconds(m[key], sync, count), rounds)
        print(f"{row} | {label} | " + " | ".join(f"{medians[k] * 1e6:.1f} us" for k in names)
              + f" | {medians['eager'] / medians['kopgen']:.2f}x | {medians['inductor'] / medians['kopgen']:.2f}x"
              + (f" | {medians['before'] / medians['kopgen']:.2f}x" if before else ""), flush=True)
    unit = "kernels" if device == "cuda" else "operators"
    print(f"{row} | {unit} per bwd | " + " | ".join(str(kernels[k]) for k in names) + " | | |" + (" |" if before else ""),
          flush=True)

if __name__ == "__main__":
    main()
