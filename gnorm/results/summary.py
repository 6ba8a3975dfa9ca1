r"""What :mod:`gnorm.results` does: reads ``results.json`` files, groups
the runs into rows and writes them (Markdown, CSV, records); the command
line's :func:`main`."""
import argparse
import csv
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple)

from gnorm.errors import ConfigError, GnormError, closest
from gnorm.results.folders import check_file
from gnorm.results.keys import (NOT_RESULT_KEYS, dotted_keys, drop_keys,
                                record_identity)
from gnorm.results.user_code import file_name, recorded_user_code

# Keys of a run's command line that never define a configuration.
NOT_CONFIG_KEYS = (*NOT_RESULT_KEYS, 'experiment')
METRICS = ('test_acc', 'val_acc', 'test_metric', 'val_metric')
MISSING = object()
# Config groups shown by the class they build (model: DeepGCN); the others
# by the option chosen (norm: contranorm) or their name (dataset: cora).
CLASS_GROUPS = ('model', )
SPLITS = ('train', 'val', 'test')
# Metric (a field's name after its split) -> shown name, unit, factor.
UNITS = {'acc': ('acc', '%', 100.0), 'rocauc': ('ROC-AUC', '%', 100.0),
         'mae': ('MAE', '', 1.0), 'loss': ('loss', '', 1.0),
         'metric': ('metric (unknown)', '', 1.0)}
STD_NOTE = "std with ddof=0 (numpy's default)"


def _read(path: Path) -> Dict[str, Any]:
    r"""The run in :obj:`path`, or a run with ``status: unreadable`` and
    the reason as its ``error``."""
    try:
        run = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        run, error = None, f'cannot read: {e}'
    except ValueError as e:
        run, error = None, f'not valid JSON (truncated?): {e}'
    else:
        error = (None if isinstance(run, dict) and 'status' in run else
                 f'not a gnorm run: holds a JSON {type(run).__name__}'
                 + (' without status' if isinstance(run, dict) else ''))
    if error is not None:
        run = {'status': 'unreadable', 'error': error}
    run['_path'] = str(path)
    return run


def load_runs(*folders: Any, warn: bool = True) -> List[Dict[str, Any]]:
    r"""Every ``results.json`` below :obj:`folders` (sorted by path), each
    with its path under ``_path``, once (a folder and a folder or file
    inside it give its runs once). One that cannot be read as a run
    (truncated, not a JSON object) is a run with ``status: unreadable``
    and the reason as ``error``, with a warning unless :obj:`warn` is
    false."""
    runs, seen = [], set()
    for folder in folders:
        folder = Path(folder)
        paths = [folder] if folder.is_file() else sorted(
            folder.rglob('results.json'))
        for path in paths:
            if path.resolve() in seen:  # overlapping folders: count once
                continue
            seen.add(path.resolve())
            run = _read(path)
            if warn and run['status'] == 'unreadable':
                print(f"warning: {path}: {run['error']}", file=sys.stderr)
            runs.append(run)
    return runs


def overrides(run: Dict[str, Any]) -> Dict[str, str]:
    r"""The ``key=value`` overrides of :obj:`run`'s command line."""
    pairs = (o.lstrip('+~').split('=', 1) for o in run.get('overrides', [])
             if '=' in o)
    return {k: v for k, v in pairs}


def value(run: Dict[str, Any], key: str, default: Any = None) -> Any:
    r"""The field :obj:`key` of :obj:`run`: a top-level field, a config
    group by what it trains (:func:`chosen`), or a dotted path into its
    config."""
    if key in run and key != 'config':
        return run[key]
    if key in run.get('choices', {}):
        return chosen(run, key)
    node: Any = run.get('config', {})
    for part in key.split('.'):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _code(run: Dict[str, Any]) -> str:
    r"""The commit that made :obj:`run` (12 digits, ``+modified`` for
    modified code), or ``unrecorded``."""
    source = run.get('source') or {}
    if not source.get('commit'):
        return 'unrecorded'
    return source['commit'][:12] + ('+modified' * bool(source.get('modified')))


