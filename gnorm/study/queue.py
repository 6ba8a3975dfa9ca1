r"""``python -m gnorm.study queue``: trains, in one process and within a
time budget, the cells that gnorm's depth studies leave for a GPU, most
wanted first, into run folders the studies read.

    python -m gnorm.study queue --list                     # what is pending, in seconds
    python -m gnorm.study queue --budget-s 540 --out DIR   # train what fits into DIR
    python -m gnorm.study queue --device cpu --studies strong_depth --datasets chameleon_filtered --depths 16

Which cells: the unfinished cells of every depth study (gnorm's, or
``--studies``) that the study's ``table.not_run`` marks as GPU work (the
first entry naming the cell says why, and its ``why`` starts with "GPU
work"; "CPU work" with ``--device cpu``, ``--work`` picks either), or,
with ``--datasets``, ``--rows`` or ``--depths``, the cells selected. A run
is finished where the study's runs folder or ``--out`` holds it (the
study's run identity) or the ``--finished`` file lists it (written by
``--write-finished`` where the runs folders are, for a device they do not
travel to); only the unfinished runs of a cell train, as one model where
they differ only in seed, split or scale, and a run two studies share
(one runs folder) trains once, for the cell first in the queue.

Order: ``conf/queue.yaml``'s ``priority``, the first entry a cell matches;
cells of no entry last; the cheapest first within a place.

Time: a cell's cost units (:func:`gnorm.study.compose.cost` of its runs at
their width and epochs) times the device's seconds per unit: the seconds
of the cells trained on this device (``--out``'s record, this call
included) over their units; before any, ``conf/queue.yaml``'s
``calibration`` for the device's name; without one the cheapest cell
trains first and gives it. A cell whose estimate exceeds the time left of
``--budget-s`` (counted from the start) is skipped, a cheaper one after it
may run. Runs go to ``<out>/<runs folder>/<run>``, as in
``experiments/runs``; ``<out>/.queue.json`` records each cell's seconds.
Ctrl-C or SIGTERM keeps every finished cell; the same command goes on. A
cell that fails (an error, out of memory) is counted and the queue goes
on with the next.

CUDA graphs: with ``--cuda-graph`` the cells' node steps replay as CUDA
graphs (``train.cuda_graph=true``, :mod:`gnorm.train.graphed`; not part of
a run's identity: the runs and their folders are those of an eager call).
Their seconds per unit are a rate of their own (``<GPU> (CUDA graphs)``),
the eager one its prior until a cell gives it. A cell that fails as CUDA
graphs trains again eagerly, and so do the cells after it.
"""
import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gnorm.errors import GnormError
from gnorm.study.runner import CAPTURE, DIVERGED, FAILED, OK
from gnorm.study.spec import Spec, SpecError, load_spec, studies
from gnorm.train import CONF_DIR
from gnorm.train.common import one_line

