r"""Regenerates Table 3 of the ContraNorm paper (deep GCNs, accuracy vs
depth) with one command: runs what is missing, cheapest cells first, then
writes the report.

    python experiments/table3.py paper     # experiment=table3_paper: the authors' protocol
    python experiments/table3.py fair      # experiment=table3_fair: the sound protocol
    python experiments/table3.py paper --report-only
    python experiments/table3.py paper --datasets cora --rows none pairnorm --depths 2 4

The grid (datasets, depths, seeds, rows and the ContraNorm scales) is the
``table:`` section of ``conf/experiment/table3_<protocol>.yaml``. Each
(dataset, row, depth) cell is one Hydra multirun of ``python -m
gnorm.train`` over the seeds (and scales) into ``experiments/runs/table3_<protocol>``
(``--runs``), one folder per run named after its overrides. Interrupt at
any time: finished runs are kept (``resume=true``) and a rerun only does
what is missing. The report (``--out``, default ``experiments/results``):
``table3_<protocol>.{md,csv}`` (ours beside the paper, difference, chosen
s, runs counted, missing cells marked), ``table3_<protocol>_depth.png``
(accuracy vs depth) and ``table3_<protocol>_erank.png`` (effective rank vs
layer of the deepest models).
"""
import argparse
import csv
import datetime
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.results import (  # noqa: E402
    NOT_CONFIG_KEYS, load_runs, mean_std, overrides, value)

# Nodes and symmetrised edges, only to run cheap cells first.
_SIZE = {'cora': (2708, 10556), 'citeseer': (3327, 9104),
         'chameleon': (2277, 62792), 'squirrel': (5201, 396846)}


def table_spec(protocol: str) -> Dict[str, Any]:
    r"""The ``table:`` section of ``experiment=table3_<protocol>``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        cfg = compose('train', overrides=[f'experiment=table3_{protocol}'])
    return OmegaConf.to_container(cfg.table, resolve=True)


def cells(spec: Dict[str, Any], rows=None) -> List[Dict[str, Any]]:
    r"""The (dataset, row, depth) cells of :obj:`spec` (its :obj:`rows`
    only, if given), cheapest first, each with the override sets of its
    runs."""
    out = []
    for dataset in spec['datasets']:
        for row in rows or list(spec['rows']):
            for depth in spec['depths']:
                scales = spec.get('scales', {}).get(row, [None])
                base = [f'dataset={dataset}', f'layers={depth}',
                        f'tag={row}', *spec['rows'][row]]
                runs = [[*base, f'seed={seed}',
                         *([] if scale is None else [f'norm.scale={scale}'])]
                        for scale in scales
                        for seed in spec['seeds']]
                # Per layer and epoch on a CPU: ~42 ns per edge or node
                # channel, ~7 ns per node pair of ContraNorm's attention.
                nodes, edges = _SIZE.get(dataset, (1000, 5000))
                cost = depth * (edges + 32 * nodes) * len(runs)
                if row in spec.get('scales', {}):
                    cost += depth * nodes * nodes // 6 * len(runs)
                out.append(dict(dataset=dataset, row=row, depth=depth,
                                base=base, seeds=spec['seeds'],
                                scales=scales, runs=runs, cost=cost))
    return sorted(out, key=lambda c: c['cost'])


def _run_key(items: Sequence[str]) -> frozenset:
    r"""A run's overrides as a set, booleans spelled as Hydra records
    them."""
    pairs = (i.split('=', 1) for i in items)
    return frozenset(f"{k}={v.lower() if v.lower() in ('true', 'false') else v}"
                     for k, v in pairs if k not in NOT_CONFIG_KEYS)


def finished(runs_dir: Path) -> set:
    r"""The override sets of the finished runs in :obj:`runs_dir`."""
    if not runs_dir.is_dir():
        return set()
    return {_run_key(f'{k}={v}' for k, v in overrides(r).items())
            for r in load_runs(runs_dir) if r.get('status') == 'ok'}


def command(protocol: str, cell: Dict[str, Any], runs_dir: Path,
            sets: Sequence[str]) -> List[str]:
    r"""The ``python -m gnorm.train -m`` command of one cell."""
    args = [sys.executable, '-m', 'gnorm.train', '-m',
            f'experiment=table3_{protocol}', *cell['base'],
            'seed=' + ','.join(str(s) for s in cell['seeds'])]
    if cell['scales'] != [None]:
        args.append('norm.scale=' + ','.join(str(s) for s in cell['scales']))
    return args + [f'hydra.sweep.dir={runs_dir}', *sets]


def run_missing(protocol: str, todo: List[Dict[str, Any]], runs_dir: Path,
                sets: Sequence[str], threads: Optional[int],
                dry_run: bool) -> int:
    r"""Runs the cells of :obj:`todo` that have unfinished runs; returns the
    number of cells that failed."""
    done = finished(runs_dir)
    env = dict(os.environ)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    failed = 0
    for k, cell in enumerate(todo, start=1):
        want = [_run_key([*r, *sets]) for r in cell['runs']]
        left = sum(w not in done for w in want)
        label = (f"[{k}/{len(todo)}] {cell['dataset']} {cell['row']} "
                 f"L={cell['depth']}: {len(want) - left}/{len(want)} done")
        if left == 0:
            print(label, flush=True)
            continue
        args = command(protocol, cell, runs_dir, sets)
        print(f'{label}, running {left}\n  {shlex.join(args[1:])}',
              flush=True)
        if dry_run:
            continue
        proc = subprocess.run(args, cwd=ROOT, env=env)
        if proc.returncode in (130, -2):  # Ctrl-C: stop the table
            raise KeyboardInterrupt
        failed += proc.returncode != 0
    return failed


def read_paper(path: Path) -> Dict[Tuple[str, str, int], Tuple[float,
                                                                float]]:
    r"""(dataset, row, layers) -> (mean, std) of the paper's table."""
    with open(path) as f:
        lines = [line for line in f if not line.startswith('#')]
    return {(r['dataset'], r['row'], int(r['layers'])):
            (float(r['mean']), float(r['std'])) for r in csv.DictReader(lines)}


