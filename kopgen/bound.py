"""Existing kernels bound to an op: `kernel: {source: {DEVICE: "PATH:FUNCTION"}}`, resolved and checked.

PATH is a file that exists when kopgen runs (it is the user's kernel, never written by kopgen), relative to
the spec's folder, which is the repo's root (`kopgen adopt` generates there). Every part of the entry is
checked at its node before it can reach generated code: PATH holds only portable file-name characters,
FUNCTION is an identifier, so no newline, quote or `*/` gets into an import, a header or setup.py.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .errors import Diagnostic
from .loader import Mapping
from .model import BUILTIN_DEFAULTS, BoundKernel, CustomKernel, Device, Language, Package, Route
from .names import CPP_KEYWORDS

if TYPE_CHECKING:
    from .resolve import OpResolver
    from .schema import FunctionSchema

_PATH = re.compile(r"[A-Za-z0-9_./-]+")  # POSIX's portable file-name characters, and /
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SUFFIXES = {Language.CPP: (".cpp", ".cc"), Language.CUDA: (".cu",)}
_MAX_BYTES = 10 * 1024 * 1024  # the textual search for FUNCTION reads at most this much
# The package's modules kopgen writes: a bound kernel is the user's file, never one of them.
_GENERATED_MODULES = ("__init__.py", "ops.py", "_registration.py", "_support.py", "reference.py", "kernels/__init__.py")


def bind_sources(resolver: OpResolver, body: CustomKernel | None, schema: FunctionSchema) -> CustomKernel | None:
    """`body` with the existing functions its `kernel: {source: ...}` binds; None where either has errors
    (the entries are checked even when the rest of the op has errors, so that all are reported at once)."""
    node = resolver.node.get("kernel")
    if not isinstance(node, Mapping):  # `kernel: custom`: skeletons only
        return body
    errors_before = len(resolver.diagnostics.items)
    bound = _resolve_sources(resolver, node.get("source"), schema)
    if body is None or len(resolver.diagnostics.items) > errors_before:
        return None
    return dataclasses.replace(body, bound=bound)


def _resolve_sources(resolver: OpResolver, source: Mapping, schema: FunctionSchema) -> tuple[BoundKernel, ...]:
    registration = resolver.resolve_registration()
    backends_node = resolver.setting("backends")
    backends = {k: v.value for k, (_, v) in backends_node.entries.items()} if backends_node else BUILTIN_DEFAULTS["backends"]
    if registration is Route.TRITON_OP:
        resolver.error(resolver.node.key_position("kernel"), "a triton_op launches its Triton kernel through "
                       "wrap_triton, which a bound function cannot receive; bind existing kernels on custom_op, "
                       "library, torch_library or stable_abi")
        return ()
    spec_dir = Path(source.position.file).parent
    bound = []
    for device, (key_node, value) in source.entries.items():
        if device not in backends:
            resolver.error(key_node.position, f"source binds a {device} kernel, but the op's backends have no {device} "
                           f"(backends: {', '.join(sorted(backends))})")
            continue
        language = Language(backends[device])
        path, _, function = value.value.rpartition(":")
        at = value.value_position
        if not _check_path(resolver, at, path, language, resolver.package, schema.name):
            continue
        if not _check_function(resolver, at.shifted(0, len(path) + 1), function, language):
            continue
        if _check_file(resolver, at, spec_dir, path, function, language, schema):
            bound.append(BoundKernel(Device(device), path, function))
    return tuple(sorted(bound))


def _check_path(resolver: OpResolver, at, path: str, language: Language, package: str, op: str) -> bool:
    """PATH's text: relative, inside the repo, of the suffix its kernel's language takes, no module kopgen writes
    (another op's kernel module included)."""
    example = "csrc/my_kernels.cu:my_kernel" if language.is_compiled else f"{package}/my_kernels.py:my_kernel"
    if not path:
        resolver.error(at, f"write a bound kernel as PATH:FUNCTION (e.g. {example})")
        return False
    if not _PATH.fullmatch(path):
        resolver.error(at, "a bound kernel's PATH holds letters, digits, '_', '-', '.' and '/' only "
                       f"(e.g. {example})")
        return False
    parts = PurePosixPath(path).parts
    if path.startswith("/"):
        resolver.error(at, f"'{path}' is absolute; write the path relative to the spec's folder (the repo's root)")
        return False
    if any(part in (".", "..") for part in path.split("/")) or "" in path.split("/"):
        resolver.error(at, f"'{path}' leaves the repo or is not a plain path; write it relative to the spec's "
                       "folder, without '.' or '..' parts")
        return False
    if language.is_compiled:
        if not path.endswith(_SUFFIXES[language]):
            wanted = " or ".join(_SUFFIXES[language])
            resolver.error(at, f"a {language} kernel is compiled from a {wanted} file, not '{path}'")
            return False
        return True
    modules = [part.removesuffix(".py") for part in parts[1:]]
    if parts[0] != package or not path.endswith(".py") or len(parts) < 2:
        resolver.error(at, f"a {language} kernel is a Python function in a .py file inside the package "
                       f"folder ({package}/), which the operator imports; not '{path}'")
        return False
    if not all(_IDENTIFIER.fullmatch(m) and not keyword.iskeyword(m) for m in modules):
        resolver.error(at, f"'{path}' cannot be imported as a module: each folder and the file name must be "
                       "a Python identifier")
        return False
    if "/".join(parts[1:]) in _GENERATED_MODULES:
        resolver.error(at, f"'{path}' is a module kopgen writes; bind a function of a file of yours")
        return False
    other_op = modules[-1] if modules[:-1] == ["kernels"] else None
    if other_op in resolver.own_ops and other_op != op:
        resolver.error(at, f"'{path}' is op {other_op}'s kernel module, which kopgen writes (or its skeleton); bind a "
                       "function of a file of yours")
        return False
    return True


def _check_function(resolver: OpResolver, at, function: str, language: Language) -> bool:
    """FUNCTION: an identifier of the kernel's language, which generated code can name."""
    what = "C++" if language.is_compiled else "Python"
    if not _IDENTIFIER.fullmatch(function):
        resolver.error(at, f"a bound kernel's FUNCTION must be a {what} identifier of at most 64 characters, "
                       f"not {function!r}")
        return False
    if (keyword.iskeyword(function) or keyword.issoftkeyword(function)) if what == "Python" else function in CPP_KEYWORDS:
        resolver.error(at, f"'{function}' is a {what} keyword, not a function name")
        return False
    return True


def _check_file(resolver: OpResolver, at, spec_dir: Path, path: str, function: str, language: Language,
                schema: FunctionSchema) -> bool:
    """PATH exists beside the spec, inside its folder, and (textually) defines or declares FUNCTION; a Python
    FUNCTION takes the arguments torch calls the op's kernel with."""
    file = spec_dir / path
    if not file.is_file() or not file.resolve().is_relative_to(spec_dir.resolve()):
        where = "is not a file" if file.exists() else "does not exist"
        resolver.error(at, f"'{path}' {where} in the spec's folder: a bound kernel is an existing file of "
                       "yours, its path relative to the spec")
        return False
    text = read_source(file)
    pattern = rf"(?<![\w:.]){function}\s*\(" if language.is_compiled else rf"^[ \t]*def[ \t]+{function}[ \t]*\("
    if not re.search(pattern, text, re.MULTILINE):
        form = f"{function}(...)" if language.is_compiled else f"def {function}(...)"
        resolver.error(at.shifted(0, len(path) + 1), f"'{path}' has no {form}: bind a function the file defines")
        return False
    if not language.is_compiled and (problem := _python_call_problem(text, function, schema)):
        resolver.error(at.shifted(0, len(path) + 1), f"'{path}': def {function} {problem}")
        return False
    return True


def read_source(file: Path) -> str:
    """A bound file's text, its first _MAX_BYTES: kopgen searches it, never compiles or runs it."""
    with open(file, "rb") as handle:
        return handle.read(_MAX_BYTES).decode("utf-8", errors="replace")


def _python_call_problem(text: str, function: str, schema: FunctionSchema) -> str | None:
    """Why torch's call of the op's kernel (the schema's positional arguments by position, its keyword-only
    ones by name) cannot reach the module-level `def FUNCTION`, or None (also where the file does not parse:
    kopgen reads it, never runs it, and Python's import will say more)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not found:
        return None
    params = found[-1].args  # the last definition is the one the module keeps
    positional = [*params.posonlyargs, *params.args]
    passed = [a.name for a in schema.positional]
    if len(positional) < len(passed) and params.vararg is None:
        return (f"takes {len(positional)} positional parameter{'s' * (len(positional) != 1)}; torch calls it with "
                f"the op's {len(passed)} ({', '.join(passed)})")
    required = len(positional) - len(params.defaults)
    if required > len(passed):
        return f"requires {required} positional arguments; torch passes the op's {len(passed)} ({', '.join(passed)})"
    by_name = {p.arg for p in positional[len(passed):] if p not in params.posonlyargs} | {p.arg for p in params.kwonlyargs}
    keywords = [a.name for a in schema.kwarg_only]
    if missing := [k for k in keywords if k not in by_name and params.kwarg is None]:
        return f"takes no parameter {missing[0]}, which torch passes by name (the op's keyword-only argument)"
    unknown = [p.arg for p, default in zip(params.kwonlyargs, params.kw_defaults, strict=True)
               if default is None and p.arg not in keywords]
    if unknown:
        return f"requires the keyword argument {unknown[0]}, which the op's schema does not have"
    return None


def generated_path_errors(root: Mapping, package: Package, planned: dict[str, tuple[str, str | None]]) -> list[Diagnostic]:
    """Bound paths that are files kopgen writes, from the resolved package's plan (`planned`: path -> (owner,
    the op whose file it is)): a file kopgen rewrites (csrc/ops.cpp, a backward kernel's module), which setup.py
    would compile twice or `update` overwrite, or another op's skeleton. An op's own skeleton stays bindable
    (in `kopgen adopt` it is the user's file, kept as it is)."""
    found = []
    spec_ops = [op for op in package.ops if not op.backward_of]  # less the backward kernels kopgen adds
    for node, op in zip(root.get("ops").items, spec_ops, strict=True):
        kernel = node.get("kernel")
        source = kernel.get("source") if isinstance(kernel, Mapping) else None
        for _, value in source.entries.values() if isinstance(source, Mapping) else ():
            path = value.value.rpartition(":")[0]
            owner, of_op = planned.get(path, (None, None))
            if owner is None or (owner == "user" and of_op == op.name):
                continue
            whose = "" if of_op is None else f" (op {of_op}'s kernel{' skeleton' if owner == 'user' else ''})"
            found.append(Diagnostic(value.value_position, f"'{path}' is a file kopgen writes{whose}; bind a "
                                                          "function of a file of yours"))
    return found
