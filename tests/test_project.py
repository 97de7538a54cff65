"""The project around the ops: LICENSE and the license field, authors, Python, repository, the CI workflow and
ci.sh, ruff and pre-commit configuration, .gitignore, and `git init` by `kopgen new`."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import types
import zipfile

import pytest
import tomllib
import yaml
from click.testing import CliRunner

from kopgen.cli import main
from kopgen.pipeline import load_spec_text
from kopgen.project import LICENSES
from kopgen.skeleton import RUFF_VERSION, skeleton_files
from kopgen.state import STATE_PATH

from .conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
OPS = """\
ops:
  - schema: "twice(Tensor a) -> Tensor"
    compute: "a * 2"
"""


def _skeleton(head: str) -> dict[str, str]:
    return skeleton_files(load_spec_text(f"kopgen: 1\npackage: kbook\n{head}{OPS}", "spec.yaml"))


def test_the_project_keys_reach_pyproject_license_and_ci():
    files = _skeleton(
        'license: MIT\nauthors: [Ada Lovelace <ada@example.com>, "Charles \\"Babbage\\" = 1"]\n'
        'python: "3.11"\nrepository: https://github.com/ada/kbook\n'
    )
    project = tomllib.loads(files["pyproject.toml"])["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert project["authors"] == [{"name": "Ada Lovelace", "email": "ada@example.com"}, {"name": 'Charles "Babbage" = 1'}]
    assert project["requires-python"] == ">=3.11"
    assert project["urls"] == {"Repository": "https://github.com/ada/kbook"}
    assert tomllib.loads(files["pyproject.toml"])["tool"]["ruff"]["target-version"] == "py311"
    assert files["LICENSE"].startswith("MIT License\n\nCopyright (c) Ada Lovelace, Charles \"Babbage\" = 1\n")
    assert yaml.safe_load(files[".github/workflows/ci.yml"])["jobs"]["cpu"]["strategy"]["matrix"]["python"] == [
        "3.11", "3.13"
    ]
    assert "<https://github.com/ada/kbook>" in files["README.md"]


def test_the_defaults():
    files = _skeleton("")
    project = tomllib.loads(files["pyproject.toml"])["project"]
    assert project["license"] == "BSD-3-Clause" and "authors" not in project and "urls" not in project
    assert project["requires-python"] == ">=3.10"
    assert files["LICENSE"].startswith("BSD 3-Clause License\n\nCopyright (c) the kbook authors\n")


def test_the_description_is_one_plain_paragraph_of_the_readme():
    """Line breaks, a code fence, a heading, HTML: the README shows them as text in one paragraph, and the
    template's own blocks stay as they are (an unclosed fence took the rest of the README)."""
    hostile = 'description: "Line one \\\\<b>\\n```\\n# Heading\\n<!-- x\\n<details>"\n'
    readme = _skeleton(hostile)["README.md"]
    assert "\nLine one \\\\\\<b> ``` # Heading \\<!-- x \\<details>\n\nPyTorch operators" in readme
    assert [line for line in readme.splitlines() if line.startswith("```")] == ["```bash", "```", "```python", "```"]
    assert not any(line.startswith(("#", "<")) for line in readme.splitlines()[1:])
    leading = _skeleton('description: "# not a heading\\n\\n12. nor a list"\n')["README.md"]
    assert "\n\\# not a heading 12. nor a list\n" in leading
    assert "\nFused ops. Fast ones.\n" in _skeleton("description: Fused ops. Fast ones.\n")["README.md"]


def test_license_none_writes_no_license_and_apache_its_text():
    files = _skeleton("license: none\n")
    assert "LICENSE" not in files and "license" not in tomllib.loads(files["pyproject.toml"])["project"]
    assert "Licensed" not in files["README.md"]
    apache = _skeleton("license: Apache-2.0\n")["LICENSE"]
    assert apache.startswith(" " * 33 + "Apache License\n") and "END OF TERMS AND CONDITIONS" in apache


