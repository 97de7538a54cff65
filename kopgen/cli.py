"""The `kopgen` command line: a thin shell over kopgen's public API."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import click

from . import __version__
from .adopt import adopt
from .errors import SpecError
from .format import SPEC_SCHEMA
from .model import Route
from .pipeline import SPEC_PATH, check_spec, generate
from .report import describe_plan
from .starter import KINDS, default_name, starter_spec
from .update import UpdatePlan, apply_update, diff, plan_update
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


def _example(*lines: str) -> str:
    """A command's help epilog: its example, kept as written (click's \\b stops the rewrapping)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" if line else "" for line in lines)


class _Main(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1; writes clean up on the way out
            click.echo("kopgen: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_example(
    "kopgen init kbook && kopgen new kopgen.yaml && cd kbook && bash ci.sh",
    "",
    "Shell completion (bash; zsh_source and fish_source for those shells), in ~/.bashrc:",
    '  eval "$(_KOPGEN_COMPLETE=bash_source kopgen)"',
))
@click.version_option(__version__, prog_name="kopgen")
def main() -> None:
    """Turn a YAML op spec into a complete, tested PyTorch operator package."""


def _warn(warnings: list) -> None:
    """FILE:LINE:COL: warning: ..., one line each, before the command's own output; never an exit code."""
    for warning in warnings:
        click.echo(str(warning), err=True)


@main.command(epilog=_example("kopgen new examples/muladd.yaml -o muladd_pkg"))
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


@main.command(epilog=_example("kopgen init kbook --kernel custom --route torch_library"))
@click.argument("name", required=False)
@click.option("--kernel", "kind", type=click.Choice(KINDS), default="compute", show_default=True,
              help="compute: kopgen writes the kernels from an expression; custom: you write them.")
@click.option("--route", type=click.Choice([route.value for route in Route]), default="custom_op", show_default=True,
              help="How the op is registered (the spec's registration).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("kopgen.yaml"),
              show_default=True, help="The spec file to write; never overwritten.")
def init(name: str | None, kind: str, route: str, output: Path) -> None:
    """Write a starter spec: one op, each key with its default and a comment.

    The package is NAME (default: the current folder's name); `kopgen new` takes the spec as it is."""
    name = name if name is not None else default_name(Path.cwd().name)
    try:
        text = starter_spec(name, kind, route)
    except SpecError as error:
        reasons = "; ".join(diagnostic.message for diagnostic in error.diagnostics)
        _fail(f"error: '{name}' cannot name the package: {reasons}")
    with _reported():
        try:
            with output.open("x", encoding="utf-8", newline="\n") as file:  # "x": an existing file stays as it is
                file.write(text)
        except FileExistsError:
            _fail(f"error: {output} exists; kopgen init never overwrites a file (write another with -o FILE)")
    click.echo(f"wrote {output}; `kopgen new {output}` generates the repo {name}/")


@main.command("adopt", epilog=_example("kopgen adopt kopgen.yaml   # in your kernel repo, beside its files"))
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


@main.command(epilog=_example("kopgen check kopgen.yaml"))
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


def _report_kept(directory: Path, plan: UpdatePlan) -> None:
    """The user's files of ops gone (or moved) that update kept, and whether setup.py, which compiles every C++ file
    of the user's in csrc/, still compiles one (its code moved into the new skeleton too, both define it)."""
    setup = (directory / "setup.py").read_text(encoding="utf-8") if (directory / "setup.py").is_file() else ""
    for path in plan.kept:
        where = PurePosixPath(path)
        suffix = ".cu" if where.suffix == ".cu" else ".cpp" if where.suffix in (".cpp", ".cc") else None
        compiled = suffix is not None and f'files("{where.parent}", "{suffix}"' in setup
        note = "; setup.py still compiles it: delete it once its code has moved" if compiled else ""
        if path in plan.moved:
            click.echo(f"kept {path} (yours{note}): its op's kernel is now {plan.moved[path]}, a new skeleton: move "
                       "your code there")
        else:
            click.echo(f"kept {path} (yours; no op of kopgen.yaml has its kernel there now{note})")


