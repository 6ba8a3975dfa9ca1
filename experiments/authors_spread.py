r"""Compares the authors' published GCN code and gnorm run by run
(:mod:`experiments.authors.report`: the permutation test of each cell, the time
per run of work-matched pairs, the twins on the same random numbers), from
the committed records and runs:

    python experiments/authors_spread.py
    # -> experiments/results/authors_vs_gnorm.md (and authors_twin.png)

The authors' records: ``experiments/results/authors_gcn`` (their timing
records, left out of the accuracies: ``.../authors_gcn/speed``, one seed a
process); gnorm's runs: ``experiments/runs/table3_paper`` (the table's 5
seeds) and ``experiments/runs/table3_paper_seeds`` (more seeds of a cell:
``python -m gnorm.train -m experiment=table3_paper ... seed=5,6,7,8,9
hydra.sweep.dir=experiments/runs/table3_paper_seeds``), their timing runs
``experiments/runs/speed_pairs``; the twins of ``experiments/authors_twin.py``
in ``experiments/results/authors_twin/`` (docs/table3.rst).
"""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.errors import one_line_errors  # noqa: E402
from gnorm.results import load_runs  # noqa: E402
from gnorm.study.spec.inputs import relative  # noqa: E402
from gnorm.study.reports.plot import save_bytes  # noqa: E402
from experiments.authors.report import (plot_twins, read_authors,  # noqa: E402
                                        read_twins, report, twin_lines)

AUTHORS = ROOT / 'experiments' / 'results' / 'authors_gcn'
RUNS = [ROOT / 'experiments' / 'runs' / 'table3_paper',
        ROOT / 'experiments' / 'runs' / 'table3_paper_seeds']
# Timing runs of both sides, left out of the accuracies.
TIMING = AUTHORS / 'speed'
TIMING_RUNS = [ROOT / 'experiments' / 'runs' / 'speed_pairs']
TWINS = ROOT / 'experiments' / 'results' / 'authors_twin'
OUT = ROOT / 'experiments' / 'results' / 'authors_vs_gnorm.md'


def compare(authors: Path = AUTHORS, runs: Sequence[Path] = RUNS,
            timing: Path = TIMING, timing_runs: Sequence[Path] = TIMING_RUNS,
            ) -> str:
    r""":func:`report` of the records and runs in these folders (those
    that exist)."""
    folders = [f for f in runs if f.is_dir()]
    timed = [f for f in timing_runs if f.is_dir()]
    return report(read_authors(authors), load_runs(*folders), folders,
                  read_authors(timing) if timing.is_dir() else [],
                  load_runs(*timed) if timed else [],
                  ([timing] if timing.is_dir() else []) + timed)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--authors', type=Path, default=AUTHORS,
                        help="folder of experiments/authors_gcn.py records")
    parser.add_argument('--runs', type=Path, nargs='+', default=RUNS,
                        help="gnorm's runs folders")
    parser.add_argument('--timing', type=Path, default=TIMING,
                        help="folder of the authors' timing records")
    parser.add_argument('--timing-runs', type=Path, nargs='+',
                        default=TIMING_RUNS,
                        help="gnorm's timing runs folders")
    parser.add_argument('--twins', type=Path, default=TWINS,
                        help='folder of experiments/authors_twin.py records')
    parser.add_argument('--out', type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = compare(args.authors, args.runs, args.timing, args.timing_runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    twins = read_twins(args.twins) if args.twins.is_dir() else []
    if twins:
        figure = args.out.with_name('authors_twin.png')
        plot_twins(twins, figure)
        text += '\n'.join(twin_lines(twins, figure.name)) + '\n'
    save_bytes(args.out, text.encode())
    print(text, end='')
    print(f'-> {relative(args.out)}')
    return 0


if __name__ == '__main__':
    with one_line_errors():
        sys.exit(main())
