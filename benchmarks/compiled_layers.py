"""Where a compiled route's call spends its time: each layer of torch_library and stable_abi per call,
side by side in one run.

    python benchmarks/compiled_layers.py [--device cpu|cuda] [--workdir DIR] [--threads N]

Builds muladd(a, b, c) = a * b + c under both compiled routes (routes.py's spec, reusing DIR's builds)
and times, on 1024 float32 elements without grad, in interleaved rounds: eager `a * b + c`; the
allocation alone (`empty_like`); each route's typed API (ops.py); and its operator called below the
Autograd key (`_AutoDispatchBelowAutograd`, as the autograd kernel itself redispatches), which is the
kernel, the dispatcher and the host code without the autograd layer. torch_library's autograd kernel
is C++ (csrc/_autograd.cpp); stable_abi's is `torch.library.register_autograd`, in Python: the stable
ABI has no autograd API and cannot read `requires_grad`, so that layer cannot move into the extension.
The typed API skips it in plain eager calls without grad (it calls the operator below the Autograd key
itself, after a check: lang/eager.py); the operator called by anyone else goes through it. The
difference between the two "below autograd" rows is the stable ABI's own cost (boxed arguments, tensor
handles, calls through the C shim).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import routes
from timing import host_seconds_per_call, interleaved_medians

COMPILED = ("torch_library", "stable_abi")


def below_autograd(op, torch):
    def call(a, b, c):
        with torch._C._AutoDispatchBelowAutograd():
            return op(a, b, c)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept; reused)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-layers-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(site) for site in routes.build(workdir, COMPILED)]

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    fns = {
        "eager a * b + c": lambda a, b, c: a * b + c,
        "empty_like (the allocation)": lambda a, b, c: torch.empty_like(a),
    }
    for route in COMPILED:
        package = importlib.import_module(f"kroute_{route}")
        fns[f"{route} API"] = package.muladd
        fns[f"{route} below autograd"] = below_autograd(getattr(torch.ops, f"kroute_{route}").muladd.default, torch)
    a, b = (torch.rand(1024, device=device) for _ in range(2))
    for name, fn in fns.items():
        if "empty_like" not in name:
            torch.testing.assert_close(fn(a, b, 0.5), a * b + 0.5, msg=name)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    medians = interleaved_medians(
        list(fns), lambda name: host_seconds_per_call(fns[name], (a, b, 0.5), sync, 2000), args.rounds
    )
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{where}, torch {torch.__version__}, 1024 float32 elements, median of {args.rounds} rounds of 2000 calls")
    print(f"{'candidate':<30}{'us/call':>10}{'x eager':>9}")
    eager = medians["eager a * b + c"]
    for name, median in medians.items():
        print(f"{name:<30}{median * 1e6:>10.2f}{median / eager:>9.2f}")


if __name__ == "__main__":
    main()