def _sweep(run: Dict[str, Any]) -> str:
    r"""The folder holding :obj:`run`'s folder (a multirun's folder)."""
    return Path(run['_path']).parent.parent.name


def chosen(run: Dict[str, Any], group: str) -> Any:
    r"""Config group :obj:`group` of :obj:`run` by what it trains: its
    name in the record's ``names`` (the option chosen, or the class of a
    ``_target_`` set to another class, ``HalfLN``:
    :func:`gnorm.train.common.run_name`), else (a record made before
    ``names``) the option chosen."""
    names = run.get('names') or {}
    return names[group] if group in names else \
        run.get('choices', {}).get(group)


# Keys derived from a run's record rather than read from it.
DERIVED = {'code': _code, 'sweep': _sweep}


def label(run: Dict[str, Any], key: str) -> Any:
    r"""The field :obj:`key` of :obj:`run` as a short table cell: a
    dataset by its name (``cora``), a model by its class (``DeepGCN``,
    ``Graphormer``, not its repr), another config group by what it
    trains (:func:`chosen`: the option chosen, ``contranorm``, or the
    class of a ``_target_`` set to another class, ``HalfLN``; without
    choices, as for a run trained outside Hydra, the class it builds); any
    other dict as compact JSON; the derived keys :data:`DERIVED`
    (``code``, ``sweep``)."""
    if key in DERIVED:
        return DERIVED[key](run)
    config = run.get('config')
    node = config.get(key) if isinstance(config, dict) else None
    if isinstance(node, dict):
        choice = chosen(run, key)
        if 'name' in node:
            return node['name']
        if choice is not None and key not in CLASS_GROUPS:
            return choice
        if '_target_' in node:  # also a run trained outside Hydra
            return str(node['_target_']).rsplit('.', 1)[-1]
    field = value(run, key)
    if key in CLASS_GROUPS and isinstance(field, str):
        return field.split('(', 1)[0]  # a module's repr
    if isinstance(field, (dict, list)):
        return json.dumps(field, sort_keys=True, separators=(',', ':'))
    return field


def default_keys(runs: Sequence[Dict[str, Any]],
                 over: Sequence[str] = ('seed', )) -> List[str]:
    r"""The keys any run's command line sets, except :obj:`over` and
    :obj:`NOT_CONFIG_KEYS`, in order of first appearance."""
    keys: Dict[str, None] = {}
    for run in runs:
        for key in overrides(run):
            if key not in over and key not in NOT_CONFIG_KEYS:
                keys[key] = None
    return list(keys)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def metric_value(run: Dict[str, Any], key: str) -> Any:
    r"""The metric :obj:`key` of :obj:`run`: its field :obj:`key`, or for
    ``collapse.<metric>.<layer>`` (layer ``first``, ``last`` or its number
    from 1) that layer's value of the run's ``collapse`` field;
    :obj:`None` if it has none."""
    if key in run or not key.startswith('collapse.'):
        return run.get(key)
    _, metric, layer = (key.split('.') + [''])[:3]
    values = (run.get('collapse') or {}).get(metric)
    if not isinstance(values, list) or not values:
        return None
    index = {'first': 0, 'last': len(values) - 1}.get(layer)
    if index is None and layer.isdigit() and 1 <= int(layer) <= len(values):
        index = int(layer) - 1
    return None if index is None else values[index]


def check_keys(runs: Sequence[Dict[str, Any]], keys: Sequence[str],
               option: str, metric: bool = False) -> None:
    r"""Raises :class:`ConfigError` for a key of :obj:`keys` that no run
    has (a number, if :obj:`metric`), naming the closest ones."""
    def has(run, key):
        if metric:
            return _number(metric_value(run, key))
        return value(run, key, MISSING) is not MISSING
    for key in keys:
        if any(has(run, key) for run in runs):
            continue
        known = set()
        for run in runs:
            if metric:
                known.update(k for k, v in run.items() if _number(v))
                known.update(f'collapse.{m}.last'
                             for m in run.get('collapse') or {}
                             if m not in ('layer', 'graphs'))
            else:
                known.update(k for k in run if not k.startswith('_'))
                known.update(run.get('choices', {}))
                config = run.get('config')
                known.update(dotted_keys(config if isinstance(config, dict)
                                         else {}))
        near = closest(key, known - {'config'})
        what = 'metric (a number in results.json)' if metric else 'key'
        hint = (f"closest: {', '.join(near)}" if near else
                f"known: {', '.join(sorted(known))}" if metric else
                'keys are results.json fields, config groups and dotted '
                'config paths (layers, norm.scale, dataset.name)')
        raise ConfigError(f'{option} {key}: no run has this {what}; {hint}')