def summarise(spec: Dict[str, Any], runs: List[Dict[str, Any]],
              paper: Dict, rows=None) -> List[Dict[str, Any]]:
    r"""One record per (dataset, row, depth, selection): test accuracy mean
    and std over seeds at the selected scale, the paper's value and the
    difference. Rows with scales get two selections: ``val`` (scale with
    the best mean validation accuracy) and ``test`` (best mean test
    accuracy: optimistic)."""
    by_cell: Dict[tuple, Dict[Any, List[Dict[str, Any]]]] = {}
    for run in runs:
        if run.get('status') != 'ok':
            continue
        key = (value(run, 'dataset.name'), value(run, 'tag'),
               value(run, 'layers'))
        scale = value(run, 'norm.scale') if key[1] in spec.get(
            'scales', {}) else None
        by_cell.setdefault(key, {}).setdefault(scale, []).append(run)
    records = []
    for dataset in spec['datasets']:
        for row in rows or list(spec['rows']):
            scaled = row in spec.get('scales', {})
            for depth in spec['depths']:
                groups = by_cell.get((dataset, row, depth), {})
                expected = len(spec['seeds'])
                for selection in (('val', 'test') if scaled else ('val', )):
                    metric = f'{selection}_acc'
                    scale = None
                    if scaled and groups:
                        # Only scales with every seed finished compete.
                        full = {s: g for s, g in groups.items()
                                if len(g) >= expected} or groups
                        scale = max(full, key=lambda s: mean_std(
                            [r[metric] for r in full[s]])[0])
                    chosen = groups.get(scale, [])
                    test_mean, test_std = mean_std(
                        [100 * r['test_acc'] for r in chosen])
                    val_mean, _ = mean_std(
                        [100 * r['val_acc'] for r in chosen])
                    p_mean, p_std = paper.get((dataset, row, depth),
                                              (None, None))
                    diff = (None if test_mean is None or p_mean is None
                            else test_mean - p_mean)
                    records.append(dict(
                        dataset=dataset, row=row, layers=depth,
                        selection=selection if scaled else '', scale=scale,
                        scales_run=len(groups), runs=len(chosen),
                        expected=expected, test_mean=test_mean,
                        test_std=test_std, val_mean=val_mean,
                        paper_mean=p_mean, paper_std=p_std, diff=diff,
                        diff_paper_stds=(None if diff is None or not p_std
                                         else diff / p_std),
                        erank=_mean_curve([r.get('collapse', {}).get(
                            'effective_rank') for r in chosen]),
                    ))
    return records


def _mean_curve(curves: List[Optional[List[float]]]) -> Optional[List]:
    curves = [c for c in curves if c]
    if not curves:
        return None
    return [sum(v) / len(v) for v in zip(*curves)]


def _label(record: Dict[str, Any]) -> str:
    if record['selection'] == 'val':
        return f"{record['row']} (s by val)"
    if record['selection'] == 'test':
        return f"{record['row']} (s by test, optimistic)"
    return record['row']


