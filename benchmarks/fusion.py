"""Compiled `op(a, b, c).relu() * 2` per route against Inductor's own fusion of the same eager expression.

    python benchmarks/fusion.py [--device cpu|cuda] [--workdir DIR] [--numel N] [--rounds R]

Uses the per-route muladd packages of routes.py (generated and installed into DIR). Every candidate
reads a and b and writes one result, 12 bytes per float32 element, whatever it runs in between: a
candidate that runs the op and then a second kernel for the epilogue moves more and shows it as less
bandwidth. The table shows the median of interleaved rounds and the ratio to Inductor's fusion.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from timing import host_seconds_per_call, interleaved_medians

INDUCTOR = "Inductor: (a * b + c).relu() * 2"
EAGER = "eager: (a * b + c).relu() * 2"


def epilogue_bandwidth(ops: dict[str, Callable], device: str, numel: int, rounds: int) -> dict[str, float]:
    """GB/s of torch.compile'd `op(a, b, 0.5).relu() * 2` for each op (by name: its Python API), beside
    Inductor's fusion of `(a * b + 0.5).relu() * 2` (INDUCTOR) and the eager expression (EAGER), all
    float32, counting 12 bytes per element. Compiled in a fresh Inductor cache: AOTAutograd's cache key
    leaves out how a custom op is traced, so an old entry would time an older package's graph."""
    import torch
    from torch._inductor.utils import fresh_inductor_cache

    def eager(a, b):
        return (a * b + 0.5).relu() * 2

    def with_epilogue(op: Callable) -> Callable:
        return lambda a, b: op(a, b, 0.5).relu() * 2

    a, b = (torch.rand(numel, device=device) for _ in range(2))
    want = eager(a, b)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    calls = 20 if device == "cuda" else 5
    with fresh_inductor_cache():
        candidates = {name: torch.compile(with_epilogue(op), fullgraph=True) for name, op in ops.items()}
        candidates[INDUCTOR] = torch.compile(eager, fullgraph=True)
        candidates[EAGER] = eager
        for name, fn in candidates.items():  # compiles, checks, warms up
            torch.testing.assert_close(fn(a, b), want, msg=name)
        seconds = interleaved_medians(
            list(candidates), lambda name: host_seconds_per_call(candidates[name], (a, b), sync, calls), rounds
        )
    return {name: 12 * numel / s / 1e9 for name, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where routes.py builds its packages (kept; reused)")
    parser.add_argument("--numel", type=int, default=None, help="default: 2**28 on CUDA, 2**24 on CPU")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    from routes import ROUTES, build

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-routes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(site) for site in build(workdir)]

    import importlib

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    numel = args.numel or (1 << 28 if device == "cuda" else 1 << 24)
    ops = {route: importlib.import_module(f"kroute_{route}").muladd for route in ROUTES}
    gbs = epilogue_bandwidth(ops, device, numel, args.rounds)
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"{where}, torch {torch.__version__}, {numel} float32 elements, median of {args.rounds} rounds")
    print(f"{'compiled op(a, b, c).relu() * 2':<36}{'GB/s':>9}{'x Inductor':>12}")
    for name, value in gbs.items():
        print(f"{name:<36}{value:>9.0f}{value / gbs[INDUCTOR]:>12.2f}")


if __name__ == "__main__":
    main()
