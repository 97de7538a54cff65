"""The Python routes' CPU kernel (`cpu: python`: the generated PyTorch reference as the kernel) against eager
`a * b + c`, side by side in one process at 2 threads: muladd of perf.py's custom_op package, best of 3 rounds of
10 calls each. On a shared CPU, allocations of 16 MB and more vary with the heap's state (page faults): compare
the ratio within a line, and the 4096 x 4096 lines above the smaller ones.

    python benchmarks/perf.py --device cpu --only bandwidth --routes custom_op --workdir DIR   (builds DIR)
    python benchmarks/python_kernel_cpu.py DIR/site_custom_op [LABEL]
"""

import sys
import time

import torch

torch.set_num_threads(2)
sys.path.insert(0, sys.argv[1])
import kroute_custom_op as kopgen  # from the site given

label = sys.argv[2] if len(sys.argv) > 2 else ""


def best_ms(fn, calls: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e3)
    return min(times)


cases = {
    "4M float32": (torch.rand(1 << 22), torch.rand(1 << 22)),
    "4M bfloat16": (torch.rand(1 << 22, dtype=torch.bfloat16), torch.rand(1 << 22, dtype=torch.bfloat16)),
    "4096x4096 float32": (torch.rand(4096, 4096), torch.rand(4096, 4096)),
    "x[4096,4096] * w[4096]": (torch.rand(4096, 4096), torch.rand(4096)),
}
for name, (a, b) in cases.items():
    torch.testing.assert_close(kopgen.muladd(a, b, 0.5), a * b + 0.5)
    eager = best_ms(lambda a=a, b=b: a * b + 0.5)
    ours = best_ms(lambda a=a, b=b: kopgen.muladd(a, b, 0.5))
    print(f"{label} {name}: eager {eager:.2f} ms, kopgen {ours:.2f} ms, {eager / ours:.2f}x eager's speed")
