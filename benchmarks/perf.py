"""Every table of issue 15 in one run, side by side: per-call cost, bandwidth, row reductions,
forward + backward, and a compiled epilogue against Inductor's own fusion.

    python benchmarks/perf.py [--device cpu|cuda] [--workdir DIR] [--quick] [--only TABLE ...]
                              [--routes ROUTE ...] [--threads N]
    python benchmarks/perf.py --generate-only --workdir DIR     (then run it where kopgen is absent)

Generates examples/muladd.yaml's op (routes.py's spec: muladd(a, b, c) = a * b + c with its
backward) under each of the five routes, and row reductions sum/mean/max/min on a Triton route
(custom_op) and a C++/CUDA route (torch_library); builds and installs them into DIR, where the next
run reuses them as they are (measuring another kopgen commit needs a fresh DIR). Then prints each table as it finishes. Every table times its candidates in
interleaved rounds (timing.py) and shows the median. GB/s counts the bytes a kernel must move: each
input read once, the output written once (a broadcast weight once, not once per row).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import routes
from timing import host_seconds_per_call, interleaved_medians

TABLES = ("percall", "bandwidth", "reductions", "backward", "fusion")
REDUCTIONS = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}  # reduce op: torch's function
ROW_ROUTES = {"custom_op": routes.ROUTES["custom_op"], "torch_library": routes.ROUTES["torch_library"]}
ROWS_OP = """\
  - schema: "row{op}(Tensor x) -> Tensor"
    registration: {route}
    backends: {backends}
    dtypes: [float32, bfloat16]
    reduce: {{op: {op}}}
