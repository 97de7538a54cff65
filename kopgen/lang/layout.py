"""Python source laid out as `ruff format` lays it out with its defaults, for the Python and Triton translations.

The generated repo carries no formatter settings, so its Python follows ruff's defaults: lines of at
most 88 columns, double quotes, and brackets split the way ruff splits them (`statement`, `wrap`).
This is Black's right-hand split, which ruff follows for the statements kopgen writes (calls,
assignments, returns, collections, and the expressions of specs inside them); the golden trees and
random specs are checked against `ruff format --check` (tests/test_generate.py, tests/test_fuzz.py).
A method chain that does not fit its line takes ruff's fluent layout (a line for each call after the
first: `_fluent_dots`). Not covered: ruff's splits inside an operand's brackets; a spec expression long
enough to need them can come out as ruff would not format it (the code is the same).
"""

from __future__ import annotations

import ast
import io
import itertools
import keyword
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

LINE_LENGTH = 88  # ruff format's default


def literal(value: object) -> str:
    """`value` as Python source, with ruff's quotes: `("cpu", "cuda")`, `"kbook::muladd"`."""
    if isinstance(value, Enum):  # a Device, Route, ...: its value
        return literal(value.value)
    if isinstance(value, str) and type(value) is str:
        return _string(value)
    if isinstance(value, tuple):
        items = [literal(item) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    return repr(value)


def _string(text: str) -> str:
    """A string literal in double quotes, unless the text holds more double quotes than single ones (as ruff)."""
    quote = "'" if text.count('"') > text.count("'") else '"'
    escaped = repr(text)[1:-1]  # escapes backslashes, control characters and the quote repr chose
    if repr(text)[0] == "'":
        escaped = escaped.replace("\\'", "'")
    else:
        escaped = escaped.replace('\\"', '"')
    return quote + escaped.replace(quote, "\\" + quote) + quote


def requote(source: str) -> str:
    """A Python literal (a schema default) with ruff's quotes: `'mean'` becomes `"mean"`, and a Device's
    `torch.device('cpu')` `torch.device("cpu")`."""
    device = "torch.device("
    if source.startswith(device) and source.endswith(")"):
        return f"{device}{requote(source[len(device) : -1])})"
    value = ast.literal_eval(source) if source[:1] in "'\"(" else None
    return literal(value) if isinstance(value, (str, tuple)) else source


def wrap(head: str, items: Sequence[str], tail: str = ")", indent: int = 0, explode: bool = False) -> str:
    """`head` (ending in an opening bracket), the items and `tail` as one statement, laid out as ruff does
    (`statement`); with a magic trailing comma, which keeps one item per line, where `explode`.
    A `def` splits at its parameters (Black's left-hand split): on one line where they fit, else
    one per line."""
    if not head.startswith("def "):
        return statement(f"{head}{', '.join(items)}{',' if explode and items else ''}{tail}", indent)
    return _device_defaults_allowed(_define(head, items, tail, indent, explode))


def _define(head: str, items: Sequence[str], tail: str, indent: int, explode: bool) -> str:
    one_line = f"{head}{', '.join(items)}{tail}"
    if indent + len(one_line) <= LINE_LENGTH and not explode:
        return one_line
    pad, inner = " " * indent, " " * (indent + 4)
    joined = ", ".join(items)
    # (A comment among the parameters splits them one a line: a Device default's pragma does.)
    if not explode and indent + 4 + len(joined) <= LINE_LENGTH and "torch.device(" not in joined:
        return f"{head}\n{inner}{joined}\n{pad}{tail}"
    return head + "\n" + "".join(f"{inner}{item},\n" for item in items) + pad + tail


def _device_defaults_allowed(define: str) -> str:
    """A `def` whose defaults include a schema's `Device` default (`torch.device("cpu")`): ruff's B008 (on by
    default) forbids calls in defaults, and does not know that a torch.device is immutable; each line with
    one says so (ruff format leaves such pragma comments out of a line's length)."""
    if "torch.device(" not in define:
        return define
    return "\n".join(line + "  # noqa: B008" if "torch.device(" in line else line for line in define.split("\n"))


def operand(expression: str) -> str:
    """`expression` as the receiver of a method call: in parentheses unless it is a name, call,
    attribute or subscript."""
    node = ast.parse(expression, mode="eval").body
    atom = isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant))
    return expression if atom and not isinstance(getattr(node, "value", None), (int, float)) else f"({expression})"