def score_field(run: Dict[str, Any], split: str) -> str:
    r"""The field of :obj:`run`'s score on :obj:`split` (``val``,
    ``test``): ``<split>_metric`` where it records one (a graph run, a
    node run scored by ROC-AUC), else its accuracy ``<split>_acc``."""
    return f'{split}_metric' if f'{split}_metric' in run else f'{split}_acc'


def metric_name(run: Dict[str, Any]) -> Optional[str]:
    r"""The metric of a graph run's ``val_metric``/``test_metric``
    (``rocauc``, ``mae``): the ``metric`` it records, else the one of its
    dataset."""
    if run.get('metric'):
        return run['metric']
    from gnorm.data.molecules import GRAPH_DATASETS  # imports torch
    entry = GRAPH_DATASETS.get(value(run, 'dataset.name'))
    return entry[2] if entry else None


def column(run: Dict[str, Any], metric: str) -> str:
    r"""The column of :obj:`run`'s field :obj:`metric`: the field, but a
    graph run's ``<split>_metric`` as ``<split>_<its metric>``
    (``test_rocauc``)."""
    split, _, kind = metric.partition('_')
    if kind == 'metric' and split in SPLITS and _number(run.get(metric)):
        return f'{split}_{metric_name(run) or kind}'
    return metric


def _order(v: Any) -> tuple:
    r"""Sort key of a table cell: numbers (also as text) by value, then
    text, then empty."""
    if v is None:
        return (2, 0.0, '')
    try:
        return (0, float(v), '')
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def machines(runs: List[Dict[str, Any]]) -> str:
    r"""The machines the runs report, with counts (for a report's
    header)."""
    seen = Counter()
    for run in runs:
        m = run.get('machine') or {}
        name = m.get('gpu') or m.get('cpu') or run.get('device', '?')
        threads = (f", {m['threads']} thread{'s' if m['threads'] != 1 else ''}"
                   if 'threads' in m else '')
        seen[f"{run.get('device', '?')}: {name}{threads}"] += 1
    return '; '.join(f'{k} ({n} runs)' for k, n in seen.most_common())


def user_code_words(runs: List[Dict[str, Any]],
                    cell: Optional[Callable[[Dict[str, Any]], str]] = None
                    ) -> str:
    r"""Which files of the user's code made :obj:`runs` (their
    ``source.user_code``: :mod:`gnorm.results.user_code`), for a report's
    Code line: ``user code: mynorm.py (sha256 1a2b3c4d)``, each version
    of a file with its runs where there are several, and the cells
    (:obj:`cell`: a run's label, ``csbm mine L=2``) whose runs different
    versions of one file made. Empty where no run names user code."""
    versions: Dict[str, Counter] = {}
    cells: Dict[str, Dict[str, set]] = {}
    for run in runs:
        for module, entry in recorded_user_code(run).items():
            name = file_name(module, entry)
            versions.setdefault(name, Counter())[entry.get('sha256')] += 1
            if cell is not None:
                cells.setdefault(name, {}).setdefault(
                    cell(run), set()).add(entry.get('sha256'))
    if not versions:
        return ''

    def version(name):
        found = sorted(versions[name].items(),
                       key=lambda kv: (-kv[1], str(kv[0])))
        if len(found) == 1:
            return f'{name} (sha256 {str(found[0][0])[:8]})'
        return (f'{name} ({len(found)} versions: ' + ', '.join(
            f"sha256 {str(sha)[:8]} in {plural(n, 'run')}"
            for sha, n in found) + ')')
    parts = ['user code: ' + ', '.join(map(version, sorted(versions)))]
    for name in sorted(cells):
        mixed = sorted(label for label, shas in cells[name].items()
                       if len(shas) > 1)
        if mixed:
            which = ('one cell' if len(mixed) == 1
                     else f'each of {len(mixed)} cells')
            parts.append(f"different versions of {name} made the runs of "
                         f"{which}: " + ', '.join(mixed))
    return '; '.join(parts)


