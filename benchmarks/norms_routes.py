"""examples/norms.yaml's row normalisations on each kernel route, beside eager PyTorch, Inductor and a copy.

    python benchmarks/norms_routes.py [--device cuda|cpu] [--workdir DIR] [--routes triton,torch_library,stable_abi]
                                      [--quick]

Generates examples/norms.yaml once per route (triton: custom_op with Triton kernels; torch_library and
stable_abi: the C++ and CUDA kernels), builds and installs each into DIR (reused where DIR has it), checks
every route's forward against PyTorch's own (F.rms_norm, F.layer_norm, softmax, log_softmax), then times the
forward, and forward + backward (the same backward formulas on every route), of rows 4096 x hidden 1024,
4096 and 8192 in float32 and bfloat16, side by side in interleaved rounds (timing.py), medians shown. GB/s
counts the bytes one forward must move (as benchmarks/norms.py). `--device cpu --quick` is a smoke test.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from routes import install
from timing import interleaved_medians

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = (1024, 4096, 8192)
ROUTES = {  # name: (registration, backends)
    "triton": ("custom_op", {"cpu": "triton", "cuda": "triton"}),
    "torch_library": ("torch_library", {"cpu": "cpp", "cuda": "cuda"}),
    "stable_abi": ("stable_abi", {"cpu": "cpp", "cuda": "cuda"}),
}


def spec(route: str) -> str:
    """examples/norms.yaml with every op on `route`'s registration and kernels, in bfloat16 too."""
    import yaml  # only where DIR has no generated repo for it (the GPU machine may not have kopgen's deps)

    registration, backends = ROUTES[route]
    text = yaml.safe_load((ROOT / "examples" / "norms.yaml").read_text())
    text["package"] = f"knorms_{route}"
    text["defaults"].update(registration=registration, backends=backends, dtypes=["float32", "bfloat16", "float64"])
    for op in text["ops"]:
        op.pop("registration", None), op.pop("backends", None)
        if registration != "custom_op":  # the compiled routes do not save statistics yet: formulas recompute them
            name = op["schema"].split("(")[0]
            for arg, formula in op.get("backward", {}).items():
                for stat, again in RECOMPUTED.get(name, {}).items():
                    formula = re.sub(rf"\b{stat}\b", again, formula)
                op["backward"][arg] = formula
    return yaml.safe_dump(text, sort_keys=False)


# The statistics the backward formulas of examples/norms.yaml read, recomputed in torch ops.
_MEAN = "x.mean(-1, keepdim=True)"
RECOMPUTED = {
    "rms_norm": {"rstd": "torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)"},
    "layer_norm": {"mu": f"({_MEAN})", "rstd": f"torch.rsqrt(((x - {_MEAN}) ** 2).mean(-1, keepdim=True) + eps)"},
}


def cases(hidden: int) -> dict:
    """PyTorch's own of each op, over (x, weight, bias or residual)."""
    return {
        "rms_norm": lambda x, w, b: F.rms_norm(x, (hidden,), w, 1e-6),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (hidden,), w, b, 1e-5),
        "softmax": lambda x, w, b: torch.softmax(x, -1),
        "log_softmax": lambda x, w, b: torch.log_softmax(x, -1),
    }


def generated(ops, name: str):
    args = {"rms_norm": lambda x, w, b: (x, w, 1e-6), "layer_norm": lambda x, w, b: (x, w, b, 1e-5)}
    fn = getattr(ops, name)
    pick = args.get(name, lambda x, w, b: (x,))
    return lambda x, w, b: fn(*pick(x, w, b))


def moved_bytes(name: str, x: torch.Tensor) -> int:
    extra = {"rms_norm": 1, "layer_norm": 2}.get(name, 0) * x.shape[-1]  # weight, bias
    return (2 * x.numel() + extra) * x.element_size()  # x read once, the output written once


def seconds(fn, args, sync, calls: int) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return (time.perf_counter() - start) / calls


def with_backward(fn):
    def run(*args):
        out = fn(*args)
        out.backward(torch.ones_like(out))

    return run


