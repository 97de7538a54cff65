"""The Triton route's normalisation kernels alone: examples/norms.yaml's ops and their backward ops (as
norms_routes.py's `triton` route generates them, in bfloat16 too), timed in CUDA graphs beside a device copy,
as kopgen at a git revision wrote them ("before") and as this checkout writes them ("now").

    python benchmarks/triton_norms_kernels.py --generate-only --before REV --workdir DIR   (here: kopgen, git)
    python benchmarks/triton_norms_kernels.py --workdir DIR                                   (CUDA only)

Rows 4096 x hidden 1024, 4096 and 8192, float32 and bfloat16. Each package runs in its own process (both are
named knorms_triton), in alternating rounds; each case shows its fastest round. "% of copy" counts the
tensors each kernel must move against one copy (a forward reads one and writes one; a backward reads two and
writes one; fused_add_rms_norm reads two and writes two): the bandwidth of norms_kernels.sh's CUDA figures.
The backward ops read saved statistics of ones (their values do not change the time).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import norms_routes
import routes
from timing import graph_seconds

ROWS, HIDDEN = 4096, (1024, 4096, 8192)


def measure(repo: Path, label: str) -> None:
    """One round over every case of the package in `repo`, one line each: label | dtype | hidden | copy us | op
    | us | tensors moved."""
    sys.path.insert(0, str(repo))
    import knorms_triton as knorms
    import torch

    ops = torch.ops.knorms_triton

    def graph_time(fn) -> float:
        """us per call of 20 calls captured in a CUDA graph: the fastest of 7 replays."""
        return graph_seconds(torch, fn, pick=min) * 1e6

    for dtype in (torch.bfloat16, torch.float32):
        for hidden in HIDDEN:
            copy, cases = shape_cases(torch, knorms, ops, dtype, hidden)
            copy_us = graph_time(copy)
            for name, moved, fn in cases:
                print(f"{label}|{str(dtype)[6:]}|{hidden}|{copy_us}|{name}|{graph_time(fn)}|{moved}", flush=True)


def shape_cases(torch, knorms, ops, dtype, hidden: int) -> tuple:
    """A device copy of one tensor, and each case: its name, the tensors it moves, its call."""
    def tensor():
        return torch.randn(ROWS, hidden, device="cuda", dtype=dtype)

    x, grad, result, out = tensor(), tensor(), tensor(), tensor()
    weight = torch.randn(hidden, device="cuda", dtype=dtype)
    bias = torch.randn(hidden, device="cuda", dtype=dtype)
    stat = torch.ones(ROWS, 1, device="cuda")
    x0, residual = torch.zeros_like(x), torch.zeros_like(x)  # fused_add_rms_norm updates them in place
    return lambda: out.copy_(x), [
        ("rms_norm", 1, lambda: knorms.rms_norm(x, weight)),
        ("layer_norm", 1, lambda: knorms.layer_norm(x, weight, bias)),
        ("softmax", 1, lambda: knorms.softmax(x)),
        ("log_softmax", 1, lambda: knorms.log_softmax(x)),
        ("fused_add_rms_norm", 2, lambda: knorms.fused_add_rms_norm(x0, residual, weight)),
        ("rms_norm_backward", 1.5, lambda: ops.rms_norm_backward(grad, x, weight, stat)),
        ("layer_norm_backward", 1.5, lambda: ops.layer_norm_backward(grad, x, weight, stat, stat)),
        ("softmax_backward", 1.5, lambda: ops.softmax_backward(grad, result)),
        ("log_softmax_backward", 1.5, lambda: ops.log_softmax_backward(grad, result)),
    ]


def report(lines: list[str]) -> None:
    """The fastest round of each case, before and now side by side."""
    best: dict[tuple, float] = {}
    copies: dict[tuple, float] = {}
    moved: dict[str, float] = {}
    for line in lines:
        label, dtype, hidden, copy, name, us, tensors = line.split("|")
        key = (dtype, int(hidden), name)
        best[(*key, label)] = min(best.get((*key, label), float("inf")), float(us))
        copies[key[:2]] = min(copies.get(key[:2], float("inf")), float(copy))
        moved[name] = float(tensors)
    labels = sorted({k[3] for k in best}, key=["before", "now"].index)
    print(f"dtype | hidden | copy | op | {' | '.join(labels)}" + (" | now / before" if len(labels) == 2 else ""))
    print(" | ".join(["---"] * (4 + len(labels) + (len(labels) == 2))))
    for dtype, hidden, name in sorted({k[:3] for k in best}, key=lambda k: (k[2], k[0], k[1])):
        copy = copies[(dtype, hidden)]
        cells = [f"{best[(dtype, hidden, name, label)]:.1f} us "
                 f"({100 * moved[name] * copy / best[(dtype, hidden, name, label)]:.0f}%)" for label in labels]
        ratio = [f"{best[(dtype, hidden, name, 'now')] / best[(dtype, hidden, name, 'before')]:.3f}"] if len(labels) == 2 else []
        print(" | ".join([dtype, str(hidden), f"{copy:.1f} us", name, *cells, *ratio]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True, help="where the repos are generated (kept, reused)")
    parser.add_argument("--before", help="the kopgen revision to compare with (with --generate-only)")
    parser.add_argument("--generate-only", action="store_true", help="generate the repos into DIR and stop")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", nargs=2, metavar=("REPO", "LABEL"), help=argparse.SUPPRESS)  # one process's round
    args = parser.parse_args()
    if args.measure:
        measure(Path(args.measure[0]), args.measure[1])
        return
    workdir = args.workdir.resolve()
    if args.generate_only:
        workdir.mkdir(parents=True, exist_ok=True)
        routes.generate(workdir, {"now": norms_routes.spec("triton")})
        if args.before:
            routes.generate_at(workdir, "before", norms_routes.spec("triton"), args.before)
        return
    repos = {label: workdir / f"repo_{label}" for label in ("before", "now") if (workdir / f"repo_{label}").exists()}
    lines = []
    for _ in range(args.rounds):
        for label, repo in repos.items():
            run = subprocess.run([sys.executable, __file__, "--workdir", str(workdir), "--measure", str(repo), label],
                                 check=True, capture_output=True, text=True)
            lines += run.stdout.splitlines()
    import torch

    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; rows {ROWS}; CUDA graphs of 20 calls, "
          f"fastest of 7 replays and {args.rounds} rounds")
    report(lines)


if __name__ == "__main__":
    main()
