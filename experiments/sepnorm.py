r"""The SepNorm comparison on ogbg-molhiv (the SepNorm paper's Table 3,
MolHIV column, Graphormer without pretraining) with one command: runs what
is missing, seed by seed, then writes the report.

    python experiments/sepnorm.py cpu     # experiment=sepnorm_molhiv_cpu: a small Graphormer, CPU
    python experiments/sepnorm.py slim    # experiment=sepnorm_molhiv: Graphormer-slim as published (GPU)
    python experiments/sepnorm.py cpu --report-only
    python experiments/sepnorm.py slim --seeds 0 --rows sharenorm sepnorm_bn_ln train.epochs=20

Rows (ShareNorm = LayerNorm at every norm site, and SepNorm with the four
BN/LN combinations of graph token and node tokens), seeds, the paper's
values and the numbers reported elsewhere are the ``table:`` section of
``conf/experiment/<experiment>.yaml``. Each (row, seed) is one ``python -m
gnorm.train`` run into ``experiments/runs/<experiment>/<row>/seed_<seed>``
(``--runs``): all rows of seed 0 first, so an interrupted table has whole
rows with fewer seeds. Interrupt at any time: finished runs are kept, an
unfinished one continues from its checkpoint (``resume=true``). Extra
``key=value`` arguments go to every run (and name a separate runs folder
only through ``--runs``). The report (``--out``, default
``experiments/results``) covers every row of the table whatever ``--rows``
and ``--seeds`` ran, and depends on the runs only (no date, no command
line), so the same runs give the same bytes: ``<experiment>.{md,csv}``
(test ROC-AUC at the best validation epoch, mean ± std over seeds, beside
the paper; the recipe, epochs run, machine) and ``<experiment>_val.png``
(validation ROC-AUC per epoch; per seed when the runs are one epoch).
"""
import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.results import (  # noqa: E402
    load_runs, machines, mean_std, value, write_records)

RECIPES = {'cpu': 'sepnorm_molhiv_cpu', 'slim': 'sepnorm_molhiv'}


def compose_experiment(experiment: str, sets: Sequence[str] = ()):
    r"""The composed config of ``experiment=<experiment>`` and :obj:`sets`
    (its ``table:`` section included)."""
    from hydra import compose, initialize_config_dir
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return compose('train', overrides=[f'experiment={experiment}',
                                           *sets])


def label(row: str) -> str:
    r"""``sharenorm`` -> ShareNorm (LayerNorm); ``sepnorm_bn_ln`` ->
    SepNorm BN+LN (graph token BN, node tokens LN)."""
    if not row.startswith('sepnorm_'):
        return 'ShareNorm (LayerNorm)' if row == 'sharenorm' else row
    virtual, token = row.split('_')[1:]
    return (f'SepNorm {virtual.upper()}+{token.upper()} (graph token '
            f'{virtual.upper()}, nodes {token.upper()})')


def recipe(cfg) -> str:
    r"""The training recipe of :obj:`cfg`, in words, read from it."""
    m, t = cfg.model, cfg.train
    precision = ('bf16 autocast on CUDA (fp32 on CPU)'
                 if t.precision == 'bf16' else 'fp32')
    bucket = (f', batches of similar-size molecules (chunks of '
              f'{t.bucket_chunk} batches; so the BN of the SepNorm rows '
              f'trains on batch statistics of similar-size molecules and '
              f'evaluates with running averages over all sizes, a handicap '
              f'the paper\'s shuffled batches do not have)'
              if t.bucket_chunk else ', uniformly shuffled batches')
    return (f'Graphormer, {cfg.layers} layers, hidden {m.hidden_channels}, '
            f'{m.num_heads} heads, FFN {m.ffn_channels}, multi-hop max '
            f'distance {m.max_dist}, dropout {m.dropout} / input '
            f'{m.input_dropout} / attention {m.attention_dropout}; AdamW lr '
            f'{t.lr:g} (weight decay {t.weight_decay:g}) after '
            f'{t.warmup_steps} warmup updates, decay to {t.end_lr:g} over '
            f'{t.epochs} epochs of batch {t.batch_size}{bucket}, gradient '
            f'clip {t.grad_clip:g}, {precision}, '
            f'test at the best validation epoch')


