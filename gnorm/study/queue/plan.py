r"""What the GPU queue trains, in which order: the pending cells of depth
studies (:func:`pending`: those ``table.not_run`` marks as GPU or CPU
work, or those selected, with their unfinished runs), ordered by the
priority (:func:`order`), each run claimed by the first cell that has it
(:func:`claim`). A run that failed :data:`MAX_FAILURES` times in the
queue's folder is not queued again (:attr:`Pending.given_up`).

For ``--list``, every cell with unfinished runs whatever its mark
(``work=None``), and the cells to remake (``remake=True``): those whose
finished runs were made by uncommitted code (``source.modified``), which
the reports do not quote. A cell no ``table.not_run`` entry marks is
classed by its estimate on this machine's CPU (:func:`classed`): CPU
work where it takes at most :data:`CPU_WORK_S`, else GPU work."""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.queue.config import AXES
from gnorm.study.runs.cost import units
from gnorm.study.runs.record import run_digest
from gnorm.study.spec.find import studies
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import Spec, SpecError
from gnorm.train.common import one_line

WORK = {'gpu': 'GPU work', 'cpu': 'CPU work'}
# A run that failed this many times (a run that diverges diverges again)
# is not queued again; --list names it.
MAX_FAILURES = 2
# A cell that no table.not_run entry marks is CPU work where this
# machine's CPU takes at most this long for it (its estimate): a night on
# one core, as the cells marked CPU work (under 5 h here); else GPU work.
CPU_WORK_S = 6 * 3600.0


@dataclass
class Study:
    r"""A depth study in the queue: its spec, the
    :class:`~gnorm.study.runs.compose.Composer` of its cells' runs (into
    ``runs``: ``<out>/<runs folder>``), its finished runs by key, and
    whether the runs replay their steps as CUDA graphs."""
    spec: Spec
    composer: Any
    found: Dict[str, Any]
    runs: Path
    graphed: bool = False


@dataclass
class Pending:
    r"""A cell with unfinished runs (:obj:`left`), its cost ``units``, its
    ``place`` in the priority, the runs it gives up (``given_up``:
    failed :data:`MAX_FAILURES` times), its ``mark`` (why
    ``table.not_run`` leaves it, :func:`marked`; :obj:`None` unmarked);
    where ``remake``, :obj:`left` are its finished runs of uncommitted
    code instead."""
    study: Study
    cell: Dict[str, Any]
    left: List[Dict[str, Any]]
    units: float
    place: int = 0
    given_up: List[Dict[str, Any]] = field(default_factory=list)
    mark: Optional[str] = None
    remake: bool = False

    @property
    def graphed(self) -> bool:
        return self.study.graphed

    @property
    def label(self) -> str:
        c = self.cell
        return (f"{self.study.spec.name} {c['dataset']} {c['row']} "
                f"L={c['depth']}")

    def narrowed(self, left: List[Dict[str, Any]]) -> 'Pending':
        r"""This cell with only the runs :obj:`left` (a subset of its
        own), its units scaled to them."""
        return Pending(self.study, self.cell, left,
                       self.units * len(left) / max(len(self.left), 1),
                       self.place, self.given_up, self.mark, self.remake)


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


def wanted(spec: Spec, cell: Dict[str, Any], work: Optional[str],
           selection: Dict[str, Any]) -> bool:
    r"""Whether the queue takes :obj:`cell`: selected, or without a
    :obj:`selection` marked as :obj:`work` ("GPU work"; :obj:`None`:
    every cell)."""
    if selection:
        return names(selection, cell)
    return work is None or (marked(spec, cell) or '').startswith(work)


def classed(item: Pending, cpu) -> str:
    r"""The kind of work of the cell :obj:`item`: its mark's ("GPU work",
    "CPU work"), else, unmarked, CPU work where :obj:`cpu` (this
    machine's CPU's :class:`~gnorm.study.runs.cost.Rate`) takes at most
    :data:`CPU_WORK_S` for it, else GPU work (also without a CPU rate)."""
    for work in WORK.values():
        if (item.mark or '').startswith(work):
            return work
    seconds = cpu.estimate(item.units)
    return WORK['cpu'] if seconds is not None and seconds <= CPU_WORK_S \
        else WORK['gpu']


class Finished:
    r"""The finished runs the queue counts: those below the runs folders
    it reads (each folder read once), and :obj:`digests` (of runs finished
    elsewhere: a ``--finished`` file)."""

    def __init__(self, digests: Sequence[str] = ()):
        self.digests = set(digests)
        self.folders: Dict[Path, Dict[str, Any]] = {}

    def below(self, folders: Sequence[Path]) -> Dict[str, Any]:
        r"""The finished runs below :obj:`folders` by key, as short
        records (:mod:`gnorm.study.runs.index`), but those made by another
        version of a file of the user's code that their config names
        (:func:`gnorm.results.user_code.changed_user_code`): the queue
        trains them again."""
        from gnorm.study.runs.index import changed_code, finished, short_runs
        found: Dict[str, Any] = {}
        for folder in dict.fromkeys(f.resolve() for f in folders):
            if folder not in self.folders:
                self.folders[folder] = {
                    key: run for key, run in finished(
                        short_runs(folder) if folder.is_dir()
                        else []).items() if not changed_code(run)}
            found.update(self.folders[folder])
        return found

    def holds(self, found: Dict[str, Any], key: str) -> bool:
        return key in found or run_digest(key) in self.digests


