r"""Regenerates Table 3 of the ContraNorm paper (deep GCNs, accuracy vs
depth) with one command: runs what is missing, cheapest cells first, then
writes the report.

    python experiments/table3.py paper     # experiment=table3_paper: the authors' protocol
    python experiments/table3.py fair      # experiment=table3_fair: the sound protocol
    python experiments/table3.py paper --report-only
    python experiments/table3.py paper --datasets cora --rows none pairnorm --depths 2 4
    python experiments/table3.py paper --launcher processes   # cells as Hydra multiruns

The grid (datasets, depths, seeds, rows and each row's candidate settings)
is the ``table:`` section of ``conf/experiment/table3_<protocol>.yaml``.
Each (dataset, row, depth) cell is the Hydra multirun ``python -m
gnorm.train -m experiment=table3_<protocol> ...`` over the seeds and the
row's ``grid`` (e.g. PairNorm's variant x s); this script composes its runs
itself (``hydra.compose``, the same overrides, configs and run folders) and
trains every cell in this one process (:func:`gnorm.train.train_runs`:
runs that differ only in seed and s train as one model). ``--launcher
NAME`` hands each cell to ``python -m gnorm.train -m
hydra/launcher=NAME`` instead (``conf/hydra/launcher/``: local processes,
SLURM). Runs go to ``experiments/runs/table3_<protocol>`` (``--runs``),
one folder per run named after its overrides. Interrupt at any time:
finished runs are kept and a rerun only does what is missing.

A report covers exactly the runs of one configuration: the protocol plus
``--set`` (a run counts only if its config is that of the table's run, so
runs made with other overrides are never averaged in). The committed
report (``experiments/results/table3_<protocol>.{md,csv}``, two plots) is
written only from the committed runs folder without ``--set`` and then
covers the whole table; any other report covers the selected cells and
goes to ``--out`` (default: ``<runs>-report`` beside the runs folder).
A report depends on its runs only (no date, no command line): the same
runs give the same bytes, and a file that would not change is not
rewritten, so a selection (``--datasets``...) leaves the committed report
as it was unless its runs changed. Its header counts the complete cells
(every setting of the grid with every seed); the plots draw only those
on the curves, partial cells as open markers.

A row with several settings is shown at the setting with the best mean
validation accuracy over its seeds (and, labelled optimistic, the best mean
test accuracy). Ties are declared, not broken silently: means equal to
within 1e-9 (:data:`TIE`) tie, the tie goes to the setting listed first in
the row's ``table.grid`` (for ContraNorm's s, the smaller scale), and the
report marks the cell with the tied settings it did not choose and their
test accuracy.
"""
import argparse
import copy
import csv
import itertools
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.results import (  # noqa: E402
    NOT_CONFIG_KEYS, code, load_runs, machines, mean_std, plural,
    write_records)
from gnorm.run_keys import identity, record_identity  # noqa: E402
from experiments.authors_gcn import read_records  # noqa: E402

RUNS = ROOT / 'experiments' / 'runs'
RESULTS = ROOT / 'experiments' / 'results'
# Keys the table sets itself; --set cannot change them.
AXES = ('experiment', 'dataset', 'layers', 'seed', 'tag')
# Nodes and symmetrised edges, only to run cheap cells first.
_SIZE = {'cora': (2708, 10556), 'citeseer': (3327, 9104),
         'chameleon': (2277, 62792), 'squirrel': (5201, 396846)}


class TableError(Exception):
    r"""A bad command line: one line, exit status 2."""