def run_folder(runs_dir: Path, row: str, seed: int) -> Path:
    return runs_dir / row / f'seed_{seed}'


def command(experiment: str, overrides: Sequence[str], row: str, seed: int,
            folder: Path, sets: Sequence[str]) -> List[str]:
    r"""The ``python -m gnorm.train`` command of one run."""
    return [sys.executable, '-m', 'gnorm.train', f'experiment={experiment}',
            *overrides, f'tag={row}', f'seed={seed}', 'resume=true',
            f'hydra.run.dir={folder}', *sets]


def finished(folder: Path) -> bool:
    runs = load_runs(folder / 'results.json') \
        if (folder / 'results.json').is_file() else []
    return bool(runs) and runs[0].get('status') == 'ok'


def run_missing(experiment: str, spec: Dict[str, Any], rows: Sequence[str],
                seeds: Sequence[int], runs_dir: Path, sets: Sequence[str],
                threads: Optional[int], dry_run: bool) -> int:
    r"""Runs the unfinished (row, seed) runs, seed by seed; returns the
    number that failed."""
    env = dict(os.environ)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    todo = [(seed, row) for seed in seeds for row in rows]
    failed = 0
    for k, (seed, row) in enumerate(todo, start=1):
        folder = run_folder(runs_dir, row, seed)
        tag = f'[{k}/{len(todo)}] {row} seed={seed}'
        if finished(folder):
            print(f'{tag}: done', flush=True)
            continue
        args = command(experiment, spec['rows'][row], row, seed, folder, sets)
        print(f'{tag}: running\n  {shlex.join(args[1:])}', flush=True)
        if dry_run:
            continue
        proc = subprocess.run(args, cwd=ROOT, env=env)
        if proc.returncode in (130, -2):  # Ctrl-C: stop the table
            raise KeyboardInterrupt
        failed += proc.returncode != 0
    return failed


def summarise(spec: Dict[str, Any], runs: List[Dict[str, Any]],
              rows: Sequence[str]) -> List[Dict[str, Any]]:
    r"""One record per row: test and validation ROC-AUC (%) at the best
    validation epoch, mean ± std (ddof=0) over the finished seeds, the
    epochs run and selected, the paper's value, the difference to the first
    row."""
    records = []
    for row in rows:
        ok = [r for r in runs if value(r, 'tag') == row
              and r.get('status') == 'ok']
        test, test_std = mean_std([100 * r['test_metric'] for r in ok])
        val, val_std = mean_std([100 * r['val_metric'] for r in ok])
        records.append(dict(
            row=row, label=label(row), runs=len(ok),
            expected=len(spec['seeds']), test_mean=test, test_std=test_std,
            val_mean=val, val_std=val_std,
            epochs=sorted({len(r['curve']['epoch']) for r in ok}),
            best_epochs=sorted(r['selected_epoch'] for r in ok),
            runtime_s=mean_std([r['runtime_s'] for r in ok])[0],
            paper=spec.get('paper', {}).get(row), runs_list=ok))
    base = records[0]['test_mean'] if records else None
    for r in records:
        r['diff'] = (None if r['test_mean'] is None or base is None
                     else r['test_mean'] - base)
    return records


def _pm(mean: Optional[float], std: Optional[float]) -> str:
    return '' if mean is None else f'{mean:.2f} ± {std:.2f}'


