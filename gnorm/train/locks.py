r"""One trainer per run: the process that trains a run holds an exclusive
lock on the run's folder (:func:`fcntl.flock`) until the run ends, so that
two processes asking for one run (two studies into one runs folder, two
multiruns) do not both train it, each appending its epochs to its
``metrics.csv``. :func:`gnorm.train.run.train_runs` trains the runs whose
folders it holds, then waits for the others and takes what their holders
finished. The lock is the kernel's: a process that ends, however it ends,
releases it, and no lock file stays behind. Under ``torchrun``, whose
processes train each run together, runs are not locked.
"""
import fcntl
import os
from pathlib import Path
from typing import NamedTuple, Optional

from gnorm.errors import renamed
from gnorm.results.keys import world_size


class RunLock(NamedTuple):
    r"""The lock of a run folder: its file descriptor ``fd`` (-1: no lock
    taken, under ``torchrun``), the ``folder``, and whether :func:`lock_folder`
    ``made`` it (:func:`release` then removes it if it is still empty: a
    run refused before training writes nothing)."""
    fd: int
    folder: Path
    made: bool


def _same(fd: int, folder: Path) -> bool:
    r"""Whether :obj:`fd` is open on :obj:`folder` still (not on a folder
    that its last holder removed)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(folder))
    except FileNotFoundError:
        return False


def lock_folder(folder: Path, wait: bool = False) -> Optional[RunLock]:
    r"""Takes the lock of the run folder :obj:`folder` (made if missing),
    for :func:`release`. When another holder has it: :obj:`None`, or,
    with :obj:`wait`, the lock once that holder releases it. On a file
    system without such locks the run goes on unlocked."""
    if world_size() > 1:
        return RunLock(-1, folder, False)
    while True:
        made = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:  # e.g. no locks on this file system
            return RunLock(fd, folder, made)
        if _same(fd, folder):
            return RunLock(fd, folder, made)
        os.close(fd)  # removed meanwhile: lock the folder made anew


def release(held: RunLock) -> None:
    r"""Releases the lock :obj:`held` (:func:`lock_folder`)."""
    if held.fd < 0:
        return
    if held.made:
        try:
            held.folder.rmdir()
        except OSError:  # not empty, or gone
            pass
    os.close(held.fd)


# The former names, for one release.
Held = RunLock
hold = renamed(lock_folder, 'gnorm.train.locks.hold')
