"""Test samples the spec sets per argument (`tests: args:`): a Tensor's own dtype and bounds, a scalar's value."""

from __future__ import annotations

import subprocess
import sys

import torch

from kopgen import generate

from .conftest import ROOT

SPEC = ROOT / "tests/specs/custom_samples.yaml"


def test_samples_draw_each_argument_as_the_spec_says(tmp_path):
    repo = generate(SPEC, tmp_path / "repo")
    text = (repo / "tests/test_cross_entropy_rows.py").read_text()
    assert '"normal": lambda make: (\n            make.drawn(8, 6, low=-4, high=4),\n' in text
    assert "make.drawn(8, dtype=torch.int64, low=0, high=6),\n            2,\n" in text
    # No rows: the target, one per row of the logits, has none either.
    assert "make.drawn(0, dtype=torch.int64, low=0, high=6)," in text
    assert "make.drawn(8, dtype=torch.int64, low=0, high=6, strided=True)," in text
    assert "gradient_inputs=(0,)," in text  # the int64 target never requires grad
    reference = (repo / "kloss/reference.py").read_text()
    assert "(logits,) = upcast(logits)" in reference  # the target stays int64
    assert 'ignore_index=ignore_index, reduction="none"' in reference
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "--isolated", "tests", "kloss/reference.py"],
        cwd=repo, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_drawn_keeps_dtype_and_bounds(tmp_path, monkeypatch):
    """The contract's Make.drawn: the argument's own dtype whatever the op's, values in [low, high)."""
    repo = generate(SPEC, tmp_path / "repo")
    monkeypatch.syspath_prepend(str(repo / "tests"))
    monkeypatch.delitem(sys.modules, "_contract", raising=False)  # this repo's, not another test's
    from _contract import Make

    make = Make("cpu", torch.float64, positive=False)
    target = make.drawn(1000, dtype=torch.int64, low=0, high=6)
    assert target.dtype == torch.int64 and target.min() == 0 and target.max() == 5
    logits = make.drawn(50, 40, low=-4, high=4, strided=True)
    assert logits.dtype == torch.float64 and not logits.is_contiguous()
    assert logits.min() >= -4 and logits.max() < 4
    assert make.drawn(5, dtype=torch.bool).dtype == torch.bool
    assert Make("cpu", torch.float32, False, grown=True).drawn(8, 1, dtype=torch.int64).shape == (10, 1)


def test_specs_without_tests_args_keep_their_make(tmp_path):
    repo = generate(ROOT / "examples/muladd.yaml", tmp_path / "repo")
    assert "def drawn(" not in (repo / "tests/_contract.py").read_text()


def test_two_tensors_related_to_a_third_draw_their_shapes_from_it(tmp_path):
    """Each relation reads only the Tensors it names (relating every other Tensor recursed without end)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: knorm
defaults:
  backends: {cpu: python, cuda: triton}
ops:
  - schema: "norm_backward(Tensor grad, Tensor input, Tensor weight) -> Tensor"
    kernel: custom
    reference: "grad * input * weight"
    fake: {shape: input.shape}
    tests:
      args:
        grad: {shape: input.shape}
        weight: {shape: "(input.shape[-1],)"}
""")
    text = (generate(spec, tmp_path / "repo") / "tests/test_norm_backward.py").read_text()
    assert '"normal": lambda make: (make(8, 6), make(8, 6), make(6)),' in text


def test_a_shape_mapping_leaves_out_the_tensors_a_relation_shapes(tmp_path):
    """`tests.shapes` gives the lead alone (7 tokens); query follows it, also in the empty sample."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: krot
defaults:
  backends: {cpu: python, cuda: triton}
ops:
  - schema: "scale_rows(Tensor positions, Tensor! query, int heads) -> ()"
    kernel: custom
    reference: {query: "query * 2"}
    tests:
      shapes: [{positions: [7]}]
      args:
        heads: {value: 4}
        positions: {dtype: int64, low: 0, high: 20}
        query: {shape: "(positions.shape[0], 16 * heads)"}
""")
    text = (generate(spec, tmp_path / "repo") / "tests/test_scale_rows.py").read_text()
    assert "make.drawn(7, dtype=torch.int64, low=0, high=20),\n            make(7, 64),\n" in text
    assert "make.drawn(0, dtype=torch.int64, low=0, high=20),\n            make(0, 64),\n" in text


def test_a_relation_reads_sizes_through_every_metadata_method(tmp_path):
    """size(i), dim(), numel() and stride() of the metadata language, on the sample's sizes (they raised
    AttributeError at generation time before)."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: kmeta
defaults:
  backends: {cpu: python}
ops:
  - schema: "f(Tensor x, Tensor a, Tensor b, Tensor c) -> Tensor"
    kernel: custom
    reference: "x * 2"
    fake: {shape: x.shape}
    tests:
      args:
        a: {shape: "(x.size(0), x.dim())"}
        b: {shape: "(1,) * x.dim() + (x.numel(),)"}
        c: {shape: "x.stride()"}
""")
    text = (generate(spec, tmp_path / "repo") / "tests/test_f.py").read_text()
    assert '"normal": lambda make: (make(8, 6), make(8, 2), make(1, 1, 48), make(6, 1)),' in text


def test_the_cuda_graph_test_computes_a_tensor_of_the_ops_dtype(tmp_path):
    """nn.Linear feeds the first Tensor the tests draw in the op's dtype, not int64 positions."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text("""\
kopgen: 1
package: krot
defaults:
  backends: {cpu: python, cuda: triton}
ops:
  - schema: "shift(Tensor positions, Tensor! query) -> ()"
    kernel: custom
    reference: {query: "query + positions.unsqueeze(-1)"}
    tests:
      shapes: [{positions: [7], query: [7, 16]}]
      args:
        positions: {dtype: int64, low: 0, high: 20}
""")
    text = (generate(spec, tmp_path / "repo") / "tests/test_shift.py").read_text()
    assert "    lead_input=1,\n" in text


def test_a_kernel_ops_scalar_with_a_default_takes_it_and_kopgens_kinds_draw_theirs(tmp_path):
    """`dim=-1` of a user's kernel means the last dimension: drawn as 3, a correct kernel failed every
    test (IndexError on 2-D samples). kopgen's own kinds keep a value that is not the default."""
    spec = tmp_path / "kopgen.yaml"
    spec.write_text(
        "kopgen: 1\npackage: kdim\ndefaults: {backends: {cpu: python}}\nops:\n"
        '  - schema: "softmax_dim(Tensor x, int dim=-1, float scale=1.0, bool? flag=None, int n=2) -> Tensor"\n'
        "    kernel: custom\n"
        '    reference: "torch.softmax(x * scale * n, dim)"\n'
        "    fake: {shape: x.shape}\n"
        '  - schema: "leaky(Tensor x, float slope=0.01) -> Tensor"\n'
        '    compute: "where(x > 0, x, x * slope)"\n'
    )
    repo = generate(spec, tmp_path / "repo")
    kernel_op = (repo / "tests/test_softmax_dim.py").read_text()
    assert '"normal": lambda make: (make(8, 6), -1, 1.0, None, 2),' in kernel_op
    assert '"normal": lambda make: (make(8, 6), 1.25),' in (repo / "tests/test_leaky.py").read_text()
