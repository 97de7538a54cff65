"""Names: the generated code renames its own locals where an op's names take them, never the user's.

The table of every local the generated code binds (kopgen/names.py) is checked against the golden
trees and the colliding spec; tests/specs/colliding_names.yaml, whose arguments are named like those
locals, generates Python that passes ruff, C++ and CUDA that compile, and a suite that passes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kopgen import generate, names
from kopgen.errors import SpecError
from kopgen.pipeline import load_spec, load_spec_text
from kopgen.schema import parse_schema

from .conftest import EXAMPLES, ROOT, installed_suite_passes
from .test_compiled import NVCC, compile_cuda, needs_nvcc, torch_includes

GOLDEN = ROOT / "tests/golden"
COLLIDING = ROOT / "tests/specs/colliding_names.yaml"


# -- the rename rule


def test_a_taken_name_gets_underscores_until_free():
    assert names.fresh("grad", {"x"}) == "grad"
    assert names.fresh("grad", {"grad", "grad_"}) == "grad__"


def locals_of(schema: str, stem: str = "") -> names.Locals:
    parsed = parse_schema(schema)
    args = tuple((a.name, str(a.type) == "Tensor?") for a in parsed.arguments)
    outputs = names.output_names([name for name, _ in args], len(parsed.returns))
    results = ("result",) if len(outputs) == 1 else tuple(f"result{i}" for i in range(len(outputs)))
    return names.Locals(parsed.name, stem or parsed.name, args, outputs, results)


def test_generated_locals_make_way_for_the_arguments():
    local = locals_of("f(Tensor grad, Tensor? mask=None, float grid=1.0, bool HAS_mask=True, float mask_=0.0) -> Tensor")
    assert (local.grad, local.grid, local.ctx) == ("grad_", "grid_", "ctx")
    assert local.mask == "mask__"  # mask_ is an argument too
    assert local.flag("mask") == "HAS_mask_"
    assert local.derived("gradient", "grad") == "grad_grad"


def test_outputs_and_what_derives_from_them_make_way_too():
    assert names.output_names(["out1", "x"], 2) == ("out0", "out1_")
    assert names.output_names(["out"], 1) == ("out_",)
    local = locals_of("f(Tensor out, Tensor out_ptr) -> Tensor")  # the output is out_, its pointer out__ptr
    assert (local.pointer("out"), local.pointer("out_")) == ("out_ptr_", "out__ptr")


def test_no_two_generated_names_meet():
    """Arguments x, x_ and grad_x: x's gradient is renamed to grad_x_, so x_'s becomes grad_x__."""
    local = locals_of("f(Tensor x, Tensor x_, Tensor grad_x, Tensor? y=None, Tensor? y_=None, bool HAS_y=True) -> Tensor")
    assert (local.derived("gradient", "x"), local.derived("gradient", "x_")) == ("grad_x_", "grad_x__")
    assert (local.flag("y"), local.flag("y_")) == ("HAS_y_", "HAS_y__")
    settled = [name for (kind, _), name in local._names.items() if kind != "unpacked"]  # setup_context's own
    assert len(settled) == len(set(settled))


def test_setup_context_keeps_torchs_parameter_names():
    """torch calls setup_context(ctx=, inputs=, output=) by keyword: an argument of those names is unpacked
    under another one, while backward (called positionally) renames its own ctx."""
    local = locals_of("f(Tensor ctx, Tensor output) -> Tensor")
    assert (local.unpacked("ctx"), local.unpacked("output"), local.unpacked("x")) == ("ctx_", "output_", "x")
    assert local.ctx == "ctx_"


def test_an_argument_kept_on_ctx_does_not_overwrite_ctx_own_members():
    local = locals_of("f(Tensor x, float saved_tensors) -> Tensor")
    assert local.attribute("saved_tensors") == "saved_tensors_"
    assert local.attribute("x") == "x"


def test_the_same_op_always_gets_the_same_names():
    schema = "f(Tensor grad, Tensor out1, Tensor? out2=None) -> (Tensor, Tensor)"
    assert locals_of(schema)._names == locals_of(schema)._names


# -- the table: every local of the golden trees is in it


def python_bindings(function: ast.FunctionDef | ast.Lambda) -> set[str]:
    """The names a function binds: its parameters, assignment, loop and comprehension targets, and the
    attributes it sets on ctx (as `ctx.NAME`)."""
    arguments = function.args
    bound = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    bound |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
            bound.add(f"ctx.{node.attr}")
    return bound


def python_locals(repo: Path, package: str, stems: set[str]) -> dict[str, set[str]]:
    """Per file, the names bound inside the functions where an op's arguments are in scope: those of
    ops.py, _registration.py, reference.py, kernels/<op>.py (and its module-level names) and the
    per-op functions of _support.py."""
    found = {}
    for path in sorted((repo / package).rglob("*.py")):
        relative = path.relative_to(repo / package).as_posix()
        if relative in ("__init__.py", "kernels/__init__.py"):
            continue
        module = ast.parse(path.read_text())
        functions = [node for node in ast.walk(module) if isinstance(node, (ast.FunctionDef, ast.Lambda))]
        if relative == "_support.py":  # the per-op allocators of custom kernels; the rest is fixed
            functions = [f for f in functions if isinstance(f, ast.FunctionDef) and f.name in {f"{s}_output" for s in stems}]
        bound = set().union(*map(python_bindings, functions)) if functions else set()
        if relative.startswith("kernels/"):
            bound |= {t.id for node in module.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
        found[relative] = bound
    return found


# A C++ declaration of a parameter, member or local: its type, then its name before , ) ; = or (.
CPP_DECLARATION = re.compile(
    r"(?:^|[(,]\s*|\n\s+)(?:const\s+)?(?:Tensor|std::optional<Tensor>|KernelCall|Launch|acc_t|bool|double|int64_t)"
    r"&?\s+(\w+)\s*(?=[,);=]|\(\")"
)
TEMPLATE_PARAMETER = re.compile(r"template <typename (\w+)>")


def cpp_locals(repo: Path, package: str, namespace: str) -> dict[str, set[str]]:
    """Per file, the names declared in the ops' own C++: functors, host functions and CUDA launchers
    (the headers and helpers written once hold no name of the user)."""
    found = {}
    starts = {"csrc/ops.cpp": f"namespace {namespace}::cpu {{", "csrc/cuda/ops.cpp": f"namespace {namespace}::cuda {{",
              "csrc/cuda/kernels.cu": f"namespace {namespace}::cuda {{"}
    for relative, start in starts.items():
        path = repo / package / relative
        if path.is_file():
            text = path.read_text().partition(start)[2]
            found[relative] = set(CPP_DECLARATION.findall(text)) | set(TEMPLATE_PARAMETER.findall(text))
    return found


def table_names(package) -> set[str]:
    """What names.py's tables allow in a package: its arguments, the generated locals, the names derived
    from an argument, output, op or index, and the names the generated code cannot rename."""
    args = {a.name for op in package.ops for a in (*op.args, *op.kernel_args)}  # with a `split` argument's halves
    args |= {name for op in package.ops for name in getattr(op.body, "stat_names", ())}  # a normalisation's statistics
    fillers = args | {o for op in package.ops for o in op.output_names} | {op.stem for op in package.ops}
    fillers |= {w.name for op in package.ops for w in op.writes if w.arg is None}  # a split gradient's halves
    fillers |= {"", *map(str, range(8))}
    allowed = args | set(names.PYTHON_LOCALS) | set(names.CPP_LOCALS) | set(names.SETUP_CONTEXT_PARAMETERS)
    allowed |= set(names.VMAP_RULE_PARAMETERS)
    allowed |= names.CPP_TYPE_NAMES | {pattern.format(f) for pattern in names.DERIVED_NAMES.values() for f in fillers}
    return allowed | {f"ctx.{name}" for name in allowed}


def unknown(bound: set[str], allowed: set[str]) -> set[str]:
    """The bound names that are neither allowed nor an allowed name with `_` appended (a rename)."""
    stems = {name.rstrip("_") for name in allowed}
    return {name for name in bound if name not in allowed and name.rstrip("_") not in stems}


def check_locals(repo: Path, spec: Path) -> dict[str, set[str]]:
    package = load_spec(spec)
    bound = python_locals(repo, package.name, {op.stem for op in package.ops})
    bound.update(cpp_locals(repo, package.name, package.namespace))
    assert any(bound.values())
    allowed = table_names(package)
    return {path: names_ for path, names_ in ((p, unknown(b, allowed)) for p, b in bound.items()) if names_}


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_every_local_of_the_golden_trees_is_in_the_table(example):
    assert check_locals(GOLDEN / example, EXAMPLES / f"{example}.yaml") == {}


def test_the_locals_check_sees_a_local_missing_from_the_table(tmp_path):
    repo = generate(EXAMPLES / "rows.yaml", tmp_path / "repo")
    launcher = repo / "krows/kernels/rowsum.py"
    launcher.write_text(launcher.read_text().replace("    n_rows, n_cols, strides = layout\n", "    n_rows, n_cols, strides = width = layout\n"))
    cpp = repo / "krows/csrc/ops.cpp"
    assert check_locals(repo, EXAMPLES / "rows.yaml") == {"kernels/rowsum.py": {"width"}} and not cpp.exists()
    fused = generate(EXAMPLES / "fused.yaml", tmp_path / "fused")
    ops = fused / "kfused/csrc/ops.cpp"
    ops.write_text(ops.read_text().replace("  Tensor out = call.output();", "  Tensor out = call.output();\n  bool done = true;"))
    assert check_locals(fused, EXAMPLES / "fused.yaml") == {"csrc/ops.cpp": {"done"}}


# -- a spec whose arguments are named like the generated locals


@pytest.fixture(scope="module")
def colliding(tmp_path_factory) -> Path:
    return generate(COLLIDING, tmp_path_factory.mktemp("colliding") / "repo")


def test_colliding_names_generate_and_every_local_is_in_the_table(colliding):
    assert check_locals(colliding, COLLIDING) == {}


def test_colliding_names_stay_as_written_in_the_api_and_schemas(colliding):
    ops = (colliding / "kclash/ops.py").read_text()
    assert "def scale_into(\n    result: Tensor,\n    input: Tensor,\n    mask: Tensor | None = None,\n    grid: float = 1.0," in ops
    assert "def split(\n    grad: Tensor,\n    out1: Tensor,\n    out2: Tensor | None = None," in ops
    assert '"launch(Tensor x, Tensor launch) -> Tensor"' in (colliding / "kclash/csrc/ops.cpp").read_text()


def test_colliding_names_rename_the_generated_locals(colliding):
    """The generated side gives way: outputs, masks, flags, ctx, kernel, call and the launch helper."""
    split = (colliding / "kclash/kernels/split.py").read_text()
    assert "    out1_ = grad - tl.where(HAS_out2, out2, out1) * shape\n" in split
    assert "    return out0, out1_\n" in split
    scale_into = (colliding / "kclash/kernels/scale_into.py").read_text()
    assert "    mask_ = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]\n" in scale_into and "    if HAS_mask_:\n" in scale_into
    assert "    result_dense_ = result.contiguous()\n" in scale_into
    registration = (colliding / "kclash/_registration.py").read_text()
    assert "def _rowtotal_setup_context(ctx, inputs, output):\n    ctx_, output_, total, _, values = inputs\n" in registration
    assert "def _rowtotal_backward(ctx_, grad):\n" in registration and "    ctx = ctx_.ctx\n" in registration
    assert "def blend_launch(\n    kernel_,\n    kernel: Tensor," in (colliding / "kclash/kernels/blend.py").read_text()
    host = (colliding / "kclash/csrc/cuda/ops.cpp").read_text()
    assert '  KernelCall call_("kclash::pair", {call, bias});\n' in host
    assert "  kclash::launch(call, kernels::launch);\n" in host  # the op and an argument are named launch
    assert "bool has_bias;\n  bool has_bias_;\n" in (colliding / "kclash/csrc/cuda/kernels.cu").read_text()


def test_colliding_names_python_passes_ruff_and_compiles(colliding):
    python_files = sorted(str(path.relative_to(colliding)) for path in colliding.rglob("*.py"))
    for path in python_files:
        compile((colliding / path).read_text(), path, "exec")
    for command in (["check", "."], ["format", "--check", "--diff", *python_files]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command[:1], "--no-cache", "--isolated", *command[1:]],
                                cwd=colliding, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


@needs_nvcc
def test_colliding_names_cuda_kernels_compile(colliding, tmp_path):
    compile_cuda(colliding / "kclash/csrc/cuda/kernels.cu", tmp_path)


@needs_nvcc
def test_colliding_names_host_code_compiles(colliding, tmp_path):
    """csrc/ops.cpp and cuda/ops.cpp, -Wall -Werror, as test_compiled.py builds the torch_library route."""
    stub = tmp_path / "stub/c10/cuda/impl/cuda_cmake_macros.h"  # the CPU build of torch lacks it
    stub.parent.mkdir(parents=True)
    stub.write_text("#pragma once\n")
    includes = [*torch_includes(), f"-I{sysconfig.get_paths()['include']}", f"-I{tmp_path / 'stub'}"]
    for source in ["kclash/csrc/ops.cpp", "kclash/csrc/cuda/ops.cpp"]:
        result = subprocess.run(
            [NVCC, "-x", "c++", "-std=c++20", "-Xcompiler", "-Wall,-Werror", "-DUSE_CUDA", *includes,
             "-c", str(colliding / source), "-o", str(tmp_path / "ops.o")],
            capture_output=True, text=True, check=False,
        )
        assert result.returncode == 0, source + "\n" + result.stdout + result.stderr


@pytest.mark.slow
def test_suite_of_colliding_names_passes(tmp_path):
    """Built (C++ with -Werror) and installed, the generated suite passes on CPU."""
    repo = generate(COLLIDING, tmp_path / "repo")
    installed_suite_passes(repo, tmp_path / "site", "-rs", at_least=100)


# -- module-level names, unique in the package

# Ops named like another op's module-level names: op f's backward and setup_context functions, fake
# kernel, triton_op CPU op and CUDA launcher are `_f_backward`, ..., the handles of the others; and the
# handle of op `support` would be _registration.py's `_support` module.
NEIGHBOURS = ["f", "f_backward", "f_setup_context", "f_fake", "f_cpu", "f_cuda", "support"]


def neighbours_spec(route: str) -> str:
    backends = "{cpu: cpp, cuda: cuda}" if route in ("torch_library", "stable_abi") else "{cpu: triton, cuda: triton}"
    ops = "".join(f"""\
  - schema: "{name}(Tensor x) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {{shape: x.shape}}
