r"""``python -m gnorm.study SPEC``: runs what a study misses, then writes
its report.

    python -m gnorm.study table3_paper                 # one of gnorm's studies (conf/experiment)
    python -m gnorm.study my_study.yaml                # the user's own spec file
    python -m gnorm.study my_study.yaml --report-only  # only the report
    python -m gnorm.study my_study.yaml --datasets cora --rows mine --depths 16 32
    python -m gnorm.study table3_fair --set train.epochs=5   # a scratch study
    python -m gnorm.study queue --list                 # the cells left for a GPU (gnorm.study.queue.command)

Where things go. Without a selection or ``--set``, runs go to the
study's runs folder and the report to its report folder (gnorm's studies:
``experiments/runs/<name>`` and ``experiments/results``; a user's spec:
``runs/<name>`` and ``results/`` beside the file; ``table.runs`` and
``table.out`` choose others). A selection (``--datasets``, ``--rows``,
``--depths``, ``--seeds``) trains the selected runs of the study into its
runs folder, as the whole study would, and writes a report of the
selected cells into the scratch folder ``--scratch`` (default
``outputs/study``), never over the study's report. ``--set key=value``
makes runs of another config: runs and report go to
``<scratch>/<name>+<key=value>``, never into the study's folders.
"""
import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from gnorm.errors import GnormError
from gnorm.study.spec.check import check_node_task, check_sets
from gnorm.study.spec.find import known_datasets, studies
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import SpecError, Spec, config_sets, set_name

SCRATCH = Path('outputs') / 'study'


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog='python -m gnorm.study',
        description='Runs what a study misses (a depth sweep or a paired '
        'comparison of norms), then writes its report: <name>.md, '
        '<name>.csv and plots.',
        epilog=' '.join(__doc__.split('\n\n')[2].split()))
    found.add_argument('spec', help='a spec file (.yaml: an experiment '
                       'config with a table: section) or one of gnorm\'s: '
                       f"{', '.join(studies())}")
    found.add_argument('--datasets', nargs='+', metavar='NAME',
                       help="only these datasets (a depth study)")
    found.add_argument('--rows', nargs='+', metavar='ROW',
                       help='only these rows')
    found.add_argument('--depths', nargs='+', type=int, metavar='L',
                       help='only these depths (a depth study)')
    found.add_argument('--seeds', nargs='+', type=int, metavar='SEED',
                       help='only these seeds')
    found.add_argument('--set', nargs='+', default=[], action='extend',
                       metavar='KEY=VALUE', help='overrides for every run, '
                       'e.g. train.epochs=50: a study of its own, in the '
                       'scratch folder')
    found.add_argument('--scratch', type=Path, default=SCRATCH,
                       help='the folder of selections\' reports and of '
                       f'--set studies (default: {SCRATCH})')
    found.add_argument('--runs', type=Path, help='the runs folder (default: '
                       'the study\'s, see below)')
    found.add_argument('--out', type=Path, help='the report folder '
                       '(default: the study\'s, see below)')
    found.add_argument('--threads', type=int, help='CPU threads of the runs')
    found.add_argument('--launcher', help='hand each cell of a depth study '
                       'to python -m gnorm.train -m hydra/launcher=LAUNCHER '
                       '(conf/hydra/launcher: local processes, SLURM); '
                       f"installed: {', '.join(_launchers())}")
    found.add_argument('--report-only', action='store_true',
                       help='run nothing, write the report')
    found.add_argument('--dry-run', action='store_true',
                       help='print what would run; run and write nothing')
    return found


def _launchers() -> List[str]:
    from gnorm.train.arguments import launchers
    return launchers()


