"""Per-call overhead of one op under every registration route, side by side in one run.

    python benchmarks/routes.py [--device cpu|cuda] [--workdir DIR]

Generates muladd(a, b, c) = a * b + c once per route (custom_op, library, triton_op with
Python kernels; torch_library and stable_abi with C++/CUDA kernels), builds and installs each
into DIR (default: a temporary folder), then times the host cost of one call on a small float32
input: the bare launcher (the generated Triton launcher on CUDA; on CPU, where Triton only
interprets, the generated PyTorch kernel `cpu: python`), each route's operator through its
Python API (a cached OpOverload, autograd registered), and eager `a * b + c`. Candidates run
in interleaved rounds; the table shows the median and the ratio to the bare launcher.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import host_seconds_per_call, interleaved_medians

ROUTES = {  # route: backends
    "custom_op": "{cpu: python, cuda: triton}",
    "library": "{cpu: python, cuda: triton}",
    "triton_op": "{cpu: python, cuda: triton}",
    "torch_library": "{cpu: cpp, cuda: cuda}",
    "stable_abi": "{cpu: cpp, cuda: cuda}",
}
SPEC = """\
kopgen: 1
package: kroute_{route}
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    registration: {route}
    backends: {backends}
    dtypes: [float32, bfloat16]
    compute: "a * b + c"
    backward:
      a: "grad * b"
      b: "grad * a"
"""


def generate(workdir: Path, specs: dict[str, str]) -> None:
    """Writes each spec and generates its repo (DIR/repo_NAME) where DIR does not have it yet."""
    for name, text in specs.items():
        repo = workdir / f"repo_{name}"
        if not repo.exists():  # generated elsewhere, e.g. for a machine without kopgen's dependencies
            spec = workdir / f"{name}.yaml"
            spec.write_text(text)
            subprocess.run(
                [sys.executable, "-m", "kopgen", "new", str(spec), "-o", str(repo)],
                check=True,
                stdout=subprocess.DEVNULL,
            )


def install(workdir: Path, specs: dict[str, str]) -> list[Path]:
    """Generates and installs one package per spec into DIR/site_NAME, reusing what DIR already has;
    the builds run in parallel (the C++/CUDA ones take minutes). Returns the install folders."""
    generate(workdir, specs)
    sites = [workdir / f"site_{name}" for name in specs]
    jobs = {}
    for site in sites:
        if not site.exists():  # a build goes to site_NAME.partial first: a failed one is not reused
            partial = site.with_name(site.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            repo = workdir / site.name.replace("site_", "repo_", 1)
            jobs[site] = (
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--no-deps",
                        "--no-build-isolation",
                        "--target",
                        str(partial),
                        str(repo),
                    ]
                ),
                time.perf_counter(),
            )
    for site, (job, started) in jobs.items():
        if job.wait() != 0:
            raise SystemExit(f"building {site.name} failed (pip exit status {job.returncode})")
        site.with_name(site.name + ".partial").rename(site)
        print(f"built {site.name[5:]} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return sites


def route_specs(routes=tuple(ROUTES)) -> dict[str, str]:
    return {route: SPEC.format(route=route, backends=ROUTES[route]) for route in routes}


def build(workdir: Path, routes=tuple(ROUTES)) -> list[Path]:
    """Generates and installs one package per route (reusing what DIR already has); their install folders."""
    return install(workdir, route_specs(routes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept; reused)")
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-routes-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(site) for site in build(workdir)]

    import importlib

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    packages = {route: importlib.import_module(f"kroute_{route}") for route in ROUTES}
    launchers = importlib.import_module("kroute_custom_op.kernels.muladd")
    bare = launchers.muladd_triton if device == "cuda" else launchers.muladd_python
    candidates = {"bare launcher": bare}
    candidates.update({f"{route} operator": packages[route].muladd for route in ROUTES})
    candidates["eager a * b + c"] = lambda a, b, c: a * b + c

    a, b = (torch.rand(args.numel, device=device) for _ in range(2))
    inputs = (a, b, 0.5)
    want = a * b + 0.5
    for name, fn in candidates.items():  # every candidate computes the same, and is warm
        torch.testing.assert_close(fn(*inputs), want, msg=name)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    calls = 2000
    medians = interleaved_medians(
        list(candidates), lambda name: host_seconds_per_call(candidates[name], inputs, sync, calls), args.rounds
    )

    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(
        f"{where}, torch {torch.__version__}, {args.numel} float32 elements, median of {args.rounds} rounds of {calls} calls"
    )
    print(f"{'candidate':<26}{'us/call':>10}{'x bare':>9}")
    base = medians["bare launcher"]
    for name, median in medians.items():
        print(f"{name:<26}{median * 1e6:>10.1f}{median / base:>9.2f}")


if __name__ == "__main__":
    main()