""" + ("" if name == "f_backward" else '    backward:\n      x: "grad * 2"\n') for name in NEIGHBOURS)
    return f"kopgen: 1\npackage: kfnames\ndefaults:\n  registration: {route}\n  backends: {backends}\nops:\n{ops}"


def module_level_bindings(module: ast.Module) -> list[str]:
    """Every name a module binds at its top level (defs, classes, assignments, imports), once per binding."""
    bound = []
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.append(node.name)
        elif isinstance(node, ast.Assign):
            bound += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound += [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    return bound


@pytest.mark.parametrize("route", ["custom_op", "library", "triton_op", "torch_library", "stable_abi"])
def test_ops_named_like_each_others_module_names_get_distinct_names(tmp_path, route):
    (tmp_path / "kopgen.yaml").write_text(neighbours_spec(route))
    repo = generate(tmp_path / "kopgen.yaml", tmp_path / "repo")
    for path in sorted(repo.rglob("*.py")):
        bound = module_level_bindings(ast.parse(path.read_text()))
        assert len(bound) == len(set(bound)), (path.name, sorted({n for n in bound if bound.count(n) > 1}))
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F811", "."],
                            cwd=repo, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    registration = (repo / "kfnames/_registration.py").read_text()
    # The handles keep their names; op f's own functions give way with a `_`.
    if route == "torch_library":  # its autograd is C++ (lang/cpp_autograd.py): no Python functions to rename
        assert "def _f_backward_(" not in registration and "def _f_setup_context_(" not in registration
        assert 'm.impl("f", &kfnames::autograd::kernels::f);' in (repo / "kfnames/csrc/ops.cpp").read_text()
    else:
        assert "torch.library.register_autograd(\n    \"kfnames::f\", _f_backward_, setup_context=_f_setup_context_\n)" \
            in registration
    assert "def _f_fake_(x):" in registration
    if route == "triton_op":
        assert "_f_cpu_ = torch.library.custom_op(\n    \"kfnames::_f_cpu\"," in registration
        assert '_f.register_kernel("cuda", _f_cuda_)' in registration
        assert '@torch.library.triton_op("kfnames::f_cpu", mutates_args=())\ndef _f_cpu(x: Tensor)' in registration
    if route in ("custom_op", "triton_op"):
        assert "\n_support_ = torch.library" in registration or "def _support_(" in registration
    assert "_support_ = torch.ops.kfnames.support.default" in (repo / "kfnames/ops.py").read_text()


@pytest.mark.parametrize("package", ["tests", "benchmarks", "conftest", "dist", "LICENSE", "kopgen"])
def test_a_package_named_like_the_repos_own_layout_is_refused(package):
    """`package: tests` was merged into the suite's folder, `conftest` broke pytest's imports, `dist` was
    left out of git, `LICENSE` failed as a write error."""
    spec = f'kopgen: 1\npackage: {package}\nops:\n  - schema: "f(Tensor x) -> Tensor"\n    compute: "x * 2"\n'
    with pytest.raises(SpecError) as caught:
        load_spec_text(spec, "kopgen.yaml")
    assert f"kopgen.yaml:2:10: error: package '{package}' would" in str(caught.value)
