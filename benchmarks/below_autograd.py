"""Per-call host time of a stable_abi op through its typed API, before and after the API learned to call an
op whose Autograd kernel is Python below that kernel (lang/eager.py), beside eager, in one run.

    python benchmarks/below_autograd.py [--before REV] [--device cpu|cuda] [--workdir DIR] [--threads N]

Generates routes.py's muladd(a, b, c) = a * b + c on `stable_abi` (its autograd registered from Python: the
stable ABI has none) twice, as package `kba_before` by kopgen at git revision REV (default a7b1825, the last
commit before the change) and as `kba_now` by this checkout, builds both into DIR (reused by later runs) and
times, on 1024 float32 elements in interleaved rounds: a call without grad, a call whose inputs require grad
(the forward, which records the graph), and forward + backward (`torch.autograd.grad`). Each candidate's
gradients are checked against eager's first.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import routes
from timing import host_seconds_per_call, interleaved_medians


def spec(package: str) -> str:
    text = routes.SPEC.format(route="stable_abi", backends=routes.ROUTES["stable_abi"])
    return text.replace("package: kroute_stable_abi", f"package: {package}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="a7b1825", help="kopgen's git revision before the change")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept; reused)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-below-"))
    workdir.mkdir(parents=True, exist_ok=True)
    routes.generate_at(workdir, "kba_before", spec("kba_before"), args.before)
    sys.path[:0] = [str(site) for site in routes.install(workdir, {"kba_before": "", "kba_now": spec("kba_now")})]

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ops = {"eager a * b + c": lambda a, b, c: a * b + c}
    ops |= {f"stable_abi API, {label}": importlib.import_module(f"kba_{label}").muladd for label in ("before", "now")}
    a, b = (torch.randn(1024, device=device) for _ in range(2))
    a_grad, b_grad = (t.clone().requires_grad_() for t in (a, b))

    def forward_backward(op):
        def run(x, y, c):
            return torch.autograd.grad(op(x, y, c).sum(), (x, y))

        return run

    modes = {"no grad": (lambda op: op, (a, b, 0.5)), "grad": (lambda op: op, (a_grad, b_grad, 0.5)),
             "forward + backward": (forward_backward, (a_grad, b_grad, 0.5))}  # fmt: skip
    for name, op in ops.items():  # every candidate's gradients are eager's
        got = forward_backward(op)(a_grad, b_grad, 0.5)
        torch.testing.assert_close(got, (b, a), msg=lambda m, name=name: f"{name}: {m}")
    candidates = {
        (mode, name): (wrap(op), call_args) for mode, (wrap, call_args) in modes.items() for name, op in ops.items()
    }
    medians = interleaved_medians(
        list(candidates), lambda key: host_seconds_per_call(*candidates[key], sync, 1000), args.rounds
    )
    print(f"{device}, torch {torch.__version__}, {torch.get_num_threads()} threads, 1024 float32 elements, "
          f"median of {args.rounds} rounds of 1000 calls; before = kopgen at {args.before}")  # fmt: skip
    print(f"{'candidate':28} {'mode':20} {'us/call':>8} {'x eager':>8}")
    for (mode, name), seconds in medians.items():
        ratio = seconds / medians[(mode, "eager a * b + c")]
        print(f"{name:28} {mode:20} {seconds * 1e6:8.2f} {ratio:8.2f}")


if __name__ == "__main__":
    main()
