"""kopgen: from a YAML op spec to a complete, tested PyTorch operator package."""

__version__ = "0.1.0"

from .errors import SpecError

__all__ = ["SpecError", "__version__", "generate", "load_spec", "plan"]


def __getattr__(name: str):
    # The pipeline (jinja2, yaml, the model) loads on first use, not with the package, so that
    # `kopgen`'s entry point can catch a Ctrl-C while it loads (kopgen/__main__.py).
    if name in ("generate", "load_spec", "plan"):
        from . import pipeline

        # Bound here once: `kopgen.plan` names pipeline.plan (the function), not the module kopgen.plan.
        globals().update(generate=pipeline.generate, load_spec=pipeline.load_spec, plan=pipeline.plan)
        return globals()[name]
    raise AttributeError(f"module 'kopgen' has no attribute {name!r}")