def code(runs: List[Dict[str, Any]],
         cell: Optional[Callable[[Dict[str, Any]], str]] = None) -> str:
    r"""Which code made the runs, for a report's header: how many name
    their commit (``source``), how many were made before every run had
    its own random generators (records without ``batch_runs``), whose seeds
    draw other numbers with today's code, and which files of the user's
    code made them (:func:`user_code_words`, :obj:`cell` naming the cell
    of a run). Empty when none applies."""
    named = [run for run in runs if (run.get('source') or {}).get('commit')]
    commits = {run['source']['commit'] for run in named}
    modified = sum(bool(run['source'].get('modified')) for run in named)
    older = sum('batch_runs' not in run for run in runs)
    parts = []
    if named:
        with_modified = (f", {plural(modified, 'run')} with modified code"
                         if modified else '')
        parts.append(f"{plural(len(named), 'run')} name the commit that "
                     f"made them ({plural(len(commits), 'commit')}"
                     f"{with_modified})")
    if older:
        parts.append(f"{plural(older, 'run')} made before every run had "
                     'its own random generators (their records have no '
                     '`batch_runs`): today\'s code draws other numbers for '
                     'their seeds, so rerunning them gives another draw of '
                     'the same experiment')
    mine = user_code_words(runs, cell)
    if mine:
        parts.append(mine)
    return '; '.join(parts)


def plural(n: int, thing: str) -> str:
    r"""``1 run``, ``2 runs``: :obj:`n` and :obj:`thing`, plural unless
    one."""
    return f"{n} {thing}{'s' * (n != 1)}"


def mean_std(values: Sequence[float]) -> Tuple[Optional[float],
                                               Optional[float]]:
    r"""Mean and standard deviation (ddof=0) of :obj:`values`;
    :obj:`None` for none."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values)
                           / len(values))


def flat_identity(run: Dict[str, Any], over: Sequence[str] = ('seed', ),
             ) -> Dict[str, Any]:
    r"""What :obj:`run` computes, apart from the keys :obj:`over`: the
    identity of its record (:func:`gnorm.results.keys.record_identity`, the
    rule a table uses to find a cell's runs: its config without the keys
    that cannot change a result, and its number of processes), as dotted
    keys and their values (JSON)."""
    config = drop_keys(record_identity(run), over)
    flat: Dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f'{prefix}{k}.')
        else:
            flat[prefix[:-1]] = json.dumps(node, sort_keys=True)
    walk(config, '')
    return flat


def _groups(runs: Iterable[Dict[str, Any]], by: Sequence[str],
            ) -> Dict[tuple, List[Dict[str, Any]]]:
    r"""The readable runs of :obj:`runs` by their :func:`label` of
    :obj:`by`."""
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for run in runs:
        if run.get('status') != 'unreadable':
            key = tuple(json.dumps(label(run, k), sort_keys=True)
                        for k in by)
            groups.setdefault(key, []).append(run)
    return groups


def differing_keys(runs: Sequence[Dict[str, Any]], by: Sequence[str],
                   over: Sequence[str] = ('seed', )) -> List[str]:
    r"""The config keys (dotted, sorted) in which runs of one row of
    :obj:`by` differ, apart from :obj:`over` and the keys that cannot
    change a result: the rows they split."""
    keys = set()
    for group in _groups(runs, by).values():
        flats = [flat_identity(run, over) for run in group]
        for key in set().union(*flats):
            if len({flat.get(key, '<missing>') for flat in flats}) > 1:
                keys.add(key)
    return sorted(keys)


def split_keys(runs: Sequence[Dict[str, Any]], by: Sequence[str],
               over: Sequence[str] = ('seed', )) -> List[str]:
    r"""The keys to add to :obj:`by` so that no row mixes runs of
    different configs (:func:`differing_keys`): ``experiment`` if the
    runs' experiments tell them apart, else the keys that differ."""
    keys = differing_keys(runs, by, over)
    if keys and 'experiment' not in by and not differing_keys(
            runs, [*by, 'experiment'], over):
        return ['experiment']
    return keys


