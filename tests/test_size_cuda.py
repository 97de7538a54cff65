"""What one more pointwise op costs in generated C++ and CUDA: a functor and a host function, the
loops and launches being written once (csrc/pointwise.h, csrc/cuda/pointwise.cuh)."""

from __future__ import annotations

from pathlib import Path

from kopgen import generate

SPEC = """\
kopgen: 1
package: ksize
defaults:
  registration: torch_library
  backends: {cpu: cpp, cuda: cuda}
  dtypes: [float16, float32, float64]
ops:
  - schema: "muladd(Tensor a, Tensor b, float c) -> Tensor"
    compute: "a * b + c"
    backward:
      a: "grad * b"
      b: "grad * a"
"""
SECOND_OP = """\
  - schema: "scaled_add(Tensor a, Tensor b, float alpha) -> Tensor"
    compute: "a + alpha * b"
    backward:
      a: "grad"
      b: "grad * alpha"
"""


def lines(repo: Path, pattern: str) -> int:
    return sum(len(path.read_text().splitlines()) for path in sorted(repo.glob(pattern)))


def autograd_lines(ops_cpp: Path) -> int:
    """The lines of ops.cpp from the C++ autograd's namespace to the end of its registration block."""
    text = ops_cpp.read_text().splitlines()
    start = text.index("namespace ksize::autograd {")
    impl = text.index("TORCH_LIBRARY_IMPL(ksize, Autograd, m) {")
    end = text.index("}", impl)
    return end - start + 1


def test_a_second_pointwise_op_adds_at_most_25_lines_of_cuda(tmp_path):
    repos = []
    for name, text in (("one", SPEC), ("two", SPEC + SECOND_OP)):
        (tmp_path / f"{name}.yaml").write_text(text)
        repos.append(generate(tmp_path / f"{name}.yaml", tmp_path / name))
    one, two = repos
    cuda = [lines(repo, "ksize/csrc/cuda/*") for repo in repos]
    cpp = [lines(repo, "ksize/csrc/*.cpp") + lines(repo, "ksize/csrc/*.h") for repo in repos]
    print(f"\nCUDA source (csrc/cuda/*): {cuda[0]} lines with one op, {cuda[1]} with two: +{cuda[1] - cuda[0]}")
    print(f"C++ CPU source (csrc/*.cpp, *.h): {cpp[0]} lines with one op, {cpp[1]} with two: +{cpp[1] - cpp[0]}")
    # The second op brings its backward kernel (backward_kernel.py), an op of its own: 25 lines each.
    assert cuda[1] - cuda[0] <= 2 * 25
    # The C++ side: a functor and a host function, plus the op's autograd in C++ (its Function and
    # Autograd kernel, which replace a Python register_autograd), counted on its own.
    autograd = [autograd_lines(repo / "ksize/csrc/ops.cpp") for repo in repos]
    print(f"of which the C++ autograd: {autograd[0]} lines with one op, {autograd[1]} with two")
    assert (cpp[1] - autograd[1]) - (cpp[0] - autograd[0]) <= 2 * 25
    # 45, and 16 for the backward kernel: its handle in ops::, its one call serving both gradients, and
    # the branch that keeps the formulas for a backward differentiated again (create_graph); and 25 for
    # the backward kernel's own Autograd kernel (a Function whose backward raises), so that its calls
    # from the C++ backward never enter Python.
    assert autograd[1] - autograd[0] <= 45 + 16 + 25
    # The fixed headers do not grow with the ops.
    for header in ("ksize/csrc/pointwise.h", "ksize/csrc/cuda/pointwise.cuh"):
        assert (one / header).read_text() == (two / header).read_text()
