r"""What a cell of a depth study costs: its cost units
(:func:`gnorm.study.runs.compose.cost` of its runs at their width and epochs)
and, on a device, its seconds: a :class:`Rate`, seconds per unit of the
epochs alone (the steady state) plus the set-up of a cell (data, compose,
first steps), measured apart.

Where a device's rate comes from, the first that has one:

1. the cells trained on it into the queue's folder (``.queue.json``,
   :mod:`gnorm.study.runs.record`, every process's);
2. ``conf/queue.yaml``'s ``calibration`` for its name (a GPU's steady
   rate and set-up, written by ``experiments/gpu_window.py
   --bring-back``);
3. the committed runs of ``experiments/runs`` trained on it
   (:func:`committed_rates`: each run's ``loop_s``, else ``runtime_s``, per
   run of its batch, over its units at the epochs it trained,
   :func:`gnorm.study.runs.index.run_cell`), times
   :data:`PRIOR_SCALE`: a prior that overstates rather than understates;
4. for a GPU, another GPU's rate (2 or 3) times :data:`OTHER_GPU_SCALE`;

else there is no rate for the device yet, and the cheapest cell trains
first to give one. Each rate says which it is (:attr:`Rate.source`)."""
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gnorm.study.runs.index import short_runs
from gnorm.study.runs.record import rates, read_record, totals
from gnorm.study.spec.table import REPO

RUNS = REPO / 'experiments' / 'runs'  # the committed runs; tests set theirs
PRIOR_SCALE = 2.0  # a rate from committed runs of other studies, as a prior
OTHER_GPU_SCALE = 4.0  # another GPU's rate, as this GPU's prior
NO_RATE = ('no rate for this device yet: the cheapest cell trains first '
           'and gives it (or bring a window back: python '
           'experiments/gpu_window.py --bring-back DIR)')


def units(cell: Dict[str, Any], left: List[Dict[str, Any]]) -> int:
    r"""The cost units of the runs :obj:`left` of :obj:`cell`, at the
    width and epochs of the first (``hidden``, ``epochs``: each run's, as
    :meth:`gnorm.study.runs.compose.Composer.run` gives them;
    :func:`gnorm.study.runs.compose.cost`)."""
    from gnorm.study.runs.compose import cost
    return len(left) * cost(cell['dataset'], cell['depth'], cell['base'],
                            left[0]['hidden'], left[0]['epochs'])


def device_name(device: str) -> Optional[str]:
    r"""The name runs record of :obj:`device` (``machine.gpu``: the GPU's,
    ``machine.cpu``: the CPU model); :obj:`None` for CUDA without one."""
    import torch
    if device == 'cuda':
        return (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                else None)
    from gnorm.machine import cpu_name
    return cpu_name()


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


# -------------------------------------------------- the committed runs


def committed_rates(root: Optional[Path] = None
                    ) -> Dict[str, Dict[str, Any]]:
    r"""Per device name, the rate of the finished runs below :obj:`root`
    (default :data:`RUNS`; ``<study>/<run>/results.json``):
    :func:`gnorm.study.runs.record.totals` of its runs, their ``device``
    kind and number of ``runs``. Read once a process."""
    return rates_below(Path(root or RUNS).resolve())


@functools.lru_cache(maxsize=4)
def rates_below(root: Path) -> Dict[str, Dict[str, Any]]:
    r""":func:`committed_rates` of :obj:`root`, read once (each run as a
    cell from its short record: :func:`gnorm.study.runs.index.run_cell`)."""
    cells: Dict[str, List[Dict[str, Any]]] = {}
    for record in short_runs(root) if Path(root).is_dir() else []:
        run = record['cell']
        if run is not None and len(Path(record['_path']).relative_to(
                root).parts) == 3:  # <study>/<run>/results.json
            cells.setdefault(run['machine'], []).append(run)
    return {name: dict(totals(found), device=found[0]['device'],
                       runs=len(found))
            for name, found in cells.items()}


# -------------------------------------------------------------- rates


