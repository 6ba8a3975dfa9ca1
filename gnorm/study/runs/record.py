r"""The GPU queue's record, ``<out>/.queue.json``: per rate name (a
device's name, ``<GPU> (CUDA graphs)`` for graphed steps) the cells
trained there, each with its wall seconds, its steady seconds (the epochs
alone) and its set-up seconds (data, compose, first steps), and its cost
units; per run (by :func:`run_digest`) how many times it failed while
training; and per cell stopped at a deadline (by its label) the seconds
its last training took and the shares of its epochs that training kept
and left (:func:`add_stopped`), which the next call's estimate of the
cell reads.

Many processes may train into one folder: each adds what it did under the
folder's lock (``<out>/.queue.lock``, :func:`fcntl.flock`): it reads the
record, merges its cell in, writes a temporary file of its own and
replaces the record with it. No writer's cells are lost, a reader always
sees a whole file, and each process's rate is the merged one."""
import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

RECORD = '.queue.json'
LOCK = '.queue.lock'
FAILED = 'failed runs'  # the record's key of the runs' failure counts
STOPPED = 'stopped cells'  # the record's key of the cells stopped last


CLAIMS = '.queue.runs'  # <out>/.queue.runs/<digest>: a run's claim


def run_digest(key: str) -> str:
    r"""A run's key (:func:`gnorm.study.runs.compose.run_key`) in 16 hex
    digits, as a ``--finished`` file and the record list it."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def read_record(out: Path) -> Dict[str, Any]:
    r"""``<out>/.queue.json`` (empty without one)."""
    path = Path(out) / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    r"""Holds the lock of :obj:`out`'s record for the block (waits for
    another holder; the kernel releases it however a process ends)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def claim_runs(out: Path, keys: Sequence[str]
               ) -> Dict[str, Tuple[int, Path]]:
    r"""Claims for this process the runs :obj:`keys` that no other
    process has claimed (a lock on ``<out>/.queue.runs/<digest>``, taken
    without waiting); returns the claimed runs' file descriptors and
    claim files by key, for :func:`release_runs`. A claim file another
    process removed between this one's open and lock (its release) is
    opened again, so that two processes never hold locks on two files of
    one name."""
    folder = out / CLAIMS
    folder.mkdir(parents=True, exist_ok=True)
    held = {}
    for key in keys:
        path = folder / run_digest(key)
        fd = _lock(path)
        if fd is not None:
            held[key] = fd, path
    return held


def _lock(path: Path, tries: int = 3) -> Optional[int]:
    r"""The descriptor of :obj:`path` locked by this process, or
    :obj:`None` where another holds it."""
    for _ in range(tries):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # released and removed meanwhile: open it again
    return None


def release_runs(held: Dict[str, Tuple[int, Path]]) -> None:
    r"""Releases the claims :obj:`held` (:func:`claim_runs`) and removes
    their files (while still locked, so that a process waiting on one
    opens a new file)."""
    for fd, path in held.values():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(fd)


def write_whole(out: Path, record: Dict[str, Any]) -> None:
    r"""Replaces ``<out>/.queue.json`` by :obj:`record`, through a
    temporary file of this writer's own."""
    fd, tmp = tempfile.mkstemp(prefix=f'{RECORD}.', suffix='.tmp', dir=out)
    try:
        with os.fdopen(fd, 'w') as f:
            f.write(json.dumps(record, indent=1) + '\n')
        os.replace(tmp, out / RECORD)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def totals(cells: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    r"""A rate's sums over its :obj:`cells`: steady ``seconds`` (a cell
    recorded without them: its wall seconds), ``units``, their
    ``seconds_per_unit`` and the mean ``setup_s`` of a cell."""
    seconds = sum(c.get('steady_s', c['seconds']) for c in cells)
    units = sum(c['units'] for c in cells)
    setup = sum(c.get('setup_s', 0.0) for c in cells)
    return dict(seconds=seconds, units=units,
                seconds_per_unit=seconds / units if units else None,
                setup_s=setup / len(cells) if cells else 0.0)


def add_cell(out: Path, name: str, device: str,
             cell: Dict[str, Any]) -> List[Dict[str, Any]]:
    r"""Adds :obj:`cell` (its ``seconds``, ``steady_s``, ``setup_s``,
    ``units``) to the rate :obj:`name` of :obj:`out`'s record, under the
    lock; returns the rate's cells, every writer's."""
    with locked(out):
        record = read_record(out)
        cells = [*(record.get(name) or {}).get('cells', []), cell]
        record[name] = dict(device=device, **totals(cells), cells=cells)
        write_whole(out, record)
    return cells


def add_failures(out: Path, keys: Sequence[str]) -> Dict[str, int]:
    r"""Counts one more failure of each run of :obj:`keys` in :obj:`out`'s
    record, under the lock; returns every run's count by digest."""
    with locked(out):
        record = read_record(out)
        counts = dict(record.get(FAILED) or {})
        for key in keys:
            digest = run_digest(key)
            counts[digest] = counts.get(digest, 0) + 1
        record[FAILED] = counts
        write_whole(out, record)
    return counts


def add_stopped(out: Path, label: str,
                stopped: Optional[Dict[str, Any]]) -> None:
    r"""Records, under the lock, that the cell :obj:`label` was stopped:
    :obj:`stopped` (its ``seconds``, and the shares of its epochs it
    ``kept`` and ``left``) replaces what an earlier stop recorded;
    :obj:`None` forgets the cell (it finished)."""
    with locked(out):
        record = read_record(out)
        cells = dict(record.get(STOPPED) or {})
        if stopped is None and label not in cells:
            return
        if stopped is None:
            del cells[label]
        else:
            cells[label] = stopped
        record[STOPPED] = cells
        write_whole(out, record)


def stopped_cells(out: Path) -> Dict[str, Dict[str, Any]]:
    r"""The cells stopped at a deadline in :obj:`out` (:func:`add_stopped`),
    by label."""
    return dict(read_record(out).get(STOPPED) or {})


def failures(out: Path) -> Dict[str, int]:
    r"""How many times each run (by digest) failed in :obj:`out`."""
    return dict(read_record(out).get(FAILED) or {})


def rate_cells(out: Path, name: str) -> List[Dict[str, Any]]:
    r"""The cells of the rate :obj:`name` in :obj:`out`'s record."""
    return list((read_record(out).get(name) or {}).get('cells', []))


def rates(record: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    r"""The rates of :obj:`record` by name (without the failure counts and
    the stopped cells)."""
    return {k: v for k, v in record.items() if k not in (FAILED, STOPPED)}
