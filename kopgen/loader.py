"""Load a spec file into a tree of YAML nodes that remember where they came from.

PyYAML's composer gives every node its start mark; we build our own small tree on top
of it (instead of plain dicts) so that every later error can point at FILE:LINE:COL,
and so that duplicate keys are reported (PyYAML would silently keep the last one).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import yaml

from .errors import Diagnostic, Diagnostics, Position, SpecError

try:  # the C composer is several times faster and keeps the same marks
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Loader = yaml.SafeLoader

# A spec has a few hundred nodes (the examples: 40 to 150). Aliases can make a small file expand to billions
# ("billion laughs"); building stops past this many nodes, counted after expansion.
MAX_NODES = 50_000


@dataclass(frozen=True)
class Scalar:
    position: Position
    value: Any  # str, int, float, bool, None, bytes (!!binary) or a date/datetime, typed by YAML's rules
    text: str  # the scalar as written, without quotes
    quoted: bool

    @property
    def value_position(self) -> Position:
        """Where the text starts: after the opening quote of a quoted scalar."""
        return self.position.shifted(0, 1) if self.quoted else self.position


@dataclass(frozen=True)
class Mapping:
    position: Position
    entries: dict[str, tuple[Scalar, Node]]  # key text -> (key node, value node), in file order

    def get(self, key: str) -> Node | None:
        entry = self.entries.get(key)
        return entry[1] if entry else None

    def key_position(self, key: str) -> Position:
        return self.entries[key][0].position


@dataclass(frozen=True)
class Sequence:
    position: Position
    items: tuple[Node, ...]


Node = Scalar | Mapping | Sequence


def describe_scalar(node: Scalar) -> str:
    """A scalar as an error message names it: its text, and its type where YAML read it as one that is not text."""
    if node.value is None:
        return "nothing"
    if isinstance(node.value, bytes):
        return "binary data (!!binary)"
    if isinstance(node.value, datetime.date):  # datetime too: YAML reads 2001-12-14 as a timestamp
        return f"a timestamp {node.text}"
    return repr(node.text)


def quote_hint(node: Scalar) -> str:
    """How to make `node` a string, where quoting does it."""
    return "" if node.value is None or isinstance(node.value, bytes) else f'; quote it: "{node.text}"'


def plain(node: Node) -> Any:
    """The node as plain Python data (dicts, lists, scalars), positions dropped."""
    if isinstance(node, Scalar):
        return node.value
    if isinstance(node, Sequence):
        return [plain(item) for item in node.items]
    return {key: plain(value) for key, (_, value) in node.entries.items()}


def load_yaml(text: str, filename: str) -> Node:
    """Parse `text`; raise SpecError for YAML syntax errors and duplicate keys."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "invalid YAML"
        position = Position(filename, mark.line + 1, mark.column + 1) if mark else Position(filename, 1, 1)
        raise SpecError([Diagnostic(position, f"invalid YAML: {problem}")]) from None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (NUL, control characters)
        line = text.count("\n", 0, error.position) + 1
        column = error.position - text.rfind("\n", 0, error.position)
        message = f"invalid YAML: character #x{error.character:04x}: {error.reason}"
        raise SpecError([Diagnostic(Position(filename, line, column), message)]) from None
    except yaml.YAMLError as error:
        first_line = str(error).splitlines()[0] if str(error) else "invalid YAML"
        raise SpecError([Diagnostic(Position(filename, 1, 1), f"invalid YAML: {first_line}")]) from None
    if root is None:
        raise SpecError([Diagnostic(Position(filename, 1, 1), "the spec is empty")])
    diagnostics = Diagnostics()
    tree = _Builder(filename, diagnostics).build(root)
    diagnostics.raise_if_any()
    return tree


class _Builder:
    def __init__(self, filename: str, diagnostics: Diagnostics):
        self.filename = filename
        self.diagnostics = diagnostics
        self.constructor = yaml.constructor.SafeConstructor()
        self.built = 0  # nodes built so far; an alias counts its node again, as it is expanded again
        self.open: set[int] = set()  # the YAML nodes being built: a node among them is its own descendant

    def position(self, node: yaml.Node) -> Position:
        return Position(self.filename, node.start_mark.line + 1, node.start_mark.column + 1)

    def build(self, node: yaml.Node, depth: int = 0) -> Node:
        position = self.position(node)
        self.built += 1
        if self.built > MAX_NODES:  # raised at once: going on is what costs minutes and gigabytes
            self.diagnostics.error(position, f"the YAML expands to more than {MAX_NODES} nodes (aliases of aliases?)")
            raise SpecError(self.diagnostics.items)
        if depth > 100:  # a spec is shallow; this only stops pathological input
            self.diagnostics.error(position, "the YAML nests too deeply")
            return Scalar(position, None, "", False)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, position)
        if id(node) in self.open:  # `&a [*a]`: yaml.compose gives a node that contains itself
            self.diagnostics.error(position, "this node contains an alias of itself")
            return Scalar(position, None, "", False)
        self.open.add(id(node))
        try:
            return self.collection(node, position, depth)
        finally:
            self.open.discard(id(node))

    def scalar(self, node: yaml.ScalarNode, position: Position) -> Scalar:
        try:
            value = self.constructor.construct_object(node)
        except yaml.constructor.ConstructorError as error:
            if node.tag == "tag:yaml.org,2002:merge":  # `<<: *op`, which kopgen's loader does not expand
                self.diagnostics.error(position, "YAML merge keys (`<<: *anchor`) are not supported: write the keys "
                                                 "out, or put the shared ones under `defaults:`")
            else:
                self.diagnostics.error(position, f"invalid YAML value: {error.problem}")
            value = node.value
        except (ValueError, KeyError, AttributeError):  # what PyYAML raises for `!!int abc`, `!!bool maybe`, ...
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            text = node.value if len(node.value) <= 40 else node.value[:40] + "..."  # a 5000-digit int, say
            self.diagnostics.error(position, f"invalid YAML value: {text!r} is not a valid {tag}")
            value = node.value
        return Scalar(position, value, node.value, node.style in ("'", '"'))

    def collection(self, node: yaml.Node, position: Position, depth: int) -> Node:
        if isinstance(node, yaml.SequenceNode):
            return Sequence(position, tuple(self.build(item, depth + 1) for item in node.value))
        entries: dict[str, tuple[Scalar, Node]] = {}
        for key_node, value_node in node.value:
            key = self.build(key_node, depth + 1)
            if not isinstance(key, Scalar):
                self.diagnostics.error(key.position, "keys must be plain strings")
                continue
            if not isinstance(key.value, str):
                self.diagnostics.error(key.position, f"keys must be strings, not {describe_scalar(key)}{quote_hint(key)}")
                continue
            if key.value in entries:
                first = entries[key.value][0].position
                self.diagnostics.error(
                    key.position, f"duplicate key '{key.value}' (first defined at line {first.line})"
                )
                continue
            entries[key.value] = (key, self.build(value_node, depth + 1))
        return Mapping(position, entries)