CONFIG = CONF_DIR / 'queue.yaml'
OUT = Path('outputs') / 'queue'
RECORD = '.queue.json'
WORK = {'gpu': 'GPU work', 'cpu': 'CPU work'}
ENTRY_KEYS = ('study', 'datasets', 'rows', 'depths')
AXES = (('datasets', 'dataset'), ('rows', 'row'), ('depths', 'depth'))
INF = float('inf')
clock = time.monotonic  # the tests set their own


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog='python -m gnorm.study queue',
        description='Trains the cells that gnorm\'s depth studies leave '
        'for a GPU, most wanted first, as many as fit in --budget-s.',
        epilog=' '.join(__doc__.split('\n\n')[2].split()))
    found.add_argument('--device', choices=('cuda', 'cpu'),
                       help='where the runs train (default: cuda when '
                       'visible, else cpu)')
    found.add_argument('--work', choices=tuple(WORK), help='the cells '
                       'table.not_run marks as GPU or CPU work (default: '
                       'the device\'s)')
    found.add_argument('--budget-s', type=float, default=INF,
                       metavar='S', help='seconds to train for, from the '
                       'start (default: no limit)')
    found.add_argument('--out', type=Path, default=OUT,
                       help=f'the folder of the runs (default: {OUT})')
    found.add_argument('--list', action='store_true', help='print the '
                       'pending cells and their estimated seconds; train '
                       'nothing')
    found.add_argument('--studies', nargs='+', metavar='NAME',
                       help='only these studies (names or spec files; '
                       'default: gnorm\'s depth studies)')
    found.add_argument('--datasets', nargs='+', metavar='NAME',
                       help='select these datasets\' cells')
    found.add_argument('--rows', nargs='+', metavar='ROW',
                       help='select these rows\' cells')
    found.add_argument('--depths', nargs='+', type=int, metavar='L',
                       help='select these depths\' cells')
    found.add_argument('--config', type=Path, default=CONFIG,
                       help='the priority and calibration (default: '
                       'conf/queue.yaml)')
    found.add_argument('--threads', type=int, help='CPU threads of the runs')
    found.add_argument('--cuda-graph', action='store_true',
                       help='replay the node steps as CUDA graphs '
                       '(train.cuda_graph=true); a cell failing so trains '
                       'again eagerly, and so do the cells after it')
    found.add_argument('--finished', type=Path, metavar='FILE',
                       help='count the runs this file lists as finished '
                       '(for a device without the runs folders)')
    found.add_argument('--write-finished', type=Path, metavar='FILE',
                       help='write the digests of the finished runs of the '
                       'studies\' runs folders and --out into FILE; train '
                       'nothing')
    return found


# ------------------------------------------------------------- the cells


@dataclass
class Study:
    r"""A depth study in the queue: its spec, the
    :class:`~gnorm.study.compose.Composer` of its cells' runs (into
    ``runs``: ``<out>/<runs folder>``), its finished runs by key, and
    whether the runs replay their steps as CUDA graphs."""
    spec: Spec
    composer: Any
    found: Dict[str, Any]
    runs: Path
    graphed: bool = False


@dataclass
class Pending:
    r"""A cell with unfinished runs (:obj:`left`), its cost ``units`` and
    its ``place`` in the priority."""
    study: Study
    cell: Dict[str, Any]
    left: List[Dict[str, Any]]
    units: float
    place: int = 0

    @property
    def graphed(self) -> bool:
        return self.study.graphed

    @property
    def label(self) -> str:
        c = self.cell
        return (f"{self.study.spec.name} {c['dataset']} {c['row']} "
                f"L={c['depth']}")


def load_specs(refs: Optional[Sequence[str]] = None) -> List[Spec]:
    r"""The depth studies :obj:`refs` (names or spec files), checked;
    gnorm's depth studies without."""
    if refs:
        specs = [load_spec(ref) for ref in refs]
        for spec in (s for s in specs if s.kind != 'depth'):
            raise SpecError(f'{spec.name} is a {spec.kind} study; the queue '
                            f'trains the cells of depth studies')
        return specs
    return [s for s in map(load_spec, studies()) if s.kind == 'depth']


def names(entry: Dict[str, Any], cell: Dict[str, Any]) -> bool:
    r"""Whether :obj:`entry` (a ``table.not_run`` entry, a priority entry
    or a selection: ``datasets``, ``rows``, ``depths``, each optional)
    names :obj:`cell`."""
    return all(cell[field] in entry[key] for key, field in AXES
               if key in entry)


def marked(spec: Spec, cell: Dict[str, Any]) -> Optional[str]:
    r"""Why ``table.not_run`` leaves :obj:`cell` (its first entry naming
    the cell, as the report reads it), or :obj:`None`."""
    for entry in spec.table.get('not_run') or []:
        if names(entry, cell):
            return entry['why']
    return None


def wanted(spec: Spec, cell: Dict[str, Any], work: str,
           selection: Dict[str, Any]) -> bool:
    r"""Whether the queue takes :obj:`cell`: selected, or without a
    :obj:`selection` marked as :obj:`work` ("GPU work")."""
    if selection:
        return names(selection, cell)
    return (marked(spec, cell) or '').startswith(work)