def assign(target: str, value: str, indent: int) -> str:
    """`target = value` (or `return value`), laid out as `statement` does."""
    head = "return " if target == "return" else f"{target} = "
    return statement(head + value, indent)


# -- statements: Black's right-hand split, which ruff format follows
#
# A statement that does not fit is split at its last bracket whose opening line fits (trailing
# brackets are left whole where they must be), the bracket's content on lines of its own: on one
# line where it fits (one item per line in a collection literal, or after a magic trailing comma),
# else split at its delimiters of the lowest precedence, and each piece again. The value of an
# assignment or return is wrapped in parentheses where it has two delimiters of that precedence
# or no bracket of its own to split.

_BRACKETS = {"(": ")", "[": "]", "{": "}"}
_PRIORITY = {
    ",": 18, "if": 16, "else": 16, "and": 14, "or": 14,
    "<": 10, ">": 10, "==": 10, "!=": 10, "<=": 10, ">=": 10, "in": 10, "not in": 10, "is": 10, "is not": 10,
    "|": 9, "^": 8, "&": 7, "<<": 6, ">>": 6, "+": 5, "-": 5, "*": 4, "/": 4, "//": 4, "%": 4, "@": 4, "**": 1,
}
_COMPREHENSION = 20


@dataclass
class _Token:
    text: str
    start: int
    end: int
    kind: int
    depth: int = 0
    partner: int = -1  # the index of the matching bracket


class _Line:
    """One statement's tokens, and where each bracket closes."""

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[_Token] = []
        pending = None
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                continue
            name = tokenize.tok_name[tok.type]
            if name == "FSTRING_START":  # Python 3.12 splits f-strings: one token here
                pending = tok.start[1]
                continue
            if pending is not None:
                if name == "FSTRING_END":
                    self.tokens.append(_Token(text[pending:tok.end[1]], pending, tok.end[1], tokenize.STRING))
                    pending = None
                continue
            self.tokens.append(_Token(tok.string, tok.start[1], tok.end[1], tok.type))
        self._merge_keywords()
        stack: list[int] = []
        for index, token in enumerate(self.tokens):
            if token.text in _BRACKETS:
                token.depth = len(stack)
                stack.append(index)
            elif token.text in _BRACKETS.values():
                opening = stack.pop()
                token.depth, token.partner, self.tokens[opening].partner = len(stack), opening, index
            else:
                token.depth = len(stack)

    def _merge_keywords(self) -> None:
        """`not in` and `is not` as one operator."""
        merged: list[_Token] = []
        for token in self.tokens:
            if merged and (merged[-1].text, token.text) in (("not", "in"), ("is", "not")):
                merged[-1] = _Token(f"{merged[-1].text} {token.text}", merged[-1].start, token.end, tokenize.NAME)
            else:
                merged.append(token)
        self.tokens = merged

    def source(self, lo: int, hi: int, trailing_comma: bool = False) -> str:
        text = self.text[self.tokens[lo].start:self.tokens[hi - 1].end] if hi > lo else ""
        return text + "," if trailing_comma and not text.endswith(",") else text

    def magic(self, lo: int, hi: int) -> bool:
        """Whether a bracket in [lo, hi) holds a magic trailing comma, which keeps it split."""
        for index in range(lo + 1, hi):
            token = self.tokens[index]
            if token.text in _BRACKETS.values() and self.tokens[index - 1].text == ",":
                opening = token.partner
                one_tuple = token.text == ")" and not self.is_call(opening) and self.commas(opening + 1, index) == 1
                if not one_tuple:
                    return True
        return False

    def commas(self, lo: int, hi: int) -> int:
        """The commas at the range's own depth."""
        depth = self.tokens[lo].depth if lo < hi else 0
        return sum(1 for t in self.tokens[lo:hi] if t.text == "," and t.depth == depth)

    def is_call(self, opening: int) -> bool:
        """Whether a bracket opens a call's arguments or a subscript (not a tuple, list, dict or set)."""
        if opening == 0:
            return False
        before = self.tokens[opening - 1]
        return before.text in _BRACKETS.values() or (before.kind == tokenize.NAME and before.text not in _KEYWORDS) \
            or before.kind == tokenize.STRING

    def delimiters(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """(priority, index) of the delimiters at the range's own depth."""
        depth = self.tokens[lo].depth
        if self.tokens[lo].text == "for":  # a comprehension's clause: never split inside `for a, b in`
            return [(_COMPREHENSION, i) for i in range(lo + 1, hi)
                    if self.tokens[i].depth == depth and self.tokens[i].text in ("for", "if")]
        found = []
        comprehension = False
        for index in range(lo, hi):
            token = self.tokens[index]
            if token.depth != depth or token.kind == tokenize.STRING:
                continue
            if token.text == "for" and index > lo:
                comprehension = True
                found.append((_COMPREHENSION, index))
            elif token.text == "if" and comprehension:
                found.append((_COMPREHENSION, index))
            elif token.text in _PRIORITY and index > lo and not (token.text in "+-" and self._unary(index)):
                if token.text == "," and index == hi - 1:
                    continue  # a trailing comma delimits nothing
                found.append((_PRIORITY[token.text], index))
        return found

    def _unary(self, index: int) -> bool:
        before = self.tokens[index - 1]
        operand = before.kind in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING) and before.text not in _KEYWORDS
        return not (operand or before.text in _BRACKETS.values())


