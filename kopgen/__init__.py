"""kopgen: from a YAML op spec to a complete, tested PyTorch operator package."""

__version__ = "0.1.0"

from .errors import SpecError  # noqa: E402
from .pipeline import generate, load_spec, plan  # noqa: E402

__all__ = ["SpecError", "__version__", "generate", "load_spec", "plan"]
