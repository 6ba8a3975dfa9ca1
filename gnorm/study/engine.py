r"""A study's plan: what it runs and what its report counts, for both
kinds (:class:`DepthPlan`, :class:`PairedPlan`). ``run()`` trains what is
missing (:mod:`gnorm.study.runs.runner`) and returns the number of failures;
``report()`` writes the report from the runs on disk and returns its
``.md``."""
import argparse
import os
import shlex
from pathlib import Path
from typing import Any, Dict, List, Sequence

from gnorm.results import load_runs
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import SpecError, Spec, config_sets
from gnorm.train.common import one_line


def _found(runs_dir: Path) -> List[Dict[str, Any]]:
    return load_runs(runs_dir) if runs_dir.is_dir() else []


class DepthPlan:
    r"""The cells of a depth study: those selected (to run) and those the
    report covers (the whole study for its own report)."""

    def __init__(self, spec: Spec, args: argparse.Namespace, places):
        from gnorm.study.runs.compose import cells, compose_cells
        table = spec.table
        self.spec, self.args, self.places = spec, args, places

        def pick(key, given):
            return given or list(table[key])
        self.todo = cells(spec, pick('datasets', args.datasets),
                          pick('rows', args.rows), pick('depths', args.depths),
                          pick('seeds', args.seeds))
        self.cells = self.todo if not places.whole else cells(
            spec, table['datasets'], list(table['rows']), table['depths'],
            table['seeds'])
        try:
            self.composer = compose_cells(
                spec, self.cells + ([] if self.cells is self.todo
                                    else self.todo), args.set, places.runs)
        except Exception as e:  # e.g. a bad --set value
            raise SpecError(f"cannot compose the study's runs: "
                            f"{one_line(e)}") from e
        self.found = self._index()

    def _index(self) -> Dict[str, Any]:
        r"""The finished runs by key: for ``--dry-run`` as short records
        (:mod:`gnorm.study.runs.index`), else whole (the report reads
        them)."""
        if self.args.dry_run:
            from gnorm.study.runs.index import finished, short_runs
            runs = self.places.runs
            return finished(short_runs(runs) if runs.is_dir() else [])
        from gnorm.study.runs.compose import index
        return index(_found(self.places.runs))

    def run(self) -> int:
        from gnorm.study.runs.runner import run_cells
        args = self.args
        try:
            return run_cells(self.spec, self.todo, self.places.runs,
                             args.set, self.found, self.composer,
                             args.threads, args.dry_run, args.launcher,
                             self.rate() if args.dry_run else None)
        finally:  # interrupted too: a launcher's runs are on disk now
            if args.launcher and not args.dry_run:
                self.found = self._index()

    def rate(self):
        r"""The seconds per unit of this device (``--dry-run`` says each
        cell's seconds): :func:`gnorm.study.runs.cost.rate_here`."""
        import torch
        from gnorm.study.queue.config import CONFIG, read_config
        from gnorm.study.runs.cost import rate_here
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
        return rate_here(device, read_config(CONFIG)['calibration'])

    def report(self) -> Path:
        from gnorm.study.reports.depth import write_report
        from gnorm.study.spec.inputs import (read_authors, read_notes,
                                             read_paper, with_authors_runs)
        from gnorm.study.runs.budget import defaults as budget_defaults
        from gnorm.study.findings.select import summarise
        spec, table = self.spec, self.spec.table
        paper = read_paper(spec.file('paper')) if table.get('paper') else {}
        authors = read_authors(spec.file('authors'))
        flag = table.get('flag') or {}
        notes = with_authors_runs(read_notes(spec.file('notes')), authors,
                                  paper, flag.get('paper_stds', 2.0))
        defaults = budget_defaults(spec)
        records = summarise(self.cells, self.found, paper, flag, notes,
                            authors, table.get('authors_compared'),
                            defaults)
        counted = [self.found[r['key']] for c in self.cells
                   for r in c['runs'] if r['key'] in self.found]
        sets = config_sets(self.args.set)
        command = report_command(spec, sets, self.places.runs,
                                 self.places.default_runs)
        return write_report(spec, records, counted, sets, self.places.runs,
                            self.places.out, command,
                            authors if table.get('paper_lines') else None,
                            defaults)


class PairedPlan:
    r"""The (row, seed) runs of a paired study; its report covers every
    row, whatever a selection ran."""

    def __init__(self, spec: Spec, args: argparse.Namespace, places):
        self.spec, self.args, self.places = spec, args, places
        try:
            self.cfg = compose([*spec.overrides(), *args.set])
        except Exception as e:
            raise SpecError(f"cannot compose the study's runs: "
                            f"{one_line(e)}") from e

    def run(self) -> int:
        from gnorm.study.runs.runner import run_paired
        args = self.args
        return run_paired(self.spec, args.rows or list(self.spec.table['rows']),
                          args.seeds, self.places.runs, args.set,
                          args.threads, args.dry_run)

    def report(self) -> Path:
        from gnorm.study.reports.paired import write_report
        from gnorm.study.runs.pairing import study_runs
        spec = self.spec
        runs = study_runs(spec, _found(self.places.runs), self.args.set)
        sets = config_sets(self.args.set)
        command = report_command(spec, sets, self.places.runs,
                                 self.places.default_runs)
        return write_report(spec, self.cfg, runs, self.places.runs,
                            self.places.out, sets, command)


def report_command(spec: Spec, sets: Sequence[str], runs_dir: Path,
                   default_runs: Path) -> str:
    r"""The command that rewrites this report."""
    args = [spec.experiment if spec.own else spec.source.name,
            '--report-only']
    if sets:
        args += ['--set', *sets]
    if runs_dir != default_runs:
        args += ['--runs', os.path.relpath(runs_dir, spec.home())]
    return 'python -m gnorm.study ' + shlex.join(args)


def plan(spec: Spec, args: argparse.Namespace, places):
    r"""The plan of :obj:`spec`'s kind."""
    return (DepthPlan if spec.kind == 'depth' else PairedPlan)(
        spec, args, places)
