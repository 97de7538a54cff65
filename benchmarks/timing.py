"""Timing shared by the benchmarks: candidates measured side by side, in rounds whose order rotates."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


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


def graph_seconds(torch, fn: Callable, args: tuple = (), rounds: int = 7, calls: int = 20,
                  pick: Callable[[Sequence[float]], float] = statistics.median) -> float:
    """GPU seconds per call: a CUDA graph of `calls` calls, replayed `rounds` times and timed with events;
    `pick` of the rounds (the median, or min for the fastest)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the default stream, as torch's docs ask before capture
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(*args)
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return pick(times)