_KEYWORDS = frozenset({"if", "else", "and", "or", "not", "in", "is", "for", "return", "lambda", "not in", "is not"})


def statement(text: str, indent: int) -> str:
    """A one-line Python statement as ruff format lays it out at column `indent` (later lines indented
    from there; the first line is printed where the template puts it)."""
    if "\n" in text:  # already laid out: its tokens would be cut short, not split again
        raise ValueError(f"statement() lays out one line, got {text!r}")
    line = _Line(_hug_powers(text) if "**" in text else text)
    lines = _split(line, 0, len(line.tokens), indent, value_from=_value_start(line))
    return "\n".join(lines)[indent:]


def _hug_powers(text: str) -> str:
    """`x ** 2` as ruff writes it, `x**2`, where both operands are simple (a name, a number, a dotted name, the
    right one maybe negated); a unary minus before such a power takes parentheses, `-(x**2)`, as ruff adds."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _LAYOUT_TOKENS]
    edits = []  # (start, end, replacement) in the text's columns
    for i, token in enumerate(tokens):
        if token.string != "**" or token.type != tokenize.OP:
            continue
        first, last = _simple_before(tokens, i), _simple_after(tokens, i)
        if first is None or last is None:
            continue
        edits.append((tokens[i - 1].end[1], tokens[i + 1].start[1], "**"))
        before = tokens[first - 1] if first else None
        if before is not None and before.string == "-" and _is_unary(tokens, first - 1):
            edits += [(tokens[first].start[1], tokens[first].start[1], "("), (tokens[last].end[1], tokens[last].end[1], ")")]
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


_LAYOUT_TOKENS = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)


def _simple(token: tokenize.TokenInfo) -> bool:
    """A name (True, None too) or a number: what a simple power operand is made of."""
    if token.type == tokenize.NUMBER:
        return True
    return token.type == tokenize.NAME and (not keyword.iskeyword(token.string) or token.string in ("True", "False", "None"))


def _simple_before(tokens: list, power: int) -> int | None:
    """The index of the first token of the simple operand that ends before tokens[power], if it is one."""
    first = power - 1
    if first < 0 or not _simple(tokens[first]):
        return None
    while first >= 2 and tokens[first - 1].string == "." and tokens[first - 2].type == tokenize.NAME:
        first -= 2
    return None if first and tokens[first - 1].string == "." else first


def _simple_after(tokens: list, power: int) -> int | None:
    """The index of the last token of the simple operand that starts after tokens[power], if it is one."""
    last = power + 1
    if last < len(tokens) and tokens[last].string in ("-", "+"):
        last += 1
    if last >= len(tokens) or not _simple(tokens[last]):
        return None
    while last + 2 < len(tokens) and tokens[last + 1].string == "." and tokens[last + 2].type == tokenize.NAME:
        last += 2
    return None if last + 1 < len(tokens) and tokens[last + 1].string in ("(", "[", ".") else last


def _is_unary(tokens: list, index: int) -> bool:
    """Whether the +/- at tokens[index] is unary: at the start, after an operator, a bracket or a keyword."""
    if index == 0:
        return True
    before = tokens[index - 1]
    return before.type == tokenize.OP and before.string not in (")", "]", "}") or (
        before.type == tokenize.NAME and keyword.iskeyword(before.string) and before.string not in ("True", "False", "None"))


def _value_start(line: _Line) -> int | None:
    """Where the value of a `return` or an assignment starts: Black puts invisible parentheses around it."""
    tokens = line.tokens
    if tokens and tokens[0].text == "return":
        return 1
    return next((i + 1 for i, t in enumerate(tokens) if t.text == "=" and t.depth == 0), None)


def _fits(line: _Line, lo: int, hi: int, indent: int, extra: int = 0) -> bool:
    return indent + len(line.source(lo, hi)) + extra <= LINE_LENGTH and not line.magic(lo, hi)


def _split(line: _Line, lo: int, hi: int, indent: int, value_from: int | None = None, comma: bool = False) -> list[str]:
    """The tokens [lo, hi) as lines at `indent` (with a trailing comma where `comma`)."""
    pad = " " * indent
    if _fits(line, lo, hi, indent, int(comma and line.tokens[hi - 1].text != ",")):
        return [pad + line.source(lo, hi, comma)]
    if value_from is not None and value_from < hi and not _can_omit_parentheses(line, value_from, hi, indent):
        return _parenthesized(line, lo, value_from, hi, indent)
    split = _right_hand_split(line, lo, hi, indent, first_bracket=value_from or lo, comma=comma)
    if split is not None and value_from is not None and value_from < hi and len(split[0]) > LINE_LENGTH:
        # its head does not fit: the value in parentheses, where its own head fits there
        inner = _right_hand_split(line, value_from, hi, indent + 4, first_bracket=value_from, comma=False)
        if inner is not None and len(inner[0]) <= LINE_LENGTH:
            return _parenthesized(line, lo, value_from, hi, indent)
    if split is not None:
        return split
    if value_from is not None and value_from < hi and (line.delimiters(value_from, hi)
                                                       or _fits(line, value_from, hi, indent + 4)):
        return _parenthesized(line, lo, value_from, hi, indent)
    return [pad + line.source(lo, hi, comma)]  # nothing to split at, or parentheses would not help: left long


def _parenthesized(line: _Line, lo: int, value_from: int, hi: int, indent: int) -> list[str]:
    pad = " " * indent
    return [f"{pad}{line.source(lo, value_from)} (", *_inside(line, value_from, hi, indent + 4), f"{pad})"]


def _can_omit_parentheses(line: _Line, lo: int, hi: int, indent: int) -> bool:
    """Black's can_omit_invisible_parens: split the value at its own last bracket rather than wrap it."""
    delimiters = line.delimiters(lo, hi)
    if not delimiters:
        return len(_fluent_dots(line, lo, hi)) < 2  # a method chain goes in parentheses, to break at its dots
    top = max(priority for priority, _ in delimiters)
    if sum(1 for priority, _ in delimiters if priority == top) > 1:
        return False
    first, last = line.tokens[lo], line.tokens[hi - 1]
    # The first bracket can be split where what follows it fits.
    if first.text in _BRACKETS and first.partner < hi - 1 and indent + len(line.source(first.partner, hi)) <= LINE_LENGTH:
        return True
    if last.text in _BRACKETS.values():
        if last.partner == hi - 2:
            return False  # empty brackets cannot be split
        if last.text == "]" and last.partner > lo and _ends_operand(line.tokens[last.partner - 1].text):
            return False  # ruff splits no subscript outside parentheses: `a * x[...]` is wrapped instead
        openings = [i for i in range(lo, last.partner) if line.tokens[i].text in _BRACKETS]
        head = indent + len(line.source(0, last.partner + 1))
        return bool(openings) or head <= LINE_LENGTH
    return False


