r"""The report of the main command's runs: what ``python -m gnorm.train
dataset=cora layers=32 norm=contranorm`` gives, against no norm, and the
probes of what changes it.

    python experiments/main_command.py              # experiments/results/main_command.md

Each folder of ``experiments/runs/main_command/`` holds the runs of one
``python -m gnorm.train -m ...`` command. Folders are reported one table
each, never merged: they were made at different times, with the code of
their time (a folder named ``main_<commit>`` was made with the code of that
commit), and a run's config does not record the code. The first folder in
:data:`FOLDERS` is the one the README quotes.
"""
import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.results import (  # noqa: E402
    STD_NOTE, aggregate, counts, load_runs, machines, metric_columns,
    split_keys, to_markdown)

RUNS = ROOT / 'experiments' / 'runs' / 'main_command'
OUT = ROOT / 'experiments' / 'results' / 'main_command.md'
# What each folder is, in the report's order; a folder not named here comes
# last, under its own name.
FOLDERS = {
    'main_b2b073a': 'the main command as it stands, ContraNorm against no '
                    'norm, seeds 0-2, with the code of commit b2b073a',
    'p5main': 'the same command with the code before the CSR kernels of '
              "ContraNorm's masked pairs (float sums in another order)",
    'p4two': '2 layers, ContraNorm and no norm, dropout 0.2 and 0.6',
    'p3none': '32 layers without a norm, dropout 0.0, 0.2 and 0.6',
    'p2a': '32 layers, ContraNorm, 150 epochs, dropout 0.0 and 0.2',
}
BY = ('dataset', 'layers', 'norm', 'model.dropout', 'train.epochs')
METRICS = ('test_acc', 'val_acc')


def _command(runs: Sequence[Dict]) -> str:
    r"""The multirun command of :obj:`runs`: each override key with the
    values the runs give it."""
    values: Dict[str, List[str]] = {}
    for run in runs:
        for item in run.get('overrides', []):
            key, _, value = item.partition('=')
            if key != 'batch_file' and value not in values.setdefault(
                    key, []):
                values[key].append(value)
    return 'python -m gnorm.train -m ' + ' '.join(
        f"{k}={','.join(v)}" for k, v in values.items())


def section(name: str, runs: List[Dict]) -> str:
    r"""The markdown section of one folder of runs."""
    by = [*BY, *split_keys(runs, BY)]
    rows = aggregate(runs, by, METRICS)
    lines = [f'## `{name}`: {FOLDERS.get(name, "")}'.rstrip(': '), '',
             f'`{_command(runs)}`; {machines(runs)}; {counts(runs)}.', '',
             to_markdown(rows, by, metric_columns(rows, METRICS))]
    return '\n'.join(lines)


def _row(rows: List[Dict], **where) -> Optional[Dict]:
    return next((r for r in rows if all(r.get(k) == v
                                        for k, v in where.items())), None)


def _acc(row: Dict) -> str:
    return f"{100 * row['test_acc_mean']:.2f} ± {100 * row['test_acc_std']:.2f} %"


def reading(runs_dir: Path) -> Optional[str]:
    r"""The paragraph the README quotes: the first folder's ContraNorm and
    no-norm rows, each against the constant predictor (the majority class
    of Cora's public test nodes, :func:`gnorm.study.findings.sanity.
    chance_accuracy`), and where ContraNorm is below no norm at 2 layers
    (``p4two``, at the first folder's dropout)."""
    from gnorm.study.findings.sanity import chance_accuracy
    first = runs_dir / next(iter(FOLDERS))
    runs = load_runs(first, warn=False) if first.is_dir() else []
    rows = aggregate(runs, BY, METRICS) if runs else []
    contra, none = _row(rows, norm='contranorm'), _row(rows, norm='none')
    if not (contra and none):
        return None
    chance = chance_accuracy(next(r for r in runs if r.get('status') == 'ok'))

    def against(row: Dict) -> str:
        side = ('below' if row['test_acc_mean'] < chance else
                'above' if row['test_acc_mean'] > chance else 'at')
        return side
    said = (f"On Cora at {contra['layers']} layers, seeds "
            f"{_seeds(runs)}, ContraNorm reaches {_acc(contra)} test "
            f"accuracy ({against(contra)} the majority class) and no norm "
            f"{_acc(none)}, {against(none)} the {100 * chance:.2f} % of "
            f"Cora's public test nodes in their majority class (what a "
            f"constant predictor scores)")
    two = runs_dir / 'p4two'
    small = aggregate(load_runs(two, warn=False), BY, METRICS) \
        if two.is_dir() else []
    c2 = _row(small, norm='contranorm', **{'model.dropout':
                                            contra['model.dropout']})
    n2 = _row(small, norm='none', **{'model.dropout': none['model.dropout']})
    if c2 and n2 and c2['test_acc_mean'] < n2['test_acc_mean']:
        said += (f"; at {c2['layers']} layers ContraNorm is below no norm: "
                 f"{_acc(c2)} against {_acc(n2)} ({c2['runs']} seeds, "
                 f"dropout {c2['model.dropout']})")
    return said + '.'


def _seeds(runs: Sequence[Dict]) -> str:
    seeds = sorted({r['config']['seed'] for r in runs if r.get('config')})
    return (f'{seeds[0]}-{seeds[-1]}' if seeds == list(
        range(seeds[0], seeds[-1] + 1)) else ', '.join(map(str, seeds)))


def report(runs_dir: Path) -> str:
    r"""The whole report of the folders below :obj:`runs_dir`."""
    folders = sorted((p for p in runs_dir.iterdir() if p.is_dir()),
                     key=lambda p: (list(FOLDERS).index(p.name)
                                    if p.name in FOLDERS else len(FOLDERS),
                                    p.name))
    parts = ['# The main command at 32 layers: what it gives and what '
             'changes it', '',
             'Generated by `python experiments/main_command.py` from the '
             'runs in `experiments/runs/main_command/`, one table per folder '
             '(one command each; folders are never merged: they were made '
             'with the code of their time). Cora, public split, '
             '`select=best_val`, gnorm\'s defaults but for the keys in the '
             f'tables. Cells: mean ± std over the finished runs, {STD_NOTE}.']
    said = reading(runs_dir)
    if said:
        parts += ['', f'**Reading.** {said}']
    for folder in folders:
        runs = load_runs(folder, warn=False)
        if runs:
            parts += ['', section(folder.name, runs)]
    return '\n'.join(parts) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python experiments/main_command.py',
        description='Writes the report of the main command\'s runs (one '
                    'table per folder of experiments/runs/main_command).')
    parser.add_argument('--runs', type=Path, default=RUNS,
                        help='folder of run folders (default: %(default)s)')
    parser.add_argument('--out', type=Path, default=OUT,
                        help='report to write (default: %(default)s)')
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        print(f'error: no such folder: {args.runs}', file=sys.stderr)
        return 2
    text = report(args.runs)
    if not args.out.is_file() or args.out.read_text() != text:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(f'report: {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