def table_spec(protocol: str) -> Dict[str, Any]:
    r"""The ``table:`` section of ``experiment=table3_<protocol>``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        cfg = compose('train', overrides=[f'experiment=table3_{protocol}'])
    return OmegaConf.to_container(cfg.table, resolve=True)


def settings(spec: Dict[str, Any], row: str) -> List[Dict[str, Any]]:
    r"""The candidate settings of :obj:`row`: every combination of its
    ``grid`` (``[{}]`` for a row without one)."""
    grid = spec.get('grid', {}).get(row) or {}
    return [dict(zip(grid, values))
            for values in itertools.product(*grid.values())]


def setting_label(setting: Dict[str, Any]) -> str:
    r"""``PN-SI, s=0.5`` for ``{norm.mode: PN-SI, norm.scale: 0.5}``."""
    return ', '.join(f's={v:g}' if k == 'norm.scale' else str(v)
                     for k, v in setting.items())


def _values(values: Sequence[Any]) -> str:
    return ','.join(str(v) for v in values)


def cells(spec: Dict[str, Any], rows=None) -> List[Dict[str, Any]]:
    r"""The (dataset, row, depth) cells of :obj:`spec` (its :obj:`rows`
    only, if given), cheapest first, each with its multirun's overrides:
    ``base`` (fixed) and ``sweep`` (the seeds and the row's grid)."""
    out = []
    for dataset in spec['datasets']:
        for row in rows or list(spec['rows']):
            grid = spec.get('grid', {}).get(row) or {}
            candidates = settings(spec, row)
            for depth in spec['depths']:
                base = [f'dataset={dataset}', f'layers={depth}',
                        f'tag={row}', *spec['rows'][row]]
                sweep = [f"seed={_values(spec['seeds'])}",
                         *(f'{k}={_values(v)}' for k, v in grid.items())]
                runs = len(candidates) * len(spec['seeds'])
                # Per layer and epoch on a CPU: ~42 ns per edge or node
                # channel, ~7 ns per node pair of ContraNorm's attention.
                nodes, edges = _SIZE.get(dataset, (1000, 5000))
                cost = depth * (edges + 32 * nodes) * runs
                if 'norm=contranorm' in base and 'norm.scale=0.0' not in base:
                    cost += depth * nodes * nodes // 6 * runs
                out.append(dict(dataset=dataset, row=row, depth=depth,
                                base=base, sweep=sweep, settings=candidates,
                                expected=len(spec['seeds']), cost=cost,
                                position=len(out)))
    return sorted(out, key=lambda c: c['cost'])


def arguments(protocol: str, cell: Dict[str, Any],
              sets: Sequence[str]) -> List[str]:
    r"""The overrides of :obj:`cell`'s multirun."""
    return [f'experiment=table3_{protocol}', *cell['base'], *cell['sweep'],
            *sets]


def command(protocol: str, cell: Dict[str, Any], runs_dir: Path,
            sets: Sequence[str], launcher: Optional[str] = None) -> List[str]:
    r"""The ``python -m gnorm.train -m`` command of one cell."""
    return ['python', '-m', 'gnorm.train', '-m',
            *arguments(protocol, cell, sets),
            f'hydra.sweep.dir={runs_dir}',
            *([f'hydra/launcher={launcher}'] if launcher else [])]


def run_key(found: Dict[str, Any]) -> str:
    r"""The identity :obj:`found` of a run (:func:`gnorm.run_keys.identity`
    of a composed config, :func:`gnorm.run_keys.record_identity` of a
    record) as text."""
    return json.dumps(found, sort_keys=True)


class Composer:
    r"""Composes the runs of cells as ``python -m gnorm.train -m`` composes
    its jobs: the jobs' overrides from Hydra's basic sweeper, each job's
    config, group choices and run folder (``hydra.sweep.subdir``). Configs
    that differ only in ``layers``, ``seed`` and grid keys (plain values)
    are composed once and the values set (the tests check that this equals
    composing each)."""

    def __init__(self, varying: Sequence[str]):
        from hydra.core.override_parser.overrides_parser import \
            OverridesParser
        import gnorm.train  # noqa: F401  (registers gnorm's resolvers)
        self.parser = OverridesParser.create()
        self.varying = ('layers', 'seed', *varying)
        self.composed: Dict[tuple, Any] = {}
        self.resolved: Dict[tuple, Dict[str, Any]] = {}
        self.parsed: Dict[str, Any] = {}

    def jobs(self, overrides: Sequence[str]) -> List[List[str]]:
        r"""The job overrides of the multirun over :obj:`overrides`."""
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        parsed = self.parser.parse_overrides(list(overrides))
        return [job for chunk in BasicSweeper.split_arguments(parsed, None)
                for job in chunk]

    def _parse(self, job: List[str]) -> list:
        for item in job:
            if item not in self.parsed:
                self.parsed[item] = self.parser.parse_override(item)
        return [self.parsed[item] for item in job]

    def _compose(self, fixed: Tuple[str, ...]):
        if fixed not in self.composed:
            from hydra import compose
            from omegaconf import OmegaConf
            cfg = compose('train', overrides=list(fixed),
                          return_hydra_config=True)
            choices = {k: v for k, v in cfg.hydra.runtime.choices.items()
                       if not k.startswith('hydra/') and k != 'hydra'}
            task = OmegaConf.masked_copy(cfg, [k for k in cfg
                                               if k != 'hydra'])
            text = json.dumps(OmegaConf.to_container(task))
            # Values set after resolving unless something interpolates them.
            late = [k for k in self.varying
                    if k != 'layers' and '${' + k not in text]
            self.composed[fixed] = (cfg, task, choices, late)
        return self.composed[fixed]

    def run(self, job: List[str], runs_dir: Path) -> Dict[str, Any]:
        r"""One job: ``dir``, ``info`` (for ``results.json``), ``key``
        (:func:`run_key`) and what :meth:`config` needs."""
        from hydra._internal.config_loader_impl import get_overrides_dirname
        from omegaconf import OmegaConf, open_dict
        parsed = self._parse(job)
        fixed = tuple(o.input_line for o in parsed
                      if o.get_key_element() not in self.varying)
        values = {o.get_key_element(): o.value() for o in parsed
                  if o.get_key_element() in self.varying}
        full, task, choices, late = self._compose(fixed)
        early = tuple((k, v) for k, v in values.items() if k not in late)
        if (fixed, early) not in self.resolved:
            cfg = copy.deepcopy(task)
            for k, v in early:
                OmegaConf.update(cfg, k, v)
            self.resolved[fixed, early] = OmegaConf.to_container(
                cfg, resolve=True)
        config = copy.deepcopy(self.resolved[fixed, early])
        for k, v in values.items():
            if k in late:
                *path, last = k.split('.')
                node = config
                for part in path:
                    node = node[part]
                node[last] = v
        naming = full.hydra.job.config.override_dirname
        with open_dict(full.hydra.job):
            full.hydra.job.override_dirname = get_overrides_dirname(
                parsed, list(naming.exclude_keys), naming.item_sep,
                naming.kv_sep)
        return dict(fixed=fixed, values=values,
                    dir=runs_dir / str(full.hydra.sweep.subdir),
                    info={'choices': dict(choices), 'overrides': list(job)},
                    key=run_key(identity(config)))

    def config(self, run: Dict[str, Any]):
        r"""The config of :obj:`run` (a :class:`DictConfig` of its own)."""
        from omegaconf import OmegaConf
        cfg = copy.deepcopy(self._compose(run['fixed'])[1])
        for k, v in run['values'].items():
            OmegaConf.update(cfg, k, v)
        return cfg


def compose_cells(protocol: str, todo: List[Dict[str, Any]],
                  spec: Dict[str, Any], sets: Sequence[str],
                  runs_dir: Path) -> Composer:
    r"""Adds to each cell of :obj:`todo` its ``runs``: one per job of its
    multirun, with its ``setting`` (of the row's grid) and ``seed``;
    returns the :class:`Composer` that makes their configs."""
    from hydra import initialize_config_dir
    from gnorm.train import CONF_DIR
    grid_keys = sorted({k for g in (spec.get('grid') or {}).values()
                        for k in (g or {})})
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        composer = Composer(grid_keys)
        for cell in todo:
            cell['runs'] = []
            keys = list(cell['settings'][0])
            for job in composer.jobs(arguments(protocol, cell, sets)):
                run = composer.run(job, runs_dir)
                run['setting'] = setting_label(
                    {k: run['values'][k] for k in keys})
                run['seed'] = run['values']['seed']
                cell['runs'].append(run)
    return composer


def index(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    r"""The finished runs by :func:`run_key` (the first by path of equal
    ones: e.g. a run whose overrides spell out a default)."""
    found: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        if run.get('status') == 'ok' and 'config' in run:
            found.setdefault(run_key(record_identity(run)), run)
    return found


def _write_hydra(run: Dict[str, Any], cfg) -> None:
    r"""``.hydra/config.yaml`` and ``overrides.yaml`` of a run, as a job of
    a multirun writes them."""
    from omegaconf import OmegaConf
    hydra_dir = run['dir'] / '.hydra'
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, hydra_dir / 'config.yaml')
    OmegaConf.save(OmegaConf.create(run['info']['overrides']),
                   hydra_dir / 'overrides.yaml')


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


def run_missing(protocol: str, todo: List[Dict[str, Any]], runs_dir: Path,
                sets: Sequence[str], found: Dict[str, Any],
                composer: Composer, threads: Optional[int], dry_run: bool,
                launcher: Optional[str] = None) -> int:
    r"""Trains the unfinished runs of the cells of :obj:`todo` in this
    process (with :obj:`launcher`: each cell with unfinished runs as a
    ``python -m gnorm.train -m`` multirun); returns the number of cells
    that failed."""
    from gnorm.errors import GnormError
    from gnorm.train import train_runs
    failed = 0
    total = sum(len(c['runs']) for c in todo)
    done = sum(r['key'] in found for c in todo for r in c['runs'])
    print(f'{total} runs in {len(todo)} cells, {done} done, '
          f'{total - done} to run', flush=True)
    for k, cell in enumerate(todo, start=1):
        left = [r for r in cell['runs'] if r['key'] not in found]
        n = len(cell['runs'])
        label = (f"[{k}/{len(todo)}] {cell['dataset']} {cell['row']} "
                 f"L={cell['depth']}: {n - len(left)}/{n} done")
        if not left:
            print(label, flush=True)
            continue
        args = command(protocol, cell, runs_dir, sets, launcher)
        print(f'{label}, running {len(left)}\n  {shlex.join(args)}',
              flush=True)
        if dry_run:
            continue
        if launcher:
            env = dict(os.environ)
            if threads:
                env['OMP_NUM_THREADS'] = str(threads)
            proc = subprocess.run([sys.executable, *args[1:]], cwd=ROOT,
                                  env=env)
            if proc.returncode in (130, 143, -2, -15):  # Ctrl-C, SIGTERM
                raise KeyboardInterrupt
            failed += proc.returncode != 0
            continue
        cfgs = [composer.config(r) for r in left]
        for run, cfg in zip(left, cfgs):
            _write_hydra(run, cfg)
        handler = show_progress()
        try:
            results = train_runs(cfgs,
                                 [str(r['dir']) for r in left],
                                 [r['info'] for r in left])
        except GnormError as e:
            print(f'error: {e}', file=sys.stderr, flush=True)
            failed += 1
            continue
        finally:
            logging.getLogger('gnorm.train.progress').removeHandler(handler)
        for run, result in zip(left, results):
            if result.get('status') == 'ok':
                found[run['key']] = result
    return failed


def read_csv(path: Path) -> List[Dict[str, str]]:
    r"""The rows of a csv file whose ``#`` lines are comments."""
    with open(path) as f:
        return list(csv.DictReader(line for line in f
                                   if not line.startswith('#')))


def read_paper(path: Path) -> Dict[Tuple[str, str, int], Tuple[float,
                                                                float]]:
    r"""(dataset, row, layers) -> (mean, std) of the paper's table."""
    return {(r['dataset'], r['row'], int(r['layers'])):
            (float(r['mean']), float(r['std'])) for r in read_csv(path)}


def read_notes(path: Optional[Path],
               ) -> Dict[Tuple[str, str, Optional[int]], str]:
    r"""(dataset, row, layers) -> explanation of a cell far from the
    paper; layers :obj:`None` (an empty ``layers`` in the file): every depth
    of that dataset and row without a line of its own."""
    if path is None or not path.is_file():
        return {}
    return {(r['dataset'], r['row'], int(r['layers']) if r['layers'] else
             None): r['note'] for r in read_csv(path)}


# The authors' norm_mode (experiments/authors_gcn.py) -> the table's row.
AUTHORS_ROWS = {'CN': 'contranorm', 'PN': 'pairnorm', 'None': 'none'}
# The authors' runs beside gnorm's, seed by seed (experiments/authors_spread.py).
AUTHORS_COMPARED = 'experiments/results/authors_vs_gnorm.md'


def relative(path: Path) -> Path:
    r""":obj:`path` relative to the repository's root when it lies in it
    (as reports name files), else as it is."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def read_authors(folder: Optional[Path],
                 ) -> Dict[Tuple[str, str, int], List[Dict[str, Any]]]:
    r"""(dataset, row, layers) -> the runs of the authors' code there (the
    records ``*.json`` of ``experiments/authors_gcn.py`` in :obj:`folder`,
    one per cell and scale), highest scale first: ``scale``, last-epoch test
    accuracy ``mean`` and ``std`` (%, ddof=0), seeds ``n``, ``path``,
    their ``commit``."""
    found: Dict[Tuple[str, str, int], List[Dict[str, Any]]] = {}
    if folder is None or not folder.is_dir():
        return found
    for record in read_records(folder):
        key = (record['dataset'], AUTHORS_ROWS[record['norm_mode']],
               record['layers'])
        mean, std = mean_std(list(record['runs'].values()))
        found.setdefault(key, []).append(dict(
            scale=record['scale'], mean=mean, std=std,
            n=len(record['runs']), commit=record['commit'],
            path=relative(record['path'])))
    for runs in found.values():
        runs.sort(key=lambda run: -run['scale'])
    return found


def with_authors_runs(
    notes: Dict[Tuple[str, str, Optional[int]], str],
    authors: Dict[Tuple[str, str, int], List[Dict[str, Any]]],
    paper: Optional[Dict] = None, paper_stds: float = 2.0,
) -> Dict[Tuple[str, str, Optional[int]], str]:
    r""":obj:`notes` with, for every cell of :obj:`authors`
    (:func:`read_authors`), a first sentence generated from those runs:
    their last-epoch test accuracy, mean ± std over the seeds run, per
    scale; and, where :obj:`paper` has the cell, which of those scales come
    within :obj:`paper_stds` paper stds of the paper."""
    notes = dict(notes)
    for key, runs in authors.items():
        rest = notes.get(key, notes.get((*key[:2], None)))
        said = '; '.join(f"{r['mean']:.2f}"
                         + (f" ± {r['std']:.2f}" if r['n'] > 1 else '')
                         + " at s = "
                         f"{r['scale']:g} ({plural(r['n'], 'seed')}, "
                         f"{r['path']})"
                         for r in runs)
        notes[key] = (f"the authors' published GCN code "
                      f"(PKU-ML/ContraNorm {runs[0]['commit']}, their "
                      f"recipe, run by experiments/authors_gcn.py; "
                      f"last-epoch test accuracy) gives {said}"
                      + _against_paper(runs, (paper or {}).get(key),
                                       paper_stds)
                      + (f'; {rest}' if rest else ''))
    return notes


def _against_paper(runs: List[Dict[str, Any]],
                   paper: Optional[Tuple[float, float]],
                   paper_stds: float) -> str:
    r"""Which scales of :obj:`runs` (:func:`read_authors`) come within
    :obj:`paper_stds` paper stds of :obj:`paper` (mean, std), as a clause;
    empty without the paper's value."""
    if not paper or paper[0] is None or not paper[1]:
        return ''
    close = [f"{r['scale']:g}" for r in runs
             if abs(r['mean'] - paper[0]) <= paper_stds * paper[1]]
    within = (f" {paper_stds:g} paper stds of the paper's "
              f"{paper[0]:.2f} ± {paper[1]:.2f}")
    if len(runs) == 1:
        return (': this comes within' if close
                else ': this does not come within') + within
    return (f': of these {len(runs)} scales, '
            + (f"s = {', '.join(close)} "
               + ('comes' if len(close) == 1 else 'come') + ' within'
               if close else 'none comes within') + within)


