"""autocast (kopgen/lang/autocast.py): each op's policy by kind or spec, what the compiled kernels are built
for, and the generated rule (_support.register_autocast) run on an op of torch's under each policy.

The generated suites check the rule of every example op end to end (`Autocasts` in tests/_contract.py)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kopgen.errors import SpecError
from kopgen.lang import autocast, cpp
from kopgen.model import Autocast
from kopgen.pipeline import load_spec, load_spec_text

from .conftest import EXAMPLES

SPEC = """\
kopgen: 1
package: kac
defaults:
  dtypes: [float32]
{defaults}
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
{muladd}
  - schema: "rowsum(Tensor x) -> Tensor"
    reduce: {{op: sum}}
  - schema: "scale_(Tensor(a!) x, float s) -> ()"
    compute: {{x: "x * s"}}
  - schema: "pairsum(Tensor x) -> Tensor"
    kernel: custom
    reference: "x.unflatten(-1, (-1, 2)).sum(-1)"
    fake: {{shape: "x.shape[:-1] + (x.shape[-1] // 2,)"}}
"""


def policies(defaults: str = "", muladd: str = "") -> dict[str, str]:
    text = SPEC.format(defaults=defaults, muladd=muladd)
    return {op.name: str(autocast.policy(op)) for op in load_spec_text(text, "kopgen.yaml").ops}


def test_each_kind_has_its_default_and_a_spec_sets_its_own():
    assert policies() == {"muladd": "promote", "rowsum": "fp32", "scale_": "none", "pairsum": "none"}
    set_here = policies(muladd="    autocast: lower_precision")
    assert set_here["muladd"] == "lower_precision" and set_here["rowsum"] == "fp32"
    # defaults reach every op but the mutating one, which must say none itself
    with pytest.raises(SpecError) as error:
        policies(defaults="  autocast: fp32")
    assert len(error.value.diagnostics) == 1  # scale_'s
    assert "a mutating op takes autocast: none (set it on 'scale_'; defaults set fp32)" in str(error.value)


def test_the_examples_ops_rules():
    """Every example op's policy; backward kernels get none (autocast is off in backward)."""
    got = {}
    for example in sorted(EXAMPLES.glob("*.yaml")):
        for op in load_spec(example).ops:
            got.setdefault(str(autocast.policy(op)), []).append(op.qualname)
            assert autocast.casts(op) == (autocast.policy(op) is not Autocast.NONE)
            assert bool(autocast.registration(op)) == autocast.casts(op)
    assert "kact::mymul" in got["lower_precision"] and "kcustom::pairsum" in got["fp32"]
    assert {"krows::rowsum", "knorms::rms_norm", "knorms::softmax"} <= set(got["fp32"])
    assert {"kbook::muladd", "kgated::silu_and_mul", "kstable::addcmul_opt"} <= set(got["promote"])
    assert {"kbook::muladd_backward", "knorms::fused_add_rms_norm", "kfused::scale_"} <= set(got["none"])


def test_compiled_kernels_take_the_dtypes_autocast_runs_them_in():
    def built(muladd: str) -> list[str]:
        """The dtypes of the C++ kernels of muladd (its policy `muladd`) and rowsum (fp32), listing float64."""
        text = SPEC.format(defaults="", muladd=muladd).replace(
            "  dtypes: [float32]", "  dtypes: [float64]\n  registration: torch_library\n  backends: {cpu: cpp}"
        )
        text = text.split('  - schema: "pairsum')[0]  # no skeleton to write
        return [d.name for d in cpp.dtypes(load_spec_text(text, "kopgen.yaml"))]

    assert built("") == ["bfloat16", "float32", "float64"]  # promote: the check's bfloat16 and float32
    assert built("    autocast: lower_precision") == ["float16", "bfloat16", "float32", "float64"]
    assert built("    autocast: none") == ["float32", "float64"]  # rowsum's fp32


# -- the generated rule, run on an op defined here

SUPPORT_IMPORTS = """\
import functools
from collections.abc import Callable

import torch
from torch import Tensor
"""


@pytest.fixture(scope="module")
def register(tmp_path_factory):
    """_support.register_autocast as generated, and an op per policy, `kac_test::<policy>(Tensor a, Tensor b,
    *, Tensor[] c)`, whose CPU kernel records the dtypes it receives."""
    path = tmp_path_factory.mktemp("autocast") / "support.py"
    path.write_text(SUPPORT_IMPORTS + autocast.SUPPORT)
    spec = importlib.util.spec_from_file_location("kac_support", path)
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    library = torch.library.Library("kac_test", "DEF")
    seen = []
    for name in ("fp32", "lower_precision", "promote"):
        library.define(f"{name}(Tensor a, Tensor b, *, Tensor[] c) -> Tensor")

        def kernel(a, b, *, c):
            seen.append((a.dtype, b.dtype, *(t.dtype for t in c)))
            return a.clone()

        library.impl(name, kernel, "CPU")
        support.register_autocast(f"kac_test::{name}", name)
    yield seen
    for registered in (*support._AUTOCAST_LIBRARIES, library):
        registered._destroy()


@pytest.mark.parametrize(
    "policy, dtypes, want",
    [
        ("fp32", (torch.bfloat16, torch.float16, torch.bfloat16), (torch.float32,) * 3),
        ("lower_precision", (torch.float32, torch.float32, torch.float32), (torch.float16,) * 3),
        ("promote", (torch.bfloat16, torch.float32, torch.bfloat16), (torch.float32,) * 3),
        ("promote", (torch.bfloat16, torch.bfloat16, torch.bfloat16), (torch.bfloat16,) * 3),
        # float64 is never cast, nor counted by promote
        ("fp32", (torch.float64, torch.bfloat16, torch.float64), (torch.float64, torch.float32, torch.float64)),
        ("promote", (torch.float64, torch.bfloat16, torch.bfloat16), (torch.float64, torch.bfloat16, torch.bfloat16)),
    ],
)
def test_the_rule_casts_as_its_policy(register, policy, dtypes, want):
    a, b, c = (torch.ones(2, dtype=dtype) for dtype in dtypes)
    op = getattr(torch.ops.kac_test, policy).default
    register.clear()
    with torch.autocast("cpu", dtype=torch.float16):
        op(a, b, c=[c])
    assert register == [want]
    register.clear()
    op(a, b, c=[c])  # outside autocast: as they come
    assert register == [dtypes]
