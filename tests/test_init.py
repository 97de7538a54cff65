"""`kopgen init`: a starter spec that `kopgen new` takes as it is; help examples; shell completion."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from click.testing import CliRunner

from kopgen.cli import main
from kopgen.format import OP_PROPERTIES, SPEC_SCHEMA
from kopgen.model import Route
from kopgen.pipeline import load_spec_text
from kopgen.starter import KINDS, starter_spec

ROUTES = [route.value for route in Route]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("route", ROUTES)
def test_kopgen_new_takes_the_starter_as_it_is(tmp_path, monkeypatch, route, kind):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "kstart", "--route", route, "--kernel", kind])
    assert result.exit_code == 0 and result.output == "wrote kopgen.yaml; `kopgen new kopgen.yaml` generates the repo kstart/\n"
    result = CliRunner().invoke(main, ["new", "kopgen.yaml", "--no-git"])
    assert result.exit_code == 0 and result.output == "created kstart\n", result.output  # no warning either
    assert (tmp_path / "kstart" / "kstart" / "ops.py").is_file()


@pytest.mark.parametrize("route", ROUTES)
def test_the_starter_shows_every_key_with_its_default(route):
    """Every top-level key and the op's keys are written out (repository, which has no default, commented),
    each with a comment; the values written are the defaults: the same model as a spec that leaves them out."""
    text = starter_spec("kstart", "compute", route)
    spec = yaml.safe_load(text)
    assert set(spec) | {"repository"} == set(SPEC_SCHEMA["properties"]) and "\n# repository: https://" in text
    assert set(spec["defaults"]) == {"registration", "backends", "dtypes", "tags"}
    custom = yaml.safe_load(starter_spec("kstart", "custom", route))["ops"][0]
    shown = set(spec["ops"][0]) | set(custom) | set(spec["defaults"])
    assert shown | {"reduce", "normalize", "split"} == set(OP_PROPERTIES)  # the other kinds, beside compute and kernel
    for line in text.splitlines():
        assert line.startswith(("#", "      ")) or "  # " in line or line.strip() in ("", "ops:", "tests:"), line
    op = {key: value for key, value in spec["ops"][0].items() if key != "tests"}
    minimal = {"kopgen": 1, "package": "kstart", "ops": [op]}
    if route != "custom_op":  # the route and its backends are the variant's choice, not defaults
        minimal["defaults"] = {key: spec["defaults"][key] for key in ("registration", "backends")}
    shown, default = load_spec_text(text, "shown.yaml"), load_spec_text(yaml.safe_dump(minimal), "default.yaml")
    assert dataclasses.replace(shown, spec_text="") == dataclasses.replace(default, spec_text="")


def test_init_names_the_package_after_the_folder(tmp_path, monkeypatch):
    (tmp_path / "My-Ops").mkdir()
    monkeypatch.chdir(tmp_path / "My-Ops")
    assert CliRunner().invoke(main, ["init"]).exit_code == 0
    assert yaml.safe_load((tmp_path / "My-Ops" / "kopgen.yaml").read_text())["package"] == "my_ops"


def test_init_refuses_a_bad_name_and_an_existing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", "torch"])
    assert result.exit_code == 2 and not (tmp_path / "kopgen.yaml").exists()
    assert result.output.startswith("error: 'torch' cannot name the package: package 'torch' would shadow the module")
    (tmp_path / "kopgen.yaml").write_text("mine")
    result = CliRunner().invoke(main, ["init", "kbook"])
    assert result.exit_code == 2 and "kopgen.yaml exists; kopgen init never overwrites a file" in result.output
    assert (tmp_path / "kopgen.yaml").read_text() == "mine"


@pytest.mark.parametrize("command", [None, *sorted(main.commands)])
def test_every_help_shows_an_example_of_its_command(command):
    result = CliRunner().invoke(main, [command, "--help"] if command else ["--help"], prog_name="kopgen")
    assert result.exit_code == 0
    example = result.output.split("Example:\n", 1)[1].splitlines()[0].split()
    assert example[0] == "kopgen" and example[1] == (command or "init"), result.output


def test_shell_completion_through_click():
    """What the main help and docs/format.md tell users to put in their shell's startup file works."""
    runner = CliRunner()
    script = runner.invoke(main, [], prog_name="kopgen", env={"_KOPGEN_COMPLETE": "bash_source"})
    assert script.exit_code == 0 and "_kopgen_completion()" in script.output
    assert 'eval "$(_KOPGEN_COMPLETE=bash_source kopgen)"' in runner.invoke(main, ["--help"]).output
    words = {"_KOPGEN_COMPLETE": "bash_complete", "COMP_WORDS": "kopgen init --route t", "COMP_CWORD": "3"}
    completed = runner.invoke(main, [], prog_name="kopgen", env=words)
    assert completed.output.splitlines() == ["plain,triton_op", "plain,torch_library"]
