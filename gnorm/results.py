r"""Results of many runs: finds the ``results.json`` files under folders
(any multirun or output folder of ``python -m gnorm.train``), groups the
runs into configurations and reports mean and standard deviation per
configuration.

    python -m gnorm.results multirun/2026-11-22_10-00-00
    python -m gnorm.results multirun/table3_paper --by dataset.name tag layers norm.scale
    python -m gnorm.results multirun/ --failed          # list the failed runs

A key names a field of the run: a top-level field of ``results.json``
(``status``, ``test_acc``, ``tag``...), a config group choice (``norm``,
``dataset``, ``model``) or a dotted config path (``layers``,
``norm.scale``, ``dataset.name``). Without ``--by``, runs are grouped by
every key their command lines set except ``--over`` (default: ``seed``).
Standard deviations are over runs with ``ddof=0`` (numpy's default, as the
papers report them).
"""
import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from gnorm.run_keys import NOT_RESULT_KEYS

# Keys of a run's command line that never define a configuration.
NOT_CONFIG_KEYS = (*NOT_RESULT_KEYS, 'experiment')
METRICS = ('test_acc', 'val_acc', 'test_metric', 'val_metric')
MISSING = object()


def load_runs(*folders: Any) -> List[Dict[str, Any]]:
    r"""Every readable ``results.json`` below :obj:`folders` (sorted by
    path), each with its path under ``_path``."""
    runs = []
    for folder in folders:
        folder = Path(folder)
        paths = [folder] if folder.is_file() else sorted(
            folder.rglob('results.json'))
        for path in paths:
            try:
                run = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                print(f'warning: skipping {path}: {e}', file=sys.stderr)
                continue
            run['_path'] = str(path)
            runs.append(run)
    return runs


def overrides(run: Dict[str, Any]) -> Dict[str, str]:
    r"""The ``key=value`` overrides of :obj:`run`'s command line."""
    pairs = (o.lstrip('+~').split('=', 1) for o in run.get('overrides', [])
             if '=' in o)
    return {k: v for k, v in pairs}


def value(run: Dict[str, Any], key: str, default: Any = None) -> Any:
    r"""The field :obj:`key` of :obj:`run`: a top-level field, a group
    choice, or a dotted path into its config."""
    if key in run and key != 'config':
        return run[key]
    if key in run.get('choices', {}):
        return run['choices'][key]
    node: Any = run.get('config', {})
    for part in key.split('.'):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


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


def mean_std(values: Sequence[float]) -> Tuple[Optional[float],
                                               Optional[float]]:
    r"""Mean and standard deviation (ddof=0) of :obj:`values`;
    :obj:`None` for none."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values)
                           / len(values))


def aggregate(runs: Iterable[Dict[str, Any]], by: Sequence[str],
              metrics: Sequence[str] = METRICS) -> List[Dict[str, Any]]:
    r"""One row per configuration (distinct values of :obj:`by`), in order
    of first appearance: the key values, ``runs`` (finished), ``failed``
    (any other status), and ``<metric>_mean`` / ``<metric>_std`` over the
    finished runs for each of :obj:`metrics` that they report."""
    groups: Dict[tuple, Dict[str, Any]] = {}
    for run in runs:
        key = tuple(json.dumps(value(run, k), sort_keys=True) for k in by)
        group = groups.setdefault(key, {
            **{k: value(run, k) for k in by}, 'runs': 0, 'failed': 0,
            '_values': {m: [] for m in metrics}, 'paths': []})
        if run.get('status') != 'ok':
            group['failed'] += 1
            continue
        group['runs'] += 1
        group['paths'].append(run['_path'])
        for m in metrics:
            v = run.get(m)
            if isinstance(v, (int, float)) and math.isfinite(v):
                group['_values'][m].append(float(v))
    rows = []
    for group in groups.values():
        values = group.pop('_values')
        for m in metrics:
            if values[m]:
                group[f'{m}_mean'], group[f'{m}_std'] = mean_std(values[m])
        rows.append(group)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f'{value:.4f}'
    return '' if value is None else str(value)


def table_columns(rows: Sequence[Dict[str, Any]], by: Sequence[str],
                  metrics: Sequence[str]) -> List[str]:
    r"""The columns of :func:`aggregate`'s rows worth printing."""
    present = [m for m in metrics if any(f'{m}_mean' in r for r in rows)]
    return [*by, 'runs', 'failed',
            *(f'{m}_{s}' for m in present for s in ('mean', 'std'))]


def to_markdown(rows: Sequence[Dict[str, Any]],
                columns: Sequence[str]) -> str:
    r"""A markdown table of :obj:`rows`."""
    lines = ['| ' + ' | '.join(columns) + ' |',
             '|' + '---|' * len(columns)]
    lines += ['| ' + ' | '.join(_fmt(r.get(c)) for c in columns) + ' |'
              for r in rows]
    return '\n'.join(lines)


def write_csv(path: Any, rows: Sequence[Dict[str, Any]],
              columns: Sequence[str]) -> None:
    r"""Writes :obj:`rows` as CSV with :obj:`columns`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, columns, extrasaction='ignore')
        writer.writeheader()
        writer.writerows({c: r.get(c) for c in columns} for r in rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    r"""Entry point of ``python -m gnorm.results``."""
    parser = argparse.ArgumentParser(
        prog='python -m gnorm.results',
        description='Mean and std per configuration of the results.json '
                    'files below the given folders.')
    parser.add_argument('folders', nargs='+', help='multirun/output folders')
    parser.add_argument('--by', nargs='+', help='keys that define a '
                        'configuration (default: the overridden keys)')
    parser.add_argument('--over', nargs='+', default=['seed'],
                        help='keys averaged over (default: seed)')
    parser.add_argument('--metrics', nargs='+', default=list(METRICS))
    parser.add_argument('--csv', help='also write the table to this CSV')
    parser.add_argument('--failed', action='store_true',
                        help='list the runs that did not finish, with '
                             'their error')
    args = parser.parse_args(argv)
    missing = [f for f in args.folders if not Path(f).exists()]
    if missing:
        print(f'error: no such folder: {missing[0]}', file=sys.stderr)
        return 2
    runs = load_runs(*args.folders)
    if not runs:
        print(f'error: no results.json below {" ".join(args.folders)}',
              file=sys.stderr)
        return 1
    if args.failed:
        for run in runs:
            if run.get('status') != 'ok':
                print(f"{run.get('status')}: {run['_path']}: "
                      f"{run.get('error')}")
        return 0
    by = args.by or default_keys(runs, args.over)
    rows = aggregate(runs, by, args.metrics)
    columns = table_columns(rows, by, args.metrics)
    print(to_markdown(rows, columns))
    if args.csv:
        write_csv(args.csv, rows, columns)
    return 0


if __name__ == '__main__':
    sys.exit(main())