@dataclass
class Rate:
    r"""Seconds per cost unit on the device :obj:`name`: what its
    ``cells`` took (the record's, every process's), else the ``prior``
    (seconds per unit, ``prior_setup`` seconds per cell), said in
    ``source``."""
    name: Optional[str]
    prior: Optional[float] = None
    source: str = NO_RATE
    prior_setup: float = 0.0
    cells: List[Dict[str, Any]] = field(default_factory=list)

    def per_unit(self) -> Optional[float]:
        return (totals(self.cells)['seconds_per_unit'] if self.cells
                else self.prior)

    def setup(self) -> float:
        return totals(self.cells)['setup_s'] if self.cells \
            else self.prior_setup

    def estimate(self, units: float, cells: int = 1) -> Optional[float]:
        r"""The seconds of :obj:`cells` cells of :obj:`units` in all:
        their set-ups and their epochs; :obj:`None` without a rate."""
        rate = self.per_unit()
        return None if rate is None else cells * self.setup() + rate * units

    def said(self) -> str:
        r"""The rate and where it comes from, in words."""
        if self.cells:
            return (f'{self.per_unit():.3g} s per unit + '
                    f'{duration(self.setup())} set-up a cell (measured: '
                    f'{len(self.cells)} cells in the record)')
        if self.prior is None:
            return self.source
        return (f'{self.prior:.3g} s per unit + {duration(self.prior_setup)}'
                f' set-up a cell ({self.source})')


def rate_name(name: Optional[str], graphed: bool) -> Optional[str]:
    r"""The name of a device's rate: :obj:`name`, with `` (CUDA graphs)``
    where the steps replay as CUDA graphs."""
    return f'{name} (CUDA graphs)' if graphed and name else name


def other_gpu(name: str, calibration: Dict[str, float],
              committed: Dict[str, Dict[str, Any]]) -> Optional[tuple]:
    r"""The last measured GPU other than :obj:`name` and its seconds per
    unit: ``conf/queue.yaml``'s, else the committed runs'."""
    known = {**{k: v['seconds_per_unit'] for k, v in committed.items()
                if v['device'].startswith('cuda')}, **calibration}
    others = [k for k in known if k != name and '(CUDA graphs)' not in k]
    return (others[-1], known[others[-1]]) if others else None


def prior_of(name: Optional[str], device: str,
             calibration: Dict[str, float],
             committed: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    r"""The prior of the device :obj:`name` (see the module's text, 2 to
    4): ``prior``, ``prior_setup`` and ``source``."""
    if name in calibration:  # with its set-up (queue_config.Calibration)
        return dict(prior=calibration[name],
                    prior_setup=getattr(calibration[name], 'setup_s', 0.0),
                    source='conf/queue.yaml calibration')
    if name in committed:
        c = committed[name]
        return dict(prior=c['seconds_per_unit'] * PRIOR_SCALE,
                    prior_setup=c['setup_s'] * PRIOR_SCALE,
                    source=f"prior: {c['runs']} committed runs on {name}, "
                    f'x{PRIOR_SCALE:g}')
    other = other_gpu(name, calibration, committed) \
        if device == 'cuda' else None
    if other is not None:
        return dict(prior=other[1] * OTHER_GPU_SCALE,
                    prior_setup=getattr(other[1], 'setup_s', 0.0)
                    * OTHER_GPU_SCALE,
                    source=f'prior: the rate of {other[0]}, '
                    f'x{OTHER_GPU_SCALE:g}')
    return dict(source=NO_RATE)


def rate_of(out: Path, name: Optional[str], device: str,
            calibration: Dict[str, float], graphed: bool = False,
            committed: Optional[Dict[str, Dict[str, Any]]] = None) -> Rate:
    r"""The :class:`Rate` of the device :obj:`name` (its steps replayed as
    CUDA graphs where :obj:`graphed`): :obj:`out`'s record, else its prior
    (a graphed rate without a calibration of its own: the eager one's,
    which overstates it)."""
    key = rate_name(name, graphed)
    committed = committed_rates() if committed is None else committed
    had = rates(read_record(out)).get(key) or {}
    if graphed and key in calibration:
        prior = dict(prior=calibration[key],
                     prior_setup=getattr(calibration[key], 'setup_s', 0.0),
                     source='conf/queue.yaml calibration')
    else:
        prior = prior_of(name, device, calibration, committed)
        if graphed and prior.get('prior') is not None:
            prior['source'] += ', eager: overstates CUDA graphs'
    return Rate(key, cells=list(had.get('cells', [])), **prior)


def refresh(rate: Rate, cells: Sequence[Dict[str, Any]]) -> None:
    r"""Sets :obj:`rate`'s cells to the record's :obj:`cells` (every
    process's): the next estimates count them."""
    rate.cells = list(cells)


def rate_here(device: str, calibration: Dict[str, float]) -> Rate:
    r"""The prior :class:`Rate` of :obj:`device` on this machine (no
    queue's record: a study's own runs, ``--dry-run``)."""
    name = device_name(device)
    return Rate(name, **prior_of(name, device, calibration,
                                 committed_rates()))
