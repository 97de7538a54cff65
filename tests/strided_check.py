"""The compiled muladd, muladd_out and scale_ of an installed fused example on broadcast and strided tensors.

    python tests/strided_check.py kfused|kstable [cpu|cuda]

Run by test_end_to_end (CPU) and on the GPU machine (CUDA). Checks the values on layouts that collapse to
one to seven dimensions (expanded, transposed, sliced, permuted, zero-size), that a call on broadcast and
transposed inputs runs no copy and allocates only its output (the profiler sees every ATen op the kernel
calls, on both ABIs), and writes through strided out= and in-place arguments. Prints one line per check.
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile


def layouts(device: str, half: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    def r(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device, dtype=dtype)

    base = r(6, 5, 4, 8, dtype=torch.float64)
    return [
        (r(256, 1024), r(1024)),  # broadcast along rows: 2 dimensions, w dense along them
        (r(256, 1024), r(256, 1)),  # broadcast along columns: w steps 0 along the rows
        (r(64, 64).t(), r(64, 64)),  # read across its layout (CPU tiles)
        (r(70, 33).t(), r(70)),  # no whole vectors, odd sizes
        (r(64, 128)[:, ::2], r(64)),  # every other element
        (r(64, 128)[:, 4:68], r(64, 1)),  # a column slice: rows dense, starts aligned
        (r(64, 128)[:, 3:67], r(64)),  # a column slice whose rows start unaligned
        (r(3, 1, 5), r(4, 1)),  # both broadcast
        (r(2, 3, 4, 5, 6, 7, 8).permute(6, 4, 2, 0, 1, 3, 5), r(1)),  # 7 dimensions: made dense
        (r(2, 3, 2, 3, 2, 3, 2, 3)[..., ::2].transpose(1, 5), r(3, 1, 3, 1, 3, 1, 1)),
        (r(5).expand(7, 5), r(7, 1).expand(7, 5)),
        (torch.tensor(2.0, device=device), r(3, 4)),
        (torch.tensor(2.0, device=device), torch.tensor(3.0, device=device)),
        (r(0, 4), r(4)),
        (base.permute(3, 1, 0, 2), base.permute(3, 1, 0, 2)[:, :, :1]),
        (r(300, 300, dtype=half).t(), r(300, dtype=half)),
        (r(1 << 20), r(1 << 20)),  # dense: the flat kernel
        (r(1024, 1024)[:, :1000], r(1000)),  # large enough for several CPU threads
        (r(1 << 18)[::2], r(1 << 17)),  # one strided dimension, several CPU threads
    ]


def expected(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() * b.double() + 0.5).to(a.dtype)  # the kernels compute in float, round once


def check_values(ops, device: str, half: torch.dtype) -> None:
    torch.manual_seed(0)
    for number, (a, b) in enumerate(layouts(device, half)):
        for x, y in ((a, b), (b, a)):
            got = ops.muladd(x, y, 0.5)
            assert got.is_contiguous() and got.shape == torch.broadcast_shapes(x.shape, y.shape), number
            torch.testing.assert_close(got, expected(x, y), msg=f"layout {number}")
    print(f"muladd: {len(layouts(device, half))} layouts, both orders: ok")


# How a compiled op allocates its output: through the dispatcher (which the profiler sees), except on
# the stable ABI, whose C shim allocates CPU tensors directly and CUDA ones with aten::empty_strided.
ALLOCATIONS = {"aten::empty", "aten::new_empty", "aten::empty_strided"}


def check_no_copy(ops, device: str, stable: bool) -> None:
    x, w, t = (
        torch.randn(512, 512, device=device),
        torch.randn(512, device=device),
        torch.randn(512, 512, device=device),
    )
    for a, b in ((x, w), (t.t(), x), (x[:, :300], w[:300])):
        ops.muladd(a, b, 0.5)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            ops.muladd(a, b, 0.5)
        names = [event.name for event in prof.events() if event.name.startswith("aten::")]
        assert set(names) <= ALLOCATIONS, names  # no copy
        assert len(names) == (0 if stable and device == "cpu" else 1), names  # the output, nothing else
    print("muladd: no copy, one allocation (the output), for broadcast, transposed and sliced inputs: ok")


def check_writes(ops, device: str) -> None:
    a, b = torch.randn(64, 64, device=device), torch.randn(64, device=device)
    out = torch.empty(64, 64, device=device).t()  # a strided out= argument
    ops.muladd_out(a.t(), b, 0.5, out)
    torch.testing.assert_close(out, expected(a.t(), b))
    wide = torch.randn(64, 128, device=device)
    x = wide[:, ::2]
    before, rest = x.clone(), wide[:, 1::2].clone()
    ops.scale_(x, 3.0)
    torch.testing.assert_close(x, before * 3)
    torch.testing.assert_close(wide[:, 1::2], rest)  # the elements between untouched
    print("muladd_out and scale_ through strided arguments: ok")


def main() -> None:
    package, device = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu"
    __import__(package)
    ops = getattr(torch.ops, package)
    half = torch.bfloat16 if package == "kstable" else torch.float16  # the dtypes each example lists
    check_values(ops, device, half)
    check_no_copy(ops, device, stable=package == "kstable")
    check_writes(ops, device)


if __name__ == "__main__":
    main()
