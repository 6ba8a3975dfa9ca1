r"""Training the GPU queue's cells in this process within a deadline.

A cell starts only when its estimate (:class:`gnorm.study.queue_cost.Rate`)
fits the time left; a cell without an estimate (no rate for the device
yet) starts only as the cheapest. A cell running at the deadline is
stopped then (:func:`stops_at`: ``SIGALRM`` raises :class:`Deadline`, and
:func:`gnorm.train.train_runs` writes what its runs hold, as for Ctrl-C);
its finished runs are kept. The call ends within its budget and
:data:`MARGIN_S`.

Before each cell the queue claims its runs (a lock of each run in
``<out>/.queue.runs``, held while the cell trains) and checks them again:
those another queue claimed, another process finished meanwhile, or one
trains now (it holds the run folder's lock), are not this process's to
train, count or time. After each cell it adds the
cell to the record (:func:`gnorm.study.queue_record.add_cell`, merged
with every other writer's) and re-estimates from the merged rate. After
any failure the cells left are sorted cheapest first. A cell whose step
cannot be captured as CUDA graphs trains again eagerly, and so do the
cells after it; a run that diverges fails its cell and the queue goes on
as it was; the runs of a failed cell count a failure each
(:func:`gnorm.study.queue_record.add_failures`)."""
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

from gnorm.errors import GnormError, Interrupted
from gnorm.study.queue_cost import Rate, duration, refresh
from gnorm.study.queue_plan import Pending, eagerly
from gnorm.study.queue_record import (add_cell, add_failures, claim_runs,
                                      rate_cells, release_runs)
from gnorm.study.runner import CAPTURE, DIVERGED, FAILED, OK
from gnorm.train.common import one_line

INF = float('inf')
# Seconds a call may run past its budget: a cell stopped at the deadline
# writes what its runs hold, the record and the window's archive.
MARGIN_S = 20.0
clock = time.monotonic  # the tests set their own


class Deadline(Interrupted):
    r"""The budget's end while a cell trains (``SIGALRM``): its runs stop
    as for Ctrl-C, writing what they hold."""

    def __init__(self) -> None:
        super().__init__(signal.SIGALRM)


def _alarm(signum: int, frame: Any) -> None:
    raise Deadline()


@contextlib.contextmanager
def stops_at(deadline: float) -> Iterator[None]:
    r"""Raises :class:`Deadline` inside the block at :obj:`deadline` (on
    :func:`clock`); nothing without one. A deadline off the main thread,
    where no signal can reach, is refused in one line
    (:class:`gnorm.errors.GnormError`) rather than silently not kept."""
    left = deadline - clock()
    if left == INF:
        yield
        return
    if threading.current_thread() is not threading.main_thread():
        raise GnormError('a queue deadline binds on the main thread only '
                         '(SIGALRM stops the cell there); call the queue '
                         'from the main thread, or without a budget')
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cheapest_first(items: List[Pending]) -> List[Pending]:
    return sorted(items, key=lambda i: i.units)


def first_cheapest(items: List[Pending], rate: Rate) -> List[Pending]:
    r""":obj:`items`, the cheapest first while :obj:`rate` has no value
    (it trains first and gives it)."""
    if rate.per_unit() is not None or not items:
        return list(items)
    cheapest = min(items, key=lambda i: i.units)
    return [cheapest, *(i for i in items if i is not cheapest)]


def finished_here(run: Dict[str, Any]) -> bool:
    r"""Whether :obj:`run`'s folder holds a finished run (``status: ok``;
    :func:`gnorm.train.train_runs` checks that it is this run's) made by
    the user's code of now
    (:func:`gnorm.results.user_code.changed_user_code`)."""
    from gnorm.results.user_code import changed_user_code
    try:
        found = json.loads((Path(run['dir']) / 'results.json').read_text())
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get('status') == 'ok' and \
        not changed_user_code(found)


