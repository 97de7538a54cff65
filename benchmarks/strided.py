"""Bandwidth of the compiled muladd on broadcast and non-contiguous inputs, beside eager, in one run.

    python benchmarks/strided.py [--device cpu|cuda] [--rounds 7]

Needs kfused (examples/fused.yaml, TORCH_LIBRARY) importable, and kstable (examples/fused_stable.yaml,
stable ABI) where it is. Each case computes x * w + 0.5 on x[4096, 4096] float32; the bytes moved count
each tensor read or written once (a broadcast w[4096] reads as nothing), so that a broadcast or strided
read at full speed shows the contiguous case's GB/s. Candidates run in interleaved rounds; the table
shows the median. On CPU, torch's threads (torch.set_num_threads) run eager and the kernels alike.
"""

from __future__ import annotations

import argparse
import time

import torch
from timing import interleaved_medians


def strided_cases(device: str, n: int = 4096) -> dict[str, tuple[torch.Tensor, torch.Tensor, int]]:
    """name: (x, w, elements moved per element of the result), for out = x * w + 0.5."""
    x = torch.rand(n, n, device=device)
    wide = torch.rand(n, 2 * n, device=device)
    return {
        "contiguous x[N,N] * w[N,N]": (x, torch.rand(n, n, device=device), 3),
        "broadcast x[N,N] * w[N]": (x, torch.rand(n, device=device), 2),
        "broadcast x[N,N] * w[N,1]": (x, torch.rand(n, 1, device=device), 2),
        "column slice x[N,2N][:, :N] * w[N]": (wide[:, :n], torch.rand(n, device=device), 2),
        "transposed x.t() * w[N,N]": (x.t(), torch.rand(n, n, device=device), 3),
        "small x[256,1024] * w[1024]": (torch.rand(256, 1024, device=device), torch.rand(1024, device=device), 2),
    }


def strided_candidates() -> dict[str, object]:
    """name: muladd(x, w, c); eager is the expression the op replaces."""
    import kfused

    candidates = {"eager x * w + c": lambda x, w, c: x * w + c, "torch_library": kfused.muladd}
    try:
        import kstable
    except ImportError:
        return candidates
    candidates["stable_abi"] = kstable.muladd
    return candidates


def seconds(fn, x, w, device: str, calls: int) -> float:
    fn(x, w, 0.5)  # warm up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x, w, 0.5)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def strided_table(device: str, rounds: int) -> None:
    candidates = strided_candidates()
    names = list(candidates)
    print(f"| {device}, threads {torch.get_num_threads()} | " + " | ".join(f"{n} GB/s (µs)" for n in names) + " |")
    print("| --- " * (len(names) + 1) + "|")
    for case, (x, w, moved) in strided_cases(device).items():
        calls = 200 if x.numel() < 2**20 else (50 if device == "cuda" else 5)
        times = interleaved_medians(
            names, lambda n, x=x, w=w, calls=calls: seconds(candidates[n], x, w, device, calls), rounds
        )
        nbytes = moved * x.numel() * x.element_size()
        cells = [f"{nbytes / times[n] / 1e9:.1f} ({times[n] * 1e6:.0f})" for n in names]
        print(f"| {case} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    strided_table(args.device, args.rounds)


if __name__ == "__main__":
    main()
