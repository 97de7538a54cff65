"""The generated test suite: the contract is written once (tests/_contract.py), so a second op
adds only its data; and the test templates only print."""

from __future__ import annotations

from kopgen.pipeline import load_spec_text, render_repo

from .conftest import EXAMPLES

SECOND_OP = """\
  - schema: "mul(Tensor a, Tensor b) -> Tensor"
    doc: a * b.
    compute: "a * b"
    backward:
      a: "grad * b"
      b: "grad * a"
"""


def lines_of_tests(spec_text: str) -> dict[str, int]:
    """The lines of each file under tests/ of the repo that `spec_text` generates."""
    files = render_repo(load_spec_text(spec_text, "kopgen.yaml"))
    return {path: len(text.splitlines()) for path, (_, text) in files.items() if path.startswith("tests/")}


def test_a_second_pointwise_op_adds_at_most_60_lines_to_the_tests():
    one_op = (EXAMPLES / "muladd.yaml").read_text()
    one = lines_of_tests(one_op)
    two = lines_of_tests(one_op + SECOND_OP)
    print(f"tests/ of one pointwise op: {sum(one.values())} lines {one}")
    print(f"tests/ of two pointwise ops: {sum(two.values())} lines {two}")
    print(f"the second op adds {sum(two.values()) - sum(one.values())} lines")
    assert set(two) - set(one) == {"tests/test_mul.py"}
    # The AOTInductor program (tests/test_aoti.py) imports the op's test module and names its class.
    aoti = two["tests/test_aoti.py"] - one["tests/test_aoti.py"]
    assert aoti <= 2
    # the contract does not grow
    assert all(two[path] == lines for path, lines in one.items() if path != "tests/test_aoti.py")
    # Its data (about 30 lines), and the import and class header that name its contract's checks,
    # one line each once they wrap (issue 15 added TracedAsReference and the two DirectInEager ones;
    # issue 16 BackwardKernel, with the data line naming the op's backward kernel; issue 17 Batched,
    # Sharded, and Autocasts with the data line naming the op's autocast policy).
    assert sum(two.values()) - sum(one.values()) - aoti <= 60
