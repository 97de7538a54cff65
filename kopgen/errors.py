"""Diagnostics: every problem in a spec is reported at the YAML node it comes from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Position:
    """A place in a spec file; line and column are 1-based, as editors show them."""

    file: str
    line: int
    column: int

    def shifted(self, line: int, column: int) -> Position:
        """The position `line` lines and `column` columns further on (for text inside a scalar)."""
        if line == 0:
            return Position(self.file, self.line, self.column + column)
        return Position(self.file, self.line + line, column + 1)


@dataclass(frozen=True, order=True)
class Diagnostic:
    position: Position
    message: str
    severity: str = "error"  # or "warning": printed, but never stops a command nor changes its exit code

    def __str__(self) -> str:
        p = self.position
        return f"{p.file}:{p.line}:{p.column}: {self.severity}: {self.message}"


class SpecError(Exception):
    """A spec that cannot be generated; carries every diagnostic found, in file order."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = sorted(set(diagnostics))
        super().__init__("\n".join(map(str, self.diagnostics)))


class Diagnostics:
    """Collects errors across a stage so that the user sees all of them at once."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def error(self, position: Position, message: str) -> None:
        self.items.append(Diagnostic(position, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise SpecError(self.items)