def check_layouts(packages: dict, device: str) -> None:
    """Every route against PyTorch where the timed shapes do not go: rows too long to hold (looped), widths
    that are no whole number of 16-byte vectors, a weight of one row per row, a transposed x."""
    for rows, hidden in ((64, 16384), (33, 12345), (7, 100)):
        for dtype in (torch.float32, torch.bfloat16):
            tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
            x = torch.randn(rows, hidden, device=device, dtype=dtype)
            w, b = torch.randn(hidden, device=device, dtype=dtype), torch.randn(hidden, device=device, dtype=dtype)
            layouts = {
                "dense": (x, w, b),
                "per-row weight": (x, torch.randn_like(x), b),
                "transposed x": (x.t().contiguous().t(), w, b),
            }
            for name, theirs in cases(hidden).items():
                for layout, args in layouts.items():
                    if layout == "per-row weight" and name not in ("rms_norm", "layer_norm"):
                        continue
                    want = theirs(*args) if layout != "per-row weight" else None
                    for route, ops in packages.items():
                        got = generated(ops, name)(*args)
                        if want is None:  # F.rms_norm and F.layer_norm take one weight row: the per-row form by hand
                            want = _per_row(name, *args)
                        torch.testing.assert_close(
                            got, want, **tolerance, msg=lambda m, at=f"{route} {name} {layout}": f"{at}: {m}"
                        )
    print(f"# checked every route against PyTorch on rows of 16384, 12345 and 100 ({', '.join(packages)})")


def _per_row(name: str, x, w, b):
    if name == "rms_norm":
        return (x.float() * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
    return (F.layer_norm(x.float(), x.shape[-1:], None, None, 1e-5) * w.float() + b.float()).to(x.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept; reused)")
    parser.add_argument("--routes", default=",".join(ROUTES), help="comma-separated: " + ", ".join(ROUTES))
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds: a smoke test")
    options = parser.parse_args()
    routes = options.routes.split(",")
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="kopgen-norms-routes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    specs = {route: "" if (workdir / f"repo_{route}").exists() else spec(route) for route in routes}
    sys.path[:0] = [str(site) for site in install(workdir, specs)]
    packages = {route: importlib.import_module(f"knorms_{route}.ops") for route in routes}
    torch._dynamo.config.recompile_limit = 64  # a compile per op, dtype and hidden size
    device = options.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows, hiddens, calls, rounds = (8, (64,), 1, 1) if options.quick else (4096, HIDDEN, 50, 7)
    check_layouts(packages, device)
    print(f"# {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; rows {rows}")
    print(
        "op | dtype | hidden | pass | " + " | ".join(routes) + " | eager | inductor | copy | GB/s of each route (fwd)"
    )
    for dtype in (torch.float32, torch.bfloat16):
        tolerance = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-4, "rtol": 1e-4}
        for hidden in hiddens:
            x = torch.randn(rows, hidden, device=device, dtype=dtype)
            w, b = torch.randn(hidden, device=device, dtype=dtype), torch.randn(hidden, device=device, dtype=dtype)
            for name, theirs in cases(hidden).items():
                candidates = {}
                for route in routes:
                    ours = generated(packages[route], name)
                    try:
                        torch.testing.assert_close(ours(x, w, b), theirs(x, w, b), **tolerance)
                        candidates[route] = ours
                    except AssertionError as error:
                        print(
                            f"# {route} {name} {dtype} {hidden}: wrong result, left out: {str(error).splitlines()[0]}"
                        )
                candidates |= {
                    "eager": theirs,
                    "inductor": torch.compile(theirs, fullgraph=True, dynamic=False),
                    "copy": lambda x, w, b: x.clone(),
                }
                for label, grad in (("fwd", False), ("fwd+bwd", True)):
                    timed = {key: with_backward(fn) if grad and key != "copy" else fn for key, fn in candidates.items()}
                    inputs = tuple(a.detach().requires_grad_(grad) for a in (x, w, b))
                    for fn in timed.values():  # warm: compiles, autotunes
                        fn(*inputs)
                    medians = interleaved_medians(
                        list(timed),
                        lambda key, timed=timed, inputs=inputs: seconds(timed[key], inputs, sync, calls),
                        rounds,
                    )
                    cells = [
                        f"{medians[k] * 1e6:.1f} us" if k in medians else "-"
                        for k in [*routes, "eager", "inductor", "copy"]
                    ]
                    gbs = [f"{moved_bytes(name, x) / medians[r] / 1e9:.0f}" if r in medians else "-" for r in routes]
                    print(
                        f"{name} | {str(dtype)[6:]} | {hidden} | {label} | "
                        + " | ".join(cells)
                        + " | "
                        + " / ".join(gbs),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
