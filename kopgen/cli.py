"""The `kopgen` command line: a thin shell over kopgen's public API."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .errors import SpecError
from .format import SPEC_SCHEMA
from .pipeline import generate, load_spec
from .report import describe_plan
from .writer import OutputError

EXIT_BAD_SPEC = 2


def _fail(error: Exception) -> None:
    click.echo(str(error), err=True)
    sys.exit(EXIT_BAD_SPEC)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kopgen")
def main() -> None:
    """Turn a YAML op spec into a complete, tested PyTorch operator package."""


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(path_type=Path), help="Folder to create (default: the package name).")
def new(spec: Path, output: Path | None) -> None:
    """Create a new operator repo from SPEC."""
    try:
        target = generate(spec, output)
    except (SpecError, OutputError) as error:
        _fail(error)
    click.echo(f"created {target}")


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
def check(spec: Path) -> None:
    """Validate SPEC and print the resolved plan; write nothing."""
    try:
        package = load_spec(spec)
    except SpecError as error:
        _fail(error)
    click.echo(describe_plan(package, str(spec)), nl=False)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    click.echo(json.dumps(SPEC_SCHEMA, indent=2))
