r"""Training the GPU queue's cells in this process within a deadline.

A cell starts only when its estimate (:class:`gnorm.study.runs.cost.Rate`)
fits the time left; a cell without an estimate (no rate for the device
yet) starts only as the cheapest. A cell running at the deadline is
stopped then (:func:`stops_at`: ``SIGALRM`` raises :class:`Deadline`, and
:func:`gnorm.train.train_runs` writes what its runs hold, as for Ctrl-C);
its finished runs are kept, and so are its runs' checkpoints (node runs
write one every ``train.checkpoint_every`` epochs): the next call resumes
them. Its seconds and the shares of its epochs it kept and left are
recorded (:func:`gnorm.study.runs.record.add_stopped`), and the next
call's estimate of the cell is at least what they say
(:func:`estimate_of`). The call ends within its budget and
:data:`MARGIN_S`.

Before each cell the queue claims its runs (a lock of each run in
``<out>/.queue.runs``, held while the cell trains) and checks them again:
those another queue claimed, another process finished meanwhile (a
finished run of the run's own identity), or one trains now (it holds the
run folder's lock), are not this process's to train, count or time. A
folder that holds a run of another config (the spec changed, its folder
names did not) is trained over, one line says so. After each cell it adds
the cell to the record (:func:`gnorm.study.runs.record.add_cell`, merged
with every other writer's) and re-estimates from the merged rate. After
any failure the cells left are sorted cheapest first. A cell whose step
cannot be captured as CUDA graphs trains again eagerly, and so do the
cells after it; a run that diverges fails its cell and the queue goes on
as it was. Only a run that failed while training counts a failure
(:func:`gnorm.study.runs.record.add_failures`): a run its cell finished
does not, and a cell refused before training (missing data, out of memory
at the start, a bad config: no run wrote its results) counts none, and
is tried again by the next call.

One module: the deadline, the claims of other processes, the checkpoints
a stopped cell keeps and the record a cell adds are the one loop of
:class:`Queue`, each read at each cell; split apart, each would take the
loop's state as arguments."""
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from gnorm.errors import GnormError, Interrupted
from gnorm.study.queue.plan import Pending, eagerly
from gnorm.study.runs.cost import Rate, duration, refresh
from gnorm.study.runs.record import (add_cell, add_failures, add_stopped,
                                     claim_runs, rate_cells, release_runs,
                                     stopped_cells)
from gnorm.study.runs.runner import CAPTURE, DIVERGED, FAILED, OK
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


