"""Memory bandwidth of the generated muladd kernels, side by side in one run (needs a CUDA GPU).

    python benchmarks/bandwidth.py

Needs the generated example packages importable: kbook (examples/muladd.yaml, Triton),
kfused (examples/fused.yaml, TORCH_LIBRARY + CUDA) and kstable (examples/fused_stable.yaml,
stable ABI + CUDA). Each candidate computes out = a * b + c on 2**28 elements, which moves
12 bytes per float32 element (a device copy moves 8). Candidates are timed in interleaved
rounds with CUDA events; the table shows the median over rounds and the ratio to Triton.
"""

from __future__ import annotations

import argparse

import kbook
import kfused
import kstable
import torch
from kbook.kernels.muladd import muladd_triton
from timing import interleaved_medians


def milliseconds(fn, calls: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # one untimed call: the clocks and caches settle
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def table(dtype: torch.dtype, numel: int, rounds: int) -> None:
    a, b = (torch.rand(numel, device="cuda", dtype=dtype) for _ in range(2))
    out = torch.empty_like(a)
    size = a.element_size()
    candidates = {  # name: (function, bytes moved per element)
        "generated Triton (kbook launcher)": (lambda: muladd_triton(a, b, 0.5), 3 * size),
        "eager a * b + c (two kernels)": (lambda: a * b + 0.5, 3 * size),
        "device copy out.copy_(a)": (lambda: out.copy_(a), 2 * size),
    }
    if dtype in (torch.float16, torch.float32, torch.float64):  # kfused's dtypes
        candidates["generated CUDA, torch_library (kfused)"] = (lambda: kfused.muladd(a, b, 0.5), 3 * size)
    if dtype in (torch.bfloat16, torch.float32, torch.float64):  # kstable's dtypes
        candidates["generated CUDA, stable_abi (kstable)"] = (lambda: kstable.muladd(a, b, 0.5), 3 * size)
    for fn, _ in candidates.values():
        for _ in range(5):  # warm-up: compiles Triton, fills the allocator cache
            fn()
    medians = interleaved_medians(list(candidates), lambda name: milliseconds(candidates[name][0]), rounds)
    triton_gbs = None
    print(f"\n{dtype}, {numel} elements")
    print(f"{'candidate':<42}{'ms':>9}{'GB/s':>9}{'x Triton':>10}")
    for name, ms in medians.items():
        gbs = candidates[name][1] * numel / ms / 1e6
        triton_gbs = triton_gbs or gbs
        print(f"{name:<42}{ms:>9.4f}{gbs:>9.0f}{gbs / triton_gbs:>10.3f}")


def check_results(numel: int) -> None:
    a, b = (torch.rand(numel, device="cuda") for _ in range(2))
    want = a * b + 0.5
    for op in (kbook.muladd, kfused.muladd, kstable.muladd):
        torch.testing.assert_close(op(a, b, 0.5), want)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1 << 28)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    check_results((1 << 20) + 3)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        table(dtype, args.numel, args.rounds)


if __name__ == "__main__":
    main()