def test_the_workflow_runs_ci_sh_and_ci_sh_pins_the_pre_commit_ruff():
    """The workflow's own steps are setup and one `bash ci.sh`, the script a user runs locally; the GPU job is off."""
    files = _skeleton("")
    workflow = yaml.safe_load(files[".github/workflows/ci.yml"])
    assert set(workflow[True]) == {"push", "pull_request"}  # YAML 1.1 reads the key `on` as true
    runs = {job: [step["run"] for step in spec["steps"] if "run" in step] for job, spec in workflow["jobs"].items()}
    assert runs == {
        "cpu": ["python -m pip install torch --index-url https://download.pytorch.org/whl/cpu", "bash ci.sh"],
        "gpu": ["bash ci.sh"],
    }
    assert workflow["jobs"]["gpu"]["if"] is False
    (hooks,) = yaml.safe_load(files[".pre-commit-config.yaml"])["repos"]
    assert hooks["repo"] == "local"  # nothing to clone: pre-commit runs where pip can install ruff
    assert [(hook["id"], hook["entry"], hook["additional_dependencies"]) for hook in hooks["hooks"]] == [
        ("ruff", "ruff check --force-exclude", [f"ruff=={RUFF_VERSION}"]),
        ("ruff-format", "ruff format --force-exclude", [f"ruff=={RUFF_VERSION}"]),
    ]
    assert f'"ruff=={RUFF_VERSION}"' in files["ci.sh"]
    assert subprocess.run(["bash", "-n"], input=files["ci.sh"], text=True, check=False).returncode == 0