@main.command(epilog=_example("kopgen update --check   # in CI: exit 1 where the repo drifted from kopgen.yaml"))
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
    except OSError as error:  # a file of the repo that cannot be read: nothing was written
        _fail(f"error: {error}", EXIT_FAILED)
    if plan.unresolved:  # before the spec is read: it may be mid-edit
        click.echo(f"error: the conflicts of the last kopgen update are not resolved in {', '.join(plan.unresolved)}: "
                   "resolve their <<<<<<< markers (keep the lines you want, delete the markers), then run kopgen "
                   "update again", err=True)
        sys.exit(1)
    _warn(check_spec(directory / SPEC_PATH)[1])  # the spec is valid: plan_update read it
    if check:
        _report_drift(plan)
        sys.exit(1 if plan.changes else 0)
    if dry_run:
        click.echo(diff(directory, plan), nl=False)
        return
    if plan.overwrites and not force:
        _refuse_overwrites(directory, plan)
    try:
        saved = apply_update(directory, plan, force=force)
    except OutputError as error:
        _repo_error(error)
    except OSError as error:  # disk full, permissions: each file is old or new, and the state is written last
        _fail(f"error: the update stopped: {error}; every file is as it was or updated, and kopgen update "
              "finishes the job once the cause is fixed", EXIT_FAILED)  # the environment failed: exit 1
    if saved:
        count = len(plan.overwrites)
        click.echo(f"backed up {count} file{'s' if count > 1 else ''} to {saved}")
        for path in plan.now_custom:
            click.echo(f"{path} is now the skeleton of a custom kernel: port your edits from {saved}{path} into it")
    for path in sorted(plan.writes):
        click.echo(f"{'created' if path in plan.created else 'updated'} {path}")
    for path in plan.deletes + [p for p in plan.hand_edited if p not in plan.writes]:
        click.echo(f"deleted {path}")
    _report_kept(directory, plan)
    if not plan.changes:
        click.echo("up to date")
    if plan.conflicts:
        click.echo(f"conflict: both you and kopgen changed the same lines of {', '.join(plan.conflicts)}; "
                   "resolve the <<<<<<< markers", err=True)
        sys.exit(1)


def _refuse_overwrites(directory: Path, plan: UpdatePlan) -> None:
    """The update would replace files of the user's (without --force): name them, show what would be lost, exit 1."""
    if plan.hand_edited:
        click.echo(f"error: kopgen's files were edited by hand: {', '.join(plan.hand_edited)}", err=True)
    for path in plan.now_custom:
        click.echo(f"error: {path} is kopgen's kernel, edited by hand, and its op's kernel is now custom: kopgen "
                   "writes a skeleton there; port your edits into it (`kopgen update --force` backs your file up "
                   "first)", err=True)
    if plan.yours:
        click.echo(f"error: files kopgen did not write stand where it writes: {', '.join(plan.yours)}", err=True)
    click.echo(diff(directory, plan, only=plan.overwrites), err=True, nl=False)
    click.echo("Move your change into kopgen.yaml or a file of yours (and your files out of kopgen's way); "
               "`kopgen update --force` overwrites them after a backup in .kopgen/backup/N/.", err=True)
    sys.exit(1)


def _report_drift(plan: UpdatePlan) -> None:
    """What `kopgen update --check` found: what an update would write, and what stands in its way."""
    for path in sorted(plan.writes):
        click.echo(f"would {'create' if path in plan.created else 'update'} {path}")
    for path in plan.deletes:
        click.echo(f"would delete {path}")
    for path in plan.hand_edited:
        custom = " (its op's kernel is now custom: a skeleton goes there)" if path in plan.now_custom else ""
        click.echo(f"edited by hand: {path}{custom}")
    for path in plan.yours:
        click.echo(f"yours: {path} (kopgen did not write it and would overwrite it)")


@main.command(epilog=_example("kopgen schema > kopgen.schema.json"))
def schema() -> None:
    """Print the JSON Schema of the spec format (for editors)."""
    click.echo(json.dumps(SPEC_SCHEMA, indent=2))