def record_of(run: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    r"""The ``results.json`` in :obj:`run`'s folder (:obj:`None`: none, or
    unreadable)."""
    try:
        found = json.loads((Path(run['dir']) / 'results.json').read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def same_run(record: Dict[str, Any], run: Dict[str, Any]) -> bool:
    r"""Whether :obj:`record` (a ``results.json``) is of :obj:`run`'s
    identity (:func:`gnorm.results.keys.record_identity`, as its ``key``
    says it: :func:`gnorm.study.runs.compose.run_key`)."""
    from gnorm.results.keys import record_identity
    from gnorm.study.runs.compose import run_key
    return run_key(record_identity(record)) == run['key']


def finished_here(run: Dict[str, Any]) -> bool:
    r"""Whether :obj:`run`'s folder holds a finished run (``status: ok``)
    of :obj:`run`'s identity (:func:`same_run`) made by the user's code of
    now (:func:`gnorm.results.user_code.changed_user_code`)."""
    from gnorm.results.user_code import changed_user_code
    found = record_of(run)
    return found is not None and found.get('status') == 'ok' and \
        same_run(found, run) and not changed_user_code(found)


def other_config(run: Dict[str, Any]) -> Optional[str]:
    r"""How the run that :obj:`run`'s folder holds (its ``results.json``,
    finished or stopped) differs from :obj:`run` (``train.epochs``: the
    dotted keys where their identities differ), or :obj:`None`: the
    folder holds none, or one of :obj:`run`'s identity."""
    from gnorm.results.keys import differences, record_identity
    found = record_of(run)
    if found is None or not isinstance(found.get('config'), dict) or \
            same_run(found, run):
        return None
    keys = differences(record_identity(found), json.loads(run['key']))
    return ', '.join(keys[:4]) + (', ...' if len(keys) > 4 else '')


def train_over(item: Pending, runs: List[Dict[str, Any]]) -> None:
    r"""Removes the ``results.json`` and ``checkpoint.pt`` of the
    :obj:`runs` of :obj:`item` whose folders hold a run of another config
    (:func:`other_config`), so that they train again rather than being
    refused (``resume=true`` keeps another config's run); one line says
    so."""
    from gnorm.train.checkpoints import CHECKPOINT
    others = {r['key']: other_config(r) for r in runs}
    others = {k: v for k, v in others.items() if v is not None}
    if not others:
        return
    for run in (r for r in runs if r['key'] in others):
        for name in ('results.json', CHECKPOINT):
            try:
                os.unlink(Path(run['dir']) / name)
            except FileNotFoundError:
                pass
    print(f'{item.label}: {len(others)} runs of another config in their '
          f'folders (differs in {next(iter(others.values()))}): trained '
          f'again', flush=True)


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
    no other process finished meanwhile (a finished run of its identity:
    a folder of another config's run is this process's, to train over)
    or trains now; :obj:`None` when none is left."""
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
    (:data:`gnorm.study.runs.runner.OK`, ``DIVERGED``, ``CAPTURE``,
    ``FAILED``). An error of the cell (out of memory, a failed CUDA graph
    capture) is printed in one line, not raised: the queue goes on."""
    from gnorm.study.runs.runner import train_here
    study = item.study
    try:
        return train_here(item.cell, item.left, study.composer, study.found)
    except Exception as e:  # one cell's failure, not the queue's
        print(f'error: {item.label}: {one_line(e)}', file=sys.stderr,
              flush=True)
        return FAILED


def epochs_of(record: Dict[str, Any], run: Dict[str, Any]) -> int:
    r"""The epochs of the run :obj:`run` (its ``results.json``
    :obj:`record`'s config, else its composition's), at least 1."""
    train = (record.get('config') or {}).get('train') or {}
    return max(int(train.get('epochs') or run.get('epochs') or 1), 1)


def trained_share(found: List[Dict[str, Any]],
                  runs: List[Dict[str, Any]]) -> float:
    r"""The share of the epochs of :obj:`runs` that their results
    :obj:`found` trained in this call: a run resumed from a checkpoint
    (``resumed_from_epoch``) trained only the rest."""
    shares = [1 - int(f.get('resumed_from_epoch') or 0) / epochs_of(f, r)
              for f, r in zip(found, runs)]
    return sum(shares) / len(shares) if shares else 1.0


def timed(item: Pending, seconds: float) -> Dict[str, Any]:
    r"""The record's entry of :obj:`item` trained in :obj:`seconds`: its
    steady seconds (the ``loop_s`` of its runs' results, each over the
    runs of its batch), its set-up (the rest) and units (those of the
    epochs trained here: a resumed run's rest)."""
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
                setup_s=round(seconds - steady, 3),
                units=round(item.units * trained_share(found, item.left), 3))


def estimate_of(item: Pending, rate: Rate,
                stopped: Optional[Dict[str, Any]] = None) -> Optional[float]:
    r"""The seconds :obj:`item` is estimated to take: :obj:`rate`'s; for a
    cell stopped at a deadline before (:obj:`stopped`:
    :func:`gnorm.study.runs.record.add_stopped`), the share of its epochs
    it left, and at least what that training says: that share at the pace
    it kept its share, or, where it kept none, the seconds it ran more."""
    if not stopped:
        return rate.estimate(item.units)
    found = rate.estimate(item.units * stopped['left'])
    if stopped['kept'] > 0:
        floor = stopped['seconds'] * stopped['left'] / stopped['kept']
    else:
        floor = stopped['seconds'] + (found or 0.0)
    return floor if found is None else max(found, floor)


def fits(item: Pending, rate: Rate, deadline: float, tag: str,
         stopped: Optional[Dict[str, Any]] = None) -> Optional[str]:
    r"""Why :obj:`item` does not train now (``unreached``: no time left,
    ``skipped``: its estimate (:func:`estimate_of`) exceeds the time left,
    said in a line), or :obj:`None`."""
    left_s, estimate = deadline - clock(), estimate_of(item, rate, stopped)
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


Stamp = Optional[Tuple[int, int]]


def stamp(run: Dict[str, Any]) -> Stamp:
    r"""When :obj:`run`'s ``results.json`` was last replaced (its inode
    and modification time; :obj:`None`: none), to tell the runs a cell's
    training wrote."""
    try:
        found = os.stat(Path(run['dir']) / 'results.json')
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


def written(item: Pending, before: Dict[str, Stamp]) -> List[Dict[str, Any]]:
    r"""The runs of :obj:`item` whose ``results.json`` was written since
    :obj:`before` (:func:`stamp` by key): those its training reached."""
    return [r for r in item.left if stamp(r) != before[r['key']]]


def kept_and_left(item: Pending, wrote: List[Dict[str, Any]]
                  ) -> Tuple[float, float]:
    r"""The shares of :obj:`item`'s epochs that its training, stopped,
    kept (a run's epochs from where it resumed to its last checkpoint,
    ``checkpoint_epoch``, or to its end where it finished; only the runs
    it :obj:`wrote` count) and that are left to train."""
    keys = {r['key'] for r in wrote}
    kept = left = 0.0
    for run in item.left:
        found = record_of(run) or {}
        epochs = epochs_of(found, run)
        done = epochs if found.get('status') == 'ok' else \
            int(found.get('checkpoint_epoch') or 0)
        began = int(found.get('resumed_from_epoch') or 0) \
            if run['key'] in keys else done
        kept += max(done - began, 0) / epochs
        left += (epochs - done) / epochs
    runs = max(len(item.left), 1)
    return kept / runs, left / runs


def failed_cell(item: Pending, ended: str, tag: str, out: Path,
                wrote: List[Dict[str, Any]]) -> None:
    r"""Says how :obj:`item` failed and counts a failure of each of its
    runs that failed while training (its results, which the cell
    :obj:`wrote`, not a finished run) in :obj:`out`'s record. A run the
    cell finished is kept as finished; a cell refused before training
    (no run written: missing data, out of memory at the start, a bad
    config) counts no failure and is tried again by the next call."""
    done = {r['key']: record_of(r) for r in wrote if finished_here(r)}
    item.study.found.update(done)
    failed = [r['key'] for r in wrote if r['key'] not in done]
    if not wrote:
        print(f'{tag}: refused before training (the error above): not a '
              f'failure of its runs, tried again by the next call',
              flush=True)
    elif ended == DIVERGED:  # a run's loss, not the capture
        print(f'{tag}: a run diverged (recorded as failed); the queue goes '
              f'on' + (' with CUDA graphs' if item.graphed else ''),
              flush=True)
    if failed:
        add_failures(out, failed)


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
        why = fits(item, self.rate, self.deadline, tag,
                   stopped_cells(self.out).get(item.label))
        if why == 'unreached':
            self.counts['unreached'] += 1 + len(self.todo)
            return False
        if why is not None:
            self.counts[why] += 1
            return True
        return self.cell(item, tag)

    def cell(self, item: Pending, tag: str) -> bool:
        r"""Trains :obj:`item` (over the runs of another config its
        folders hold, :func:`train_over`); whether the queue goes on."""
        train_over(item, item.left)
        began, before = clock(), {r['key']: stamp(r) for r in item.left}
        try:
            with stops_at(self.deadline):
                ended = train_cell(item)
        except Deadline:
            self.stopped(item, tag, clock() - began, written(item, before))
            return False
        if ended == OK:
            add_stopped(self.out, item.label, None)
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
            failed_cell(item, ended, tag, self.out, written(item, before))
            self.counts['failed'] += 1
            self.todo = cheapest_first(self.todo)
        if self.after_cell is not None:
            self.after_cell()
        return True

    def stopped(self, item: Pending, tag: str, seconds: float,
                wrote: List[Dict[str, Any]]) -> None:
        r"""Says that :obj:`item` was stopped at the deadline after
        :obj:`seconds` and, where it stopped runs that were training
        (:obj:`wrote` their results, interrupted), records its seconds and
        the shares of its epochs kept and left for the next call's
        estimate (a cell stopped waiting for another process's run is not
        measured)."""
        cut = any((record_of(r) or {}).get('status') == 'interrupted'
                  for r in wrote)
        kept, left = kept_and_left(item, wrote)
        if cut:
            add_stopped(self.out, item.label, dict(
                seconds=round(seconds, 3), kept=round(kept, 6),
                left=round(left, 6), units=item.units))
        print(f'{tag}: stopped at the deadline after {duration(seconds)}; '
              f'its finished runs are kept'
              + (f', and its checkpoints ({kept:.0%} of its epochs kept, '
                 f'{left:.0%} left: the next call resumes them)' if cut
                 else ''), flush=True)
        self.counts['stopped'] += 1
        self.counts['unreached'] += len(self.todo)


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