def busy(run: Dict[str, Any]) -> bool:
    r"""Whether another process trains :obj:`run` now (holds its folder's
    lock, :mod:`gnorm.train.locks`)."""
    from gnorm.train.locks import lock_folder, release
    held = lock_folder(Path(run['dir']))
    if held is None:
        return True
    release(held)
    return False


def still_left(item: Pending, claimed: Dict[str, int]) -> Optional[Pending]:
    r""":obj:`item` with only the runs this process :obj:`claimed` that
    no other process finished meanwhile or trains now; :obj:`None` when
    none is left."""
    left = [r for r in item.left if r['key'] in claimed
            and not finished_here(r) and not busy(r)]
    if not left:
        return None
    return item if len(left) == len(item.left) else item.narrowed(left)


@contextlib.contextmanager
def claimed(item: Pending, out: Path) -> Iterator[Optional[Pending]]:
    r"""Holds, for the block, this process's claim on the runs of
    :obj:`item` it is left to train (:func:`still_left`), and yields the
    cell of those runs (:obj:`None`: none)."""
    held = claim_runs(out, [r['key'] for r in item.left])
    try:
        yield still_left(item, held)
    finally:
        release_runs(held)


def train_cell(item: Pending) -> str:
    r"""Trains the unfinished runs of :obj:`item`'s cell in this process
    (as one model where they may be); returns how it ended
    (:data:`gnorm.study.runner.OK`, ``DIVERGED``, ``CAPTURE``,
    ``FAILED``). An error of the cell (out of memory, a failed CUDA graph
    capture) is printed in one line, not raised: the queue goes on."""
    from gnorm.study.runner import train_here
    study = item.study
    try:
        return train_here(item.cell, item.left, study.composer, study.found)
    except Exception as e:  # one cell's failure, not the queue's
        print(f'error: {item.label}: {one_line(e)}', file=sys.stderr,
              flush=True)
        return FAILED


def timed(item: Pending, seconds: float) -> Dict[str, Any]:
    r"""The record's entry of :obj:`item` trained in :obj:`seconds`: its
    steady seconds (the ``loop_s`` of its runs' results, each over the
    runs of its batch), its set-up (the rest) and units."""
    found = [item.study.found.get(r['key']) or {} for r in item.left]
    loops = [f['loop_s'] / max(int(f.get('batch_runs') or 1), 1)
             for f in found if f.get('loop_s') is not None]
    steady = min(sum(loops), seconds) if len(loops) == len(found) \
        else seconds
    c = item.cell
    return dict(study=item.study.spec.name, dataset=c['dataset'],
                row=c['row'], depth=c['depth'], runs=len(item.left),
                cuda_graph=item.graphed, seconds=round(seconds, 3),
                steady_s=round(steady, 3),
                setup_s=round(seconds - steady, 3), units=item.units)


def fits(item: Pending, rate: Rate, deadline: float,
         tag: str) -> Optional[str]:
    r"""Why :obj:`item` does not train now (``unreached``: no time left,
    ``skipped``: its estimate exceeds the time left, said in a line), or
    :obj:`None`."""
    left_s, estimate = deadline - clock(), rate.estimate(item.units)
    if left_s <= 0:
        return 'unreached'
    if estimate is not None and estimate > left_s:
        print(f'{tag}, estimate {duration(estimate)}, {duration(left_s)} '
              f'left: skipped', flush=True)
        return 'skipped'
    print(f'{tag}, estimate {duration(estimate)}'
          + (f', {duration(left_s)} left' if left_s < INF else '')
          + (': training as CUDA graphs' if item.graphed
             else ': training'), flush=True)
    return None


def failed_cell(item: Pending, ended: str, tag: str, out: Path) -> None:
    r"""Says how :obj:`item` failed and counts a failure of each of its
    runs left unfinished in :obj:`out`'s record."""
    if ended == DIVERGED:  # a run's loss, not the capture
        print(f'{tag}: a run diverged (recorded as failed); the queue goes '
              f'on' + (' with CUDA graphs' if item.graphed else ''),
              flush=True)
    add_failures(out, [r['key'] for r in item.left
                       if r['key'] not in item.study.found])


