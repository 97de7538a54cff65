"""Row reductions, split ops, row normalisations and a broadcast pointwise op on a Triton route, per call:
kopgen now beside kopgen at a git revision (before their launchers took dense CUDA tensors straight to the kernel), eager PyTorch and
the device copy.

    python benchmarks/dense_paths.py --before REV [--device cuda] [--workdir DIR] [--quick]
    python benchmarks/dense_paths.py --before REV --generate-only --workdir DIR   (then run where kopgen is absent)

Generates rowsum and rowmax (`reduce`), silu_and_mul (`split` + `compute`), rms_norm, layer_norm and softmax
(`normalize`, as examples/norms.yaml) and muladd (`a * b + c`, timed on x[4096, 4096] with y of the same shape
and with w[4096] broadcast along the rows) on custom_op with Triton kernels, as package kdense_now (this checkout) and kdense_before (kopgen at REV), installs both into DIR
and times, in interleaved rounds (the median), back-to-back calls with the device synchronised at the
end: what a caller sees when the host path is longer than the kernel. GB/s counts the bytes each op
must move (the input read once, the output written once); the copy reads and writes x.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import routes
from timing import host_seconds_per_call, interleaved_medians

SPEC = """\
kopgen: 1
package: kdense_{label}
defaults:
  registration: custom_op
  backends: {{cpu: triton, cuda: triton}}
  dtypes: [float32, bfloat16]
ops:
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {{op: sum}}
  - schema: "rowmax(Tensor x) -> Tensor"
    reduce: {{op: max}}
  - schema: "silu_and_mul(Tensor x) -> Tensor"
    split: {{x: [gate, up]}}
    compute: "silu(gate) * up"
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
  - schema: "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor"
    normalize:
      stats: {{rstd: "rsqrt(mean(x * x) + eps)"}}
      compute: "x * rstd * weight"
  - schema: "layer_norm(Tensor x, Tensor weight, Tensor? bias=None, float eps=1e-5) -> Tensor"
    normalize:
      stats:
        mu: "mean(x)"
        rstd: "rsqrt(mean((x - mu) * (x - mu)) + eps)"
      compute: "(x - mu) * rstd * weight + (bias if present(bias) else 0.0)"
  - schema: "softmax(Tensor x) -> Tensor"
    normalize:
      stats: {{x_max: "max(x)", sum_exp: "sum(exp(x - x_max))"}}
      compute: "exp(x - x_max) / sum_exp"
