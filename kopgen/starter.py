"""`kopgen init`: a commented starter spec that `kopgen new` accepts as it is, every key with its default."""

from __future__ import annotations

import re

from .model import Route
from .pipeline import load_spec_text
from .project import DEFAULT_LICENSE, DEFAULT_PYTHON
from .render import environment

KINDS = ["compute", "custom"]  # kopgen writes the kernels from an expression, or you write them
_UNTAGGED = {Route.TRITON_OP, Route.STABLE_ABI}  # their definitions take no tags


def default_name(folder: str) -> str:
    """A package name from a folder's name: `my-ops` -> `my_ops` (checked with the rest of the spec)."""
    return re.sub(r"\W", "_", folder.strip().lower()) or "ops"


def starter_spec(name: str, kind: str = "compute", route: str = "custom_op") -> str:
    """The starter's text; SpecError (positions in the starter) if NAME cannot be a package."""
    registration = Route(route)
    compiled = registration.is_compiled
    tagged = registration not in _UNTAGGED
    op = "scale_add"
    text = environment().get_template("starter/spec.yaml.j2").render(
        name=name,
        route=route,
        kind_lines=f"starter/{kind}.yaml.j2",  # the op's kind: its own lines
        backends="{cpu: cpp, cuda: cuda}" if compiled else "{cpu: triton, cuda: triton}",
        backends_comment="C++ on CPU, CUDA on GPUs" if compiled else "Triton (its interpreter on CPU; cpu: python is faster)",
        tags="[pt2_compliant_tag]" if tagged else "[]",
        tags_comment="torch tags; the generated suite proves this one" if tagged else f"{route} definitions take no tags",
        skeletons=f"{name}/csrc/{op}.cpp, {name}/csrc/cuda/{op}.cu" if compiled else f"{name}/kernels/{op}.py",
        license=DEFAULT_LICENSE,
        python=DEFAULT_PYTHON,
    )
    load_spec_text(text, "kopgen.yaml")  # kopgen new takes it as it is, or NAME is why not
    return text