def write_report(name: str, cfg, records: List[Dict[str, Any]],
                 runs_dir: Path, out: Path, sets: Sequence[str]) -> None:
    r"""Writes ``<experiment>.md``, ``<experiment>.csv`` and the plot of
    the recipe :obj:`name` (``cpu``, ``slim``) with the overrides
    :obj:`sets`: from the records, runs and config only."""
    experiment = RECIPES[name]
    out.mkdir(parents=True, exist_ok=True)
    columns = ['row', 'runs', 'expected', 'test_mean', 'test_std',
               'val_mean', 'val_std', 'epochs', 'best_epochs', 'runtime_s',
               'paper', 'diff']
    write_records(out / f'{experiment}.csv', records, columns)
    ok = [run for r in records for run in r['runs_list']]
    spec = cfg.table
    lines = [
        f'# SepNorm vs ShareNorm on ogbg-molhiv from scratch ({experiment})',
        '',
        f'Generated by `python experiments/sepnorm.py '
        f'{shlex.join([name, *sets, "--report-only"])}` from {len(ok)} '
        f'finished runs '
        f'in `{os.path.relpath(runs_dir, ROOT)}` (config: '
        f'`conf/experiment/{experiment}.yaml`). Machines: '
        f'{machines(ok) or "none yet"}.',
        '',
        f'**Recipe**: {recipe(cfg)}. ogbg-molhiv scaffold split '
        f'(32,901 / 4,113 / 4,113), ROC-AUC from `ogb`\'s Evaluator.'
        + (' **A small CPU recipe, not the published architecture or '
           'training length: compare the rows with each other, not with '
           'the paper.**' if experiment.endswith('_cpu') else ''),
        '',
        'Test and validation ROC-AUC (%) at the best validation epoch, mean '
        '± std over seeds (ddof=0); Δ = test mean − the first row\'s; '
        'epochs = epochs run per run; best = the selected epoch of each '
        'run; time = mean wall time per run.',
        '',
        '| norm | runs | test ROC-AUC | val ROC-AUC | Δ test | paper | '
        'epochs | best | time |',
        '|---|---|---|---|---|---|---|---|---|',
    ]
    for r in records:
        runs = f"{r['runs']}/{r['expected']}"
        if r['runs'] == 0:
            lines.append(f"| {r['label']} | {runs} | missing | | | "
                         f"{r['paper'] or ''} | | | |")
            continue
        lines.append(
            f"| {r['label']} | {runs} | **{_pm(r['test_mean'], r['test_std'])}"
            f"** | {_pm(r['val_mean'], r['val_std'])} | "
            f"{r['diff']:+.2f} | {r['paper'] if r['paper'] else ''} | "
            f"{'/'.join(map(str, r['epochs']))} | "
            f"{' '.join(map(str, r['best_epochs']))} | "
            f"{r['runtime_s']:.0f} s |")
    lines += ['', 'Paper: Graphormer 73.36 → +SepNorm 75.64 (its Table 3, '
              'without pretraining; no hyperparameters published). '
              'What from-scratch models give elsewhere, to place the '
              'numbers:', '', '| model | test ROC-AUC (%) |', '|---|---|']
    lines += [f'| {name} | {score} |' for name, score in spec.elsewhere]
    lines += ['', f'![validation ROC-AUC per epoch]({experiment}_val.png)',
              '']
    (out / f'{experiment}.md').write_text('\n'.join(lines))
    plot(records, out / f'{experiment}_val.png', experiment)


