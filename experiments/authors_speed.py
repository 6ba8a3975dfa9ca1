r"""The time per run of the authors' GCN code and of gnorm at the same
Table 3 cell, for the section "Time per run" of
``experiments/results/authors_vs_gnorm.md`` (written by
``experiments/authors_spread.py``).

What each side records: ``experiments/authors_gcn.py`` keeps, per seed,
``seconds``, the wall-clock time of its 200-epoch loop alone (no data
loading, no model building), and the machine that ran it (the run's
``made_by``; a run without it takes the record's ``machine``, that of the
record's last invocation). gnorm's ``results.json`` keeps ``runtime_s``,
the wall-clock time of the whole training call (data, model, epochs,
final evaluation), ``device``, ``machine`` and ``batch_runs``: the number
of runs trained together as one model, whose ``runtime_s`` is the whole
batch's. A ratio is given only for a like-for-like pair (:func:`why_apart`):
the same device, processor and thread count, and gnorm's run trained
alone; a batched run's time divided by its batch is shown, never compared.
Neither side records peak memory.
"""
import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.results import mean_std, plural

# (device type, processor: GPU name or CPU model, torch threads)
Kind = Tuple[str, str, int]
# Why a cell without any gnorm run has no pair.
NO_RUNS = 'no gnorm runs'


def authors_kind(machine: Dict[str, Any]) -> Kind:
    r"""The :data:`Kind` of an ``experiments/authors_gcn.py`` machine
    record."""
    return (machine['device'].split(':')[0],
            machine.get('gpu') or machine['cpu'],
            int(machine.get('torch_threads', machine['threads'])))


def gnorm_kind(run: Dict[str, Any]) -> Kind:
    r"""The :data:`Kind` of a gnorm run (its ``device`` and ``machine``)."""
    machine = run['machine']
    return (run['device'].split(':')[0], machine.get('gpu') or machine['cpu'],
            int(machine['threads']))


def kind_label(kind: Kind) -> str:
    r"""``cpu: AMD EPYC, 1 thread``."""
    device, name, threads = kind
    return f"{device}: {name}, {plural(threads, 'thread')}"


def authors_times(path: Path) -> Dict[Kind, List[float]]:
    r"""Machine -> the ``seconds`` of each run of the
    ``experiments/authors_gcn.py`` record at :obj:`path`."""
    record = json.loads(Path(path).read_text())
    times: Dict[Kind, List[float]] = {}
    for run in record['runs'].values():
        machine = run.get('made_by', {}).get('machine') or record['machine']
        times.setdefault(authors_kind(machine), []).append(run['seconds'])
    return times


def gnorm_times(runs: Sequence[Dict[str, Any]],
                ) -> Dict[Tuple[Kind, Optional[int]], List[float]]:
    r"""(machine, runs per batch) -> time per run (``runtime_s`` over
    ``batch_runs``) of gnorm's :obj:`runs`; a run that does not record
    ``batch_runs`` has batch :obj:`None` and its ``runtime_s`` as is."""
    times: Dict[Tuple[Kind, Optional[int]], List[float]] = {}
    for run in runs:
        batch = run.get('batch_runs')
        times.setdefault((gnorm_kind(run), batch), []).append(
            run['runtime_s'] / (batch or 1))
    return times


def why_apart(authors: Kind, gnorm: Kind, batch: Optional[int]) -> List[str]:
    r"""Why gnorm's runs (on :obj:`gnorm`, :obj:`batch` runs as one model)
    are no like-for-like pair for the authors' runs on :obj:`authors`;
    empty for a pair: the same device and processor, the same thread
    count, and each gnorm run trained alone."""
    why = []
    if authors[:2] != gnorm[:2]:
        why.append('other machine')
    if authors[2] != gnorm[2]:
        why.append('other threads')
    if batch is None:
        why.append('gnorm batch not recorded')
    elif batch > 1:
        why.append('gnorm batched')
    return why


def ratio(authors: Sequence[float], gnorm: Sequence[float]) -> float:
    r"""The authors' mean time per run over gnorm's (above 1: gnorm is
    faster)."""
    return mean_std(authors)[0] / mean_std(gnorm)[0]


def _time(seconds: Sequence[float]) -> str:
    mean, std = mean_std(seconds)
    return f'{mean:.1f} ± {std:.1f} ({len(seconds)})'


def _trained(batch: Optional[int]) -> str:
    if batch is None:
        return 'batch not recorded'
    return ('alone' if batch == 1 else
            f'in batches of {batch} (batch time / {batch})')