def _at_scales(groups: Dict[str, List[Dict[str, Any]]],
               runs: List[Dict[str, Any]]) -> str:
    r"""gnorm's test accuracy at the scales of the authors' :obj:`runs`
    (:obj:`groups`: gnorm's finished runs of the cell by setting), as a
    clause; empty where gnorm ran none of them."""
    said = []
    for run in runs:
        ours = groups.get(setting_label({'norm.scale': run['scale']}), [])
        if ours:
            mean, std = mean_std([100 * r['test_acc'] for r in ours])
            said.append(f"{mean:.2f} ± {std:.2f} at s = {run['scale']:g} "
                        f"({plural(len(ours), 'seed')})")
    return (f"; gnorm at the same scales: {'; '.join(said)} (seed by seed, "
            f"with a permutation test: {AUTHORS_COMPARED})" if said else '')


# Mean accuracies (fractions) closer than this are a tie: equal numbers of
# correct nodes summed in another order differ in the last bits only.
TIE = 1e-9


def _choose(groups: Dict[str, List[Dict[str, Any]]], expected: int,
            metric: str, order: Sequence[str] = ()
            ) -> Tuple[Optional[str], List[str]]:
    r"""The setting of :obj:`groups` with the best mean :obj:`metric`, and
    the settings tied with it (means within :data:`TIE`); only settings
    with every seed finished compete while there are any. A tie goes to
    the setting that comes first in :obj:`order` (the row's ``table.grid``
    order: for ContraNorm's s, the smaller scale)."""
    if not groups:
        return None, []
    full = {s: g for s, g in groups.items() if len(g) >= expected} or groups
    means = {s: mean_std([r[metric] for r in g])[0] for s, g in full.items()}
    best = max(means.values())
    rank = {s: k for k, s in enumerate(order)}
    tied = sorted((s for s in full if best - means[s] <= TIE),
                  key=lambda s: rank.get(s, len(rank)))
    return tied[0], tied[1:]


