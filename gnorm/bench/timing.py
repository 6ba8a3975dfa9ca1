r"""Timing side by side: every case once a round, the order rotating from
round to round, so that cases measured together share the machine's load
and the ratio of their medians is measured under the same conditions."""
import statistics
import time
from typing import (Any, Callable, Dict, Hashable, Iterator, List, Mapping,
                    Optional, Sequence, Tuple, TypeVar)

import torch

K = TypeVar('K', bound=Hashable)
# Clocks: wall time, this process's CPU time (less sensitive than wall time
# to other jobs on a shared machine), or both at once.
WALL = time.perf_counter
CPU = time.process_time


def wall_and_cpu() -> Tuple[float, float]:
    r"""Wall and process CPU time at once: :func:`timed` then gives
    ``(wall seconds, CPU seconds)``."""
    return time.perf_counter(), time.process_time()


def sync(device: Any = None) -> None:
    r"""Waits for :obj:`device`'s queued work where it runs asynchronously
    (CUDA); nothing on the CPU or for :obj:`None`."""
    if device is not None and torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)


def _elapsed(start: Any, end: Any) -> Any:
    if isinstance(start, tuple):
        return tuple(e - s for s, e in zip(start, end))
    return end - start


def timed(fn: Callable, *args: Any, device: Any = None,
          clock: Callable[[], Any] = WALL) -> Tuple[Any, Any]:
    r"""Calls ``fn(*args)`` and returns (the :obj:`clock` time it took,
    its result), :obj:`device` synchronised before and after, so that the
    time includes the work the call queued. A clock that returns a tuple
    (:func:`wall_and_cpu`) gives a tuple of times."""
    sync(device)
    start = clock()
    result = fn(*args)
    sync(device)
    return _elapsed(start, clock()), result


def profiled(fn: Callable, *args: Any, device: Any = None):
    r"""``torch.profiler``'s operator averages of one call ``fn(*args)``
    (:func:`timed`): CPU operators, and CUDA kernels on a CUDA
    :obj:`device`; ``.table(sort_by=...)`` prints them."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device is not None and torch.device(device).type == 'cuda'
    with profile(activities=[ProfilerActivity.CPU]
                 + [ProfilerActivity.CUDA] * cuda) as prof:
        timed(fn, *args, device=device)
    return prof.key_averages()


def kernel_time(fn: Callable, *args: Any,
                device: Any = None) -> Dict[str, float]:
    r"""How one call ``fn(*args)`` spends its time (:func:`profiled`):
    on a CUDA :obj:`device`, ``kernel_ms`` is the kernels' self device
    time and ``launches`` its ``cudaLaunchKernel`` calls; elsewhere the
    self CPU time of every operator and the ``aten`` operators it ran
    (nested ones counted)."""
    events = profiled(fn, *args, device=device)
    if device is not None and torch.device(device).type == 'cuda':
        return dict(kernel_ms=sum(e.self_device_time_total
                                  for e in events) / 1e3,
                    launches=sum(e.count for e in events
                                 if 'LaunchKernel' in e.key))
    return dict(kernel_ms=sum(e.self_cpu_time_total for e in events) / 1e3,
                launches=sum(e.count for e in events
                             if e.key.startswith('aten::')))


def rotation(keys: Sequence[K], rounds: int) -> Iterator[Tuple[int, K]]:
    r"""``(round, key)`` for :obj:`rounds` rounds of every key of
    :obj:`keys` once, round ``r`` starting at the ``r``-th key (cyclically):
    ``rotation('ab', 3)`` gives a, b; b, a; a, b. No key is always first
    (after a warm-up of another, or when the machine is coolest)."""
    for r in range(rounds):
        for i in range(len(keys)):
            yield r, keys[(i + r) % len(keys)]


def alternate(cases: Mapping[K, Callable], rounds: int, warmup: int = 1, *,
              inputs: Optional[Sequence[Any]] = None, device: Any = None,
              clock: Callable[[], Any] = WALL) -> Dict[K, List[Any]]:
    r"""Times each of :obj:`cases` (name -> callable) once a round for
    :obj:`warmup` + :obj:`rounds` rounds in :func:`rotation` order, each
    call :func:`timed` on :obj:`device` with :obj:`clock`; returns name ->
    the times of the last :obj:`rounds` rounds (the warm-up rounds are run,
    not kept). :obj:`inputs`: one argument per round (warm-up rounds
    first), passed to every case of the round, e.g. the round's batch, so
    that all cases see the same data; :obj:`None`: the cases take none."""
    times: Dict[K, List[Any]] = {name: [] for name in cases}
    for r, name in rotation(list(cases), warmup + rounds):
        args = () if inputs is None else (inputs[r], )
        seconds, _ = timed(cases[name], *args, device=device, clock=clock)
        if r >= warmup:
            times[name].append(seconds)
    return times


def medians(times: Mapping[K, Sequence[float]]) -> Dict[K, float]:
    r"""The median of each case's times (:func:`alternate`)."""
    return {name: statistics.median(t) for name, t in times.items()}


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    r""":obj:`a` / :obj:`b`, or :obj:`None` where either is missing or
    :obj:`b` is 0 (a table shows no ratio there)."""
    return None if a is None or not b else a / b


def ratio_range(a: Sequence[float], b: Sequence[float],
                ) -> Tuple[float, float]:
    r"""The least and the greatest ratio of one of :obj:`a` to one of
    :obj:`b`, over every pair of the two (a range, not a confidence
    interval)."""
    ratios = [x / y for x in a for y in b]
    return min(ratios), max(ratios)