@pytest.mark.parametrize("example", sorted(p.stem for p in EXAMPLES.glob("*.yaml")))
def test_a_generated_repo_passes_its_own_ruff_configuration(example):
    """What ci.sh and pre-commit run, with the repo's pyproject.toml: every file ruff reads, README included."""
    repo = GOLDEN / example
    for command in (["check"], ["format", "--check", "--diff"]):
        result = subprocess.run([sys.executable, "-m", "ruff", *command, "--no-cache", "."], cwd=repo,
                                capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_wheel_carries_the_license(tmp_path):
    repo = tmp_path / "muladd"
    shutil.copytree(GOLDEN / "muladd", repo)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path / "dist"), str(repo)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("kbook-0.1.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("kbook-0.1.0.dist-info/METADATA").decode()
        assert archive.read("kbook-0.1.0.dist-info/licenses/LICENSE") == (repo / "LICENSE").read_bytes()
    assert "License-Expression: BSD-3-Clause\n" in metadata and "Requires-Python: >=3.10\n" in metadata


def test_new_runs_git_init_outside_a_repository(tmp_path):
    result = CliRunner().invoke(main, ["new", str(EXAMPLES / "muladd.yaml"), "-o", str(tmp_path / "repo")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"initialized a git repository in {tmp_path / 'repo'}"
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path / "repo",
                            capture_output=True, text=True, check=True).stdout
    assert "?? kopgen.yaml" in status.splitlines() and "?? .kopgen/state.json" in status.splitlines()


def test_new_skips_git_init_inside_a_repository_and_with_no_git(tmp_path):
    subprocess.run(["git", "init", "--quiet", str(tmp_path)], check=True)
    result = CliRunner().invoke(main, ["new", str(EXAMPLES / "muladd.yaml"), "-o", str(tmp_path / "inside")])
    assert result.exit_code == 0 and not (tmp_path / "inside" / ".git").exists(), result.output
    assert "no git init" in result.output
    outside = tmp_path / "outside"
    shutil.rmtree(tmp_path / ".git")
    result = CliRunner().invoke(main, ["new", str(EXAMPLES / "muladd.yaml"), "-o", str(outside), "--no-git"])
    assert result.exit_code == 0 and result.output == f"created {outside}\n" and not (outside / ".git").exists()


def test_every_license_of_the_format_has_its_text():
    texts = sorted(p.stem for p in (ROOT / "templates" / "licenses").glob("*.txt"))
    assert texts == sorted(set(LICENSES) - {"none"})


@pytest.mark.slow
def test_ci_sh_runs_in_a_fresh_environment(tmp_path, example="muladd"):
    """The CI's steps as the workflow runs them (`bash ci.sh`), in a new virtual environment that sees this
    one's packages (torch, ruff, setuptools) through a .pth file and may download nothing: ruff with the
    repo's configuration, the editable build, then a part of the suite (the whole suites run in
    test_end_to_end.py; the compiled examples' builds in test_compiled.py)."""
    repo, env_dir = tmp_path / example, tmp_path / "venv"
    shutil.copytree(GOLDEN / example, repo)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    (site,) = env_dir.glob("lib/python*/site-packages")
    (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""}
    result = subprocess.run(["bash", "ci.sh", "-k", "opcheck and float32 and normal"], cwd=repo, env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "All checks passed!" in result.stdout and " passed" in result.stdout.splitlines()[-1], result.stdout
    assert any(path.name.startswith("__editable__") for path in site.iterdir())  # installed here, not in ours


def test_an_update_keeps_the_users_own_project_files(tmp_path):
    """A repo from before kopgen wrote LICENSE and the CI, where the user keeps their own: `kopgen update` keeps
    them as theirs (never merged into, as `kopgen adopt` does), and writes the project files that are missing."""
    repo = tmp_path / "repo"
    assert CliRunner().invoke(main, ["new", str(EXAMPLES / "muladd.yaml"), "-o", str(repo), "--no-git"]).exit_code == 0
    state = json.loads((repo / STATE_PATH).read_text())
    for path in ("LICENSE", ".github/workflows/ci.yml", ".pre-commit-config.yaml"):
        del state["user_base"][path]
    (repo / STATE_PATH).write_text(json.dumps(state))
    (repo / "LICENSE").write_text("Proprietary. Ask Ada.\n")
    (repo / ".github" / "workflows" / "ci.yml").write_text("name: mine\n")
    (repo / ".pre-commit-config.yaml").unlink()
    spec = repo / "kopgen.yaml"
    spec.write_text(spec.read_text().replace("Fused elementwise kernels", "Fused kernels"))
    result = CliRunner().invoke(main, ["update", str(repo)])
    assert result.exit_code == 0, result.output
    assert (repo / "LICENSE").read_text() == "Proprietary. Ask Ada.\n"
    assert (repo / ".github" / "workflows" / "ci.yml").read_text() == "name: mine\n"
    assert (repo / ".pre-commit-config.yaml").is_file()
    assert {"LICENSE", ".github/workflows/ci.yml"} <= set(json.loads((repo / STATE_PATH).read_text())["adopted"])
    assert CliRunner().invoke(main, ["update", str(repo), "--check"]).exit_code == 0


def _generated_test_wheel(example: str, package: str, monkeypatch):
    """The golden repo's tests/test_wheel.py as a module, its package (not built here) stubbed."""
    stub = types.ModuleType(package)
    stub.__path__ = [str(GOLDEN / example / package)]
    monkeypatch.setitem(sys.modules, package, stub)
    spec = importlib.util.spec_from_file_location(f"test_wheel_{package}", GOLDEN / example / "tests" / "test_wheel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("g++") is None, reason="needs g++ and nm (binutils)")
def test_the_generated_symbol_check_refuses_libtorch_cpp_in_a_stable_module(tmp_path, monkeypatch):
    """fused_stable's tests/test_wheel.py on wheels made here: a module that calls torch through the C shim passes;
    one that calls a c10:: function fails naming it, as does a module named as TORCH_LIBRARY names its own."""
    check = _generated_test_wheel("fused_stable", "kstable", monkeypatch).test_the_wheel_holds_the_compiled_module_of_its_route
    cases = [
        ("kstable/_C.abi3.so", 'extern "C" void aoti_torch_f(); void g() { aoti_torch_f(); }', None),
        ("kstable/_C.abi3.so", "namespace c10 { void f(); } void g() { c10::f(); }", r"c10::f\(\)"),
        ("kstable/_C.cpython-311-x86_64-linux-gnu.so", 'extern "C" void aoti_torch_f(); void g() { aoti_torch_f(); }',
         r"_C\.cpython-311"),
    ]
    for index, (name, source, refused) in enumerate(cases):
        library, wheel, scratch = tmp_path / f"{index}.so", tmp_path / f"{index}.whl", tmp_path / str(index)
        subprocess.run(["g++", "-shared", "-fPIC", "-x", "c++", "-", "-o", str(library)], input=source, text=True,
                       check=True)  # fmt: skip
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.write(library, name)
        scratch.mkdir()
        if refused is None:
            check(wheel, scratch)
        else:
            with pytest.raises(AssertionError, match=refused):
                check(wheel, scratch)


@pytest.mark.slow
def test_pre_commit_runs_the_repos_hooks_on_a_fresh_repo(tmp_path):
    """`pre-commit run --all-files` in a repo that `kopgen new` made and git-initialized: its local hooks install the
    pinned ruff with pip (nothing is cloned, so it runs wherever pip reaches an index) and pass on every file; an
    unused import planted in the package fails them, naming the rule."""
    pytest.importorskip("pre_commit", reason="needs pre-commit (kopgen's test extra)")
    repo = tmp_path / "repo"
    assert CliRunner().invoke(main, ["new", str(EXAMPLES / "muladd.yaml"), "-o", str(repo)]).exit_code == 0
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit")}

    def pre_commit() -> subprocess.CompletedProcess:
        subprocess.run(["git", "add", "--all"], cwd=repo, check=True)  # --all-files means the files git tracks
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=repo, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip

    result = pre_commit()
    assert result.returncode == 0, result.stdout + result.stderr
    hooks = [line for line in result.stdout.splitlines() if line.startswith("ruff ")]
    assert len(hooks) == 2 and all(line.endswith(".Passed") for line in hooks), result.stdout
    (repo / "kbook" / "planted.py").write_text("import os\n")
    result = pre_commit()
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr
