"""kopgen: from a YAML op spec to a complete, tested PyTorch operator package."""

__version__ = "0.1.0"

from .errors import SpecError
from .pipeline import generate, load_spec, plan

__all__ = ["SpecError", "__version__", "generate", "load_spec", "plan"]