def overrides(device: str, graphed: bool) -> List[str]:
    r"""The overrides the queue adds to every run: its device,
    ``resume=true`` (a run finished in a folder is not trained again, as
    :func:`gnorm.study.runs.runner.run_paired` sets it: a cell tried again
    after a failure trains only what is left), and
    ``train.cuda_graph=true`` where :obj:`graphed`."""
    return [f'device={device}', 'resume=true',
            *(['train.cuda_graph=true'] if graphed else [])]


def study_pending(spec: Spec, out: Path, device: str, work: Optional[str],
                  selection: Dict[str, Any], done: Finished,
                  graphed: bool = False,
                  failed: Optional[Dict[str, int]] = None,
                  remake: bool = False) -> List[Pending]:
    r"""The cells of :obj:`spec` the queue takes (:func:`wanted`) that
    have unfinished runs, their runs composed into ``<out>/<runs
    folder>``; a run :obj:`failed` (by digest) :data:`MAX_FAILURES` times
    is given up. With :obj:`remake`, also those with finished runs of
    uncommitted code, as items of their own (:attr:`Pending.remake`)."""
    from gnorm.study.runs.index import modified
    from gnorm.study.runs.compose import cells, compose_cells
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
    failed = failed or {}
    found = []
    for cell in todo:
        unfinished = [r for r in cell['runs']
                      if not done.holds(study.found, r['key'])]
        left = [r for r in unfinished
                if failed.get(run_digest(r['key']), 0) < MAX_FAILURES]
        given_up = [r for r in unfinished if r not in left]
        mark = marked(spec, cell)
        if unfinished:
            found.append(Pending(study, cell, left,
                                 units(cell, left) if left else 0,
                                 given_up=given_up, mark=mark))
        again = [r for r in cell['runs'] if r['key'] in study.found
                 and modified(study.found[r['key']])]
        if remake and again:
            found.append(Pending(study, cell, again,
                                 units(cell, again), mark=mark,
                                 remake=True))
    return found


def pending(specs: Sequence[Spec], out: Path, device: str,
            work: Optional[str], selection: Optional[Dict[str, Any]] = None,
            digests: Sequence[str] = (), graphed: bool = False,
            failed: Optional[Dict[str, int]] = None,
            remake: bool = False) -> List[Pending]:
    r"""The pending cells of :obj:`specs` (see the module's text; work
    :obj:`None`: whatever their mark); :obj:`digests`: of runs finished
    elsewhere (:func:`run_digest`); :obj:`graphed`: their steps replayed
    as CUDA graphs; :obj:`failed`: the runs' failure counts (a cell whose
    runs are all given up is kept for :attr:`Pending.given_up`, without
    runs left); :obj:`remake`: with the cells to remake."""
    done = Finished(digests)
    return [item for spec in specs for item in study_pending(
        spec, out, device, work, selection or {}, done, graphed, failed,
        remake)]


def eagerly(items: Sequence[Pending], device: str) -> List[Pending]:
    r""":obj:`items`, those replayed as CUDA graphs composed again without
    ``train.cuda_graph`` (one compose per study): the same unfinished runs
    (keys and folders), trained eagerly."""
    from gnorm.study.runs.compose import compose_cells
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
                               items[i].units, items[i].place,
                               items[i].given_up, items[i].mark)
    return found


def finished_digests(specs: Sequence[Spec], out: Path) -> List[str]:
    r"""The digests of the finished runs in the runs folders of
    :obj:`specs` and below :obj:`out`, sorted."""
    done = Finished()
    keys = {key for spec in specs for key in done.below(
        [spec.runs_dir(), out / spec.runs_dir().name])}
    return sorted(map(run_digest, keys))


def read_digests(path: Optional[Path]) -> List[str]:
    r"""The digests of the ``--finished`` file :obj:`path` (none without)."""
    if path is None:
        return []
    if not path.is_file():
        raise SpecError(f'--finished: no file {path}; write it with '
                        f'--write-finished {path} where the runs are')
    return path.read_text().split()


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


def claim(items: List[Pending], taken: Optional[set] = None
          ) -> List[Pending]:
    r""":obj:`items` in order, each without the runs an earlier one trains
    (studies that share runs: one identity in one runs folder, as
    :class:`Finished` counts them) or :obj:`taken` holds (identities and
    runs folders; those of :obj:`items` are added), its units scaled to
    the runs left; those left without runs dropped. A run of one identity
    in the runs folders of two studies is two runs."""
    taken, found = (set() if taken is None else taken), []
    for item in items:
        where = str(item.study.spec.runs_dir())
        left = [r for r in item.left if (r['key'], where) not in taken]
        taken.update((r['key'], where) for r in left)
        if left:
            item.units = item.units * len(left) // len(item.left)
            item.left = left
            found.append(item)
    return found
