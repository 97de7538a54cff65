"""examples/norms.yaml's row normalisations beside eager PyTorch, Inductor and a copy, in one run.

    python benchmarks/norms.py [--device cuda|cpu] [--workdir DIR] [--quick]

Generates examples/norms.yaml (Triton kernels only: nothing to build) into DIR, checks each op against
PyTorch's own (F.rms_norm, F.layer_norm, softmax, log_softmax: forward, and the gradients of its backward
formulas), then times forward and forward + backward of rows 4096 x hidden 1024, 4096 and 8192 in float32
and bfloat16: the generated op (ops.py, the typed API), eager PyTorch, torch.compile of the same eager
code (Inductor) and x.clone() (the copy roofline). Candidates run side by side in interleaved rounds
(timing.py), medians shown. GB/s counts the bytes one forward must move: x read once, the output written
once, the weight and bias once (fused_add_rms_norm: x and residual read and written, forward only). `--device cpu --quick` is a smoke test of the script (the interpreter).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import interleaved_medians

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = (1024, 4096, 8192)


def generated(workdir: Path):
    """The generated package knorms, imported from DIR (generated there once)."""
    repo = workdir / "norms"
    if not repo.exists():
        sys.path.insert(0, str(ROOT))
        from kopgen import generate

        generate(ROOT / "examples" / "norms.yaml", repo)
    sys.path.insert(0, str(repo))
    return importlib.import_module("knorms.ops")


def cases(ops, hidden: int):
    """Per op: the generated call and PyTorch's own, over (x, weight, bias)."""
    return {
        "rms_norm": (lambda x, w, b: ops.rms_norm(x, w, 1e-6), lambda x, w, b: F.rms_norm(x, (hidden,), w, 1e-6)),
        "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
                       lambda x, w, b: F.layer_norm(x, (hidden,), w, b, 1e-5)),
        "softmax": (lambda x, w, b: ops.softmax(x), lambda x, w, b: torch.softmax(x, -1)),
        "log_softmax": (lambda x, w, b: ops.log_softmax(x), lambda x, w, b: torch.log_softmax(x, -1)),
        # in place on x and the residual (b here, of x's shape): forward only
        "fused_add_rms_norm": (lambda x, w, b: ops.fused_add_rms_norm(x, b, w, 1e-6), _fused_add_rms_norm),
    }


def _fused_add_rms_norm(x, weight, residual):
    residual.add_(x)
    x.copy_(F.rms_norm(residual, residual.shape[-1:], weight, 1e-6))


def _fused_add_rms_norm_functional(x, weight, residual):
    """What Inductor compiles of it: the same values as new tensors (it failed on the in-place form here)."""
    total = residual + x
    return F.rms_norm(total, total.shape[-1:], weight, 1e-6), total


def moved_bytes(name: str, x: torch.Tensor) -> int:
    extra = {"rms_norm": 1, "layer_norm": 2, "fused_add_rms_norm": 1}.get(name, 0) * x.shape[-1]  # weight, bias
    tensors = 4 if name == "fused_add_rms_norm" else 2  # x (and residual) read once, written once
    return (tensors * x.numel() + extra) * x.element_size()


def seconds(fn, args, sync, calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return (time.perf_counter() - start) / calls


def check(name, ours, theirs, args, dtype) -> None:
    tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
    if name == "fused_add_rms_norm":  # in place: compare what each writes into copies
        mine, want = [a.clone() for a in args], [a.clone() for a in args]
        ours(*mine), theirs(*want)
        torch.testing.assert_close(mine, want, **tolerance)
        return
    torch.testing.assert_close(ours(*args), theirs(*args), **tolerance)
    grads = []
    for fn in (ours, theirs):
        leaves = [a.detach().clone().requires_grad_() for a in args]
        fn(*leaves).float().square().sum().backward()
        grads.append([leaf.grad for leaf in leaves])
    if dtype == torch.bfloat16:  # the backward formulas run as eager bfloat16 ops (float32 checks them)
        return
    for mine, want in zip(*grads):
        torch.testing.assert_close(mine, want, **tolerance)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds: a smoke test")
    options = parser.parse_args()
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="kopgen-norms-"))
    # Inductor compiles each eager reference once per dtype and hidden size: 6 compiles of one lambda
    # and its backward, past Dynamo's default limit of 8 recompiles per code object.
    torch._dynamo.config.recompile_limit = 64
    ops = generated(workdir)
    device = options.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows, hiddens, calls, rounds = (8, (64,), 1, 1) if options.quick else (4096, HIDDEN, 50, 7)
    print(f"# {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; rows {rows}")
    print("op | dtype | hidden | pass | kopgen | eager | inductor | copy | kopgen/eager | kopgen/inductor | GB/s kopgen")
    for dtype in (torch.float32, torch.bfloat16):
        for hidden in hiddens:
            x = torch.randn(rows, hidden, device=device, dtype=dtype)
            w, b = torch.randn(hidden, device=device, dtype=dtype), torch.randn(hidden, device=device, dtype=dtype)
            for name, (ours, theirs) in cases(ops, hidden).items():
                args = (x, w, torch.randn_like(x) if name == "fused_add_rms_norm" else b)  # b: the residual
                check(name, ours, theirs, args, dtype)
                eager_code = _fused_add_rms_norm_functional if name == "fused_add_rms_norm" else theirs
                compiled = torch.compile(eager_code, fullgraph=True, dynamic=False)
                candidates = {"kopgen": ours, "eager": theirs, "inductor": compiled, "copy": lambda x, w, b: x.clone()}
                passes = (("fwd", False),) if name == "fused_add_rms_norm" else (("fwd", False), ("fwd+bwd", True))
                for label, grad in passes:
                    timed = {key: _with_backward(fn) if grad and key != "copy" else fn for key, fn in candidates.items()}
                    inputs = tuple(a.detach().requires_grad_(grad) for a in args)
                    for fn in timed.values():  # warm: compiles, autotunes
                        fn(*inputs)
                    medians = interleaved_medians(list(timed), lambda key, timed=timed, inputs=inputs: seconds(timed[key], inputs, sync, calls), rounds)
                    gbs = moved_bytes(name, x) / medians["kopgen"] / 1e9
                    print(f"{name} | {str(dtype)[6:]} | {hidden} | {label} | "
                          + " | ".join(f"{medians[k] * 1e6:.1f} us" for k in timed)
                          + f" | {medians['eager'] / medians['kopgen']:.2f}x | {medians['inductor'] / medians['kopgen']:.2f}x"
                          + f" | {gbs:.0f}", flush=True)


def _with_backward(fn):
    def run(*args):
        out = fn(*args)
        out.backward(torch.ones_like(out))
    return run


if __name__ == "__main__":
    main()