def _seed(run: Dict[str, Any], over: Sequence[str]) -> str:
    r"""What :obj:`run` repeats when another run has it too: its values of
    :obj:`over`; a run that lacks one repeats nothing (its own path)."""
    values = [value(run, k) for k in over]
    return json.dumps(run['_path'] if None in values else values,
                      sort_keys=True)


def _repeats(group: Sequence[Dict[str, Any]], over: Sequence[str]) -> bool:
    r"""Whether two finished runs of :obj:`group` have one seed."""
    seeds = [_seed(run, over) for run in group if run.get('status') == 'ok']
    return len(set(seeds)) < len(seeds)


def repeat_keys(runs: Sequence[Dict[str, Any]], by: Sequence[str],
                over: Sequence[str] = ('seed', )) -> List[str]:
    r"""The derived key (``code``, else ``sweep``: :data:`DERIVED`) to add
    to :obj:`by` so that no row's finished runs repeat a seed of
    :obj:`over`; none when no row repeats one, or when neither tells the
    repeats apart (:func:`aggregate` then averages a seed's runs
    first)."""
    if not any(_repeats(g, over) for g in _groups(runs, by).values()):
        return []
    for key in DERIVED:
        if key not in by and not any(
                _repeats(g, over) for g in _groups(runs, [*by, key]).values()):
            return [key]
    return []


def aggregate(runs: Iterable[Dict[str, Any]], by: Sequence[str],
              metrics: Sequence[str] = METRICS,
              over: Sequence[str] = ('seed', )) -> List[Dict[str, Any]]:
    r"""One row per configuration (distinct :func:`label` of :obj:`by` and
    distinct :func:`flat_identity` apart from :obj:`over`: runs of different
    configs never share a row; :func:`split_keys` names the keys that tell
    such rows apart), sorted by the labels (numbers by value): the labels,
    ``runs`` (finished), ``seeds`` (distinct values of :obj:`over` among
    them), ``failed`` (any other status), and ``<column>_mean`` /
    ``<column>_std`` over the seeds for each of :obj:`metrics` that the
    finished runs report (``test_metric`` under :func:`column`:
    ``test_rocauc_mean``...), in the metric's own unit (accuracy as a
    fraction); runs that repeat a seed are averaged first, so that a seed
    counts once (:func:`repeat_keys` names a key that keeps them apart).
    Unreadable runs (:func:`load_runs`) belong to no configuration and
    are left out."""
    groups: Dict[tuple, Dict[str, Any]] = {}
    for run in runs:
        if run.get('status') == 'unreadable':
            continue
        labels = {k: label(run, k) for k in by}
        key = tuple(json.dumps(v, sort_keys=True) for v in labels.values())
        key += (json.dumps(flat_identity(run, over), sort_keys=True), )
        group = groups.setdefault(key, {**labels, 'runs': 0, 'failed': 0,
                                        '_values': {}, '_seeds': set(),
                                        'paths': []})
        if run.get('status') != 'ok':
            group['failed'] += 1
            continue
        group['runs'] += 1
        group['_seeds'].add(_seed(run, over))
        group['paths'].append(run['_path'])
        for m in metrics:
            v = metric_value(run, m)
            if _number(v) and math.isfinite(v):
                group['_values'].setdefault(column(run, m), {}).setdefault(
                    _seed(run, over), []).append(float(v))
    rows = sorted(groups.values(),
                  key=lambda g: [_order(g[k]) for k in by])
    for row in rows:
        row['seeds'] = len(row.pop('_seeds'))
        for c, by_seed in row.pop('_values').items():
            row[f'{c}_mean'], row[f'{c}_std'] = mean_std(
                [v[0] if len(v) == 1 else sum(v) / len(v)
                 for v in by_seed.values()])
    return rows


