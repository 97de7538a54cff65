"""What each layer of a Python-registered operator costs per call, side by side in one run.

    python benchmarks/dispatch_layers.py [--device cpu|cuda]

One kernel (a Triton a * b + c on CUDA; eager a * b + c on CPU, where Triton only interprets)
called: directly; as a `Library` op with only the device kernel; with autograd added by
`torch.library.register_autograd` (what kopgen generates); with autograd added as a plain
`autograd.Function` impl'd on the Autograd key (a leaner alternative); and as a `custom_op`.
Inputs need no gradient, so every autograd layer takes its no-grad path.
"""

from __future__ import annotations

import argparse

import torch
from timing import host_seconds_per_call, interleaved_medians


def make_kernel(device: str):
    if device != "cuda":
        return lambda a, b, c: a * b + c
    import triton
    import triton.language as tl

    @triton.jit
    def muladd_kernel(a_ptr, b_ptr, out_ptr, c, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask)
        b = tl.load(b_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, a * b + c, mask=mask)

    def launch(a, b, c):
        out = torch.empty_like(a)
        muladd_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, out, c, a.numel(), BLOCK=1024)
        return out

    return launch


def setup_context(ctx, inputs, output):
    a, b, _ = inputs
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b if ctx.needs_input_grad[0] else None)


def backward(ctx, grad):
    a, b = ctx.saved_tensors
    return grad * b if ctx.needs_input_grad[0] else None, grad * a if ctx.needs_input_grad[1] else None, None


def candidates(device: str) -> dict:
    kernel = make_kernel(device)
    key = "CUDA" if device == "cuda" else "CPU"
    lib = torch.library.Library("layers", "DEF")
    for name in ("plain", "registered", "lean"):
        lib.define(f"{name}(Tensor a, Tensor b, float c) -> Tensor")
        lib.impl(name, kernel, key)
        torch.library.register_fake(f"layers::{name}", lambda a, b, c: torch.empty_like(a), lib=lib)
    torch.library.register_autograd("layers::registered", backward, setup_context=setup_context, lib=lib)

    lean_op = torch.ops.layers.lean.default

    class LeanFunction(torch.autograd.Function):
        @staticmethod
        def forward(a, b, c):
            with torch._C._AutoDispatchBelowAutograd():
                return lean_op(a, b, c)

        setup_context = staticmethod(setup_context)
        backward = staticmethod(backward)

    def lean_autograd(a, b, c):
        if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
            return LeanFunction.apply(a, b, c)
        with torch._C._AutoDispatchBelowAutograd():
            return lean_op(a, b, c)

    lib.impl("lean", lean_autograd, "Autograd")

    custom = torch.library.custom_op("layers::custom", kernel, mutates_args=(), schema="(Tensor a, Tensor b, float c) -> Tensor")
    custom.register_fake(lambda a, b, c: torch.empty_like(a))
    custom.register_autograd(backward, setup_context=setup_context)
    return {
        "kernel, called directly": kernel,
        "Library op, no autograd": torch.ops.layers.plain.default,
        "+ register_autograd": torch.ops.layers.registered.default,
        "+ lean Autograd impl": lean_op,
        "custom_op + register_autograd": torch.ops.layers.custom.default,
    }, lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    fns, _lib = candidates(args.device)
    a, b = (torch.rand(1024, device=args.device) for _ in range(2))
    for name, fn in fns.items():
        torch.testing.assert_close(fn(a, b, 0.5), a * b + 0.5, msg=name)
    x, y = (torch.rand(8, device=args.device, dtype=torch.float64, requires_grad=True) for _ in range(2))
    for name, fn in list(fns.items())[2:]:  # the layers with autograd compute gradients
        assert torch.autograd.gradcheck(lambda x, y, fn=fn: fn(x, y, 0.5), (x, y)), name
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    calls = 2000
    medians = interleaved_medians(list(fns), lambda name: host_seconds_per_call(fns[name], (a, b, 0.5), sync, calls), args.rounds)
    print(f"{args.device}, torch {torch.__version__}, 1024 float32 elements, median of {args.rounds} rounds of {calls} calls")
    print(f"{'candidate':<32}{'us/call':>10}{'x kernel':>10}")
    base = medians["kernel, called directly"]
    for name, median in medians.items():
        print(f"{name:<32}{median * 1e6:>10.1f}{median / base:>10.2f}")


if __name__ == "__main__":
    main()
