"""Count the logic in kopgen's templates: branches, loops, assignments, arithmetic, string tests.

Templates should only print; every decision belongs to the model. This prints one row per
template (and a total) from Jinja's own lexer, so strings and comments are never miscounted:

    python benchmarks/template_logic.py
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
COLUMNS = ("if", "for", "set", "macro", "arith", "length", "in_str", "concat")
ARITHMETIC = {"add", "sub", "mul", "div", "floordiv", "mod", "pow"}


def count(source: str) -> Counter:
    """Logic tokens inside {% %} and {{ }} of one template."""
    counts: Counter = Counter()
    tokens = [token for token in jinja2.Environment().lex(source) if token[1] != "whitespace"]
    for index, (_, kind, value) in enumerate(tokens):
        if kind == "name" and value in ("if", "elif", "for", "set", "macro"):
            counts[value if value != "elif" else "if"] += 1
        elif kind == "operator" and value in ("+", "-", "*", "/", "//", "%", "**"):
            counts["arith"] += 1
        elif kind == "operator" and value == "~":
            counts["concat"] += 1
        elif kind == "name" and value == "length" and index and tokens[index - 1][2] == "|":
            counts["length"] += 1
        elif kind == "name" and value == "in":
            around = [tokens[i][1] for i in (index - 1, index + 1) if 0 <= i < len(tokens)]
            if "string" in around:
                counts["in_str"] += 1
    return counts


def main() -> int:
    rows = []
    for path in sorted(TEMPLATES.rglob("*")):
        if path.is_file() and path.suffix in (".j2", ".jinja"):
            rows.append((path.relative_to(TEMPLATES).as_posix(), count(path.read_text(encoding="utf-8"))))
    width = max(len(name) for name, _ in rows)
    print(f"{'template':<{width}}  " + "  ".join(f"{c:>6}" for c in COLUMNS))
    total: Counter = Counter()
    for name, counts in rows:
        total.update(counts)
        print(f"{name:<{width}}  " + "  ".join(f"{counts[c]:>6}" for c in COLUMNS))
    print(f"{'total':<{width}}  " + "  ".join(f"{total[c]:>6}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