def check_selection(spec: Spec, args: argparse.Namespace) -> None:
    r"""Raises :class:`SpecError` for a selection the study cannot make."""
    table = spec.table
    bad = [row for row in args.rows or [] if row not in table['rows']]
    if bad:
        raise SpecError(f"unknown row {bad[0]!r}; pick from "
                        f"{', '.join(table['rows'])}")
    if spec.kind == 'paired' and (args.datasets or args.depths):
        raise SpecError('a paired study has no --datasets or --depths')
    if spec.kind == 'paired' and args.launcher:
        raise SpecError('--launcher hands the cells of a depth study to '
                        'Hydra; a paired study runs one process per run')
    known = known_datasets()
    bad = [d for d in args.datasets or [] if d not in known]
    if bad:
        raise SpecError(f"unknown dataset {bad[0]!r}; pick from "
                        f"{', '.join(known)}")
    check_node_task('--datasets', args.datasets or [])
    for values, flag, low in ((args.depths, 'depths', 1),
                              (args.seeds, 'seeds', 0)):
        bad = [v for v in values or [] if v < low]
        if bad:
            raise SpecError(f'--{flag} must be integers >= {low}, got '
                            f'{bad[0]}')
    for values, flag in ((args.datasets, 'datasets'), (args.depths, 'depths'),
                         (args.seeds, 'seeds'), (args.rows, 'rows')):
        if values and len(set(values)) < len(values):
            raise SpecError(f'--{flag} names a value twice: {values}')
    if args.threads is not None and args.threads < 1:
        raise SpecError(f'--threads must be >= 1, got {args.threads}')


class Places:
    r"""Where a call's runs and report go (see the module's text)."""

    def __init__(self, spec: Spec, args: argparse.Namespace):
        from gnorm.results.folders import check_folder
        sets = config_sets(args.set)
        selected = any((args.datasets, args.rows, args.depths, args.seeds))
        scratch = args.scratch.resolve()
        self.study_runs = spec.runs_dir()
        study_out = spec.out_dir()
        if sets:
            own = scratch / set_name(spec.name, sets)
            self.default_runs, out = own / 'runs', own
        else:
            self.default_runs = self.study_runs
            out = scratch / f'{spec.name}-selection' if selected \
                else study_out
        self.runs = (args.runs.resolve() if args.runs
                     else self.default_runs)
        if self.runs != self.default_runs:  # a runs folder of the user's
            out = self.runs.with_name(f'{self.runs.name}-report')
        self.whole = self.runs == self.study_runs and not sets \
            and not selected
        self.out = args.out.resolve() if args.out else out
        if args.report_only and not args.dry_run and not self.runs.is_dir():
            raise SpecError(f'--report-only: no runs folder {self.runs}; '
                            f'pass --runs <the folder of the runs>')
        if self.out == study_out and not self.whole:
            raise SpecError(f'{study_out} holds the report of the whole '
                            f'study from {self.study_runs} only; pass '
                            f'another --out')
        check_folder(self.runs, f'--runs {self.runs}',
                     write=not args.report_only)
        if not args.dry_run:
            check_folder(self.out, f'--out {self.out}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ['queue']:  # the GPU queue: gnorm.study.queue.command
        from gnorm.study.queue.command import main as queue
        return queue(argv[1:])
    args = parser().parse_args(argv)
    try:
        spec = load_spec(args.spec)
        check_selection(spec, args)
        check_sets(spec, args.set, args.rows, args.datasets)
        if args.launcher is not None:
            from gnorm.train.arguments import check_launcher
            check_launcher(args.launcher)
        places = Places(spec, args)
        from gnorm.study import engine
        plan = engine.plan(spec, args, places)
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    if args.threads and not args.launcher:
        import torch
        torch.set_num_threads(args.threads)
    status = _run(plan, args)
    if not args.dry_run:  # interrupted too: the report of what finished
        try:
            path = plan.report()
        except GnormError as e:  # e.g. runs whose data does not load
            print(f'error: no report: {e}', file=sys.stderr)
            return 2
        print(f'report: {os.path.relpath(path)}', flush=True)
    return status


def _run(plan, args: argparse.Namespace) -> int:
    r"""Trains what :obj:`plan` misses (nothing with ``--report-only``);
    returns the exit status: 0, 1 when runs failed, 128 + the signal's
    number when interrupted (130 for Ctrl-C, 143 for SIGTERM), as the
    queue and ``python -m gnorm.train`` exit."""
    from gnorm.study.runs.runner import sigterm_interrupts
    try:
        with sigterm_interrupts():
            return 1 if not args.report_only and plan.run() else 0
    except KeyboardInterrupt as e:
        print('interrupted: finished runs are kept; run the same command '
              'again to go on', file=sys.stderr, flush=True)
        return getattr(e, 'exit_code', 130)