def units(composer, cell: Dict[str, Any], left: List[Dict[str, Any]]
          ) -> int:
    r"""The cost units of the runs :obj:`left` of :obj:`cell`, at their
    width and epochs (:func:`gnorm.study.compose.cost`)."""
    from gnorm.study.compose import cost
    cfg = composer.config(left[0])
    hidden = int(cfg.model.get('hidden_channels') or 32)
    return len(left) * cost(cell['dataset'], cell['depth'], cell['base'],
                            hidden, int(cfg.train.epochs))


def digest(key: str) -> str:
    r"""A run's key (:func:`gnorm.study.compose.run_key`) in 16 hex
    digits, as a ``--finished`` file lists it."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Finished:
    r"""The finished runs the queue counts: those below the runs folders
    it reads (each folder read once), and :obj:`digests` (of runs finished
    elsewhere: a ``--finished`` file)."""

    def __init__(self, digests: Sequence[str] = ()):
        self.digests = set(digests)
        self.folders: Dict[Path, Dict[str, Any]] = {}

    def below(self, folders: Sequence[Path]) -> Dict[str, Any]:
        r"""The finished runs below :obj:`folders`, by key."""
        from gnorm.results import load_runs
        from gnorm.study.compose import index
        found: Dict[str, Any] = {}
        for folder in dict.fromkeys(f.resolve() for f in folders):
            if folder not in self.folders:
                self.folders[folder] = index(
                    load_runs(folder, warn=False) if folder.is_dir() else [])
            found.update(self.folders[folder])
        return found

    def holds(self, found: Dict[str, Any], key: str) -> bool:
        return key in found or digest(key) in self.digests


def overrides(device: str, graphed: bool) -> List[str]:
    r"""The overrides the queue adds to every run: its device,
    ``resume=true`` (a run finished in a folder is not trained again, as
    :func:`gnorm.study.runner.run_paired` sets it: a cell tried again
    after a failure trains only what is left), and
    ``train.cuda_graph=true`` where :obj:`graphed`."""
    return [f'device={device}', 'resume=true',
            *(['train.cuda_graph=true'] if graphed else [])]


def study_pending(spec: Spec, out: Path, device: str, work: str,
                  selection: Dict[str, Any], done: Finished,
                  graphed: bool = False) -> List[Pending]:
    r"""The cells of :obj:`spec` the queue takes that have unfinished
    runs, their runs composed into ``<out>/<runs folder>``."""
    from gnorm.study.compose import cells, compose_cells
    t = spec.table
    todo = [c for c in cells(spec, t['datasets'], list(t['rows']),
                             t['depths'], t['seeds'])
            if wanted(spec, c, work, selection)]
    if not todo:
        return []
    runs = out.resolve() / spec.runs_dir().name
    try:
        composer = compose_cells(spec, todo, overrides(device, graphed),
                                 runs)
    except Exception as e:
        raise SpecError(f"{spec.name}: cannot compose the study's runs: "
                        f"{one_line(e)}") from e
    study = Study(spec, composer, done.below([spec.runs_dir(), runs]), runs,
                  graphed)
    found = []
    for cell in todo:
        left = [r for r in cell['runs'] if not done.holds(study.found,
                                                          r['key'])]
        if left:
            found.append(Pending(study, cell, left,
                                 units(composer, cell, left)))
    return found


def pending(specs: Sequence[Spec], out: Path, device: str, work: str,
            selection: Optional[Dict[str, Any]] = None,
            digests: Sequence[str] = (),
            graphed: bool = False) -> List[Pending]:
    r"""The pending cells of :obj:`specs` (see the module's text);
    :obj:`digests`: of runs finished elsewhere (:func:`digest`);
    :obj:`graphed`: their steps replayed as CUDA graphs."""
    done = Finished(digests)
    return [item for spec in specs for item in study_pending(
        spec, out, device, work, selection or {}, done, graphed)]


def eagerly(items: Sequence[Pending], device: str) -> List[Pending]:
    r""":obj:`items`, those replayed as CUDA graphs composed again without
    ``train.cuda_graph`` (one compose per study): the same unfinished runs
    (keys and folders), trained eagerly."""
    from gnorm.study.compose import compose_cells
    by_study: Dict[Tuple[str, Path], List[int]] = {}
    for i, item in enumerate(items):
        if item.graphed:
            study = item.study
            by_study.setdefault((study.spec.name, study.runs), []).append(i)
    found = list(items)
    for ks in by_study.values():
        study = items[ks[0]].study
        cells = [{k: v for k, v in items[i].cell.items() if k != 'runs'}
                 for i in ks]
        eager = Study(study.spec, compose_cells(
            study.spec, cells, overrides(device, False), study.runs),
            study.found, study.runs)
        for i, cell in zip(ks, cells):
            keys = {r['key'] for r in items[i].left}
            found[i] = Pending(eager, cell, [r for r in cell['runs']
                                             if r['key'] in keys],
                               items[i].units, items[i].place)
    return found


def finished_digests(specs: Sequence[Spec], out: Path) -> List[str]:
    r"""The digests of the finished runs in the runs folders of
    :obj:`specs` and below :obj:`out`, sorted."""
    done = Finished()
    keys = {key for spec in specs for key in done.below(
        [spec.runs_dir(), out / spec.runs_dir().name])}
    return sorted(map(digest, keys))


def read_digests(path: Optional[Path]) -> List[str]:
    r"""The digests of the ``--finished`` file :obj:`path` (none without)."""
    if path is None:
        return []
    if not path.is_file():
        raise SpecError(f'--finished: no file {path}; write it with '
                        f'--write-finished {path} where the runs are')
    return path.read_text().split()


# ------------------------------------------------ priority, calibration


def good_entry(entry: Any, known: Sequence[str]) -> bool:
    r"""Whether :obj:`entry` is a priority entry: a study of
    :obj:`known`, and lists of datasets, rows, depths or none."""
    return (isinstance(entry, dict) and entry.get('study') in known
            and not set(entry) - set(ENTRY_KEYS)
            and all(isinstance(entry[key], list) for key, _ in AXES
                    if key in entry))


def read_config(path: Path, known: Sequence[str] = ()) -> Dict[str, Any]:
    r"""``priority`` (a list of entries: ``study`` and optional
    ``datasets``, ``rows``, ``depths``) and ``calibration`` (GPU name:
    seconds per unit) of :obj:`path`; :class:`SpecError` for a bad entry
    or a study not among :obj:`known` and gnorm's."""
    from omegaconf import OmegaConf
    if not Path(path).is_file():
        raise SpecError(f'no queue config {path}')
    try:
        found = OmegaConf.to_container(OmegaConf.load(path)) or {}
    except Exception as e:  # a YAML error, said in one line
        raise SpecError(f"{path} is not a YAML mapping: "
                        f"{one_line(e)}") from None
    if not isinstance(found, dict):
        raise SpecError(f'{path} is not a YAML mapping of priority and '
                        f'calibration')
    bad = sorted(set(found) - {'priority', 'calibration'})
    if bad:
        raise SpecError(f"{path}: unknown key {bad[0]!r}; it takes "
                        f"priority and calibration")
    known = {*known, *studies()}
    for entry in found.get('priority') or []:
        if not good_entry(entry, known):
            raise SpecError(f'{path}: a priority entry takes a study of '
                            f"{', '.join(sorted(known))} and optional "
                            f'lists datasets, rows, depths; got {entry!r}')
    for name, value in (found.get('calibration') or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 < value < float('inf'):  # NaN fails too
            raise SpecError(f'{path}: calibration of {name!r} must be '
                            f'seconds per unit (a finite number > 0), got '
                            f'{value!r}')
    return dict(priority=list(found.get('priority') or []),
                calibration=dict(found.get('calibration') or {}))


def check_priority(priority: Sequence[Dict[str, Any]],
                   specs: Sequence[Spec], path: Path) -> None:
    r"""Raises :class:`SpecError` for a priority entry naming a dataset,
    row or depth its study does not have (a typo would match nothing and
    leave the cells it meant at the end of the queue)."""
    tables = {s.name: s.table for s in specs}
    for entry in priority:
        table = tables.get(entry['study'])
        if table is None:
            continue  # a study not queued in this call
        for key, _ in AXES:
            has = list(table[key])
            bad = [v for v in entry.get(key, []) if v not in has]
            if bad:
                raise SpecError(
                    f"{path}: priority entry of {entry['study']} names "
                    f"{key[:-1]} {bad[0]!r}, which the study does not have "
                    f"(it has {', '.join(map(str, has))})")


def place(priority: Sequence[Dict[str, Any]], item: Pending) -> int:
    r"""The index of the first entry of :obj:`priority` naming the cell
    of :obj:`item`; ``len(priority)`` for none."""
    for k, entry in enumerate(priority):
        if entry['study'] == item.study.spec.name and names(entry,
                                                            item.cell):
            return k
    return len(priority)


def order(items: List[Pending], priority: Sequence[Dict[str, Any]]
          ) -> List[Pending]:
    r""":obj:`items` by their place in :obj:`priority`, cheapest first
    within a place."""
    for item in items:
        item.place = place(priority, item)
    return sorted(items, key=lambda i: (i.place, i.units))


def claim(items: List[Pending]) -> List[Pending]:
    r""":obj:`items` in order, each without the runs an earlier one trains
    (studies that share runs: one identity, one folder), its units scaled
    to the runs left; those left without runs dropped."""
    taken, found = set(), []
    for item in items:
        left = [r for r in item.left if r['key'] not in taken]
        taken.update(r['key'] for r in left)
        if left:
            item.units = item.units * len(left) // len(item.left)
            item.left = left
            found.append(item)
    return found


def device_name(device: str) -> Optional[str]:
    r"""The name runs record of :obj:`device` (``machine.gpu``: the GPU's,
    ``machine.cpu``: the CPU model); :obj:`None` for CUDA without one."""
    import torch
    if device == 'cuda':
        return (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                else None)
    from gnorm.bench.report import cpu_name
    return cpu_name()


@dataclass
class Rate:
    r"""Seconds per cost unit on the device :obj:`name`: what its cells
    took (``seconds`` over ``units``), else the committed ``prior``."""
    name: Optional[str]
    prior: Optional[float] = None
    seconds: float = 0.0
    units: float = 0.0
    cells: List[Dict[str, Any]] = field(default_factory=list)

    def per_unit(self) -> Optional[float]:
        return self.seconds / self.units if self.units else self.prior

    def estimate(self, units: float) -> Optional[float]:
        rate = self.per_unit()
        return None if rate is None else rate * units

    def add(self, seconds: float, units: float,
            cell: Dict[str, Any]) -> None:
        self.seconds += seconds
        self.units += units
        self.cells.append(dict(cell, seconds=round(seconds, 3),
                               units=units))


def read_record(out: Path) -> Dict[str, Any]:
    r"""``<out>/.queue.json``: per device name its ``seconds``, ``units``
    and trained ``cells``."""
    path = out / RECORD
    return json.loads(path.read_text()) if path.is_file() else {}


def rate_name(name: Optional[str], graphed: bool) -> Optional[str]:
    r"""The name of a device's rate: :obj:`name`, with `` (CUDA graphs)``
    where the steps replay as CUDA graphs."""
    return f'{name} (CUDA graphs)' if graphed and name else name


def rate_of(out: Path, name: Optional[str], calibration: Dict[str, float],
            graphed: bool = False) -> Rate:
    r"""The :class:`Rate` of the device :obj:`name` (its steps replayed as
    CUDA graphs where :obj:`graphed`): :obj:`out`'s record, the committed
    :obj:`calibration` as its prior (a graphed rate without one: the
    eager one's, which overestimates it)."""
    key = rate_name(name, graphed)
    had = read_record(out).get(key) or {}
    prior = calibration.get(key, calibration.get(name) if graphed else None)
    return Rate(key, prior, had.get('seconds', 0.0), had.get('units', 0.0),
                list(had.get('cells', [])))


def write_record(out: Path, device: str, rate: Rate) -> None:
    r"""Writes :obj:`rate` into ``<out>/.queue.json`` (atomically)."""
    record = read_record(out)
    record[rate.name] = dict(device=device, seconds=rate.seconds,
                             units=rate.units,
                             seconds_per_unit=rate.per_unit(),
                             cells=rate.cells)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f'{RECORD}.tmp'
    tmp.write_text(json.dumps(record, indent=1) + '\n')
    tmp.replace(out / RECORD)


# ---------------------------------------------------------------- output


def duration(seconds: Optional[float]) -> str:
    r"""``0.4 s``, ``42 s``, ``3.5 min``, ``2.1 h``; ``-`` for
    :obj:`None`."""
    if seconds is None:
        return '-'
    if seconds < 10:
        return f'{seconds:.1f} s'
    if seconds < 120:
        return f'{seconds:.0f} s'
    return (f'{seconds / 60:.1f} min' if seconds < 7200
            else f'{seconds / 3600:.1f} h')


def last_gpu(calibration: Dict[str, float]) -> Optional[str]:
    return list(calibration)[-1] if calibration else None


def show(items: List[Pending], what: str, here: str, rate: Rate,
         calibration: Dict[str, float]) -> None:
    r"""Prints :obj:`items` (:obj:`what`: the cells taken, in words) in
    the queue's order with their seconds on this device (:obj:`here`,
    :obj:`rate`) and on the last measured GPU."""
    gpu = last_gpu(calibration)
    other = Rate(gpu, calibration.get(gpu))
    runs = sum(len(i.left) for i in items)
    print(f'{len(items)} cells pending ({what}), {runs} runs to train')
    print(f'here ({here}): ' + (
        f'{rate.per_unit():.3g} s per unit' if rate.per_unit()
        else 'not calibrated yet (the first cell trained gives it)'))
    print(f'last measured GPU: {gpu}, {other.prior:.3g} s per unit' if gpu
          else 'last measured GPU: none (conf/queue.yaml calibration)')

    def line(k, label, runs, units):
        return (k, label, str(runs), f'{units:.3g}',
                duration(rate.estimate(units)),
                duration(other.estimate(units)))
    table([('#', 'cell', 'runs', 'units', 'here', 'last GPU'),
           *(line(str(k), i.label, len(i.left), i.units)
             for k, i in enumerate(items, start=1)),
           line('', 'total', runs, sum(i.units for i in items))])
    if not items:
        print('(--work gpu or cpu takes the cells table.not_run marks as '
              'GPU or CPU work; --datasets, --rows, --depths select cells)')


def table(rows: List[Sequence[str]]) -> None:
    r"""Prints :obj:`rows` as aligned columns (text left, figures right)."""
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        print('  '.join(v.ljust(w) if k == 1 else v.rjust(w)
                        for k, (v, w) in enumerate(zip(r, widths))).rstrip())


# -------------------------------------------------------------- training


def first_cheapest(items: List[Pending], rate: Rate) -> List[Pending]:
    r""":obj:`items`, the cheapest first while :obj:`rate` is not
    calibrated (it trains first and gives the calibration)."""
    if rate.per_unit() is not None or not items:
        return items
    cheapest = min(items, key=lambda i: i.units)
    return [cheapest, *(i for i in items if i is not cheapest)]


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


def cell_fields(item: Pending) -> Dict[str, Any]:
    c = item.cell
    return dict(study=item.study.spec.name, dataset=c['dataset'],
                row=c['row'], depth=c['depth'], runs=len(item.left),
                cuda_graph=item.graphed)


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


def train(items: List[Pending], rate: Rate, deadline: float, out: Path,
          device: str, after_cell: Optional[Callable[[], Any]] = None,
          eager: Optional[Rate] = None) -> Dict[str, int]:
    r"""Trains :obj:`items` in order while :func:`clock` is before
    :obj:`deadline`, skipping a cell whose estimate exceeds the time left;
    after every cell writes ``<out>/.queue.json`` and calls
    :obj:`after_cell`. A cell whose step cannot be captured as CUDA graphs
    trains again eagerly (:func:`eagerly`, the :obj:`eager` rate), and so
    do the cells after it; a cell with a run that diverges (a NaN loss)
    is a failed cell, and the queue goes on as it was. Returns the
    numbers of cells ``trained``, ``failed``, ``skipped``
    (over the time left) and ``unreached``."""
    if eager is None and any(i.graphed for i in items):
        raise ValueError('train: cells replayed as CUDA graphs need the '
                         'eager rate to fall back to')
    counts = dict(trained=0, failed=0, skipped=0, unreached=0)
    items = list(first_cheapest(items, rate))
    for k in range(len(items)):
        item = items[k]
        tag = f'[{k + 1}/{len(items)}] {item.label}: {len(item.left)} runs'
        why = fits(item, rate, deadline, tag)
        if why is None:
            began = clock()
            ended = train_cell(item)
            if ended == CAPTURE and item.graphed:
                print(f'{tag}: failed as CUDA graphs; it and the cells '
                      f'after it train eagerly', flush=True)
                items[k:] = eagerly(items[k:], device)
                rate, item = eager, items[k]
                why, began = fits(item, rate, deadline, tag), clock()
                ended = train_cell(item) if why is None else FAILED
            elif ended == DIVERGED:  # a run's loss, not the capture
                print(f'{tag}: a run diverged (recorded as failed); the '
                      f'queue goes on'
                      + (' with CUDA graphs' if item.graphed else ''),
                      flush=True)
            ok = ended == OK
            if ok:
                rate.add(clock() - began, item.units, cell_fields(item))
            write_record(out, device, rate)
            if after_cell is not None:
                after_cell()
            why = why or ('trained' if ok else 'failed')
        if why == 'unreached':
            counts['unreached'] = len(items) - k
            break
        counts[why] += 1
    return counts


# ------------------------------------------------------------- command


def check_args(args: argparse.Namespace) -> None:
    r"""Raises :class:`SpecError` for a bad number on the command line."""
    if not args.budget_s >= 0:
        raise SpecError(f'--budget-s must be >= 0 seconds, got '
                        f'{args.budget_s:g}')
    if args.threads is not None and args.threads < 1:
        raise SpecError(f'--threads must be >= 1, got {args.threads}')
    bad = [d for d in args.depths or [] if d < 1]
    if bad:
        raise SpecError(f'--depths must be integers >= 1, got {bad[0]}')


def selection_of(args: argparse.Namespace,
                 specs: Sequence[Spec]) -> Dict[str, Any]:
    r"""The cells ``--datasets``, ``--rows``, ``--depths`` select;
    :class:`SpecError` for a value no study of :obj:`specs` has."""
    found = {key: getattr(args, key) for key, _ in AXES
             if getattr(args, key)}
    for key, values in found.items():
        known = {v for s in specs for v in s.table[key]}
        bad = [v for v in values if v not in known]
        if bad:
            raise SpecError(f'--{key} {bad[0]}: no study of the queue has '
                            f"it; they have {', '.join(map(str, known))}")
    return found


def in_words(selection: Dict[str, Any], work: str) -> str:
    r"""The cells the queue takes, in words."""
    if not selection:
        return f'marked {work}'
    return 'selected: ' + '; '.join(
        f"{key} {', '.join(map(str, values))}"
        for key, values in selection.items())


@dataclass
class Plan:
    r"""What a call trains: the pending ``items`` in order, the ``rate``
    of the device, the ``calibration`` committed, and in words ``what``."""
    items: List[Pending]
    rate: Rate
    calibration: Dict[str, float]
    device: str
    what: str
    eager: Optional[Rate] = None  # after a cell failed as CUDA graphs

    def trained(self) -> int:
        r"""The cells the record holds as trained."""
        return sum(len(r.cells) for r in (self.rate, self.eager) if r)


def prepare(args: argparse.Namespace,
            specs: Optional[Sequence[Spec]]) -> Plan:
    r"""The :class:`Plan` of :obj:`args` over :obj:`specs` (default:
    ``--studies``, else gnorm's depth studies)."""
    from gnorm.results.folders import check_folder
    import torch
    check_args(args)
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    name = device_name(device)
    if name is None and not args.list:
        raise SpecError('--device cuda: torch sees no CUDA device; pass '
                        '--device cpu')
    if args.cuda_graph and device != 'cuda':
        raise SpecError(f'--cuda-graph replays the steps as CUDA graphs and '
                        f'needs --device cuda, got {device}')
    specs = list(specs or load_specs(args.studies))
    selection = selection_of(args, specs)
    work = WORK[args.work or ('gpu' if device == 'cuda' else 'cpu')]
    config = read_config(args.config, [s.name for s in specs])
    check_priority(config['priority'], specs, args.config)
    check_folder(args.out, f'--out {args.out}', write=not args.list)
    items = claim(order(pending(specs, args.out, device, work, selection,
                                read_digests(args.finished),
                                args.cuda_graph), config['priority']))
    calibration = config['calibration']
    return Plan(items, rate_of(args.out, name, calibration, args.cuda_graph),
                calibration, device, in_words(selection, work),
                rate_of(args.out, name, calibration) if args.cuda_graph
                else None)


def head(plan: Plan, budget_s: float) -> str:
    r"""The first lines of a call that trains."""
    rate = plan.rate
    said = (f'{rate.per_unit():.3g} s per unit' if rate.per_unit()
            else 'not calibrated yet: the cheapest cell trains first')
    return (f'{len(plan.items)} cells pending ({plan.what}), '
            f'{sum(len(i.left) for i in plan.items)} runs; '
            + (f'budget {duration(budget_s)}' if budget_s < INF
               else 'no time limit')
            + f' on {plan.device} ({rate.name}), {said}')


def _run(plan: Plan, args: argparse.Namespace, start: float,
         after_cell: Optional[Callable[[], Any]]) -> int:
    r"""Trains :obj:`plan`; returns the exit status (0, 1 when a cell
    failed, 130 when interrupted by Ctrl-C, 143 by SIGTERM, as
    :class:`gnorm.errors.Interrupted` says)."""
    from gnorm.study.runner import sigterm_interrupts
    done = plan.trained()
    try:
        with sigterm_interrupts():
            counts = train(plan.items, plan.rate, start + args.budget_s,
                           args.out, plan.device, after_cell, plan.eager)
    except KeyboardInterrupt as e:
        print(f'interrupted: the {plan.trained() - done} cells '
              f'finished are kept in {args.out}; run the same command '
              f'again to go on', file=sys.stderr, flush=True)
        return getattr(e, 'exit_code', 130)  # 143 for SIGTERM
    print(f"trained {counts['trained']} cells in "
          f'{duration(clock() - start)}; {counts["skipped"]} skipped (over '
          f"the time left), {counts['unreached']} not reached, "
          f"{counts['failed']} failed; runs in {args.out}", flush=True)
    return 1 if counts['failed'] else 0


def write_finished(args: argparse.Namespace,
                   specs: Optional[Sequence[Spec]]) -> int:
    r"""``--write-finished FILE``: the digests of the finished runs, a
    line each (:func:`finished_digests`); returns the exit status."""
    from gnorm.results.folders import check_file
    try:
        check_file(args.write_finished, '--write-finished')
        found = finished_digests(list(specs or load_specs(args.studies)),
                                 args.out)
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        return 2
    args.write_finished.write_text(''.join(f'{d}\n' for d in found))
    print(f'{len(found)} finished runs listed in {args.write_finished}')
    return 0


def main(argv: Optional[Sequence[str]] = None,
         specs: Optional[Sequence[Spec]] = None,
         after_cell: Optional[Callable[[], Any]] = None) -> int:
    r"""``python -m gnorm.study queue ARGS``; :obj:`specs`: loaded specs
    in place of ``--studies``; :obj:`after_cell`: called after every
    cell trained (e.g. to pack the runs). Returns the exit status."""
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    start = clock()
    if args.write_finished is not None:
        return write_finished(args, specs)
    try:
        plan = prepare(args, specs)
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # while planning: nothing written yet
        print('interrupted while planning; nothing was trained or written',
              file=sys.stderr, flush=True)
        return 130
    if args.list:
        show(plan.items, plan.what, f"{plan.device}: "
             f"{plan.rate.name or 'no CUDA device here'}", plan.rate,
             plan.calibration)
        return 0
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    print(head(plan, args.budget_s), flush=True)
    return _run(plan, args, start, after_cell)
