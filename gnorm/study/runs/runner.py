r"""Trains what a study misses: the unfinished runs of a depth study's
cells in this process (:func:`gnorm.train.train_runs`: runs that differ
only in the keys the engine stacks train as one model) or, with a Hydra
launcher, each cell as ``python -m gnorm.train -m hydra/launcher=NAME``;
a paired study's (row, seed) runs one ``python -m gnorm.train`` each,
resuming from their checkpoints. Interrupt at any time: finished runs are
kept, and the same command goes on."""
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

from gnorm.study.runs.compose import Composer, write_hydra, command
from gnorm.study.runs.cost import Rate, duration, units
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import Spec


def _terminate(signum: int, frame: Any) -> None:
    from gnorm.errors import Interrupted
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    r"""SIGTERM inside the block stops it as Ctrl-C does: a
    :class:`gnorm.errors.Interrupted`, a :class:`KeyboardInterrupt`."""
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def show_progress() -> logging.Handler:
    r"""Prints the epoch lines of the runs trained in this process
    (:mod:`gnorm.train.progress`, every ``train.log_every`` epochs) on
    stdout with the time of day, so that a cell's progress shows in a
    terminal and under ``nohup`` alike; returns the handler."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter('  %(asctime)s %(message)s',
                                           '%H:%M:%S'))
    logger = logging.getLogger('gnorm.train.progress')
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


def _subprocess(args: List[str], threads: Optional[int]) -> bool:
    r"""Runs ``python`` with :obj:`args` (``OMP_NUM_THREADS`` =
    :obj:`threads` when given); returns whether it succeeded. Ctrl-C or
    SIGTERM of the child stops the study."""
    env = dict(os.environ)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    proc = subprocess.run([sys.executable, *args], env=env)
    if proc.returncode in (130, 143, -2, -15):
        raise KeyboardInterrupt
    return proc.returncode == 0


# How training a cell in this process ended (train_here): every run
# finished; a run diverged (a NaN or infinite loss: recorded as failed, the
# others kept); the step could not be captured as a CUDA graph (the same
# runs can train eagerly); another error.
OK, DIVERGED, CAPTURE, FAILED = 'ok', 'diverged', 'capture', 'failed'


def train_here(cell: Dict[str, Any], left: List[Dict[str, Any]],
               composer: Composer, found: Dict[str, Any]) -> str:
    r"""Trains the runs :obj:`left` of :obj:`cell` in this process, adds
    the finished ones to :obj:`found`; returns how it ended: :data:`OK`,
    :data:`DIVERGED`, :data:`CAPTURE` or :data:`FAILED` (the error said in
    one line)."""
    from gnorm.errors import CaptureError, GnormError, TrainingError
    from gnorm.train import train_runs
    cfgs = [composer.config(r) for r in left]
    for run, cfg in zip(left, cfgs):
        write_hydra(run, cfg)
    handler = show_progress()
    try:
        results = train_runs(cfgs, [str(r['dir']) for r in left],
                             [r['info'] for r in left])
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        return (DIVERGED if isinstance(e, TrainingError) else
                CAPTURE if isinstance(e, CaptureError) else FAILED)
    finally:
        logging.getLogger('gnorm.train.progress').removeHandler(handler)
    for run, result in zip(left, results):
        if result.get('status') == 'ok':
            found[run['key']] = result
    return OK


def cell_seconds(rate: Optional[Rate], cost: float, cells: int = 1) -> str:
    r"""``, about 25 min here`` for :obj:`cells` cells of :obj:`cost` cost
    units in all at :obj:`rate` (``no rate`` without one for this
    device); nothing without :obj:`rate`."""
    if rate is None:
        return ''
    seconds = rate.estimate(cost, cells)
    return (f', about {duration(seconds)} here' if seconds is not None
            else ', no rate for this device yet')


def changed_runs(todo: List[Dict[str, Any]],
                 found: Dict[str, Any]) -> Dict[str, str]:
    r"""The runs of the cells :obj:`todo` whose finished run in
    :obj:`found` was made by another version of a file of the user's
    code its config names
    (:func:`gnorm.results.user_code.changed_user_code`; :obj:`found`
    holds full or short records, :mod:`gnorm.study.runs.index`), by key,
    each with the ``retraining: ...`` line that says so: they are trained
    again."""
    from gnorm.results.user_code import retraining
    from gnorm.study.runs.index import changed_code
    lines = {}
    for run in (r for c in todo for r in c['runs'] if r['key'] in found):
        record = found[run['key']]
        changed = changed_code(record)
        if changed:
            lines[run['key']] = retraining(
                record, changed, record.get('_path') or run['dir'])
    return lines


def run_cells(spec: Spec, todo: List[Dict[str, Any]], runs_dir: Path,
              sets: Sequence[str], found: Dict[str, Any],
              composer: Composer, threads: Optional[int], dry_run: bool,
              launcher: Optional[str] = None,
              rate: Optional[Rate] = None) -> int:
    r"""Trains the unfinished runs of the cells :obj:`todo` of a depth
    study in this process (with :obj:`launcher`: each cell with unfinished
    runs as a ``python -m gnorm.train -m`` multirun); returns the number
    of cells that failed. :obj:`rate`: the device's, to say each cell's
    seconds and their total (:mod:`gnorm.study.runs.cost`)."""
    failed, cells_left, runs_left, cost_left = 0, 0, 0, 0
    total = sum(len(c['runs']) for c in todo)
    retrain = changed_runs(todo, found)
    done = sum(r['key'] in found and r['key'] not in retrain
               for c in todo for r in c['runs'])
    print(f'{total} runs in {len(todo)} cells, {done} done, '
          f'{total - done} to run', flush=True)
    for line in retrain.values():
        print(line, flush=True)
    if rate is not None:
        print(f'seconds here ({rate.name}): {rate.said()}', flush=True)
    for k, cell in enumerate(todo, start=1):
        left = [r for r in cell['runs']
                if r['key'] not in found or r['key'] in retrain]
        n = len(cell['runs'])
        label = (f"[{k}/{len(todo)}] {cell['dataset']} {cell['row']} "
                 f"L={cell['depth']}: {n - len(left)}/{n} done")
        if not left:
            print(label, flush=True)
            continue
        args = command(spec, cell, runs_dir, sets, launcher)
        cost = units(cell, left)
        cells_left, runs_left = cells_left + 1, runs_left + len(left)
        cost_left += cost
        print(f"{label}, {'would run' if dry_run else 'running'} "
              f'{len(left)}{cell_seconds(rate, cost)}'
              f'\n  {shlex.join(args)}', flush=True)
        if dry_run:
            continue
        ok = (_subprocess(args[1:], threads) if launcher
              else train_here(cell, left, composer, found) == OK)
        failed += not ok
    if rate is not None:
        print(f'total: {runs_left} runs to run in {cells_left} cells'
              f'{cell_seconds(rate, cost_left, cells_left)}', flush=True)
    return failed


def run_folder(runs_dir: Path, row: str, seed: int) -> Path:
    r"""The folder of a paired study's run: ``<runs>/<row>/seed_<seed>``."""
    return runs_dir / row / f'seed_{seed}'