def _tie_text(setting: str, runs: List[Dict[str, Any]]) -> str:
    r"""``s=0.8: 87.98 ± 1.27``: a tied setting and its test accuracy
    (%, mean ± std over its seeds)."""
    mean, std = mean_std([100 * r['test_acc'] for r in runs])
    return f'{setting}: {mean:.2f} ± {std:.2f}'


def summarise(todo: List[Dict[str, Any]], found: Dict[str, Dict[str, Any]],
              paper: Dict, flag: Optional[Dict[str, Any]] = None,
              notes: Optional[Dict] = None,
              authors: Optional[Dict] = None) -> List[Dict[str, Any]]:
    r"""One record per (dataset, row, depth, selection) of the cells
    :obj:`todo` (with their composed ``runs``): test accuracy mean and std
    over the seeds of the selected setting, counting only the finished
    runs of :obj:`found` whose config is that of one of the cell's runs;
    the paper's value and the difference. Rows with several settings get two
    selections: ``val`` (best mean validation accuracy) and ``test`` (best
    mean test accuracy: optimistic). A record of a row in
    ``flag['rows']`` more than ``flag['paper_stds']`` paper stds from the
    paper gets a ``note`` (from :obj:`notes`, or that none is known), and,
    where :obj:`authors` (:func:`read_authors`) ran the cell, gnorm's
    accuracy at the scales they ran."""
    flag = flag or {}
    notes, authors = notes or {}, authors or {}
    records = []
    # In the table's order: datasets, rows, depths as the spec lists them.
    for cell in sorted(todo, key=lambda c: c.get('position', 0)):
        groups: Dict[str, List[Dict[str, Any]]] = {}
        for run in cell['runs']:
            if run['key'] in found:
                groups.setdefault(run['setting'], []).append(
                    found[run['key']])
        several = len(cell['settings']) > 1
        where = (cell['dataset'], cell['row'], cell['depth'])
        order = [setting_label(s) for s in cell['settings']]
        for selection in (('val', 'test') if several else ('val', )):
            setting, tied = _choose(groups, cell['expected'],
                                    f'{selection}_acc', order)
            chosen = groups.get(setting, [])
            test_mean, test_std = mean_std(
                [100 * r['test_acc'] for r in chosen])
            val_mean, _ = mean_std([100 * r['val_acc'] for r in chosen])
            p_mean, p_std = paper.get(where, (None, None))
            diff = (None if test_mean is None or p_mean is None
                    else test_mean - p_mean)
            stds = None if diff is None or not p_std else diff / p_std
            note = None
            if (cell['row'] in flag.get('rows', []) and stds is not None
                    and abs(stds) > flag.get('paper_stds', 2)):
                note = notes.get(where, notes.get(
                    (*where[:2], None), 'no explanation known yet: the '
                    "authors' code was not run at this cell"))
                if where in authors:
                    note += _at_scales(groups, authors[where])
            cell_runs = sum(len(g) for g in groups.values())
            cell_expected = len(cell['settings']) * cell['expected']
            erank = [r.get('collapse', {}).get('effective_rank')
                     for r in chosen]
            records.append(dict(
                dataset=cell['dataset'], row=cell['row'],
                layers=cell['depth'],
                selection=selection if several else '',
                setting=setting if several else None,
                settings_run=len(groups), settings=len(cell['settings']),
                runs=len(chosen), expected=cell['expected'],
                cell_runs=cell_runs, cell_expected=cell_expected,
                complete=cell_runs == cell_expected,
                test_mean=test_mean, test_std=test_std, val_mean=val_mean,
                paper_mean=p_mean, paper_std=p_std, diff=diff,
                diff_paper_stds=stds, note=note,
                ties='; '.join(_tie_text(t, groups[t]) for t in tied),
                erank=_curve(erank, _mean), erank_min=_curve(erank, min),
                erank_max=_curve(erank, max),
            ))
    return records


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _curve(curves: List[Optional[List[float]]], how) -> Optional[List]:
    r""":obj:`how` (mean, min, max) of :obj:`curves` per layer; :obj:`None`
    if no curve."""
    curves = [c for c in curves if c]
    if not curves:
        return None
    return [how(v) for v in zip(*curves)]


def _label(record: Dict[str, Any]) -> str:
    if record['selection'] == 'val':
        return f"{record['row']} (chosen by val)"
    if record['selection'] == 'test':
        return f"{record['row']} (chosen by test, optimistic)"
    return record['row']


TIE_RULE = ('Ties: settings whose mean accuracy (the one choosing) is '
            f'equal, to {TIE:g}, tie; the tie goes to the setting listed '
            'first in the row\'s `table.grid` (for s, the smaller scale), '
            'and the cell shows the tied settings it did not choose with '
            'their test accuracy ("tie, not chosen").')


def _cell(r: Dict[str, Any]) -> str:
    if r['runs'] == 0:
        ours = 'missing'
    else:
        ours = f"**{r['test_mean']:.2f}** ± {r['test_std']:.2f}"
        if r['runs'] < r['expected']:
            ours += f" ({r['runs']}/{r['expected']} runs)"
        if r['setting'] is not None:
            ours += f", {r['setting']}"
            if r['settings_run'] < r['settings']:
                ours += f" (of {r['settings_run']}/{r['settings']})"
        if r.get('ties'):
            ours += f"<br>tie, not chosen: {r['ties']}"
    if r['paper_mean'] is None:
        return ours
    paper = f"paper {r['paper_mean']:.2f} ± {r['paper_std']:.2f}"
    if r['diff'] is None:
        return f'{ours}<br>{paper}'
    return f"{ours}<br>{paper}, Δ {r['diff']:+.2f}"


# Rows whose cells are compared (by the seeds' spread) with ContraNorm's.
COMPARED = ('pairnorm', 'layernorm')


