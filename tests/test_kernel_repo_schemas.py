"""The schemas kernel authors write (issue 14's list, from public kernel repositories) pass `kopgen
check` as written, behind `kernel: custom`, on torch_library and on stable_abi; what kopgen still
refuses of them is refused at the argument, saying why."""

from click.testing import CliRunner

from kopgen.cli import main

from .conftest import ROOT

SPEC = (ROOT / "tests/specs/kernel_repo_schemas.yaml").read_text()
SCHEMAS = [
    "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
    "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()",
    "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()",
    "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale) -> ()",
    "apply_rotary(Tensor x1, Tensor x2, Tensor cos, Tensor sin, Tensor! out1, Tensor! out2, bool conj) -> ()",
]


def check(tmp_path, text: str):
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(text)
    return CliRunner().invoke(main, ["check", str(spec)])


def test_the_spec_holds_the_schemas_verbatim():
    for schema in SCHEMAS:
        assert f'- schema: "{schema}"' in SPEC


def test_every_schema_passes_check_on_torch_library(tmp_path):
    result = check(tmp_path, SPEC)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    for name in ("silu_and_mul", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "static_scaled_fp8_quant",
                 "apply_rotary", "dropout_add_ln_fwd"):
        assert f"krepo::{name}" in result.stdout


def test_on_stable_abi_only_the_generator_is_refused_at_its_argument(tmp_path):
    result = check(tmp_path, SPEC.replace("registration: torch_library", "registration: stable_abi"))
    assert result.exit_code == 2
    [error] = result.stderr.splitlines()
    line = SPEC.splitlines().index(next(s for s in SPEC.splitlines() if "dropout_add_ln_fwd(" in s)) + 1
    column = SPEC.splitlines()[line - 1].index("Generator? gen") + len("Generator? ") + 1  # at its name
    assert error.startswith(f"{tmp_path / 'kopgen.yaml'}:{line}:{column}: error: stable_abi: argument 'gen' of type Generator?")
    without = SPEC.replace("Generator? gen, ", "").replace("registration: torch_library", "registration: stable_abi")
    assert check(tmp_path, without).exit_code == 0


def test_tensor_list_returns_are_refused_with_the_tuple_spelling(tmp_path):
    result = check(tmp_path, SPEC.replace("-> (Tensor, Tensor, Tensor, Tensor)", "-> Tensor[]"))
    assert result.exit_code == 2
    # torch_library returns no lists yet (custom_op and library do: tests/test_custom_list_return.py)
    assert ("registration 'torch_library' does not return lists in kopgen 0.1.0: use custom_op or library, "
            "or return a fixed number, `-> (Tensor, Tensor)`") in result.stderr