def run_overrides(spec: Spec, row: str, seed: int,
                  sets: Sequence[str]) -> List[str]:
    r"""The overrides of a paired study's run of :obj:`row` and
    :obj:`seed`, without its folder."""
    return [*spec.overrides(), *spec.table['rows'][row], f'tag={row}',
            f'seed={seed}', 'resume=true', *sets]


def holds_finished_run(folder: Path, cfg) -> bool:
    r"""Whether :obj:`folder` holds a finished run of :obj:`cfg`
    (:func:`gnorm.results.keys.is_finished`); raises
    :class:`~gnorm.errors.ConfigError` if it holds a finished run of
    another config."""
    from gnorm.train.common import finished_run
    return finished_run(folder / 'results.json', cfg) is not None


def row_seeds(spec: Spec, row: str) -> List[int]:
    r"""The seeds of :obj:`row`: its entry of ``table.row_seeds`` (rows
    that need more seeds to decide), else ``table.seeds``."""
    return list((spec.table.get('row_seeds') or {}).get(
        row, spec.table['seeds']))


def paired_todo(spec: Spec, rows: Sequence[str],
                seeds: Optional[Sequence[int]]) -> List[tuple]:
    r"""The (seed, row) runs of a paired study, seed by seed (an
    interrupted study has whole rows with fewer seeds): the :obj:`seeds`
    of every row of :obj:`rows`, or each row's own (:func:`row_seeds`)."""
    every = sorted({s for row in rows for s in row_seeds(spec, row)})
    return [(seed, row) for seed in (seeds or every) for row in rows
            if seeds or seed in row_seeds(spec, row)]


def run_paired(spec: Spec, rows: Sequence[str],
               seeds: Optional[Sequence[int]], runs_dir: Path,
               sets: Sequence[str], threads: Optional[int],
               dry_run: bool) -> int:
    r"""Runs the (row, seed) runs of a paired study that are not finished
    runs of their config (:func:`finished`), one ``python -m gnorm.train``
    each; returns the number that failed or could not run (a folder
    holding a finished run of another config)."""
    from gnorm.errors import ConfigError
    todo = paired_todo(spec, rows, seeds)
    failed = 0
    for k, (seed, row) in enumerate(todo, start=1):
        folder = run_folder(runs_dir, row, seed)
        overrides = run_overrides(spec, row, seed, sets)
        tag = f'[{k}/{len(todo)}] {row} seed={seed}'
        try:
            if holds_finished_run(folder, compose(overrides)):
                print(f'{tag}: done', flush=True)
                continue
        except ConfigError:
            print(f'{tag}: error: {folder} holds a finished run of another '
                  f'config, kept as it is; pass another --runs', flush=True)
            failed += 1
            continue
        args = ['-m', 'gnorm.train', *overrides, f'hydra.run.dir={folder}']
        print(f"{tag}: {'would run' if dry_run else 'running'}\n"
              f'  python {shlex.join(args)}', flush=True)
        if not dry_run:
            failed += not _subprocess(args, threads)
    return failed