def _ends_operand(text: str) -> bool:
    """Whether a token ends an operand, so that a `[` after it opens a subscript (not a list)."""
    if text in (")", "]", "}") or text[-1] in "'\"":
        return True
    return (text[-1].isalnum() or text[-1] == "_") and not keyword.iskeyword(text)


def _right_hand_split(line: _Line, lo: int, hi: int, indent: int, first_bracket: int, comma: bool) -> list[str] | None:
    """Split at the last bracket whose opening line fits, omitting trailing brackets one by one; at the
    last bracket where none fits."""
    depth = line.tokens[lo].depth
    candidates = []
    for index in range(hi - 1, first_bracket - 1, -1):
        token = line.tokens[index]
        if token.depth != depth or token.text not in _BRACKETS.values():
            continue
        if candidates and indent + len(line.source(index, hi)) > LINE_LENGTH:
            break  # what would trail the split no longer fits on its line
        if first_bracket <= token.partner < index - 1:  # empty brackets cannot be split
            candidates.append(token.partner)
    for opening in candidates:
        head = line.source(lo, opening + 1)
        if indent + len(head) <= LINE_LENGTH:
            return _bracket_split(line, lo, opening, hi, indent, comma)
    return _bracket_split(line, lo, candidates[0], hi, indent, comma) if candidates else None


