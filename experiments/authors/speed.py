r"""The time per run and peak memory of the authors' GCN code and of gnorm
at the same Table 3 cell, for the section "Time per run" of
``experiments/results/authors_vs_gnorm.md`` (:mod:`experiments.authors.report`,
written by ``experiments/authors_spread.py``).

What each side records: ``experiments/authors_gcn.py`` keeps, per seed,
``seconds``, the wall-clock time of its 200-epoch loop alone (per epoch a
training step and a validation forward, plus a test forward at each new
best validation accuracy; no data loading, no model building), the
machine that ran it (the run's ``made_by``; a run without it takes the
record's ``machine``, that of the record's last invocation) and, in newer
records, ``peak_memory``: ``host_rss_mib``, the process's largest resident
set so far, and ``runs_before_in_process``. gnorm's ``results.json`` keeps
``loop_s`` (newer runs), the time of its epochs alone (per epoch a
training step and, every ``train.eval_every``-th epoch and at the last, an
evaluation forward giving train, validation and test accuracy),
``runtime_s``, the whole training call (data, model, epochs, final
evaluation), ``peak_memory`` (newer runs), ``device``, ``machine`` and
``batch_runs``: the number of runs trained together as one model, whose
times and memory are the whole batch's.

A ratio is given only for a work-matched pair (:func:`why_apart`): the
same device, processor and thread count; gnorm's runs trained alone,
evaluated every epoch as the authors' loop validates every epoch, and
timed by ``loop_s`` (loop against loop); at least :data:`MIN_RUNS` runs a
side. It is the ratio of the mean times, with the least and greatest ratio
of one authors' run to one gnorm run (:func:`gnorm.bench.ratio_range`);
beside it the ratio of the mean peak memories where both sides record
them.
"""
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Dict, List, Optional, Sequence, Tuple

from gnorm.bench import ratio, ratio_range
from gnorm.results import mean_std, plural, value
from gnorm.study.stats import mean_interval

# (device type, processor: GPU name or CPU model, torch threads)
Kind = Tuple[str, str, int]
# Why a cell without any gnorm run has no pair.
NO_RUNS = 'no gnorm runs'
# The fewest runs a side for a ratio.
MIN_RUNS = 3


@dataclass(frozen=True)
class Runs:
    r"""One side's runs of a cell on one machine, timed alike: ``seconds``
    and ``memory`` (peak host RSS, MiB; :obj:`None` where not recorded)
    per run; ``source``: what they come from (the authors' record);
    gnorm's ``batch`` (runs trained as one model; :obj:`None`: not
    recorded), ``eval_every`` and ``loop`` (``seconds`` time the loop
    alone, else the whole training call); ``together``: timed side by side
    with the other side (both in the timing folders, run at the same time
    on one machine)."""
    kind: Kind
    seconds: Tuple[float, ...]
    memory: Tuple[Optional[float], ...]
    source: str = ''
    batch: Optional[int] = 1
    eval_every: int = 1
    loop: bool = True
    together: bool = False
    seeds: Tuple[Optional[int], ...] = field(default=(), compare=False)


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


def _authors_memory(run: Dict[str, Any]) -> Optional[float]:
    r"""The peak host RSS of an authors' run if it was the first of its
    process (else the peak may be an earlier run's)."""
    peak = run.get('peak_memory') or {}
    if peak.get('runs_before_in_process', 0) != 0:
        return None
    return peak.get('host_rss_mib')


def authors_times(path: Path, together: bool = False) -> List[Runs]:
    r"""The runs of the ``experiments/authors_gcn.py`` record at
    :obj:`path`, one :class:`Runs` per machine: each run's ``seconds``
    and peak memory (:func:`_authors_memory`); :obj:`together`: timed side
    by side with gnorm's."""
    path = Path(path)
    record = json.loads(path.read_text())
    found: Dict[Kind, List[Tuple[float, Optional[float], int]]] = {}
    for seed, run in record['runs'].items():
        machine = run.get('made_by', {}).get('machine') or record['machine']
        found.setdefault(authors_kind(machine), []).append(
            (run['seconds'], _authors_memory(run), int(seed)))
    source = f'{path.parent.name}/{path.name}'
    return [Runs(kind, tuple(s for s, _, _ in runs),
                 tuple(m for _, m, _ in runs), source, together=together,
                 seeds=tuple(k for _, _, k in runs))
            for kind, runs in found.items()]