class Queue:
    r"""The cells :obj:`todo` of one call, trained in order into
    :obj:`out` until :obj:`deadline` (see the module's text); ``counts``:
    the cells ``trained``, ``failed``, ``skipped`` (over the time left),
    ``unreached``, ``stopped`` (at the deadline) and ``elsewhere``
    (trained by another process)."""

    def __init__(self, items: List[Pending], rate: Rate, deadline: float,
                 out: Path, device: str, eager: Optional[Rate] = None,
                 after_cell: Optional[Callable[[], Any]] = None):
        if eager is None and any(i.graphed for i in items):
            raise ValueError('train: cells replayed as CUDA graphs need the '
                             'eager rate to fall back to')
        self.todo = first_cheapest(items, rate)
        self.rate, self.eager, self.deadline = rate, eager, deadline
        self.out, self.device, self.after_cell = out, device, after_cell
        self.counts = dict(trained=0, failed=0, skipped=0, unreached=0,
                           stopped=0, elsewhere=0)
        self.done, self.total = 0, len(self.todo)

    def run(self) -> Dict[str, int]:
        r"""Trains the cells; returns :attr:`counts`."""
        while self.todo:
            with claimed(self.todo.pop(0), self.out) as item:
                self.done += 1
                if not self.next(item):
                    break
        return self.counts

    def next(self, item: Optional[Pending]) -> bool:
        r"""Trains :obj:`item` if it fits (:obj:`None`: another process's);
        whether the queue goes on."""
        if item is None:
            self.counts['elsewhere'] += 1
            return True
        tag = (f'[{self.done}/{self.total}] {item.label}: '
               f'{len(item.left)} runs')
        if self.rate.name:  # every writer's cells so far
            refresh(self.rate, rate_cells(self.out, self.rate.name))
        why = fits(item, self.rate, self.deadline, tag)
        if why == 'unreached':
            self.counts['unreached'] += 1 + len(self.todo)
            return False
        if why is not None:
            self.counts[why] += 1
            return True
        return self.cell(item, tag)

    def cell(self, item: Pending, tag: str) -> bool:
        r"""Trains :obj:`item`; whether the queue goes on."""
        began = clock()
        try:
            with stops_at(self.deadline):
                ended = train_cell(item)
        except Deadline:
            print(f'{tag}: stopped at the deadline after '
                  f'{duration(clock() - began)}; its finished runs are '
                  f'kept', flush=True)
            self.counts['stopped'] += 1
            self.counts['unreached'] += len(self.todo)
            return False
        if ended == OK:
            refresh(self.rate, add_cell(self.out, self.rate.name,
                                        self.device,
                                        timed(item, clock() - began)))
            self.counts['trained'] += 1
        elif ended == CAPTURE and item.graphed:
            print(f'{tag}: failed as CUDA graphs; it and the cells after '
                  f'it train eagerly', flush=True)
            self.todo = cheapest_first(eagerly([item, *self.todo],
                                               self.device))
            self.rate, self.done = self.eager, self.done - 1
        else:
            failed_cell(item, ended, tag, self.out)
            self.counts['failed'] += 1
            self.todo = cheapest_first(self.todo)
        if self.after_cell is not None:
            self.after_cell()
        return True


def train(items: List[Pending], rate: Rate, deadline: float, out: Path,
          device: str, after_cell: Optional[Callable[[], Any]] = None,
          eager: Optional[Rate] = None) -> Dict[str, int]:
    r"""Trains :obj:`items` in order into :obj:`out` until
    :obj:`deadline` (:class:`Queue`; :obj:`eager`: the rate a cell that
    fails as CUDA graphs falls back to; :obj:`after_cell`: called after
    every cell); returns the numbers of cells ``trained``, ``failed``,
    ``skipped``, ``unreached``, ``stopped`` and ``elsewhere``."""
    return Queue(items, rate, deadline, out, device, eager,
                 after_cell).run()