def _bracket_split(line: _Line, lo: int, opening: int, hi: int, indent: int, comma: bool) -> list[str]:
    pad = " " * indent
    closing = line.tokens[opening].partner
    head = pad + line.source(lo, opening + 1)
    tail = _split(line, closing, hi, indent, comma=comma) if closing < hi - 1 or comma else [pad + line.source(closing, hi)]
    body = _body(line, opening, indent + 4)
    return [head, *body, *tail]


def _body(line: _Line, opening: int, indent: int) -> list[str]:
    """The content of a bracket split onto lines of its own."""
    lo, hi = opening + 1, line.tokens[opening].partner
    call = line.is_call(opening)
    commas = line.commas(lo, hi)
    trailing = line.tokens[hi - 1].text == ","
    one_tuple = not call and line.tokens[opening].text == "(" and commas == 1 and trailing
    # Collection literals go one item per line, and so does anything with a magic trailing comma.
    if not one_tuple and (trailing or (commas and not call)):
        return _comma_split(line, lo, hi, indent)
    if _fits(line, lo, hi, indent):
        return [" " * indent + line.source(lo, hi)]
    return _inside(line, lo, hi, indent)


def _inside(line: _Line, lo: int, hi: int, indent: int, comma: bool = False) -> list[str]:
    """Tokens inside brackets: on one line, split at their delimiters, or at their last bracket."""
    if _fits(line, lo, hi, indent, int(comma)):
        return [" " * indent + line.source(lo, hi, comma)]
    if line.delimiters(lo, hi):
        return _delimiter_split(line, lo, hi, indent, comma=comma)
    if len(_fluent_dots(line, lo, hi)) >= 2:
        return _fluent_split(line, lo, hi, indent, comma)
    return _split(line, lo, hi, indent, comma=comma)


def _fluent_dots(line: _Line, lo: int, hi: int) -> list[int]:
    """Where ruff's fluent layout breaks a method chain: before each `.` at the chain's own depth that
    follows a call, a subscript or a parenthesized value (`x.abs()` stays one piece, `.amax(...)` starts
    the next). Ruff lays a chain out so where it has two such dots at least and does not fit its line."""
    depth = line.tokens[lo].depth
    return [i for i in range(lo + 1, hi) if line.tokens[i].text == "." and line.tokens[i].depth == depth
            and line.tokens[i - 1].text in (")", "]")]


def _fluent_split(line: _Line, lo: int, hi: int, indent: int, comma: bool) -> list[str]:
    """A method chain a piece a line (each laid out again where it does not fit); the comma after the last."""
    bounds = [lo, *_fluent_dots(line, lo, hi), hi]
    lines = []
    for index, (a, b) in enumerate(itertools.pairwise(bounds)):
        lines += _split(line, a, b, indent, comma=comma and index == len(bounds) - 2)
    return lines


def _delimiter_split(line: _Line, lo: int, hi: int, indent: int, comma: bool = False) -> list[str]:
    """Split at the delimiters of the lowest precedence (after commas, which end their lines; before
    operators, which start theirs), each piece laid out again; a comma after the last item."""
    delimiters = line.delimiters(lo, hi)
    top = max((priority for priority, _ in delimiters), default=None)
    if top is None:
        return _split(line, lo, hi, indent, comma=comma)
    if top == _PRIORITY[","]:
        return _comma_split(line, lo, hi, indent)
    cuts = [index for priority, index in delimiters if priority == top]
    bounds = [lo, *cuts, hi]
    lines = []
    for index, (a, b) in enumerate(itertools.pairwise(bounds)):
        lines += _inside(line, a, b, indent, comma=comma and index == len(bounds) - 2)
    return lines


def _comma_split(line: _Line, lo: int, hi: int, indent: int) -> list[str]:
    """One item per line, each ending in a comma (a magic trailing comma after the last)."""
    depth = line.tokens[lo].depth
    cuts = [i for i in range(lo, hi) if line.tokens[i].text == "," and line.tokens[i].depth == depth]
    bounds = [lo - 1, *cuts] + ([] if cuts and cuts[-1] == hi - 1 else [hi])
    lines = []
    for a, b in itertools.pairwise(bounds):
        lines += _inside(line, a + 1, b, indent, comma=True)
    return lines


def expression_comment(text: str) -> str:
    """An expression of the spec on one line of a generated comment, as Python writes it back: no newline,
    comment or trailing backslash of the spec's text can end the comment early or run into the next line."""
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except (SyntaxError, ValueError, RecursionError):  # kopgen checked it; whitespace alone, to be safe
        return " ".join(text.replace("\\", " ").split())
