"""The project skeleton: every value of the generated pyproject.toml is written by a TOML writer."""

from __future__ import annotations

import dataclasses

import tomllib

from kopgen.pipeline import load_spec_text
from kopgen.skeleton import skeleton_files

SPEC = """\
kopgen: 1
package: kbook
version: 1.2.0rc1
description: "Fused \\"ops\\" \\\\ tab\\t and \\u00e9\\ndependencies = [\\"evil-package>=0\\"]"
ops:
  - schema: "f(Tensor a) -> Tensor"
    compute: "a * 2"
"""


def test_pyproject_values_cannot_escape_their_strings():
    package = load_spec_text(SPEC, "spec.yaml")
    # A version that passed no validation (the model is built elsewhere, say) still stays one string.
    hostile = '0.1.0"\ndependencies = ["evil-package>=0"]\n[tool.swallowed]\n#'
    for version in (package.version, hostile):
        text = skeleton_files(dataclasses.replace(package, version=version))["pyproject.toml"]
        project = tomllib.loads(text)["project"]
        assert project["version"] == version
        assert project["name"] == "kbook"
        assert project["description"] == 'Fused "ops" \\ tab\t and \u00e9'  # the first line only
        assert not any("evil" in dependency for dependency in project["dependencies"])
        assert tomllib.loads(text)["tool"]["setuptools"]["packages"]["find"]["include"] == ["kbook", "kbook.*"]
