"""The spec format, written once as a JSON Schema.

`kopgen schema` prints it for editors, and `check_format` walks a loaded YAML tree
against it. The walker understands only the JSON Schema keywords used below; it
exists (instead of the `jsonschema` package) because every message must point at a
YAML node and unknown keys must come with a "did you mean".
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

from .errors import Diagnostics
from .loader import Mapping, Node, Scalar, Sequence, describe_scalar, quote_hint
from .model import Autocast, Device, Language, Route
from .project import DEFAULT_LICENSE, DEFAULT_PYTHON, LICENSES

FORMAT_VERSION = 1
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
ROUTES = [route.value for route in Route]
CPU_KERNELS = [language.value for language in Language if Device.CPU in language.devices]
CUDA_KERNELS = [language.value for language in Language if Device.CUDA in language.devices]
DTYPES = ["float16", "bfloat16", "float32", "float64"]
TAGS = ["pt2_compliant_tag", "needs_fixed_stride_order", "cudagraph_unsafe"]
REDUCTIONS = ["sum", "mean", "max", "min"]
AUTOCASTS = [policy.value for policy in Autocast]

_STRING = {"type": "string"}
_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": 0}, "description": "a tensor shape"}
_FAKE = {
    "title": "fake",
    "type": "object",
    "properties": {"shape": _STRING, "dtype": _STRING, "strides": _STRING},
    "required": ["shape"],
    "additionalProperties": False,
}

# Existing functions bound as kernels: DEVICE -> "PATH:FUNCTION", PATH relative to the spec's folder.
_SOURCE = {
    "title": "source",
    "type": "object",
    "properties": {"cpu": _STRING, "cuda": _STRING},
    "additionalProperties": False,
    "minProperties": 1,
}

# How the tests draw one argument: a Tensor's own dtype and value bounds, or a scalar's fixed value.
_SAMPLE_ARG = {
    "title": "test argument",
    "type": "object",
    "properties": {
        "dtype": {**_STRING, "description": "a Tensor's own torch dtype (int64, bool, ...), kept in every sample"},
        "low": {"type": "number", "description": "a Tensor's values are drawn from [low, high)"},
        "high": {"type": "number"},
        "value": {"description": "a non-Tensor argument's value in every sample"},
        "shape": {**_STRING, "description": "a Tensor's shape from the other arguments, e.g. x.shape[:-1]"},
    },
    "additionalProperties": False,
    "minProperties": 1,
}

OP_PROPERTIES: dict[str, Any] = {
    "schema": {**_STRING, "description": "PyTorch function schema without namespace: name(args) -> returns"},
    "doc": {**_STRING, "description": "docstring of the generated Python function"},
    "compute": {
        "description": "pointwise op: an expression, a list (one per return) or {mutated_arg: expression}",
        "anyOf": [
            _STRING,
            {"type": "array", "items": _STRING, "minItems": 1},
            {"type": "object", "additionalProperties": _STRING, "minProperties": 1},
        ],
    },
    "split": {
        "title": "split",
        "description": "a Tensor argument's last dimension in halves, named for compute: {x: [gate, up]}",
        "type": "object",
        "additionalProperties": {"type": "array", "items": _STRING, "minItems": 2, "maxItems": 2},
        "minProperties": 1,
        "maxProperties": 1,
    },
    "reduce": {
        "title": "reduce",
        "description": "reduction over the last dimension",
        "type": "object",
        "properties": {"op": {"enum": REDUCTIONS}, "expr": _STRING},
        "required": ["op"],
        "additionalProperties": False,
    },
    "normalize": {
        "title": "normalize",
        "description": "row normalisation over the last dimension: statistics per row, then compute over the row",
        "type": "object",
        "properties": {
            "stats": {
                "type": "object",
                "description": "name -> expression with one reduction (sum, mean, max, min), in order",
                "additionalProperties": _STRING,
                "minProperties": 1,
            },
            "compute": {
                "description": "pointwise expression over the row, reading the statistics; {mutated_arg: expression}",
                "anyOf": [_STRING, {"type": "object", "additionalProperties": _STRING, "minProperties": 1}],
            },
        },
        "required": ["stats", "compute"],
        "additionalProperties": False,
    },
    "kernel": {
        "anyOf": [
            {"type": "string", "enum": ["custom"], "description": "user-written kernel bodies (skeletons, created once)"},
            {
                "title": "kernel",
                "type": "object",
                "description": "existing kernels bound per device; a device not bound gets a skeleton",
                "properties": {"source": _SOURCE},
                "required": ["source"],
                "additionalProperties": False,
            },
        ],
    },
    "reference": {
        "description": "PyTorch expression used as the test oracle; a mutating op's: {mutated_arg: expression, return: ...}",
        "anyOf": [_STRING, {"type": "object", "additionalProperties": _STRING, "minProperties": 1}],
    },
    "contiguous": {
        "description": "the Tensor arguments a `kernel: custom` op's kernel receives dense (default: all)",
        "type": "array",
        "items": _STRING,
        "uniqueItems": True,
    },
    "fake": {"anyOf": [_FAKE, {"type": "array", "items": _FAKE, "minItems": 1}]},
    "backward": {
        "title": "backward",
        "description": "Tensor argument -> derivative formula, or non_differentiable",
        "type": "object",
        "additionalProperties": _STRING,
    },
    "registration": {"enum": ROUTES},
    "backends": {
        "title": "backends",
        "type": "object",
        "properties": {"cpu": {"enum": CPU_KERNELS}, "cuda": {"enum": CUDA_KERNELS}},
        "additionalProperties": False,
        "minProperties": 1,
    },
    "dtypes": {"type": "array", "items": {"enum": DTYPES}, "minItems": 1, "uniqueItems": True},
    "tags": {"type": "array", "items": {"enum": TAGS}, "uniqueItems": True},
    "autocast": {
        "enum": AUTOCASTS,
        "description": "under torch.autocast: floating inputs cast to float32, to autocast's dtype, to the widest "
        "of them, or none (default by kind: compute promote, reduce and normalize fp32, kernel none)",
    },
    "tests": {
        "title": "tests",
        "type": "object",
        "properties": {
            "shapes": {
                "type": "array",
                "minItems": 1,
                "items": {"anyOf": [_SHAPE, {"type": "object", "additionalProperties": _SHAPE}]},
            },
            "atol": {"type": "number", "minimum": 0},
            "rtol": {"type": "number", "minimum": 0},
            "args": {
                "type": "object",
                "description": "argument name -> how the tests draw it",
                "additionalProperties": _SAMPLE_ARG,
            },
        },
        "additionalProperties": False,
    },
}

SPEC_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://kopgen.dev/schema/format-1.json",
    "title": "spec",
    "description": "A kopgen op spec (format 1)",
    "type": "object",
    "properties": {
        "kopgen": {"const": FORMAT_VERSION, "description": "format version"},
        "package": {"type": "string", "pattern": IDENTIFIER, "description": "generated import package"},
        "namespace": {"type": "string", "pattern": IDENTIFIER, "description": "torch.ops.<namespace>"},
        "version": _STRING,
        "description": _STRING,
        "license": {
            "enum": LICENSES,
            "default": DEFAULT_LICENSE,
            "description": "SPDX identifier of the LICENSE file and the license field; none: neither",
        },
        "authors": {
            "type": "array",
            "items": {**_STRING, "description": "Name, or Name <email>"},
            "uniqueItems": True,
            "description": "the package's authors (pyproject.toml) and the LICENSE's copyright holders",
        },
        "python": {**_STRING, "default": DEFAULT_PYTHON, "description": "the oldest Python supported, X.Y"},
        "repository": {**_STRING, "format": "uri", "description": "the project's URL (pyproject.toml, README)"},
        "defaults": {
            "title": "defaults",
            "type": "object",
            "properties": {k: v for k, v in OP_PROPERTIES.items() if k not in ("schema", "contiguous")},
            "additionalProperties": False,
        },
        "ops": {
            "type": "array",
            "minItems": 1,
            "items": {
                "title": "op",
                "type": "object",
                "properties": OP_PROPERTIES,
                "required": ["schema"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["kopgen", "package", "ops"],
    "additionalProperties": False,
}

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
}


def check_format(root: Node, diagnostics: Diagnostics) -> None:
    """Report every place where `root` does not follow SPEC_SCHEMA."""
    _check(root, SPEC_SCHEMA, "spec", diagnostics)


def _node_type(node: Node) -> str:
    if isinstance(node, Mapping):
        return "object"
    if isinstance(node, Sequence):
        return "array"
    value = node.value
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    return type(value).__name__  # bytes (!!binary), date, datetime: never text, whatever they print as


def _matches_type(node: Node, expected: str) -> bool:
    actual = _node_type(node)
    return actual == expected or (expected == "number" and actual == "integer")


def _yaml_float(text: str) -> str:
    """1e-5 as YAML 1.1 reads as a number: a dot in the mantissa and a signed exponent (1.0e-5)."""
    mantissa, exponent = re.split("[eE]", text)
    mantissa = mantissa if "." in mantissa else mantissa + ".0"
    return f"{mantissa}e{exponent if exponent[0] in '+-' else '+' + exponent}"


def _describe(node: Node) -> str:
    if isinstance(node, Scalar):
        return describe_scalar(node)
    return _TYPE_NAMES[_node_type(node)]


def _check(node: Node, schema: dict[str, Any], label: str, diagnostics: Diagnostics) -> None:
    if "anyOf" in schema:
        _check_any_of(node, schema["anyOf"], label, diagnostics)
        return
    expected = schema.get("type")
    if expected and not _matches_type(node, expected):
        hint = quote_hint(node) if expected == "string" and isinstance(node, Scalar) else ""
        if expected in ("number", "integer") and isinstance(node, Scalar) and isinstance(node.value, str) \
                and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", node.value):
            hint = f" (YAML reads {node.value} as text: write {_yaml_float(node.value)})"
        diagnostics.error(node.position, f"{label} must be {_TYPE_NAMES[expected]}, not {_describe(node)}{hint}")
        return
    if "const" in schema and not (isinstance(node, Scalar) and _same(node.value, schema["const"])):
        diagnostics.error(node.position, f"{label} must be {schema['const']!r}, not {_describe(node)}")
    if "enum" in schema:
        _check_enum(node, schema["enum"], label, diagnostics)
    if isinstance(node, Scalar):
        _check_scalar(node, schema, label, diagnostics)
    elif isinstance(node, Sequence):
        _check_sequence(node, schema, label, diagnostics)
    elif isinstance(node, Mapping):
        _check_mapping(node, schema, label, diagnostics)


def _same(value: Any, expected: Any) -> bool:
    return type(value) is type(expected) and value == expected


def _check_enum(node: Node, choices: list[str], label: str, diagnostics: Diagnostics) -> None:
    if isinstance(node, Scalar) and node.value in choices and isinstance(node.value, str):
        return
    message = f"{label} must be one of {', '.join(choices)}; got {_describe(node)}"
    if isinstance(node, Scalar):
        message += _did_you_mean(str(node.text), choices)
    diagnostics.error(node.position, message)


def _check_scalar(node: Scalar, schema: dict[str, Any], label: str, diagnostics: Diagnostics) -> None:
    pattern = schema.get("pattern")
    if pattern and not re.fullmatch(pattern, node.value):  # fullmatch: `$` lets a final newline through
        diagnostics.error(node.value_position, f"{label} must be an identifier (letters, digits, _), not {node.text!r}")
    if isinstance(node.value, float) and not math.isfinite(node.value) or _beyond_float(node.value, schema):
        # as in JSON, which has neither; an integer too large for a float fails where the tests convert it
        diagnostics.error(node.position, f"{label} must be a finite number, not {_short(node.text)}")
        return
    if "minimum" in schema and node.value < schema["minimum"]:
        diagnostics.error(node.position, f"{label} must be at least {schema['minimum']}, not {node.text}")


def _beyond_float(value: Any, schema: dict[str, Any]) -> bool:
    """An integer where a number is meant that no float holds (`atol: 1000...0`, 400 digits)."""
    if schema.get("type") != "number" or type(value) is not int:
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"


def _check_sequence(node: Sequence, schema: dict[str, Any], label: str, diagnostics: Diagnostics) -> None:
    minimum = schema.get("minItems", 0)
    if len(node.items) < minimum:  # a split's list needs two: "must not be empty" said nothing of [gate]
        diagnostics.error(node.position, f"{label} must not be empty" if minimum == 1 else
                          f"{label} needs {minimum} items, not {len(node.items)}")
    seen: set[Any] = set()
    for index, item in enumerate(node.items):
        if "items" in schema:
            _check(item, schema["items"], f"{label}[{index}]", diagnostics)
        if schema.get("uniqueItems") and isinstance(item, Scalar):
            if item.value in seen:
                diagnostics.error(item.position, f"{label} lists {item.text!r} twice")
            seen.add(item.value)


def _check_mapping(node: Mapping, schema: dict[str, Any], label: str, diagnostics: Diagnostics) -> None:
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    noun = schema.get("title", label)
    for key, (key_node, value) in node.entries.items():
        child = f"{label}.{key}" if label != "spec" else key
        if key in properties:
            _check(value, properties[key], child, diagnostics)
        elif extra is False:
            shown = f"'{key}'" if str(key).isprintable() else repr(key)  # no terminal escapes from the spec
            diagnostics.error(key_node.position, f"unknown key {shown} in {noun}{_did_you_mean(key, list(properties))}")
        elif isinstance(extra, dict):
            _check(value, extra, child, diagnostics)
    for key in schema.get("required", []):
        if key not in node.entries:
            diagnostics.error(node.position, f"{noun} is missing the required key '{key}'")
    if len(node.entries) < schema.get("minProperties", 0):
        diagnostics.error(node.position, f"{label} must not be empty")


def _check_any_of(node: Node, branches: list[dict[str, Any]], label: str, diagnostics: Diagnostics) -> None:
    # Pick the branch whose type fits the node, so the user gets that branch's message.
    for branch in branches:
        if _matches_type(node, branch.get("type", "")):
            _check(node, branch, label, diagnostics)
            return
    names = [_TYPE_NAMES[b["type"]] for b in branches]
    expected = ", ".join(names[:-1]) + " or " + names[-1]
    diagnostics.error(node.position, f"{label} must be {expected}, not {_describe(node)}")


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