"""


def rows_specs() -> dict[str, str]:
    """One package per route holding rowsum, rowmean, rowmax and rowmin (examples/rows.yaml has only two)."""
    return {
        f"rows_{route}": f"kopgen: 1\npackage: krows_{route}\nops:\n"
        + "".join(ROWS_OP.format(op=op, route=route, backends=backends) for op in REDUCTIONS)
        for route, backends in ROW_ROUTES.items()
    }


@dataclass(frozen=True)
class Sizes:
    per_call: int  # elements of the per-call table
    contiguous: int  # elements of the contiguous bandwidth cases
    matrix: tuple[int, int]  # x of the broadcast and transposed cases
    rows: tuple[tuple[int, int], ...]  # the reductions' shapes
    backward: int
    fusion: int
    rounds: int
    calls: int  # calls per round in the per-call table (the other tables: `long_calls`)
    long_calls: int


def sizes_for(device: str, quick: bool) -> Sizes:
    if quick:
        return Sizes(1024, 1 << 12, (64, 256), ((64, 256), (256, 64), (8, 4096)), 1 << 12, 1 << 12, 3, 20, 2)
    if device == "cuda":
        return Sizes(1024, 1 << 28, (4096, 4096), ((4096, 4096), (16384, 1024), (1024, 65536)), 1 << 26, 1 << 28,
                     15, 2000, 20)  # fmt: skip
    # CPU: the same row lengths as on CUDA with a quarter of the rows; 2^22 elements contiguous
    return Sizes(1024, 1 << 22, (4096, 4096), ((1024, 4096), (4096, 1024), (256, 65536)), 1 << 20, 1 << 22,
                 7, 2000, 5)  # fmt: skip


@dataclass
class Bench:
    torch: object
    device: str
    sizes: Sizes
    ops: dict  # route: its generated muladd (through the package's Python API)
    bare: object  # the generated launcher, no operator around it
    rows: dict  # route: the package holding rowsum, rowmean, rowmax, rowmin

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def rand(self, *shape, dtype=None, grad=False):
        return self.torch.rand(*shape, device=self.device, dtype=dtype, requires_grad=grad)

    def medians(self, candidates: dict, calls: int) -> dict:
        """Median seconds per call of each {name: (function, args)}, timed side by side; each is run
        (compiled, warmed) twice first."""
        for fn, args in candidates.values():
            for _ in range(2):
                fn(*args)
        self.sync()
        return interleaved_medians(
            list(candidates),
            lambda name: host_seconds_per_call(*candidates[name], self.sync, calls),
            self.sizes.rounds,
        )


def cell(value) -> str:
    """A number to 3 digits (timing noise is larger), None as '—'."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def show(title: str, header: list[str], rows: list[list]) -> None:
    """A table as plain text: the first column left-aligned, numbers right-aligned."""
    text = [[cell(v) for v in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in text) for i in range(len(header))]
    print(f"## {title}\n")
    for row in text:
        print("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip())
    print(flush=True)  # a blank line ends the table


def checked(candidates: dict, want, what: str, **tolerance) -> dict:
    """The candidates whose result matches `want`; a failing one is reported and left out, not fatal."""
    import torch

    kept = {}
    for name, (fn, args) in candidates.items():
        try:
            got = fn(*args)
            torch.testing.assert_close(
                got, want, check_stride=False, msg=lambda m, name=name: f"{name}: {m}", **tolerance
            )
            kept[name] = (fn, args)
        except Exception as error:  # noqa: BLE001 (a route that fails here is a finding: print it, measure the rest)
            label = ", ".join(name) if isinstance(name, tuple) else name
            print(f"{what}: {label} left out: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
    return kept


def per_call(b: Bench) -> None:
    """Host µs per call on a small float32 input, inputs without and with requires_grad."""
    n = b.sizes.per_call
    x, y = b.rand(n), b.rand(n)
    gx, gy = x.clone().requires_grad_(), y.clone().requires_grad_()
    fns = {"eager a * b + c": lambda a, b, c: a * b + c} | ({"bare launcher": b.bare} if b.bare else {})
    # The typed API (kroute_<route>.muladd: the kernel itself in plain eager calls) beside the operator.
    fns |= {f"{route} API": op for route, op in b.ops.items()}
    handles = {route: getattr(b.torch.ops, f"kroute_{route}") for route in b.ops}
    fns |= {f"{route} operator": ns.muladd.default for route, ns in handles.items() if hasattr(ns, "muladd")}
    candidates = {(name, "no grad"): (fn, (x, y, 0.5)) for name, fn in fns.items()}
    candidates |= {(name, "grad"): (fn, (gx, gy, 0.5)) for name, fn in fns.items() if name != "bare launcher"}
    candidates = checked(candidates, x * y + 0.5, "per call")
    med = b.medians(candidates, b.sizes.calls)
    eager, bare = med.get(("eager a * b + c", "no grad")), med.get(("bare launcher", "no grad"))
    eager_grad = med.get(("eager a * b + c", "grad"))
    rows = []
    for name in fns:
        plain, grad = med.get((name, "no grad")), med.get((name, "grad"))
        if plain is None and grad is None:
            continue  # left out above
        rows.append([
            name,
            plain and plain * 1e6, plain and eager and plain / eager, plain and bare and plain / bare,
            grad and grad * 1e6, grad and eager_grad and grad / eager_grad,
        ])  # fmt: skip
    show(
        f"Per call: host µs, {n} float32 elements, median of {b.sizes.rounds} rounds of {b.sizes.calls} calls",
        ["candidate", "no grad µs", "x eager", "x bare", "requires grad µs", "x eager"],
        rows,
    )


def bandwidth_cases(b: Bench) -> dict:
    """name: (args of muladd, bytes a kernel must move, the tensor a device copy copies, reference case)."""
    torch, n, (r, c) = b.torch, b.sizes.contiguous, b.sizes.matrix
    cases = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = b.rand(n, dtype=dtype), b.rand(n, dtype=dtype)
        cases[f"contiguous {n} {str(dtype)[6:]}"] = ((x, y, 0.5), 3 * x.nbytes, x, None)
    x, y, w = b.rand(r, c), b.rand(r, c), b.rand(c)
    same = f"contiguous x[{r},{c}] * y[{r},{c}] + 0.5"
    cases[same] = ((x, y, 0.5), 3 * x.nbytes, x, None)
    cases[f"broadcast x[{r},{c}] * w[{c}] + 0.5"] = ((x, w, 0.5), 2 * x.nbytes + w.nbytes, x, same)
    xt = b.rand(c, r).t()
    cases[f"transposed x[{c},{r}].t() * y + 0.5"] = ((xt, y, 0.5), 3 * y.nbytes, y, same)
    return cases


def bandwidth(b: Bench) -> None:
    """GB/s of each route's muladd vs eager and a device copy, per case; broadcast and transposed
    also as a fraction of the same route's contiguous case of equal size."""
    gbs_of = {}
    for case, (args, moved, copied, reference) in bandwidth_cases(b).items():
        candidates = {f"{route} API": (op, args) for route, op in b.ops.items()}
        candidates["eager a * b + c"] = (lambda a, b, c: a * b + c, args)
        candidates = checked(candidates, args[0] * args[1] + 0.5, case)
        candidates["device copy"] = (lambda x: b.torch.empty_like(x).copy_(x), (copied,))
        med = b.medians(candidates, b.sizes.long_calls)
        gbs = {name: (2 * copied.nbytes if name == "device copy" else moved) / s / 1e9 for name, s in med.items()}
        gbs_of[case] = gbs
        eager, copy = gbs.get("eager a * b + c"), gbs["device copy"]
        rows = []
        for name, value in gbs.items():
            own = reference and gbs_of[reference].get(name)
            row = [name, med[name] * 1e3, value, eager and value / eager, value / copy]
            rows.append(row + [own and value / own] if reference else row)
        columns = ["candidate", "ms", "GB/s", "x eager", "x copy"] + (["x contiguous"] if reference else [])
        show(
            f"Bandwidth: {case}, {cell(moved / 1e6)} MB moved ({cell(2 * copied.nbytes / 1e6)} by the copy)",
            columns,
            rows,
        )


def reductions(b: Bench) -> None:
    """GB/s of the generated row reductions vs torch's and a device copy, per shape and dtype."""
    torch = b.torch
    for rows, cols in b.sizes.rows:
        for dtype in (torch.float32, torch.bfloat16):
            x = b.rand(rows, cols, dtype=dtype)
            moved = x.nbytes + rows * x.element_size()
            # a float32 sum of 65536 elements in one serial loop is ~1e-5 off torch's pairwise sum (measured)
            tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
            candidates = {"device copy": (lambda x: torch.empty_like(x).copy_(x), (x,))}
            for op, name in REDUCTIONS.items():
                reference = getattr(torch, name)
                candidates[("torch", op)] = (lambda x, f=reference: f(x, -1), (x,))
                generated = {(route, op): (getattr(pkg, f"row{op}"), (x,)) for route, pkg in b.rows.items()}
                candidates |= checked(generated, reference(x, -1), f"row{op} {rows}x{cols} {dtype}", **tolerance)
            med = b.medians(candidates, b.sizes.long_calls)
            copy = 2 * x.nbytes / med["device copy"] / 1e9
            table = []
            for op in REDUCTIONS:
                torch_gbs = moved / med[("torch", op)] / 1e9
                row = [op]
                for route in b.rows:
                    ours = moved / med[(route, op)] / 1e9 if (route, op) in med else None
                    row += [ours, ours and ours / torch_gbs, ours and ours / copy]
                table.append([*row, torch_gbs, torch_gbs / copy])
            header = ["op"] + [f"{h}" for r in b.rows for h in (f"{r} GB/s", "x torch", "x copy")]
            show(
                f"Row reductions: {rows}x{cols} {str(dtype)[6:]}, device copy {copy:.0f} GB/s",
                [*header, "torch GB/s", "x copy"],
                table,
            )


def backward(b: Bench) -> None:
    """Forward + backward of muladd (both inputs require grad): each route vs eager and compiled eager."""
    torch, n = b.torch, b.sizes.backward
    x, y, g = b.rand(n, grad=True), b.rand(n, grad=True), b.rand(n)
    compiled = torch.compile(lambda a, b, c: a * b + c)

    def step(fn):
        return lambda a, b: torch.autograd.grad(fn(a, b, 0.5), (a, b), g)

    fns = {f"{route} API": op for route, op in b.ops.items()}
    fns |= {"eager a * b + c": lambda a, b, c: a * b + c, "torch.compile(eager)": compiled}
    candidates = checked({name: (step(fn), (x, y)) for name, fn in fns.items()}, (g * y, g * x), "backward")
    med = b.medians(candidates, b.sizes.long_calls)
    eager, inductor = med.get("eager a * b + c"), med.get("torch.compile(eager)")
    rows = [[name, s * 1e3, eager and s / eager, inductor and s / inductor] for name, s in med.items()]
    show(f"Forward + backward: ms, {n} float32 elements", ["candidate", "ms", "x eager", "x compiled eager"], rows)


INDUCTOR, EAGER = "Inductor: (a * b + c).relu() * 2", "eager: (a * b + c).relu() * 2"  # as in fusion.py


def epilogue_bandwidth_here(b: Bench, numel: int) -> dict[str, float]:
    """GB/s of torch.compile'd `op(a, b, 0.5).relu() * 2` per route, of Inductor's fusion (INDUCTOR) and
    of eager (EAGER), 12 bytes per element: perf.py's own copy of benchmarks/fusion.py's measurement
    (issue 15, part E), used where that file is absent. A fresh Inductor cache, as there: AOTAutograd's
    cache key leaves out how a custom op is traced, so an old entry would time an older package."""
    from torch._inductor.utils import fresh_inductor_cache

    def eager(a, b):
        return (a * b + 0.5).relu() * 2

    x, y = b.rand(numel), b.rand(numel)
    with fresh_inductor_cache():
        candidates = {
            route: (b.torch.compile(lambda a, b, op=op: op(a, b, 0.5).relu() * 2, fullgraph=True), (x, y))
            for route, op in b.ops.items()
        }
        candidates[INDUCTOR] = (b.torch.compile(eager, fullgraph=True), (x, y))
        candidates[EAGER] = (eager, (x, y))
        med = b.medians(checked(candidates, eager(x, y), "fusion"), b.sizes.long_calls)
    return {name: 3 * x.nbytes / s / 1e9 for name, s in med.items()}


def fusion(b: Bench) -> None:
    """Compiled `op(a, b, c).relu() * 2` per route vs Inductor's fusion of `(a * b + c).relu() * 2`,
    measured by benchmarks/fusion.py's `epilogue_bandwidth` where it exists (it also counts kernels
    and checks torch.export, in its tests), else by the copy above."""
    n = b.sizes.fusion
    try:
        import fusion as part_e
    except ImportError:
        gbs, source = epilogue_bandwidth_here(b, n), "perf.py's own measurement: benchmarks/fusion.py is absent"
        inductor, eager = gbs.get(INDUCTOR), gbs.get(EAGER)
    else:
        gbs, source = part_e.epilogue_bandwidth(b.ops, b.device, n, b.sizes.rounds), "measured by benchmarks/fusion.py"
        inductor, eager = gbs.get(part_e.INDUCTOR), gbs.get(part_e.EAGER)
    rows = [
        [
            f"compiled {name} op(...).relu() * 2" if name in b.ops else name,
            v,
            inductor and v / inductor,
            eager and v / eager,
        ]
        for name, v in gbs.items()
    ]
    show(f"Compiled with an epilogue: {n} float32 elements, GB/s counting 12 bytes per element ({source})",
         ["candidate", "GB/s", "x Inductor", "x eager"], rows)  # fmt: skip


def generated_at(workdir: Path) -> str:
    """The kopgen commit DIR's repos were generated at (they are reused: that, not today's checkout, is
    what runs), saved beside them when first generated; the GPU machine has no kopgen checkout."""
    saved = workdir / "COMMIT"
    if not saved.exists():
        found = subprocess.run(["git", "describe", "--always", "--dirty"], check=False, capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()  # fmt: skip
        saved.write_text((found or "unknown") + "\n")
    return saved.read_text().strip()


def header(torch, device: str, commit: str, quick: bool) -> None:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU: {platform.processor() or platform.machine()}"
    print(f"# kopgen perf: {where}, {os.cpu_count()} cores, {torch.get_num_threads()} threads")
    print(f"# torch {torch.__version__}, triton {triton_version}, repos generated at {commit}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC{', --quick' if quick else ''}")  # fmt: skip
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda where available)")
    parser.add_argument("--workdir", type=Path, default=None, help="where packages are built (kept, reused)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (a smoke test)")
    parser.add_argument("--only", nargs="+", choices=TABLES, default=list(TABLES), help="the tables to print")
    parser.add_argument("--routes", nargs="+", choices=list(routes.ROUTES), default=list(routes.ROUTES))
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--generate-only", action="store_true", help="generate the repos into DIR and stop")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kopgen-perf-"))
    workdir.mkdir(parents=True, exist_ok=True)
    commit = generated_at(workdir)  # before generating: a new DIR records today's commit
    specs = routes.route_specs(args.routes) if set(args.only) - {"reductions"} else {}
    specs |= rows_specs() if "reductions" in args.only else {}
    if args.generate_only:
        routes.generate(workdir, routes.route_specs() | rows_specs())
        return
    sys.path[:0] = [str(site) for site in routes.install(workdir, specs)]

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads:  # before anything compiles: Inductor's CPU kernels keep the count they were built for
        torch.set_num_threads(args.threads)
    ops = {route: importlib.import_module(f"kroute_{route}").muladd for route in args.routes if route in specs}
    launchers = importlib.import_module("kroute_custom_op.kernels.muladd") if "custom_op" in ops else None
    bare = launchers and (launchers.muladd_triton if device == "cuda" else launchers.muladd_python)
    rows = {route: importlib.import_module(f"krows_{route}") for route in ROW_ROUTES if f"rows_{route}" in specs}
    bench = Bench(torch, device, sizes_for(device, args.quick), ops, bare, rows)
    header(torch, device, commit, args.quick)
    for table in args.only:
        globals()[{"percall": "per_call"}.get(table, table)](bench)


if __name__ == "__main__":
    main()
