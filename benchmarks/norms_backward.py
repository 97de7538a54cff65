"""The backward alone of rms_norm and layer_norm: the package of DIR/norms beside DIR/norms_before, in one run.

    python benchmarks/norms.py --generate-only --workdir DIR --before REV   (where git is)
    python benchmarks/norms_backward.py --workdir DIR [--device cpu|cuda] [--rows R] [--hidden H]

The forward runs once per package (on CPU, Triton kernels run in the interpreter: slow, and outside the
timing); then torch.autograd.grad of the same output gradient, retaining the graph, alternates between
the packages, and the medians are shown. With REV c084955 (before the statistics were saved), the
formulas of norms_before recompute each row's statistics in eager ops; those of norms read the
statistics the forward saved.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from norms import generated, generated_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    packages = {"before": generated_before(options.workdir), "after": generated(options.workdir)}
    assert packages["before"] is not None, "generate DIR/norms_before first (benchmarks/norms.py --before REV)"
    device, rows, hidden = options.device, options.rows, options.hidden
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    x = torch.randn(rows, hidden, device=device, requires_grad=True)
    w, b = (torch.randn(hidden, device=device, requires_grad=True) for _ in range(2))
    grad = torch.randn(rows, hidden, device=device)
    cases = {"rms_norm": (lambda ops: ops.rms_norm(x, w, 1e-6), (x, w)),
             "layer_norm": (lambda ops: ops.layer_norm(x, w, b, 1e-5), (x, w, b))}
    print(f"# {torch.__version__}, {device}, {torch.get_num_threads()} threads; {rows} x {hidden} float32")
    for name, (call, inputs) in cases.items():
        outputs = {key: call(ops) for key, ops in packages.items()}
        grads = {key: torch.autograd.grad(out, inputs, grad, retain_graph=True) for key, out in outputs.items()}
        torch.testing.assert_close(grads["after"], grads["before"], rtol=1e-4, atol=1e-4)
        times = {key: [] for key in outputs}
        for _ in range(options.rounds):
            for key, out in outputs.items():
                sync()
                start = time.perf_counter()
                torch.autograd.grad(out, inputs, grad, retain_graph=True)
                sync()
                times[key].append(time.perf_counter() - start)
        median = {key: statistics.median(values) * 1e3 for key, values in times.items()}
        print(f"{name} backward: before {median['before']:.3f} ms, after {median['after']:.3f} ms, "
              f"before/after {median['before'] / median['after']:.2f}x")


if __name__ == "__main__":
    main()
