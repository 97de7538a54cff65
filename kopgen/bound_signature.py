"""A bound C++ kernel's parameters against the declaration kopgen writes in kernels.h (a warning of `check`,
`new` and `update`): a function that differs, as kernel repos write theirs (vLLM's `torch::Tensor& positions`,
`std::optional<torch::Tensor> key` by value), is another overload, and the host function's call of the declared
one fails at import with an undefined symbol. Read from the file's text, never compiled: spellings of one type
(`torch::Tensor`, `at::Tensor`, `c10::optional`, a by-value `const int64_t`) count as one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from .bound import read_source
from .errors import Diagnostic, Position
from .lang.cpp_types import cpp_parameter
from .loader import Mapping
from .model import Op


def signature_warnings(node: Mapping, op: Op) -> Iterator[Diagnostic]:
    """A warning per bound C++ function whose parameters are not those kopgen declares."""
    source = node.get("kernel").get("source") if isinstance(node.get("kernel"), Mapping) else None
    for device in ("cpu", "cuda"):
        bound = op.bound_kernel(device)
        if bound is None or source is None or not bound.path.endswith((".cpp", ".cc", ".cu")):
            continue
        try:
            text = read_source(Path(source.position.file).parent / bound.path)
        except OSError:  # resolution checked it is there; gone since, the build will say so
            continue
        theirs = _parameters(text, bound.function)
        ours = [cpp_parameter(a.schema, op.registration) for a in op.args]
        if theirs is None or [_type(p) for p in theirs] == [_type(p) for p in ours]:
            continue
        at: Position = source.entries[device][1].value_position
        differ = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if _type(a) != _type(b)), None)
        what = (f"takes {len(theirs)} parameters, the op's kernel {len(ours)}" if differ is None
                else f"takes `{theirs[differ]}` where kernels.h declares `{ours[differ]}` (parameter {differ + 1})")
        yield Diagnostic(at, f"{bound.function} in '{bound.path}' {what}: write it as kernels.h declares it "
                             f"({', '.join(ours)}), or kopgen's call of it will not link (undefined symbol at import)",
                         "warning")


def _parameters(text: str, function: str) -> list[str] | None:
    """The parameters of the first definition of `function` in `text` (a body follows its `)`), or None."""
    for match in re.finditer(rf"(?<![\w:.]){function}\s*\(", text):
        depth, start = 1, match.end()
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        else:
            return None
        if re.match(r"\s*(const\s*)?(noexcept\s*)?\{", text[end + 1:]):
            return _split(re.sub(r"//[^\n]*|/\*.*?\*/", " ", text[start:end], flags=re.DOTALL))
    return None


def _split(parameters: str) -> list[str]:
    """Top-level comma-separated parameters (`std::tuple<a, b>` is one)."""
    found, depth, current = [], 0, ""
    for char in parameters:
        depth += {"<": 1, "(": 1, "[": 1, ">": -1, ")": -1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            found.append(current)
            current = ""
        else:
            current += char
    found.append(current)
    return [" ".join(p.split()) for p in found if p.strip() and p.strip() != "void"]


def _type(parameter: str) -> str:
    """A parameter's type, spelled one way: without its name and default, namespaces torch aliases
    dropped, a by-value parameter's top-level const dropped (neither changes the signature)."""
    text = re.sub(r"\s*=.*$", "", parameter)
    text = re.sub(r"\s*\b[A-Za-z_]\w*$", "", text) if re.search(r"[\w>&*]\s+[A-Za-z_]\w*$", text) else text
    text = re.sub(r"\b(?:torch|c10|at)::(?!stable::|headeronly::)|\bstd::(?=optional|string_view)", "", text)
    text = re.sub(r"\s*([&*<>,])\s*", r"\1", text).strip()
    return re.sub(r"^const\s+", "", text) if not text.endswith(("&", "*")) else text