def save_bytes(path: Path, data: bytes) -> None:
    r"""Writes :obj:`data` to :obj:`path` unless it already holds exactly
    that (a regenerated report leaves an unchanged file untouched)."""
    if not (path.is_file() and path.read_bytes() == data):
        path.write_bytes(data)


def save_figure(fig, path: Path) -> None:
    r"""Saves :obj:`fig` as PNG without the metadata that changes between
    matplotlib versions, so the same records give the same bytes."""
    import io
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=110, bbox_inches='tight',
                metadata={'Software': None})
    plt.close(fig)
    save_bytes(path, buffer.getvalue())


def _shown(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell: the setting chosen by validation."""
    return [r for r in records if r['selection'] != 'test']


def _partial(r: Dict[str, Any]) -> str:
    r"""``1 of 12 settings`` (or ``3 of 5 runs``) for a partial cell."""
    if r['settings_run'] < r['settings']:
        return f"{r['settings_run']} of {r['settings']} settings"
    return f"{r['cell_runs']} of {r['cell_expected']} runs"


def completeness(records: List[Dict[str, Any]]) -> str:
    r"""How many cells are complete (every setting of the grid with every
    seed), partial and missing, and how many runs of the grid are done."""
    cells = _shown(records)
    complete = sum(r['complete'] for r in cells)
    missing = sum(r['cell_runs'] == 0 for r in cells)
    return (f"**{complete} of {len(cells)} cells complete** (every setting "
            f"of the grid run with every seed), "
            f"{len(cells) - complete - missing} partial, {missing} missing; "
            f"{sum(r['cell_runs'] for r in cells)} of "
            f"{sum(r['cell_expected'] for r in cells)} runs of the grid "
            f"done ({sum(r['settings_run'] for r in cells)} of "
            f"{sum(r['settings'] for r in cells)} settings with runs).")


def _versus(ours: Dict[str, Any], other: Dict[str, Any]) -> str:
    r"""Whether :obj:`ours` beats :obj:`other` by more than the seeds'
    spread (the larger of the two stds), in words with the numbers."""
    for r in (ours, other):
        if not r['complete']:
            return (f"not compared: {r['row']} "
                    + ('missing' if r['cell_runs'] == 0 else
                       f'partial ({_partial(r)})'))
    diff = ours['test_mean'] - other['test_mean']
    spread = max(ours['test_std'], other['test_std'])
    numbers = f'Δ {diff:+.2f}, spread {spread:.2f}'
    if diff > spread:
        return f'**beats** ({numbers})'
    if diff < -spread:
        return f'**loses** ({numbers})'
    return f'within the spread ({numbers})'


def comparison(records: List[Dict[str, Any]],
               row: str = 'contranorm') -> List[str]:
    r"""The report's section saying, per dataset and depth, whether
    :obj:`row` beats each of :data:`COMPARED` by more than the seeds'
    spread; complete cells only. No lines without those rows."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in _shown(records)}
    against = [o for o in COMPARED if any(k[1] == o for k in by)]
    if not against or not any(k[1] == row for k in by):
        return []
    lines = [f'## Does {row} beat {" and ".join(against)}?', '',
             f'Rule: {row} (setting chosen by validation) beats a row at a '
             f'(dataset, depth) when its mean test accuracy exceeds that '
             f"row's by more than the spread, the larger of the two seeds' "
             f'standard deviations (ddof=0); it loses when it is below by '
             f'more than the spread, and is otherwise within the spread. '
             f'Δ = {row} − the other row (test accuracy, %). Only complete '
             f'cells (every setting with every seed) are compared.', '',
             '| dataset | layers | ' + ' | '.join(
                 f'vs {o}' for o in against) + ' |',
             '|---|---|' + '---|' * len(against)]
    verdicts: Dict[str, Dict[str, List[str]]] = {o: {} for o in against}
    for (dataset, name, depth), ours in by.items():
        if name != row:
            continue
        texts = [_versus(ours, by[dataset, o, depth])
                 if (dataset, o, depth) in by else 'no such cell'
                 for o in against]
        lines.append(f'| {dataset} | {depth} | ' + ' | '.join(texts) + ' |')
        for o, text in zip(against, texts):
            verdict = text.split(' (')[0].strip('*')
            if verdict not in VERDICTS:  # not compared, for any reason
                verdict = 'not compared'
            verdicts[o].setdefault(verdict, []).append(f'{dataset} L={depth}')
    return lines + ['', in_words(row, verdicts)]


VERDICTS = ('beats', 'loses', 'within the spread')


def in_words(row: str, verdicts: Dict[str, Dict[str, List[str]]]) -> str:
    r"""The comparison's table in one paragraph (the README quotes it):
    per other row, the cells where :obj:`row` beats it, loses, or is within
    the spread, and which cells are not compared yet."""
    parts = []
    for other, found in verdicts.items():
        said = [f"{verdict} at {', '.join(found[verdict])}"
                for verdict in VERDICTS if found.get(verdict)]
        left = found.get('not compared', [])
        parts.append(f"against {other}, {row} "
                     + ('; '.join(said) if said else 'has no complete cell')
                     + (f" (not compared yet, incomplete: {', '.join(left)})"
                        if left else ''))
    return 'In words: ' + '. '.join(
        p[0].upper() + p[1:] if i else p for i, p in enumerate(parts)) + '.'


def _command(protocol: str, spec: Dict[str, Any], sets: Sequence[str],
             runs_dir: Path) -> str:
    r"""The command that rewrites a report of the whole table."""
    args = [protocol, '--report-only']
    if sets:
        args += ['--set', *sets]
    if runs_dir != (RUNS / spec['name']).resolve():
        args += ['--runs', os.path.relpath(runs_dir, ROOT)]
    return 'python experiments/table3.py ' + shlex.join(args)


def _coverage(spec: Dict[str, Any], records: List[Dict[str, Any]]) -> str:
    r"""What the report covers: the whole table, or the cells selected."""
    def listed(key):
        return ', '.join(map(str, dict.fromkeys(r[key] for r in records)))
    whole = ({(r['dataset'], r['row'], r['layers']) for r in records}
             == {(d, row, depth) for d in spec['datasets']
                 for row in spec['rows'] for depth in spec['depths']})
    if whole:
        return 'It covers the whole table.'
    return (f"It covers only the selected cells: datasets {listed('dataset')}"
            f"; rows {listed('row')}; depths {listed('layers')}.")


def set_name(name: str, sets: Sequence[str]) -> str:
    r"""The name of the runs or report of :obj:`name` with the overrides
    :obj:`sets`: ``table3_fair+train.epochs=50`` (``/`` becomes ``_``);
    :obj:`name` itself without overrides."""
    return name + ''.join(f"+{s.replace('/', '_')}" for s in sets)


def write_report(protocol: str, spec: Dict[str, Any],
                 records: List[Dict[str, Any]], counted: List[Dict],
                 sets: Sequence[str], runs_dir: Path, out: Path,
                 authors: Optional[Dict] = None) -> Path:
    r"""Writes ``<name>.md``, ``<name>.csv`` and the plots (``<name>``: the
    table's name, plus ``+<override>`` for each of :obj:`sets`); returns
    the path of the ``.md``. The files depend on the records, runs and
    table only (no date, no command line of the call): the same runs give
    the same bytes, and a file that would not change is not rewritten."""
    name = set_name(spec['name'], sets)
    out.mkdir(parents=True, exist_ok=True)
    columns = ['dataset', 'row', 'layers', 'selection', 'setting',
               'settings_run', 'settings', 'runs', 'expected', 'cell_runs',
               'cell_expected', 'complete', 'test_mean', 'test_std',
               'val_mean', 'paper_mean', 'paper_std', 'diff',
               'diff_paper_stds', 'note', 'ties']
    scratch = out / f'.{name}.csv.new'
    write_records(scratch, records, columns)
    save_bytes(out / f'{name}.csv', scratch.read_bytes())
    scratch.unlink()

    depths = sorted({r['layers'] for r in records})
    made_by = code(counted)
    title = f"# {spec['name']}: accuracy vs depth, ContraNorm paper Table 3"
    if sets:
        title += f" — with {' '.join(sets)}"
    lines = [
        title, '',
        f'Generated by `{_command(protocol, spec, sets, runs_dir)}` from the '
        f'{len(counted)} finished runs in '
        f'`{os.path.relpath(runs_dir, ROOT)}` whose config is one of this '
        f"table's (protocol: `conf/experiment/table3_{protocol}.yaml`"
        + (f" plus `{' '.join(sets)}`" if sets else '') + '). '
        f'{_coverage(spec, records)} '
        f'Machines: {machines(counted) or "none yet"}.'
        + (f' Code: {made_by}.' if made_by else ''),
        '',
        completeness(records),
        '',
        'Each cell: our test accuracy (%), mean ± std over seeds '
        '(ddof=0), the paper\'s value and Δ = ours − paper. A row with '
        'several candidate settings (`table.grid`: PairNorm\'s variant and '
        's, ContraNorm\'s s) shows the chosen one; "chosen by val" picks it '
        'per (dataset, depth) by mean validation accuracy (the honest '
        'choice), "chosen by test, optimistic" by mean test accuracy, which '
        'is what a table built from test means shows. "of k/n" = only k of '
        'the n settings have runs yet; "missing" = not run yet. '
        f'{TIE_RULE}',
    ]
    flag = spec.get('flag') or {}
    if flag:
        lines += ['', f"Cells of the rows {', '.join(flag['rows'])} more than "
                  f"{flag['paper_stds']:g} paper standard deviations from the "
                  'paper carry a footnote with what is known about them.']
    footnotes = []
    for dataset in dict.fromkeys(r['dataset'] for r in records):
        lines += ['', f'## {dataset}', '',
                  '| row | ' + ' | '.join(f'L={d}' for d in depths) + ' |',
                  '|---|' + '---|' * len(depths)]
        rows = dict.fromkeys((r['row'], r['selection']) for r in records
                             if r['dataset'] == dataset)
        for row, selection in rows:
            rs = {r['layers']: r for r in records if r['dataset'] == dataset
                  and r['row'] == row and r['selection'] == selection}
            texts = []
            for d in depths:
                r = rs.get(d)
                text = _cell(r) if r else ''
                if r and r['note']:
                    footnotes.append(
                        f"[^{len(footnotes) + 1}]: {dataset} {_label(r)} "
                        f"L={d}: {r['test_mean']:.2f} ± {r['test_std']:.2f} "
                        f"is {r['diff_paper_stds']:+.1f} paper stds from "
                        f"{r['paper_mean']:.2f} ± {r['paper_std']:.2f}: "
                        f"{r['note']}.")
                    text += f' [^{len(footnotes)}]'
                texts.append(text)
            lines.append(f'| {_label(next(iter(rs.values())))} | '
                         + ' | '.join(texts) + ' |')
    versus = comparison(records)
    if versus:
        lines += [''] + versus
    if footnotes:
        lines += [''] + footnotes
    lines += ['', f'![accuracy vs depth]({name}_depth.png)', '']
    plot_depth(records, out / f'{name}_depth.png',
               paper_lines=protocol == 'paper',
               authors=authors if protocol == 'paper' else None)
    if plot_erank(records, out / f'{name}_erank.png'):
        lines += [f'![effective rank vs layer]({name}_erank.png)', '']
    else:
        lines += ['No run of this report recorded effective ranks '
                  '(`collapse_metrics`), so there is no plot of them.', '']
    save_bytes(out / f'{name}.md', '\n'.join(lines).encode())
    return out / f'{name}.md'


def _spans(depths: List[int]) -> str:
    return ', '.join(f'L={d}' for d in depths)


def _panels(n: int, height: float = 3.4):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, n, figsize=(4 * n, height), squeeze=False)
    return fig, axes[0]