def _cell(r: Dict[str, Any]) -> str:
    if r['runs'] == 0:
        ours = 'missing'
    else:
        ours = f"**{r['test_mean']:.2f}** ± {r['test_std']:.2f}"
        if r['runs'] < r['expected']:
            ours += f" ({r['runs']}/{r['expected']} runs)"
        if r['scale'] is not None:
            ours += f", s={r['scale']:g}"
            if r['scales_run'] < 4:
                ours += f" of {r['scales_run']}"
    if r['paper_mean'] is None:
        return ours
    paper = f"paper {r['paper_mean']:.2f} ± {r['paper_std']:.2f}"
    if r['diff'] is None:
        return f'{ours}<br>{paper}'
    return f"{ours}<br>{paper}, Δ {r['diff']:+.2f}"


def machines(runs: List[Dict[str, Any]]) -> str:
    r"""The machines the runs report, with counts."""
    seen = Counter()
    for run in runs:
        m = run.get('machine') or {}
        name = m.get('gpu') or m.get('cpu') or run.get('device', '?')
        threads = f", {m['threads']} threads" if 'threads' in m else ''
        seen[f"{run.get('device', '?')}: {name}{threads}"] += 1
    return '; '.join(f'{k} ({n} runs)' for k, n in seen.most_common())


def write_report(protocol: str, spec: Dict[str, Any],
                 records: List[Dict[str, Any]], runs: List[Dict[str, Any]],
                 runs_dir: Path, out: Path, argv: Sequence[str]) -> None:
    r"""Writes ``<name>.md``, ``<name>.csv`` and the two plots."""
    name = spec['name']
    out.mkdir(parents=True, exist_ok=True)
    columns = ['dataset', 'row', 'layers', 'selection', 'scale',
               'scales_run', 'runs', 'expected', 'test_mean', 'test_std',
               'val_mean', 'paper_mean', 'paper_std', 'diff',
               'diff_paper_stds']
    with open(out / f'{name}.csv', 'w', newline='') as f:
        writer = csv.DictWriter(f, columns, extrasaction='ignore')
        writer.writeheader()
        for r in records:
            writer.writerow({k: (f'{v:.4f}' if isinstance(v, float) else v)
                             for k, v in r.items() if k in columns})

    ok = [r for r in runs if r.get('status') == 'ok']
    depths = sorted({r['layers'] for r in records})
    missing = sum(r['runs'] == 0 for r in records if r['selection'] != 'test')
    lines = [
        f'# {name}: accuracy vs depth, ContraNorm paper Table 3',
        '',
        f'Generated by `python experiments/table3.py {" ".join(argv)}` on '
        f'{datetime.date.today().isoformat()} from {len(ok)} finished runs '
        f'in `{os.path.relpath(runs_dir, ROOT)}` '
        f'(protocol: `conf/experiment/table3_{protocol}.yaml`). '
        f'Machines: {machines(ok) or "none yet"}.',
        '',
        'Each cell: our test accuracy (%), mean ± std over seeds '
        '(ddof=0), the paper\'s value and Δ = ours − paper. A row with '
        'scales tried shows the chosen s; "s by val" picks s per (dataset, '
        'depth) by mean validation accuracy (the honest choice), '
        '"s by test, optimistic" by mean test accuracy, which is what a '
        'table built from test means shows. "of k" = only k scales have '
        f'runs yet; "missing" = not run yet ({missing} cells).',
    ]
    for dataset in dict.fromkeys(r['dataset'] for r in records):
        lines += ['', f'## {dataset}', '',
                  '| row | ' + ' | '.join(f'L={d}' for d in depths) + ' |',
                  '|---|' + '---|' * len(depths)]
        rows = dict.fromkeys((r['row'], r['selection']) for r in records
                             if r['dataset'] == dataset)
        for row, selection in rows:
            rs = {r['layers']: r for r in records if r['dataset'] == dataset
                  and r['row'] == row and r['selection'] == selection}
            lines.append(f'| {_label(rs[depths[0]])} | ' + ' | '.join(
                _cell(rs[d]) if d in rs else '' for d in depths) + ' |')
    lines += ['', f'![accuracy vs depth]({name}_depth.png)', '',
              f'![effective rank vs layer]({name}_erank.png)', '']
    (out / f'{name}.md').write_text('\n'.join(lines))
    plot(records, out, name)