def repeated(rows: Sequence[Dict[str, Any]]) -> bool:
    r"""Whether a row of :func:`aggregate` has runs that repeat a seed."""
    return any(r['seeds'] != r['runs'] for r in rows)


def unit(column: str) -> Tuple[str, float]:
    r"""Header (metric and unit: ``test acc (%)``, ``test MAE``) and factor
    from its unit (100 for a fraction shown in %) of a metric column."""
    split, _, kind = column.partition('_')
    if split not in SPLITS or kind not in UNITS:
        return column, 1.0
    name, symbol, factor = UNITS[kind]
    return f"{split} {name}{f' ({symbol})' if symbol else ''}", factor


def metric_columns(rows: Sequence[Dict[str, Any]],
                   metrics: Sequence[str]) -> List[str]:
    r"""The metric columns of :func:`aggregate`'s rows, in the order of
    :obj:`metrics`."""
    found = {k[:-len('_mean')]: None for r in rows for k in r
             if k.endswith('_mean')}

    def rank(c):
        split = c.partition('_')[0]
        return next((i for i, m in enumerate(metrics)
                     if m in (c, f'{split}_metric')), len(metrics))
    return sorted(found, key=rank)


def _cell(v: Any) -> str:
    return '' if v is None else str(v)


def _counted(rows: Sequence[Dict[str, Any]]) -> List[str]:
    r"""The count columns of a table of :obj:`rows`: runs, seeds (only when
    a row repeats a seed) and failed."""
    return ['runs', *(['seeds'] if repeated(rows) else []), 'failed']