"""
ROW_SHAPES = [(4096, 4096), (16384, 1024), (1024, 65536)]
SPLIT_HIDDEN = [1024, 4096, 8192]


def generate(workdir: Path, before: str) -> None:
    routes.generate(workdir, {"now": SPEC.format(label="now")})
    routes.generate_at(workdir, "before", SPEC.format(label="before"), before)


def eager_silu_and_mul(torch):
    def silu_and_mul(x):
        gate, up = x.chunk(2, -1)
        return torch.nn.functional.silu(gate) * up

    return silu_and_mul


def table(torch, title: str, fns: dict, x, moved: int, sync, rounds: int, calls: int) -> None:
    want = fns["eager"](x.double()).to(x.dtype) if x.dtype != torch.bfloat16 else fns["eager"](x)
    for name, fn in fns.items():
        if name != "copy":
            torch.testing.assert_close(fn(x), want, atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"{n}: {m}")
    medians = interleaved_medians(list(fns), lambda n: host_seconds_per_call(fns[n], (x,), sync, calls), rounds)
    print(f"\n{title}: us per call, GB/s of the bytes it must move, ratio to eager")
    for name, seconds in medians.items():
        bytes_ = 2 * x.numel() * x.element_size() if name == "copy" else moved
        print(f"  {name:<10}{seconds * 1e6:9.1f} us{bytes_ / seconds / 1e9:9.0f} GB/s"
              f"{seconds / medians['eager']:8.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, metavar="REV", help="the kopgen revision to compare with")
    parser.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept, reused)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (a smoke test)")
    parser.add_argument("--generate-only", action="store_true", help="generate the repos into DIR and stop")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-dense-"))
    workdir.mkdir(parents=True, exist_ok=True)
    generate(workdir, args.before)
    if args.generate_only:
        return
    sys.path[:0] = [str(site) for site in routes.install(workdir, {"now": "", "before": ""})]

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    now, before = (importlib.import_module(f"kdense_{label}") for label in ("now", "before"))
    rounds, calls = (3, 2) if args.quick else (15, 50)
    row_shapes = [(64, 256)] if args.quick else ROW_SHAPES
    hiddens = [64] if args.quick else SPLIT_HIDDEN
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; "
          f"median of {rounds} rounds of {calls} calls; before = kopgen at {args.before}")

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def copy(x):
        return torch.empty_like(x).copy_(x)

    functional = torch.nn.functional
    for dtype in (torch.float32, torch.bfloat16):
        for rows, cols in row_shapes:
            x = torch.randn(rows, cols, device=device, dtype=dtype)
            moved = (x.numel() + rows) * x.element_size()
            for op, eager in (("rowsum", lambda x: x.sum(-1)), ("rowmax", lambda x: x.amax(-1))):
                fns = {"now": getattr(now, op), "before": getattr(before, op), "eager": eager, "copy": copy}
                table(torch, f"{op} {str(dtype)[6:]} [{rows}, {cols}]", fns, x, moved, sync, rounds, calls)
        x = torch.randn(row_shapes[0], device=device, dtype=dtype)
        w = torch.randn(x.shape[1:], device=device, dtype=dtype)
        for label, y in (("y", torch.randn_like(x)), (f"w[{x.shape[1]}]", w)):
            moved = (2 * x.numel() + y.numel()) * x.element_size()
            fns = {"now": lambda x, y=y: now.muladd(x, y, 0.5), "before": lambda x, y=y: before.muladd(x, y, 0.5),
                   "eager": lambda x, y=y: x * y + 0.5, "copy": copy}  # fmt: skip
            title = f"muladd {str(dtype)[6:]} x{list(x.shape)} * {label} + 0.5"
            table(torch, title, fns, x, moved, sync, rounds, calls)
        for hidden in hiddens:
            x = torch.randn(4096 if not args.quick else 64, 2 * hidden, device=device, dtype=dtype)
            moved = x.numel() * x.element_size() * 3 // 2
            fns = {"now": now.silu_and_mul, "before": before.silu_and_mul, "eager": eager_silu_and_mul(torch),
                   "copy": copy}  # fmt: skip
            table(torch, f"silu_and_mul {str(dtype)[6:]} x [{x.shape[0]}, {2 * hidden}]", fns, x, moved, sync,
                  rounds, calls)  # fmt: skip
        for hidden in hiddens:
            x = torch.randn(4096 if not args.quick else 64, hidden, device=device, dtype=dtype)
            w, b = (torch.randn(hidden, device=device, dtype=dtype) for _ in range(2))
            moved = (2 * x.numel() + 2 * hidden) * x.element_size()
            for op, eager in (
                ("rms_norm", lambda x, w=w: functional.rms_norm(x, x.shape[-1:], w.to(x.dtype), 1e-6)),
                ("layer_norm", lambda x, w=w, b=b: functional.layer_norm(x, x.shape[-1:], w.to(x.dtype), b.to(x.dtype),
                                                                         1e-5)),
                ("softmax", lambda x: torch.softmax(x, -1)),
            ):
                ours = {"rms_norm": lambda m, x, w=w: m.rms_norm(x, w), "layer_norm": lambda m, x, w=w, b=b: m.layer_norm(x, w, b),
                        "softmax": lambda m, x: m.softmax(x)}[op]  # fmt: skip
                fns = {"now": lambda x, o=ours: o(now, x), "before": lambda x, o=ours: o(before, x), "eager": eager,
                       "copy": copy}  # fmt: skip
                table(torch, f"{op} {str(dtype)[6:]} x [{x.shape[0]}, {hidden}]", fns, x, moved, sync, rounds, calls)


if __name__ == "__main__":
    main()