def _notes(ax, notes: List[str]) -> None:
    r"""Writes :obj:`notes` under the panel :obj:`ax`, off the data."""
    if notes:
        ax.text(0.0, -0.3, '\n'.join(notes), transform=ax.transAxes,
                fontsize=7, va='top', color='0.25')


def plot_depth(records: List[Dict[str, Any]], path: Path,
               paper_lines: bool, authors: Optional[Dict] = None) -> None:
    r"""Test accuracy vs depth, a panel per dataset: per row a line with a
    std band through its complete cells only; a partial cell is an open
    marker labelled ``k of n settings``; a missing cell is not drawn and
    is listed under the panel. :obj:`paper_lines`: the paper's values too
    (dashed, crosses); only where the splits are the paper's. :obj:`authors`
    (:func:`read_authors`): the authors' code's mean at every scale it ran,
    a diamond each, in the row's colour."""
    authors = authors or {}
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    shown = _shown(records)
    datasets = list(dict.fromkeys(r['dataset'] for r in shown
                                  if r['cell_runs']))
    empty = [d for d in dict.fromkeys(r['dataset'] for r in shown)
             if d not in datasets]
    row_names = list(dict.fromkeys(r['row'] for r in shown))
    depths = sorted({r['layers'] for r in shown})
    fig, axes = _panels(max(len(datasets), 1))
    for ax, dataset in zip(axes, datasets):
        lacking: Dict[str, List[str]] = {}  # depths without runs -> rows
        for k, row in enumerate(row_names):
            rs = sorted((r for r in shown if r['dataset'] == dataset
                         and r['row'] == row), key=lambda r: r['layers'])
            color = f'C{k}'
            x = [r['layers'] for r in rs]
            nan = float('nan')
            m = [r['test_mean'] if r['complete'] else nan for r in rs]
            s = [r['test_std'] if r['complete'] else nan for r in rs]
            ax.errorbar(x, m, yerr=s, fmt='o-', color=color, capsize=2,
                        elinewidth=0.8)
            ax.fill_between(x, [a - b for a, b in zip(m, s)],
                            [a + b for a, b in zip(m, s)], color=color,
                            alpha=0.15, lw=0)
            for r in rs:
                if r['cell_runs'] and not r['complete']:
                    ax.plot(r['layers'], r['test_mean'], 'o', mfc='white',
                            color=color)
                    last = r['layers'] == depths[-1]  # label inwards
                    ax.annotate(_partial(r), (r['layers'], r['test_mean']),
                                xytext=(-5 if last else 5, 3),
                                textcoords='offset points', fontsize=6,
                                color=color, ha='right' if last else 'left')
            none = _spans([r['layers'] for r in rs if r['cell_runs'] == 0])
            if none:
                lacking.setdefault(none, []).append(row)
            theirs = [(layers, run['mean'])
                      for (d, name, layers), runs in authors.items()
                      if d == dataset and name == row for run in runs]
            if theirs:
                ax.plot(*zip(*theirs), 'D', color=color, mec='black',
                        ms=7, ls='none', zorder=4)  # over gnorm's markers
            paper = [r for r in rs if r['paper_mean'] is not None]
            if paper_lines and paper:
                ax.plot([r['layers'] for r in paper],
                        [r['paper_mean'] for r in paper], 'x--',
                        color=color, alpha=0.6)
        ax.set_xscale('log', base=2)
        ax.xaxis.set_major_locator(FixedLocator(depths))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlim(depths[0] / 1.3, depths[-1] * 1.3)
        ax.set_title(dataset)
        ax.set_xlabel('layers')
        ax.set_ylabel('test accuracy (%)')
        ax.grid(alpha=0.3)
        _notes(ax, [f"{', '.join(rows)}: no runs at {spans}"
                    for spans, rows in lacking.items()])
    handles = [Line2D([], [], color=f'C{k}', marker='o', label=row)
               for k, row in enumerate(row_names)]
    handles.append(Line2D([], [], color='0.4', marker='o', ls='none',
                          mfc='white', label='partial cell (not every '
                          'setting and seed run): not on the line'))
    if paper_lines:
        handles.append(Line2D([], [], color='0.4', marker='x', ls='--',
                              label='paper'))
    if authors:
        handles.append(Line2D([], [], color='0.4', marker='D', mec='black',
                              ls='none', label="authors' code, their recipe "
                              '(one per scale run)'))
    title = ('gnorm: mean ± std over seeds (error bar and band); the '
             'setting chosen by validation')
    if not paper_lines:
        title += ("; the paper's values are not drawn: its splits differ, "
                  'not comparable')
    if empty:
        title += f"\nno runs yet, not drawn: {', '.join(empty)}"
    fig.legend(handles=handles, loc='upper center', ncol=len(handles),
               fontsize=8, title=title, title_fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout()
    save_figure(fig, path)


def plot_erank(records: List[Dict[str, Any]], path: Path) -> bool:
    r"""Effective rank vs layer of each dataset's deepest models with
    effective ranks (mean over seeds, band: min to max), a panel per
    dataset that has them; returns whether there was any to plot (no file
    otherwise)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import (FuncFormatter, LogLocator, MaxNLocator,
                                   NullFormatter)

    shown = [r for r in _shown(records) if r['erank']]
    datasets = list(dict.fromkeys(r['dataset'] for r in shown))
    if not datasets:
        return False
    row_names = list(dict.fromkeys(r['row'] for r in _shown(records)))
    fig, axes = _panels(len(datasets))
    for ax, dataset in zip(axes, datasets):
        deepest = max(r['layers'] for r in shown if r['dataset'] == dataset)
        absent, partial = [], []
        for k, row in enumerate(row_names):
            r = next((r for r in shown if r['dataset'] == dataset
                      and r['row'] == row and r['layers'] == deepest), None)
            if r is None:
                absent.append(row)
                continue
            layers = range(1, len(r['erank']) + 1)
            ax.plot(layers, r['erank'], color=f'C{k}',
                    ls='-' if r['complete'] else ':')
            ax.fill_between(layers, r['erank_min'], r['erank_max'],
                            color=f'C{k}', alpha=0.15, lw=0)
            if not r['complete']:
                partial.append(f'{row} ({_partial(r)})')
        ax.set_title(f'{dataset}, {deepest} layers')
        ax.set_xlabel('layer')
        ax.set_ylabel('effective rank')
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_yscale('log')
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
        _notes(ax, ([f"no effective rank at {deepest} layers: "
                     f"{', '.join(absent)}"] if absent else [])
               + ([f"partial cell, dotted: {', '.join(partial)}"]
                  if partial else []))
    handles = [Line2D([], [], color=f'C{k}', label=row)
               for k, row in enumerate(row_names)
               if any(r['row'] == row for r in shown)]
    fig.legend(handles=handles, loc='upper center', ncol=len(handles),
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0),
               title='mean over seeds of the setting chosen by validation; '
               'band: min to max over seeds', title_fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _datasets() -> List[str]:
    r"""The node-classification datasets of ``conf/dataset/``."""
    from omegaconf import OmegaConf
    from gnorm.train import CONF_DIR
    return sorted(p.stem for p in (CONF_DIR / 'dataset').glob('*.yaml')
                  if OmegaConf.load(p).get('task', 'node') == 'node')


def check_arguments(args: argparse.Namespace, spec: Dict[str, Any]) -> None:
    r"""Raises :class:`TableError` for a bad selection or ``--set``."""
    bad = [row for row in args.rows or [] if row not in spec['rows']]
    if bad:
        raise TableError(f'unknown row {bad[0]!r}; pass one of '
                         f'{", ".join(spec["rows"])}')
    known = _datasets()
    bad = [d for d in args.datasets or [] if d not in known]
    if bad:
        raise TableError(f'unknown dataset {bad[0]!r}; pass some of '
                         f'{", ".join(known)}')
    bad = [d for d in args.depths or [] if d < 1]
    if bad:
        raise TableError(f'--depths must be integers >= 1 (graph '
                         f'convolutions), got {bad[0]}')
    bad = [s for s in args.seeds or [] if s < 0]
    if bad:
        raise TableError(f'--seeds must be integers >= 0, got {bad[0]}')
    for values, flag in ((args.datasets, 'datasets'), (args.depths, 'depths'),
                         (args.seeds, 'seeds'), (args.rows, 'rows')):
        if values and len(set(values)) < len(values):
            raise TableError(f'--{flag} names a value twice: {values}')
    table_keys = set(AXES)
    for row, overrides in spec['rows'].items():
        table_keys |= {o.split('=', 1)[0] for o in overrides}
        table_keys |= set((spec.get('grid') or {}).get(row) or {})
    for item in args.set:
        key = item.split('=', 1)[0].lstrip('+~')
        if '=' not in item:
            raise TableError(f'--set takes key=value, got {item!r}')
        if key in table_keys:
            raise TableError(f'--set {item}: the table sets {key} itself; '
                             f'use --datasets, --depths, --seeds, --rows or '
                             f'the table: section of the experiment')
    check_set_keys(args, spec)


def check_set_keys(args: argparse.Namespace, spec: Dict[str, Any]) -> None:
    r"""Raises :class:`TableError` for a ``--set`` key that no run of the
    selected cells has or an unknown group option, naming the closest keys
    (:func:`gnorm.train.arguments.check_keys`, as ``python -m gnorm.train``
    does)."""
    from gnorm.errors import ConfigError
    from gnorm.train.arguments import check_choices, check_keys, groups
    from gnorm.train import CONF_DIR
    if not args.set:
        return
    known = set(groups(CONF_DIR))
    picks: Dict[str, List[str]] = {
        'dataset': list(args.datasets or spec['datasets'])}
    for row in args.rows or list(spec['rows']):
        for item in spec['rows'][row]:
            key, value = item.split('=', 1)
            if key in known and value not in picks.setdefault(key, []):
                picks[key].append(value)
    argv = [f'experiment={spec["name"]}',
            *(f'{key}={",".join(values)}' for key, values in picks.items()),
            *args.set]
    try:
        check_choices(argv)
        check_keys(argv)
    except ConfigError as e:
        raise TableError(f'--set: {e}') from None


def _launchers() -> List[str]:
    r"""The launchers of ``--launcher`` that are installed."""
    from gnorm.train.arguments import launchers
    return launchers()


def main(argv: Optional[Sequence[str]] = None) -> int:
    from gnorm.errors import ConfigError
    from gnorm.folders import check_folder
    from gnorm.train.arguments import check_launcher
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog='python experiments/table3.py',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('protocol', choices=['paper', 'fair'],
                        help='paper: the authors\' protocol '
                        '(experiment=table3_paper); fair: the sound one '
                        '(experiment=table3_fair)')
    parser.add_argument('--datasets', nargs='+', metavar='NAME',
                        help='only these datasets (default: the table\'s, '
                        'e.g. cora citeseer chameleon squirrel)')
    parser.add_argument('--rows', nargs='+', metavar='ROW',
                        help='only these rows (default: every row of the '
                        'table, e.g. none layernorm pairnorm contranorm)')
    parser.add_argument('--depths', nargs='+', type=int, metavar='L',
                        help='only these depths, in graph convolutions '
                        '(default: the table\'s, 2 4 8 16 32)')
    parser.add_argument('--seeds', nargs='+', type=int, metavar='SEED',
                        help='only these seeds (default: the table\'s, '
                        '0 1 2 3 4)')
    parser.add_argument('--set', nargs='+', default=[], action='extend',
                        metavar='KEY=VALUE',
                        help='overrides for every run, e.g. train.epochs=50 '
                        '(a table of its own: its report counts only its '
                        'runs)')
    parser.add_argument('--runs', type=Path, help='multirun folder '
                        '(default: experiments/runs/<table name>)')
    parser.add_argument('--out', type=Path, help='report folder (default: '
                        'experiments/results for the committed runs without '
                        '--set, else <runs>-report)')
    parser.add_argument('--threads', type=int, help='CPU threads of the '
                        'runs')
    parser.add_argument('--launcher', help='hand each cell to python -m '
                        'gnorm.train -m hydra/launcher=LAUNCHER instead of '
                        'training in this process; installed: '
                        f'{", ".join(_launchers())}')
    parser.add_argument('--report-only', action='store_true',
                        help='run nothing, write the report of the runs '
                        'in --runs')
    parser.add_argument('--dry-run', action='store_true',
                        help='print what would run, run nothing')
    args = parser.parse_args(argv)

    spec = table_spec(args.protocol)
    committed = (RUNS / spec['name']).resolve()
    runs_dir = (args.runs or committed).resolve()
    sets = [s for s in args.set
            if s.split('=', 1)[0].lstrip('+~') not in NOT_CONFIG_KEYS]
    published = runs_dir == committed and not sets
    out = (args.out or (RESULTS if published else runs_dir.with_name(
        runs_dir.name + '-report'))).resolve()
    try:
        check_arguments(args, spec)
        if args.launcher is not None:
            check_launcher(args.launcher)
        if args.threads is not None and args.threads < 1:
            raise TableError(f'--threads must be >= 1, got {args.threads}')
        if args.report_only and not runs_dir.is_dir():
            raise TableError(f'--report-only: no runs folder {runs_dir}; '
                             f'pass --runs <the folder of the runs>')
        check_folder(runs_dir, f'--runs {runs_dir}',
                     write=not args.report_only)
        if not args.dry_run:
            check_folder(out, f'--out {out}')
        if out == RESULTS.resolve() and not published:
            raise TableError(
                f'{os.path.relpath(RESULTS, ROOT)} holds the report of '
                f'{os.path.relpath(committed, ROOT)} without --set only; '
                f'pass another --out')
        selected = {**spec, 'datasets': args.datasets or spec['datasets'],
                    'depths': args.depths or spec['depths'],
                    'seeds': args.seeds or spec['seeds']}
        todo = cells(selected, rows=args.rows)
        # The committed report covers the whole table.
        report = cells(spec) if published else todo
        try:
            composer = compose_cells(args.protocol, report + (
                [] if report is todo else todo), spec, args.set, runs_dir)
        except Exception as e:  # e.g. a bad --set value
            raise TableError(f"cannot compose the table's runs: "
                             f"{' '.join(str(e).split())}") from e
    except (TableError, ConfigError) as e:
        print(f'error: {e}', file=sys.stderr)
        return 2

    found = index(load_runs(runs_dir) if runs_dir.is_dir() else [])
    failed = 0
    if not args.report_only:
        if args.threads and not args.launcher:
            import torch
            torch.set_num_threads(args.threads)
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _terminate)
        try:
            failed = run_missing(args.protocol, todo, runs_dir, args.set,
                                 found, composer, args.threads, args.dry_run,
                                 args.launcher)
        except KeyboardInterrupt:
            print('interrupted: finished runs are kept; run the same '
                  'command again to go on', file=sys.stderr)
            return 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        if args.launcher and not args.dry_run:  # the runs are on disk now
            found = index(load_runs(runs_dir))
    if args.dry_run:
        return 0
    paper = read_paper(ROOT / spec['paper'])
    authors = read_authors(ROOT / spec['authors'] if spec.get('authors')
                           else None)
    notes = with_authors_runs(
        read_notes(ROOT / spec['notes'] if spec.get('notes') else None),
        authors, paper, (spec.get('flag') or {}).get('paper_stds', 2.0))
    records = summarise(report, found, paper, spec.get('flag'), notes,
                        authors)
    counted = [found[r['key']] for c in report for r in c['runs']
               if r['key'] in found]
    path = write_report(args.protocol, spec, records, counted, sets,
                        runs_dir, out, authors)
    print(f'report: {path} ({len(counted)} runs counted)')
    return 1 if failed else 0


def _terminate(signum: int, frame: Any) -> None:
    r"""SIGTERM stops the table as Ctrl-C does."""
    from gnorm.errors import Interrupted
    raise Interrupted(signum)


if __name__ == '__main__':
    sys.exit(main())