def plot(records: List[Dict[str, Any]], path: Path, title: str) -> None:
    r"""Validation ROC-AUC per epoch: each run thin, each row's mean over
    seeds thick; with one epoch per run (no curve to draw), each row's
    seeds as dots beside their mean ± std."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if all(len(run['curve']['epoch']) <= 1
           for r in records for run in r['runs_list']):
        _plot_seeds(ax, records, title)
        fig.tight_layout()
        fig.savefig(path, dpi=120, metadata={'Software': None})
        plt.close(fig)
        return
    for k, r in enumerate(records):
        color = f'C{k}'
        curves = [run['curve'] for run in r['runs_list']]
        for c in curves:
            ax.plot(c['epoch'], [100 * v for v in c['val_metric']],
                    color=color, alpha=0.3, lw=0.8)
        if curves:
            n = min(len(c['epoch']) for c in curves)
            mean = [100 * sum(c['val_metric'][e] for c in curves)
                    / len(curves) for e in range(n)]
            ax.plot(curves[0]['epoch'][:n], mean, color=color, lw=2,
                    marker='o', label=f"{r['label']} ({r['runs']} runs)")
    ax.set_xlabel('epoch')
    ax.set_ylabel('validation ROC-AUC (%)')
    ax.set_title(f'ogbg-molhiv, {title}')
    ax.legend(fontsize=7, title='thin: each seed; thick: mean over seeds',
              title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={'Software': None})
    plt.close(fig)


def _plot_seeds(ax, records: List[Dict[str, Any]], title: str) -> None:
    r"""Validation ROC-AUC of runs of one epoch: a dot per seed, the
    mean ± std over seeds beside them, a column per row."""
    for k, r in enumerate(records):
        values = [100 * run['val_metric'] for run in r['runs_list']]
        ax.plot([k - 0.08] * len(values), values, 'o', color=f'C{k}',
                alpha=0.6, ms=5)
        if values:
            ax.errorbar([k + 0.08], [r['val_mean']], yerr=[r['val_std']],
                        fmt='D', color=f'C{k}', capsize=4)
    ax.set_xticks(range(len(records)))
    ax.set_xticklabels([f"{r['label'].split(' (')[0]}\n({r['runs']} runs)"
                        for r in records], fontsize=7)
    ax.set_xlim(-0.5, len(records) - 0.5)
    ax.set_ylabel('validation ROC-AUC (%)')
    ax.grid(axis='y', alpha=0.3)
    ax.set_title(f'ogbg-molhiv, {title}: one epoch per run, no curve\n'
                 'dots: each seed; diamond and bar: mean ± std (ddof=0)',
                 fontsize=9)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog='python experiments/sepnorm.py',
        description=' '.join(__doc__.split('\n\n')[0].split()))
    parser.add_argument('recipe', choices=list(RECIPES),
                        help='cpu: experiment=sepnorm_molhiv_cpu (a small '
                        'Graphormer on the CPU); slim: '
                        'experiment=sepnorm_molhiv (Graphormer-slim as '
                        'published, GPU)')
    parser.add_argument('sets', nargs='*', metavar='key=value',
                        help='overrides for every run, e.g. '
                        'train.epochs=20')
    parser.add_argument('--rows', nargs='+', metavar='ROW',
                        help='only these rows (default: every row of the '
                        'recipe: sharenorm and the four sepnorm_<graph '
                        'token>_<nodes> combinations)')
    parser.add_argument('--seeds', nargs='+', type=int, metavar='SEED',
                        help="only these seeds (default: the recipe's)")
    parser.add_argument('--runs', help='runs folder (default: '
                        'experiments/runs/<experiment>)')
    parser.add_argument('--out', default=str(ROOT / 'experiments' /
                                             'results'),
                        help='report folder (default: experiments/results)')
    parser.add_argument('--threads', type=int,
                        help='OMP_NUM_THREADS of every run')
    parser.add_argument('--report-only', action='store_true',
                        help='run nothing, write the report of the runs in '
                        '--runs')
    parser.add_argument('--dry-run', action='store_true',
                        help='print what would run, run nothing')
    args = parser.parse_args(argv)
    experiment = RECIPES[args.recipe]
    cfg = compose_experiment(experiment, args.sets)
    spec = cfg.table
    rows = args.rows or list(spec.rows)
    unknown = [r for r in rows if r not in spec.rows]
    if unknown:
        parser.error(f"unknown rows {unknown}; pick from {list(spec.rows)}")
    runs_dir = Path(args.runs) if args.runs else \
        ROOT / 'experiments' / 'runs' / experiment
    failed = 0
    if not args.report_only:
        failed = run_missing(experiment, spec, rows,
                             args.seeds or list(spec.seeds), runs_dir,
                             args.sets, args.threads, args.dry_run)
    runs = [r for r in load_runs(runs_dir)] if runs_dir.is_dir() else []
    records = summarise(spec, runs, list(spec.rows))
    write_report(args.recipe, cfg, records, runs_dir, Path(args.out),
                 args.sets)
    print(f"report: {Path(args.out) / experiment}.md", flush=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