def to_markdown(rows: Sequence[Dict[str, Any]], by: Sequence[str],
                columns: Sequence[str]) -> str:
    r"""A markdown table of :obj:`rows`: the :obj:`by` labels, runs,
    seeds (when a row repeats one), failed, and ``mean ± std`` of each
    metric column, in its unit."""
    counted = _counted(rows)
    headers = [*by, *counted, *(unit(c)[0] for c in columns)]
    lines = ['| ' + ' | '.join(headers) + ' |', '|' + '---|' * len(headers)]
    for r in rows:
        cells = [_cell(r[k]) for k in (*by, *counted)]
        for c in columns:
            factor = unit(c)[1]
            digits = 2 if factor == 100 else 4
            cells.append('' if f'{c}_mean' not in r else
                         f"{factor * r[f'{c}_mean']:.{digits}f} ± "
                         f"{factor * r[f'{c}_std']:.{digits}f}")
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def write_csv(path: Any, rows: Sequence[Dict[str, Any]], by: Sequence[str],
              columns: Sequence[str]) -> None:
    r"""Writes :obj:`rows` as CSV: the :obj:`by` labels, the count columns
    and ``<header> mean`` / ``<header> std`` of each metric column, in its
    unit (as in the markdown table)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    counted = _counted(rows)
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow([*by, *counted,
                         *(f'{unit(c)[0]} {s}' for c in columns
                           for s in ('mean', 'std'))])
        for r in rows:
            writer.writerow([*(r[k] for k in (*by, *counted)),
                             *(None if f'{c}_{s}' not in r else
                               unit(c)[1] * r[f'{c}_{s}']
                               for c in columns for s in ('mean', 'std'))])


def write_records(path: Any, records: Sequence[Dict[str, Any]],
                  columns: Sequence[str]) -> None:
    r"""Writes the :obj:`columns` of a report's :obj:`records` as CSV:
    floats with 4 decimals, lists space-separated."""
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, columns, extrasaction='ignore')
        writer.writeheader()
        for r in records:
            writer.writerow({k: (f'{v:.4f}' if isinstance(v, float) else
                                 ' '.join(map(str, v)) if isinstance(v, list)
                                 else v) for k, v in r.items()
                             if k in columns})


def counts(runs: Sequence[Dict[str, Any]]) -> str:
    r"""How many runs finished and failed (any other status, unreadable
    included), on one line."""
    ok = sum(r.get('status') == 'ok' for r in runs)
    unreadable = sum(r.get('status') == 'unreadable' for r in runs)
    return (f'{len(runs)} results.json: {ok} ok, {len(runs) - ok} failed'
            + (f' ({unreadable} unreadable)' if unreadable else ''))


def main(argv: Optional[Sequence[str]] = None) -> int:
    r"""Entry point of ``python -m gnorm.results``."""
    parser = argparse.ArgumentParser(
        prog='python -m gnorm.results',
        description='Mean ± std per configuration of the results.json '
                    'files below the given folders. Accuracies and ROC-AUC '
                    f'in %, MAE as is; {STD_NOTE}. Unreadable '
                    'results.json files count as failed.')
    parser.add_argument('folders', nargs='+', help='multirun/output folders')
    parser.add_argument('--by', nargs='+', help='keys that define a '
                        'configuration (default: the overridden keys)')
    parser.add_argument('--over', nargs='+', default=['seed'],
                        help='keys averaged over (default: seed)')
    parser.add_argument('--metrics', nargs='+', default=list(METRICS),
                        help='numeric results.json fields (default: '
                        f"{' '.join(METRICS)}, those the runs have)")
    parser.add_argument('--csv', help='also write the table to this CSV')
    parser.add_argument('--failed', action='store_true',
                        help='list the runs that did not finish or cannot '
                             'be read, with their error')
    args = parser.parse_args(argv)
    missing = [f for f in args.folders if not Path(f).exists()]
    if missing:
        print(f'error: no such folder: {missing[0]}', file=sys.stderr)
        return 2
    files = [f for f in args.folders if Path(f).is_file()
             and Path(f).name != 'results.json']
    if files:
        print(f'error: {files[0]} is not a folder', file=sys.stderr)
        return 2
    runs = load_runs(*args.folders, warn=False)
    if not runs:
        print(f'error: no results.json below {" ".join(args.folders)}',
              file=sys.stderr)
        return 1
    if args.failed:
        failed = [r for r in runs if r.get('status') != 'ok']
        for run in failed:
            print(f"{run.get('status')}: {run['_path']}: {run.get('error')}")
        print(counts(runs) if failed else
              f'no failed runs: all {len(runs)} results.json have status ok')
        return 0
    try:
        if args.csv:
            check_file(args.csv, f'--csv {args.csv}')
        check_keys(runs, args.by or [], '--by')
        check_keys(runs, args.over, '--over')
        if args.metrics != list(METRICS):
            check_keys(runs, args.metrics, '--metrics', metric=True)
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr)
        return e.exit_code
    by = args.by or default_keys(runs, args.over)
    extra = split_keys(runs, by, args.over)
    if extra and args.by:
        differ = differing_keys(runs, by, args.over)
        print(f"note: rows of --by {' '.join(by)} split: their runs differ "
              f"in {', '.join(differ)} (shown as "
              f"{'column' if len(extra) == 1 else 'columns'} "
              f"{', '.join(extra)}; pass --over KEY to average over a key)",
              file=sys.stderr)
    by = [*by, *extra]
    apart = repeat_keys(runs, by, args.over)
    if apart:
        print(f"note: runs of one row repeat a seed ({' '.join(args.over)}"
              f"); their rows split by {apart[0]}", file=sys.stderr)
    by = [*by, *apart]
    rows = aggregate(runs, by, args.metrics, args.over)
    columns = metric_columns(rows, args.metrics)
    print(to_markdown(rows, by, columns))
    bad = any(r.get('status') != 'ok' for r in runs)
    seeds = ('; rows with fewer seeds than runs repeat a seed: each seed\'s '
             'runs are averaged first, mean ± std over the seeds'
             if repeated(rows) else '')
    print(f'\ncells: mean ± std over the ok runs of a row; {STD_NOTE}'
          f"{seeds}\n{counts(runs)}{'; --failed lists them' if bad else ''}")
    if args.csv:
        write_csv(args.csv, rows, by, columns)
    return 0
