"""Timing shared by the benchmarks: candidates measured side by side, in rounds whose order rotates."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_medians(names: list[str], measure: Callable[[str], float], rounds: int) -> dict[str, float]:
    """The median of `measure(name)` over `rounds` rounds; each round starts with the next candidate,
    so that no candidate always runs first (or right after the same neighbour)."""
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(measure(name))
    return {name: statistics.median(values) for name, values in times.items()}


def host_seconds_per_call(fn: Callable, args: tuple, sync: Callable[[], None], calls: int) -> float:
    """Wall time per call of `calls` back-to-back calls, the device synchronised at the end."""
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return (time.perf_counter() - start) / calls