def gnorm_times(runs: Sequence[Dict[str, Any]],
                together: Collection[str] = ()) -> List[Runs]:
    r"""gnorm's :obj:`runs` grouped by machine, batch, ``train.eval_every``
    (1 where the config lacks it) and what their time covers: per run
    ``loop_s`` where recorded, else ``runtime_s`` (over ``batch_runs``: a
    batch records the whole batch's time; a run without ``batch_runs`` has
    batch :obj:`None` and its time as is), and ``peak_memory.host_rss_mib``
    (the process's: a batch's, and a later run of a process that trained
    several includes the earlier's); runs whose ``_path`` is in
    :obj:`together` were timed side by side with the authors' code."""
    found: Dict[tuple, List[Tuple[float, Optional[float], Any]]] = {}
    for run in runs:
        batch, loop = run.get('batch_runs'), 'loop_s' in run
        seconds = run['loop_s'] if loop else run['runtime_s']
        key = (gnorm_kind(run), batch,
               int(value(run, 'train.eval_every', 1) or 1), loop,
               str(run.get('_path')) in together)
        found.setdefault(key, []).append((
            seconds / (batch or 1),
            (run.get('peak_memory') or {}).get('host_rss_mib'),
            value(run, 'seed')))
    return [Runs(kind, tuple(s for s, _, _ in times),
                 tuple(m for _, m, _ in times), '', batch, every, loop, side,
                 tuple(k for _, _, k in times))
            for (kind, batch, every, loop, side), times in found.items()]


