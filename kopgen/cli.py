"""The `kopgen` command line: a thin shell over kopgen's public API."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from . import __version__
from .adopt import adopt
from .errors import SpecError
from .format import SPEC_SCHEMA
from .pipeline import SPEC_PATH, check_spec, generate
from .report import describe_plan
from .update import apply_update, diff, plan_update
from .vcs import init_repository
from .writer import OutputError, WriteError

EXIT_FAILED = 1  # the environment failed us: no permission, a full disk, another process in the way
EXIT_BAD_SPEC = 2  # a bad spec, or a bad use of the command
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report a SIGINT


def _fail(error: Exception | str, code: int = EXIT_BAD_SPEC) -> None:
    click.echo(str(error), err=True)
    sys.exit(code)


@contextmanager
def _reported() -> Iterator[None]:
    """Every error a command expects becomes its message and exit code, never a traceback."""
    try:
        yield
    except SpecError as error:  # FILE:LINE:COL: error: ..., one line per problem
        _fail(error)
    except WriteError as error:
        _fail(f"error: {error}", EXIT_FAILED)
    except OutputError as error:
        _fail(f"error: {error}")
    except OSError as error:
        _fail(f"error: {error}", EXIT_FAILED)


class _Main(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1; writes clean up on the way out
            click.echo("kopgen: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kopgen")
def main() -> None:
    """Turn a YAML op spec into a complete, tested PyTorch operator package."""


def _warn(warnings: list) -> None:
    """FILE:LINE:COL: warning: ..., one line each, before the command's own output; never an exit code."""
    for warning in warnings:
        click.echo(str(warning), err=True)


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", "output", type=click.Path(path_type=Path), help="Folder to create (default: the package name).")
@click.option("--here", is_flag=True, help="Generate into the folder that holds SPEC, which may be an existing "
              "repo: the same as `kopgen adopt SPEC`.")
@click.option("--no-git", is_flag=True, help="Do not run `git init` (run where the new repo is not inside a git repository).")
def new(spec: Path, output: Path | None, here: bool, no_git: bool) -> None:
    """Create a new operator repo from SPEC."""
    if here:
        if output is not None:
            _fail("error: --here generates into the folder that holds SPEC; it takes no -o")
        _adopt(spec)
        return
    with _reported():
        _warn(check_spec(spec)[1])
        target = generate(spec, output)
    click.echo(f"created {target}")
    if not no_git:
        click.echo(init_repository(target))


@main.command("adopt")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
def adopt_command(spec: Path) -> None:
    """Generate SPEC's repo into the folder that holds SPEC, an existing kernel repo or not: files of yours
    are kept as they are; nothing is written if a file stands where kopgen writes one of its own."""
    _adopt(spec)


def _adopt(spec: Path) -> None:
    with _reported():
        _warn(check_spec(spec)[1])
        adoption = adopt(spec)
    for path in sorted(adoption.writes):
        click.echo(f"wrote {path}")
    for path in adoption.kept:
        click.echo(f"kept {path} (yours, as it was)")
    if adoption.spec_copied_from:
        click.echo(f"kopgen update reads the spec from {SPEC_PATH} (a copy of {adoption.spec_copied_from}) from now on")
    click.echo(f"adopted {adoption.target}")


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
def check(spec: Path) -> None:
    """Validate SPEC and print the resolved plan; write nothing. Warns where a custom kernel's
    `fake` cannot match its `reference` (run on meta tensors, where torch is installed)."""
    with _reported():
        package, warnings = check_spec(spec, run_meta=True)
    _warn(warnings)
    click.echo(describe_plan(package, str(spec)), nl=False)


def _repo_error(error: Exception | str) -> None:
    """A repo `kopgen update` cannot work on (corrupt state, a folder where a file goes, ...): exit 2."""
    click.echo(f"error: {error}", err=True)
    sys.exit(EXIT_BAD_SPEC)


@main.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if anything would change (a CI drift gate).")
@click.option("--dry-run", is_flag=True, help="Print the unified diff of what would change; write nothing.")
@click.option("--force", is_flag=True, help="Overwrite hand-edited generated files and files kopgen never wrote "
              "that stand where it writes, after a backup in .kopgen/backup/N/; also recovers from a corrupt state.")
def update(directory: Path, check: bool, dry_run: bool, force: bool) -> None:
    """Regenerate DIRECTORY (default .) from its kopgen.yaml; your files are merged, never overwritten."""
    try:
        plan = plan_update(directory, force=force)
    except SpecError as error:
        _fail(error)
    except OutputError as error:
        _repo_error(error)
    _warn(check_spec(directory / SPEC_PATH)[1])  # the spec is valid: plan_update read it
    if check:
        for path in sorted(plan.writes):
            click.echo(f"would update {path}")
        for path in plan.deletes:
            click.echo(f"would delete {path}")
        for path in plan.hand_edited:
            click.echo(f"edited by hand: {path}")
        for path in plan.yours:
            click.echo(f"yours: {path} (kopgen did not write it and would overwrite it)")
        sys.exit(1 if plan.changes else 0)
    if dry_run:
        click.echo(diff(directory, plan), nl=False)
        return
    if plan.overwrites and not force:
        if plan.hand_edited:
            click.echo(f"error: kopgen's files were edited by hand: {', '.join(plan.hand_edited)}", err=True)
        if plan.yours:
            click.echo(f"error: files kopgen did not write stand where it writes: {', '.join(plan.yours)}", err=True)
        click.echo(diff(directory, plan, only=plan.overwrites), err=True, nl=False)
        click.echo("Move your change into kopgen.yaml or a file of yours (and your files out of kopgen's way); "
                   "`kopgen update --force` overwrites them after a backup in .kopgen/backup/N/.", err=True)
        sys.exit(1)
    try:
        saved = apply_update(directory, plan, force=force)
    except OutputError as error:
        _repo_error(error)
    except OSError as error:  # disk full, permissions: each file is old or new, and the state is written last
        _repo_error(f"the update stopped: {error}; every file is as it was or updated, and kopgen update "
                    "finishes the job once the cause is fixed")
    if saved:
        count = len(plan.overwrites)
        click.echo(f"backed up {count} file{'s' if count > 1 else ''} to {saved}")
    for path in sorted(plan.writes):
        click.echo(f"updated {path}")
    for path in plan.deletes + [p for p in plan.hand_edited if p not in plan.writes]:
        click.echo(f"deleted {path}")
    for path in plan.kept:
        click.echo(f"kept {path} (yours; its op is gone from kopgen.yaml)")
    if not plan.changes:
        click.echo("up to date")
    if plan.conflicts:
        click.echo(f"conflict: both you and kopgen changed the same lines of {', '.join(plan.conflicts)}; "
                   "resolve the <<<<<<< markers", err=True)
        sys.exit(1)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    click.echo(json.dumps(SPEC_SCHEMA, indent=2))
