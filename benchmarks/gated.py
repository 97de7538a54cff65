"""Gated ops (issue 16, Build 2): forward and forward + backward of silu_and_mul and gelu_tanh_and_mul
beside eager PyTorch, torch.compile of the same eager code (Inductor) and the device's copy, in one run.

    python benchmarks/gated.py [--device cpu|cuda] [--workdir DIR] [--quick] [--hidden N ...]
                               [--dtypes float32 bfloat16] [--routes custom_op torch_library stable_abi]
                               [--before REV] [--threads N]

Generates the two ops (`split: {x: [gate, up]}`, as examples/gated.yaml) on a Triton route (custom_op)
and two C++/CUDA routes (torch_library, stable_abi), builds and installs them into DIR (reused by the
next run; --before REV adds torch_library as kopgen at git revision REV generated it), then
times every candidate side by side (timing.py's interleaved rounds, the median) on x of 4096 rows x
2 * hidden. GB/s counts the bytes each pass must move: forward reads x and writes the output (half of
x), 1.5 x's bytes; forward + backward adds reading x and grad and writing x's gradient, 4 x's bytes in
all. `copy` is the device copying x (2 x's bytes): the roofline. Every route's backward runs the
generated backward kernel (one launch writing both halves of x's gradient), from a C++ autograd on
torch_library and from Python on the others. benchmarks/backward_kernels.py sets it beside the formulas
(torch.cat) on one route.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import routes
from timing import host_seconds_per_call, interleaved_medians

SILU_BACKWARD = (
    "torch.cat([grad * up * torch.sigmoid(gate) * (1 + gate * (1 - torch.sigmoid(gate))),"
    " grad * torch.nn.functional.silu(gate)], -1)"
)
SIGMOID_2Z = "torch.sigmoid(1.5957691216057308 * (gate + 0.044715 * gate * gate * gate))"
GELU_BACKWARD = (
    f"torch.cat([grad * up * {SIGMOID_2Z} * (1 + gate * (1 - {SIGMOID_2Z})"
    f" * (1.5957691216057308 + 0.21406444881780073 * gate * gate)), grad * gate * {SIGMOID_2Z}], -1)"
)
SPEC = """\
kopgen: 1
package: kgated_{route}
defaults:
  registration: {registration}
  backends: {backends}
  dtypes: [float32, bfloat16]
ops:
  - schema: "silu_and_mul(Tensor x) -> Tensor"
    split: {{x: [gate, up]}}
    compute: "silu(gate) * up"
    backward:
      x: "{silu}"
  - schema: "gelu_tanh_and_mul(Tensor x) -> Tensor"
    split: {{x: [gate, up]}}
    compute: "gelu_tanh(gate) * up"
    backward:
      x: "{gelu}"
"""
ROUTES = {  # name: (registration, backends)
    "custom_op": ("custom_op", "{cpu: triton, cuda: triton}"),
    "torch_library": ("torch_library", "{cpu: cpp, cuda: cuda}"),
    "stable_abi": ("stable_abi", "{cpu: cpp, cuda: cuda}"),
    "torch_library_before": ("torch_library", "{cpu: cpp, cuda: cuda}"),  # --before REV
}


def spec(route: str) -> str:
    registration, backends = ROUTES[route]
    return SPEC.format(route=route, registration=registration, backends=backends, silu=SILU_BACKWARD,
                       gelu=GELU_BACKWARD)


def eager_fns(torch):
    """The same ops in eager PyTorch, as a model's MLP writes them."""
    functional = torch.nn.functional

    def silu_and_mul(x):
        d = x.shape[-1] // 2
        return functional.silu(x[..., :d]) * x[..., d:]

    def gelu_tanh_and_mul(x):
        d = x.shape[-1] // 2
        return functional.gelu(x[..., :d], approximate="tanh") * x[..., d:]

    return {"silu_and_mul": silu_and_mul, "gelu_tanh_and_mul": gelu_tanh_and_mul}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept, reused)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (a smoke test)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    of_this_kopgen = [route for route in ROUTES if route != "torch_library_before"]
    parser.add_argument("--routes", nargs="+", choices=of_this_kopgen, default=of_this_kopgen,
                        help="custom_op's CPU kernel is Triton's interpreter: leave it out on a CPU")
    parser.add_argument("--before", metavar="REV", help="also torch_library as kopgen at REV wrote it")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-gated-"))
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = list(args.routes)
    if args.before:
        routes.generate_at(workdir, "gated_torch_library_before", spec("torch_library_before"), args.before)
    if (workdir / "repo_gated_torch_library_before").exists() and "torch_library_before" not in chosen:
        chosen.append("torch_library_before")
    specs = {f"gated_{route}": spec(route) for route in chosen}
    sys.path[:0] = [str(site) for site in routes.install(workdir, specs)]

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    rows, hiddens = (64, [64]) if args.quick else (4096, args.hidden)
    rounds, calls = (3, 2) if args.quick else (15, 20)
    packages = {route: importlib.import_module(f"kgated_{route}") for route in chosen}
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; "
          f"x is {rows} x 2*hidden; median of {rounds} rounds of {calls} calls")

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for name, eager in eager_fns(torch).items():
        compiled = torch.compile(eager)
        for dtype in args.dtypes:
            for hidden in hiddens:
                x = torch.randn(rows, 2 * hidden, device=device, dtype=getattr(torch, dtype))
                measure(torch, name, dtype, x, packages, eager, compiled, sync, rounds, calls)


def measure(torch, name, dtype, x, packages, eager, compiled, sync, rounds, calls) -> None:
    """One table: forward, then forward + backward, of every candidate on x, with the copy beside them."""
    fns = {f"{route} API": getattr(package, name) for route, package in packages.items()}
    fns |= {"eager": eager, "torch.compile(eager)": compiled}
    want = eager(x.double()).to(x.dtype)
    for candidate, fn in fns.items():  # every candidate right before it is timed
        torch.testing.assert_close(fn(x), want, atol=2e-2, rtol=2e-2, msg=lambda m, c=candidate: f"{c}: {m}")
    xg = x.detach().requires_grad_()
    grad = torch.randn_like(want)

    def step(fn):
        return lambda: torch.autograd.grad(fn(xg), xg, grad)

    copy_to = torch.empty_like(x)
    forward = {candidate: (fn, (x,)) for candidate, fn in fns.items()} | {"copy": (copy_to.copy_, (x,))}
    backward = {candidate: (step(fn), ()) for candidate, fn in fns.items()}
    x_bytes, copy_gbs = x.numel() * x.element_size(), None
    for title, candidates, moved in (("forward", forward, 1.5), ("forward + backward", backward, 4.0)):
        for fn, fn_args in candidates.values():  # compiled and warmed
            fn(*fn_args)
        sync()
        medians = interleaved_medians(
            list(candidates), lambda c, timed=candidates: host_seconds_per_call(*timed[c], sync, calls), rounds)
        if "copy" in medians:  # the forward table's; the backward one is set against it too
            copy_gbs = 2 * x_bytes / medians["copy"] / 1e9
        print(f"\n{name} {title}, {dtype}, x {list(x.shape)}: ms, GB/s of the bytes it must move, % of copy")
        for candidate, seconds in medians.items():
            gbs = (2.0 if candidate == "copy" else moved) * x_bytes / seconds / 1e9
            share = f"{100 * gbs / copy_gbs:5.0f}%"
            print(f"  {candidate:24} {seconds * 1e3:9.4f} ms {gbs:8.1f} GB/s {share}")


if __name__ == "__main__":
    main()
