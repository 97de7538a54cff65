"""What the wheel of a package is, for the generated tests/test_wheel.py (issue 17, Build 2): per route, the
wheel's tag, its torch requirement and the compiled module it holds, as the test's constants.

The Python routes make one pure wheel; `stable_abi` one `abi3` wheel whose module calls torch only through
the stable C ABI, so it serves every torch from 2.10 on; `torch_library` a wheel per CPython whose module
links libtorch's C++ API, hence its pin to the torch it was built against (setup.py, cpp.requirements).
"""

from __future__ import annotations

from ..model import Package
from . import layout


def source(package: Package) -> str:
    """The test's SOURCE: the folder the package is imported from."""
    return layout.statement(f"SOURCE = Path({package.name}.__path__[0]).resolve()", 0)


def constants(package: Package) -> str:
    """The test's constants: TAG (the wheel tag's interpreter and ABI; the platform is the build machine's),
    TORCH_SPECIFIER (its torch requirement), MODULES (the compiled modules' paths in the wheel, as patterns)
    and LINKS_LIBTORCH_CPP (whether those modules reference libtorch's C++ API)."""
    name = package.name
    if not package.compiled_ops:
        lines = [
            "# Python kernels only: one pure wheel for every CPython and platform (torch 2.10 on).",
            'TAG = "py3-none"',
            'TORCH_SPECIFIER = ">=2.10"',
            "MODULES = []",
            "LINKS_LIBTORCH_CPP = False",
        ]
    elif package.stable_abi:
        lines = [
            "# The stable ABI: one abi3 wheel for CPython 3.10 on, whose module calls torch only",
            "# through its C ABI (aoti_torch_*, torch_*), so that it serves every torch from 2.10 on.",
            'TAG = "cp310-abi3"',
            'TORCH_SPECIFIER = ">=2.10"',
            f'MODULES = [r"{name}/_C\\.abi3\\.so"]',
            "LINKS_LIBTORCH_CPP = False",
        ]
    else:
        lines = [
            "# TORCH_LIBRARY: a wheel per CPython, whose module links libtorch's C++ API, which",
            "# changes with each release: the wheel requires the torch it was built against.",
            'CPYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"',
            'TAG = f"{CPYTHON}-{CPYTHON}"',
            "TORCH_SPECIFIER = f\"=={'.'.join(TORCH.split('.')[:2])}.*\"",
            f'MODULES = [r"{name}/_C\\.cpython-.+\\.so"]',
            "LINKS_LIBTORCH_CPP = True",
        ]
    return "\n".join(lines)
