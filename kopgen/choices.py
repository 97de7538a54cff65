"""The closed sets of the spec: routes, devices, kernel languages (format.py's JSON Schema takes its enums from them)."""

from __future__ import annotations

from enum import Enum


class _Choice(str, Enum):
    """A value of a closed set: compares equal to, hashes as and prints as its value (`"cpu"`)."""

    # Enum hashes a member by its name: as the value's, so that `"cpu" in {Device.CPU}` agrees with ==.
    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value


class Route(_Choice):
    """How an op is registered with torch: its spec's `registration`."""

    CUSTOM_OP = "custom_op"
    LIBRARY = "library"
    TRITON_OP = "triton_op"
    TORCH_LIBRARY = "torch_library"
    STABLE_ABI = "stable_abi"

    @property
    def is_compiled(self) -> bool:
        """Defined by the package's C++ extension (TORCH_LIBRARY or the stable ABI), with C++/CUDA kernels."""
        return self in (Route.TORCH_LIBRARY, Route.STABLE_ABI)


class Device(_Choice):
    """A device an op has a kernel for: a key of the spec's `backends`."""

    CPU = "cpu"
    CUDA = "cuda"

    @property
    def dispatch_key(self) -> str:
        return self.value.upper()  # CPU, CUDA


class Language(_Choice):
    """The language of a kernel: a value of the spec's `backends`."""

    TRITON = "triton"
    CPP = "cpp"
    PYTHON = "python"
    CUDA = "cuda"

    @property
    def is_compiled(self) -> bool:
        """Built into the C++ extension; only the compiled routes take it."""
        return self in (Language.CPP, Language.CUDA)

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices a kernel of this language runs on (Triton's CPU kernels in its interpreter)."""
        cpu, cuda = (Device.CPU,), (Device.CUDA,)
        return {Language.TRITON: cpu + cuda, Language.CPP: cpu, Language.PYTHON: cpu, Language.CUDA: cuda}[self]


class Autocast(_Choice):
    """What an op does under torch.autocast: its spec's `autocast` (kopgen/lang/autocast.py)."""

    FP32 = "fp32"  # floating inputs cast to float32, as autocast does for sums and norms
    LOWER_PRECISION = "lower_precision"  # to autocast's dtype, as for matmuls
    PROMOTE = "promote"  # to the widest of them, as for torch.cat and addcmul
    NONE = "none"  # no rule: the op runs on its inputs as they come