def ordinal(n: int) -> str:
    r"""``1st``, ``2nd``, ``10th``."""
    last = {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')
    return f"{n}{'th' if 10 <= n % 100 <= 20 else last}"


def why_apart(authors: Runs, gnorm: Runs) -> List[str]:
    r"""Why gnorm's runs :obj:`gnorm` are no work-matched pair for the
    authors' runs :obj:`authors`; empty for a pair: the same device,
    processor and thread count; each gnorm run trained alone, evaluated
    every epoch and timed by its loop alone; at least :data:`MIN_RUNS`
    runs a side."""
    why = []
    if authors.kind[:2] != gnorm.kind[:2]:
        why.append('other machine')
    if authors.kind[2] != gnorm.kind[2]:
        why.append('other threads')
    if gnorm.batch is None:
        why.append('gnorm batch not recorded')
    elif gnorm.batch > 1:
        why.append('gnorm batched')
    if gnorm.eval_every != 1:
        why.append(f'gnorm evaluated every {ordinal(gnorm.eval_every)} '
                   'epoch')
    if not gnorm.loop:
        why.append('no loop time recorded')
    if min(len(authors.seconds), len(gnorm.seconds)) < MIN_RUNS:
        why.append('too few runs')
    if not (authors.together and gnorm.together):
        why.append('not timed side by side')
    return why


def mean_ratio(authors: Sequence[float], gnorm: Sequence[float]
               ) -> Optional[float]:
    r"""The authors' mean over gnorm's (:func:`gnorm.bench.ratio`; time:
    above 1, gnorm is faster)."""
    return ratio(mean_std(authors)[0], mean_std(gnorm)[0])


def memory_ratio(authors: Runs, gnorm: Runs) -> Optional[float]:
    r"""The ratio of the mean peak memories of the runs that record it;
    :obj:`None` unless both sides have some."""
    mine = [m for m in authors.memory if m is not None]
    theirs = [m for m in gnorm.memory if m is not None]
    return mean_ratio(mine, theirs) if mine and theirs else None


@dataclass(frozen=True)
class Pair:
    r"""A work-matched pair's ratios, authors / gnorm: of the mean times,
    its ``low``-``high`` range (:func:`~gnorm.bench.ratio_range`) and of
    the mean peak memories (:obj:`None`: not recorded by both); ``cell``:
    where, in words (the cell and the authors' record)."""
    cell: str
    time: float
    low: float
    high: float
    memory: Optional[float]
    by_seed: Optional[Tuple[float, float, int]] = None


def seed_interval(authors: Runs, gnorm: Runs, level: float = 0.95
                  ) -> Optional[Tuple[float, float, int]]:
    r"""The ratio authors / gnorm paired by seed: the 95 % t interval of
    the mean log ratio of the runs of one seed (both sides run side by
    side, so that a seed's pair shared the machine's load), as ratios
    ``(low, high, n)``; :obj:`None` with fewer than two seeds both sides
    ran."""
    mine = dict(zip(authors.seeds, authors.seconds))
    theirs = dict(zip(gnorm.seeds, gnorm.seconds))
    logs = [math.log(mine[k] / theirs[k]) for k in sorted(
        k for k in mine if k is not None and k in theirs)]
    _, lo, hi, _ = mean_interval(logs, level)
    if lo is None:
        return None
    return math.exp(lo), math.exp(hi), len(logs)


def _time(seconds: Sequence[float]) -> str:
    mean, std = mean_std(seconds)
    return f'{mean:.1f} ± {std:.1f} ({len(seconds)})'


def _memory(memory: Sequence[Optional[float]]) -> str:
    found = [m for m in memory if m is not None]
    if not found:
        return 'not recorded'
    return f'{mean_std(found)[0]:.0f} ({len(found)})'


def _gnorm_runs(runs: Runs) -> str:
    if runs.batch is None:
        trained = 'batch not recorded'
    elif runs.batch == 1:
        trained = 'alone'
    else:
        trained = f'in batches of {runs.batch} (batch time / {runs.batch})'
    evaluated = ('every epoch' if runs.eval_every == 1 else
                 f'every {ordinal(runs.eval_every)} epoch')
    timed = '`loop_s`' if runs.loop else '`runtime_s` (whole call)'
    return f'{trained}, evaluated {evaluated}, {timed}'


def _label(cell: Tuple[str, int, float]) -> str:
    dataset, layers, scale = cell
    return f'{dataset} L={layers} s={scale:g}'


def cell_rows(cell: Tuple[str, int, float], authors: Sequence[Runs],
              gnorm: Sequence[Runs]) -> Tuple[List[str], List[Pair],
                                              List[str]]:
    r"""The table rows of one :obj:`cell` (dataset, layers, scale): one
    per group of the authors' runs (a record on one machine) and group of
    gnorm's (:func:`gnorm_times`), with the ratios for a work-matched pair
    and the reasons otherwise. Returns (rows, the pairs, why the cell has
    no pair: empty if it has one)."""
    dataset, layers, scale = cell
    rows, pairs, why = [], [], {}  # why: an ordered set
    for mine in authors:
        head = (f'| {dataset} | {layers} | {scale:g} | {mine.source}, '
                f'{kind_label(mine.kind)} | {_time(mine.seconds)} | '
                f'{_memory(mine.memory)} |')
        if not gnorm:
            rows.append(f'{head} no runs | | | | — ({NO_RUNS}) | |')
            why[NO_RUNS] = None
        for theirs in gnorm:
            apart = why_apart(mine, theirs)
            if apart:
                why.update(dict.fromkeys(apart))
                compared = f"— ({', '.join(apart)}) | —"
            else:
                memory = memory_ratio(mine, theirs)
                pairs.append(Pair(
                    f'{_label(cell)} ({mine.source})',
                    mean_ratio(mine.seconds, theirs.seconds),
                    *ratio_range(mine.seconds, theirs.seconds), memory,
                    seed_interval(mine, theirs)))
                compared = (f'{pairs[-1].time:.2f}x ({pairs[-1].low:.2f}x-'
                            f'{pairs[-1].high:.2f}x) | '
                            + (f'{memory:.2f}x' if memory is not None else
                               'not recorded'))
            rows.append(f'{head} {kind_label(theirs.kind)} | '
                        f'{_gnorm_runs(theirs)} | {_time(theirs.seconds)} | '
                        f'{_memory(theirs.memory)} | {compared} |')
    return rows, pairs, [] if pairs else list(why)


def _pair_words(pair: Pair) -> str:
    memory = (f'{pair.memory:.2f}x its peak memory' if pair.memory is not
              None else 'peak memory not recorded by both')
    paired = ('' if pair.by_seed is None else
              f'{pair.by_seed[0]:.2f}x-{pair.by_seed[1]:.2f}x paired by seed '
              f'(95 % interval, n={pair.by_seed[2]}); ')
    return (f"{pair.time:.2f}x gnorm's time ({paired}{pair.low:.2f}x-"
            f'{pair.high:.2f}x over every pair of runs, which mixes the '
            f'machine\'s loads; {memory}) at {pair.cell}')


# The order in which reasons are told (by their start).
REASONS = ('other machine', 'other threads', 'gnorm batch not recorded',
           'gnorm batched', 'gnorm evaluated every', 'no loop time recorded',
           'too few runs', NO_RUNS)


def _order(reason: str) -> Tuple[int, str]:
    return next((i for i, start in enumerate(REASONS)
                 if reason.startswith(start)), len(REASONS)), reason


def in_words(pairs: Sequence[Pair], unpaired: Sequence[List[str]]) -> str:
    r"""The section's outcome in one sentence: the ratios of the
    work-matched :obj:`pairs`, and why the other cells have none
    (:obj:`unpaired`: each such cell's reasons): each reason with the
    number of those cells where it keeps a row from being a pair."""
    if pairs:
        said = (f"Time per run: at {plural(len(pairs), 'work-matched pair')}"
                " (loop against loop, gnorm evaluating every epoch) the "
                "authors' code takes " + '; '.join(map(_pair_words, pairs)))
    else:
        said = ('Time per run: no cell has a work-matched pair yet (the '
                'same machine and threads; gnorm trained alone, evaluated '
                f'every epoch, timed by `loop_s`; {MIN_RUNS} runs a side '
                'or more), so no ratio is given')
    if unpaired:
        counts = Counter(why for reasons in unpaired for why in set(reasons))
        said += (f"; of the {plural(len(unpaired), 'cell')} without a pair"
                 if pairs else '') + ': ' + '; '.join(
            f"{why} at {plural(n, 'cell')}" for why, n in sorted(
                counts.items(), key=lambda c: _order(c[0])))
    return said + '.'


INTRO = (
    "Wall-clock seconds per run, mean ± std (ddof=0; runs), and peak "
    "memory, the process's largest resident set (host RSS, MiB, mean over "
    "the runs that record it; runs), by machine (device: processor, torch "
    "threads). The authors' code (experiments/authors_gcn.py, each run's "
    "`seconds`) times its 200-epoch loop alone: per epoch one training "
    'step and one validation forward, plus a test forward at each new best '
    'validation accuracy; not loading the data or building the model. Its '
    'peak memory counts only for a run that was the first of its process '
    "(`runs_before_in_process` 0). gnorm's `loop_s` (results.json) times "
    'its 200 epochs alone: per epoch one training step and, every '
    '`train.eval_every`-th epoch and at the last, one evaluation forward '
    'that gives train, validation and test accuracy (and keeps the best '
    'validation weights); a run without `loop_s` shows its `runtime_s`, '
    'the whole training call (loading the graph, building the model, the '
    'epochs, the final evaluation with collapse metrics). Runs trained '
    'together as one model (`batch_runs` = k > 1) record the whole '
    "batch's time, shown divided by k, and the batch's memory; gnorm's peak "
    'is its process\'s, so a run after others in one process includes '
    "theirs. The ratio authors / gnorm (above 1: gnorm is faster, or "
    'smaller) is given only for a work-matched pair: the same device, '
    "processor and thread count; gnorm's runs trained alone, evaluated "
    "every epoch (as the authors' loop validates every epoch) and timed by "
    f'`loop_s` (loop against loop); at least {MIN_RUNS} runs a side; both '
    'sides timed side by side (the timing folders: run at the same time on '
    'one machine, one process a side, one seed a process, so that what '
    'else the machine ran slowed both alike). Time: '
    'the ratio of the mean times, in brackets its 95 % interval paired by '
    'seed (the mean log ratio of the two runs of one seed, which ran side '
    'by side under one load, with its t interval) and the least and the '
    "greatest ratio of one authors' run to one gnorm run (every pair of "
    'runs: a range that mixes loads, not a confidence interval); memory: '
    'the ratio of the mean '
    'peaks. Every other row says why not. Pairs timed side by side shared '
    'the machine with other work (tests, other runs): their absolute times '
    'are slower than on an idle machine, their ratio is the measurement.')


def speed_lines(cells: Sequence[Tuple[Tuple[str, int, float], Sequence[Path],
                                      List[Dict[str, Any]]]],
                sources: str = '', together: Collection[str] = ()
                ) -> List[str]:
    r"""The section "Time per run": for each cell ((dataset, layers,
    scale), the paths of the authors' records, gnorm's runs of the cell),
    its rows (:func:`cell_rows`), then the outcome in words
    (:func:`machine_words`); :obj:`sources`: a sentence naming where the
    records and runs come from; :obj:`together`: the paths of the
    records and runs timed side by side (the timing folders)."""
    lines = ['', '## Time per run', '',
             INTRO + (f' {sources}' if sources else ''), '',
             "| dataset | L | s | authors' code: record, machine | time per "
             'run (s) | peak memory (MiB) | gnorm: machine | gnorm runs | '
             'time per run (s) | peak memory (MiB) | authors / gnorm: time | '
             'authors / gnorm: memory |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|']
    pairs, unpaired = [], []
    for cell, paths, runs in cells:
        authors = [group for path in paths
                   for group in authors_times(path, str(path) in together)]
        rows, paired, why = cell_rows(cell, authors,
                                      gnorm_times(runs, together))
        lines += rows
        pairs += paired
        if why:
            unpaired.append(why)
    lines += ['', in_words(pairs, unpaired)]
    if unpaired:
        lines += ['', f'A cell without a pair needs {MIN_RUNS} or more gnorm '
                  'runs of it trained alone and evaluated every epoch on the '
                  "authors' machine and thread count (`batch_runs=1 "
                  'threads=<n> train.eval_every=1`, recording `loop_s`), '
                  f"beside {MIN_RUNS} or more of the authors' runs there."]
    return lines
