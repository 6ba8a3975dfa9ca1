r"""Peak memory of a block: on CUDA what torch allocated, on the CPU the
process's peak resident set, which a child process
(:func:`gnorm.bench.process.run_child`) gives each measurement for its
own."""
import resource
from pathlib import Path
from typing import Any

import torch


def _peak_bytes() -> int:
    r"""This process's peak resident set in bytes: ``VmHWM``, its own since
    it started (``ru_maxrss``, the fallback without ``/proc``, carries the
    parent's peak across fork and exec)."""
    try:
        for line in Path('/proc/self/status').read_text().splitlines():
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss_gib() -> float:
    r"""This process's peak resident set in GiB, interpreter and imports
    included."""
    return _peak_bytes() / 2**30


class PeakMemory:
    r"""``with PeakMemory(device) as peak: ...`` sets ``peak.gib``, the
    peak memory (GiB) the block added: on CUDA the most torch allocated on
    :obj:`device` above what it held at the start
    (``torch.cuda.max_memory_allocated``, its cache emptied and the peak
    reset first); on the CPU the growth of the process's peak resident set
    (:func:`peak_rss_gib`), which counts only what goes beyond the
    process's earlier peak: measure in a fresh process
    (:func:`~gnorm.bench.process.run_child`) for a block's own."""

    def __init__(self, device: Any = 'cpu'):
        self.device = torch.device(device)
        self.cuda = self.device.type == 'cuda'
        self.gib = float('nan')

    def __enter__(self) -> 'PeakMemory':
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            self._start = _peak_bytes()
        return self

    def __exit__(self, *error: Any) -> None:
        end = torch.cuda.max_memory_allocated(self.device) if self.cuda \
            else _peak_bytes()
        self.gib = (end - self._start) / 2**30