def plot(records: List[Dict[str, Any]], out: Path, name: str) -> None:
    r"""Accuracy vs depth per dataset (a line and std band per row, the
    paper dashed) and effective rank vs layer of the deepest models."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    shown = [r for r in records if r['selection'] != 'test']
    datasets = list(dict.fromkeys(r['dataset'] for r in shown))
    fig, axes = plt.subplots(1, len(datasets), figsize=(
        4 * len(datasets), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for k, row in enumerate(dict.fromkeys(r['row'] for r in shown)):
            rs = sorted((r for r in shown if r['dataset'] == dataset
                         and r['row'] == row), key=lambda r: r['layers'])
            have = [r for r in rs if r['runs'] > 0]
            color = f'C{k}'
            if have:
                x = [r['layers'] for r in have]
                m = [r['test_mean'] for r in have]
                s = [r['test_std'] for r in have]
                ax.plot(x, m, 'o-', color=color, label=row)
                ax.fill_between(x, [a - b for a, b in zip(m, s)],
                                [a + b for a, b in zip(m, s)], color=color,
                                alpha=0.2)
            paper = [r for r in rs if r['paper_mean'] is not None]
            if paper:
                ax.plot([r['layers'] for r in paper],
                        [r['paper_mean'] for r in paper], '--', color=color,
                        alpha=0.6, label=f'{row} (paper)' if not have
                        else None)
        ax.set_xscale('log', base=2)
        ax.set_title(dataset)
        ax.set_xlabel('layers')
        ax.set_ylabel('test accuracy (%)')
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, title='solid: gnorm, dashed: paper',
                      title_fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f'{name}_depth.png', dpi=110)
    plt.close(fig)

    deepest = {}
    for r in shown:
        if r['erank'] and r['layers'] >= deepest.get(r['dataset'], 0):
            deepest[r['dataset']] = r['layers']
    fig, axes = plt.subplots(1, max(len(datasets), 1), figsize=(
        4 * max(len(datasets), 1), 3.4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for k, row in enumerate(dict.fromkeys(r['row'] for r in shown)):
            for r in shown:
                if (r['dataset'] == dataset and r['row'] == row
                        and r['layers'] == deepest.get(dataset)
                        and r['erank']):
                    ax.plot(range(1, len(r['erank']) + 1), r['erank'],
                            color=f'C{k}', label=row)
        ax.set_title(f'{dataset}, {deepest.get(dataset, "-")} layers')
        ax.set_xlabel('layer')
        ax.set_ylabel('effective rank')
        ax.set_yscale('log')
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f'{name}_erank.png', dpi=110)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog='python experiments/table3.py',
        description=__doc__.split('\n\n')[0])
    parser.add_argument('protocol', choices=['paper', 'fair'])
    parser.add_argument('--datasets', nargs='+')
    parser.add_argument('--rows', nargs='+')
    parser.add_argument('--depths', nargs='+', type=int)
    parser.add_argument('--seeds', nargs='+', type=int)
    parser.add_argument('--set', nargs='+', default=[], metavar='KEY=VALUE',
                        help='overrides for every run, e.g. train.epochs=50')
    parser.add_argument('--runs', type=Path, help='multirun folder '
                        '(default: experiments/runs/<table name>)')
    parser.add_argument('--out', type=Path, default=ROOT / 'experiments' /
                        'results', help='report folder')
    parser.add_argument('--threads', type=int, help='OMP_NUM_THREADS of '
                        'the runs')
    parser.add_argument('--report-only', action='store_true')
    parser.add_argument('--dry-run', action='store_true',
                        help='print the commands, run nothing')
    args = parser.parse_args(argv)

    spec = table_spec(args.protocol)
    bad = [row for row in args.rows or [] if row not in spec['rows']]
    if bad:
        parser.error(f'unknown row {bad[0]!r}; pass one of '
                     f'{", ".join(spec["rows"])}')
    runs_dir = (args.runs or ROOT / 'experiments' / 'runs' / spec['name']).resolve()
    if args.datasets or args.seeds or args.depths:
        spec = {**spec, 'datasets': args.datasets or spec['datasets'],
                'depths': args.depths or spec['depths'],
                'seeds': args.seeds or spec['seeds']}
    todo = cells(spec, rows=args.rows)
    failed = 0
    if not args.report_only:
        try:
            failed = run_missing(args.protocol, todo, runs_dir, args.set,
                                 args.threads, args.dry_run)
        except KeyboardInterrupt:
            print('interrupted: finished runs are kept; run the same '
                  'command again to go on', file=sys.stderr)
            return 130
    if args.dry_run:
        return 0
    runs = load_runs(runs_dir) if runs_dir.is_dir() else []
    paper = read_paper(ROOT / spec['paper'])
    records = summarise(spec, runs, paper, rows=args.rows)
    write_report(args.protocol, spec, records, runs, runs_dir, args.out,
                 argv)
    print(f"report: {args.out / spec['name']}.md ({len(runs)} runs read)")
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
