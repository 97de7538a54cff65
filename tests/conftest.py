import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def muladd_spec() -> Path:
    return EXAMPLES / "muladd.yaml"


def write_pairsum_kernel(path: Path) -> None:
    """Do what a user of examples/custom.yaml does: write the kernel body, drop the launcher's `raise`.

    Also run on the GPU machine (docs/gpu.md), on a copy of the golden tree.
    """
    text = path.read_text()
    text = re.sub(r"    raise NotImplementedError\(\n.*\n    \)\n", "", text)
    text = text.replace(
        "    out = tl.full((BLOCK_SIZE,), 0.0, dtype=COMPUTE_DTYPE)\n",
        "    pairs = 2 * offsets\n"
        "    out = tl.load(x_ptr + pairs, mask=mask).to(COMPUTE_DTYPE)"
        " + tl.load(x_ptr + pairs + 1, mask=mask).to(COMPUTE_DTYPE)\n",
    )
    assert "raise NotImplementedError" not in text and "pairs = 2 * offsets" in text
    path.write_text(text)
