"""GB/s of the C++ CPU row reductions (torch_library) against torch, side by side in one run.

    python benchmarks/rows_cpu.py DIR

DIR holds the built rows package that `benchmarks/perf.py --workdir W` generates (W/repo_rows_torch_library
after `python setup.py build_ext --inplace` there, or W/site_rows_torch_library). 2 threads, 20 calls each;
every result is compared with torch's first.
"""

from __future__ import annotations

import sys
import time

import torch


def seconds_per_call(fn, x, calls: int = 20) -> float:
    fn(x)
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - start) / calls


def main(site: str) -> None:
    sys.path.insert(0, site)
    import krows_torch_library as rows

    torch.set_num_threads(2)
    references = {"sum": lambda x: x.sum(-1), "max": lambda x: x.amax(-1)}
    for shape in [(1024, 4096), (4096, 1024), (256, 65536)]:
        for dtype in [torch.float32, torch.bfloat16]:
            x = torch.randn(*shape, dtype=dtype)
            tolerance = {"rtol": 1e-4, "atol": 1e-3} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 1e-1}
            for name, reference in references.items():
                op = getattr(rows, f"row{name}")
                torch.testing.assert_close(op(x).float(), reference(x).float(), **tolerance)
                ours, theirs = seconds_per_call(op, x), seconds_per_call(reference, x)
                gb = x.numel() * x.element_size() / 1e9
                print(
                    f"{shape} {dtype} {name}: ours {gb / ours:.1f} GB/s, torch {gb / theirs:.1f} GB/s, x torch {theirs / ours:.2f}"
                )


if __name__ == "__main__":
    main(sys.argv[1])