def cell_rows(cell: str, authors: Dict[Kind, List[float]],
              gnorm: Dict[Tuple[Kind, Optional[int]], List[float]],
              ) -> Tuple[List[str], List[float], List[str]]:
    r"""The table rows of one :obj:`cell` (``dataset | L | s``): one per
    machine of the authors' runs and group of gnorm's (:func:`gnorm_times`),
    with the ratio for a pair and the reasons otherwise. Returns (rows,
    ratios of the pairs, why the cell has no pair: empty if it has one)."""
    rows, ratios, why = [], [], {}  # why: an ordered set
    for kind, seconds in authors.items():
        head = f'| {cell} | {kind_label(kind)} | {_time(seconds)} |'
        if not gnorm:
            rows.append(f'{head} no runs | | | — ({NO_RUNS}) |')
            why[NO_RUNS] = None
        for (theirs, batch), ours in gnorm.items():
            apart = why_apart(kind, theirs, batch)
            if apart:
                why.update(dict.fromkeys(apart))
                compared = f"— ({', '.join(apart)})"
            else:
                ratios.append(ratio(seconds, ours))
                compared = f'{ratios[-1]:.2f}x'
            rows.append(f'{head} {kind_label(theirs)} | {_trained(batch)} | '
                        f'{_time(ours)} | {compared} |')
    return rows, ratios, [] if ratios else list(why)


def in_words(ratios: Sequence[float], unpaired: Sequence[List[str]]) -> str:
    r"""The section's outcome in one sentence: the range of the
    :obj:`ratios` of the paired cells, and how many cells have no pair
    for which reasons (:obj:`unpaired`: each such cell's reasons)."""
    if ratios:
        low, high = min(ratios), max(ratios)
        spread = f'{low:.2f}x' if low == high else f'{low:.2f}x-{high:.2f}x'
        said = (f"Time per run: at {plural(len(ratios), 'like-for-like pair')}"
                f" the authors' code takes {spread} gnorm's time")
    else:
        said = ('Time per run: no cell has a like-for-like pair (the same '
                'machine and threads, gnorm trained alone)')
    if unpaired:
        counts = Counter(', '.join(why) for why in unpaired)
        said += ('; ' if ratios else ': ') + '; '.join(
            f"{why} at {plural(n, 'cell')}"
            for why, n in sorted(counts.items(), key=lambda c: (-c[1], c[0])))
        if ratios:
            said += ' without a pair'
    return said + '.'


INTRO = (
    "Wall-clock seconds per run, mean ± std (ddof=0; runs), by machine "
    "(device: processor, torch threads). The authors' code "
    "(experiments/authors_gcn.py, each run's `seconds`) times its 200-epoch "
    'loop alone: a training step and validation each epoch, the test set '
    'at each new best validation accuracy; not loading the data or building '
    "the model. gnorm's `runtime_s` (results.json) times the whole training "
    'call: loading the graph, building the model, 200 epochs with train, '
    'validation and test accuracy each epoch, and the final evaluation with '
    'collapse metrics; runs trained together as one model (`batch_runs` = '
    'k > 1) record the whole batch\'s time, shown here divided by k and '
    'never compared, since a run trained alone takes other time. The ratio '
    "authors / gnorm (above 1: gnorm is faster) is given only for a "
    'like-for-like pair: the same device, processor and thread count, and '
    "gnorm's runs trained alone; every other row says why not. Peak memory: "
    'not recorded by either side. Neither record says what else the machine '
    'ran meanwhile.')


def speed_lines(cells: Sequence[Tuple[str, Path, List[Dict[str, Any]]]],
                ) -> List[str]:
    r"""The section "Time per run": for each cell (``dataset | L | s``, the
    path of the authors' record, gnorm's runs of the cell), its rows
    (:func:`cell_rows`), then the outcome in words (:func:`in_words`)."""
    lines = ['', '## Time per run', '', INTRO, '',
             "| dataset | L | s | authors' code: machine | time per run (s) "
             '| gnorm: machine | gnorm trained | time per run (s) | '
             'authors / gnorm |', '|---|---|---|---|---|---|---|---|---|']
    ratios, unpaired = [], []
    for cell, path, runs in cells:
        rows, paired, why = cell_rows(cell, authors_times(path),
                                      gnorm_times(runs))
        lines += rows
        ratios += paired
        if why:
            unpaired.append(why)
    lines += ['', in_words(ratios, unpaired)]
    if unpaired:
        lines += ['', "A cell without a pair needs gnorm runs of it trained "
                  "alone on the authors' machine and thread count "
                  "(`batch_runs=1 threads=<n>` on that machine), or the "
                  "authors' runs on gnorm's."]
    return lines
