r"""What a depth study's report says, computed in one pass before any word
is written: the cells (chosen by validation, and at each row's default),
the comparisons of ``table.compare`` as families and sections, the cells
against the paper, the counts of complete cells, each row's settings,
what depth does for each row (:mod:`gnorm.study.findings.depth_gain`),
the family its gains make, and what the spec says about itself (the
recipe it inherits included). :mod:`gnorm.study.reports.depth` renders it
(Markdown, CSV, plots); nothing here writes a sentence."""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.findings.compare import (UNCOMMITTED, FamilySize, Section,
                                          family_size, views)
from gnorm.study.findings.depth_gain import DepthGain, depth_gains, family
from gnorm.study.findings.select import REPRODUCED, reproduced, scores_said
from gnorm.study.spec.find import inherited_recipe
from gnorm.study.spec.table import REPO, Spec, budget, grid, set_name


@dataclass(frozen=True)
class RowSettings:
    r"""A row of the table: its overrides, its grid (key → values; empty
    for one setting), how many settings it tries per cell and its default
    setting (``s=1``), where it has one."""
    row: str
    overrides: List[str]
    grid: Dict[str, list]
    budget: int
    default: Optional[str]


@dataclass(frozen=True)
class Counts:
    r"""How far the grid is: cells (one per row, dataset and depth) complete,
    partial, missing and left to another machine (``table.not_run``); runs
    and settings done of the grid's."""
    cells: int
    complete: int
    missing: int
    not_run: int
    runs: int
    runs_expected: int
    settings_run: int
    settings: int


@dataclass(frozen=True)
class Reproduction:
    r"""The cells with a paper value by :func:`gnorm.study.findings.select.reproduced`
    under :obj:`rule`: ``True`` reproduced, ``False`` not, ``None`` not
    complete yet, :data:`~gnorm.study.findings.compare.UNCOMMITTED` complete but
    resting on runs of uncommitted code (not quoted)."""
    rule: Dict[str, float]
    cells: Dict[Any, List[Dict[str, Any]]]


@dataclass
class DepthFindings:
    r"""A depth report's content as data (:func:`depth_findings`)."""
    name: str
    source: str                       # the spec file as the report names it
    runs: str                         # the runs folder, from the spec's home
    whole: bool                       # the records cover the whole table
    records: List[Dict[str, Any]]     # every record, comparison columns added
    cells: List[Dict[str, Any]]       # one per cell: chosen by validation
    columns: List[str]                # the comparison columns of the CSV
    sections: List[Tuple[str, bool, Section]]  # (role, primary, section)
    rows: List[RowSettings]
    equal_budget: Optional[int]       # settings of every compared row, equal
    reproduction: Optional[Reproduction]
    counts: Counts
    score: str                        # the cells' score, e.g. ``accuracy``
    scores: Dict[str, str]            # each dataset's score in words
    level: float
    correction: str
    gains: List[DepthGain]            # what depth does, per (dataset, row);
                                      # none for a table of one depth
    gain_size: Optional[FamilySize]   # the gains as one family, its size
    recipe: Optional[Tuple[str, Any]]  # the experiment the spec inherits
                                       # and its epochs


def not_run(spec: Spec, records: List[Dict[str, Any]]) -> None:
    r"""Sets ``not_run`` of each record without runs whose cell
    ``table.not_run`` names (a list of ``datasets``, ``rows``, ``depths``,
    each optional, and ``why``): the reason, e.g. GPU work."""
    for r in records:
        if r['cell_runs']:
            continue
        for entry in spec.table.get('not_run') or []:
            if all(r[field] in entry[key]
                   for key, field in (('datasets', 'dataset'),
                                      ('rows', 'row'), ('depths', 'layers'))
                   if key in entry):
                r['not_run'] = entry['why']
                break


def compared(spec: Spec) -> List[tuple]:
    r"""(row, the rows it is compared with) of ``table.compare``."""
    compare = spec.table.get('compare') or {}
    return [(row, [o for o in compare.get('against', []) if o != row])
            for row in compare.get('rows', [])]


def primary(spec: Spec) -> str:
    r"""The view whose verdicts are the study's (``table.primary``):
    ``val`` (each row tuned by validation, the default) or ``default``
    (every row at its default setting: equal budgets)."""
    return 'default' if spec.table.get('primary') == 'budget' else 'val'


def counts(cells: List[Dict[str, Any]]) -> Counts:
    r"""The :class:`Counts` of :obj:`cells` (one record per cell)."""
    return Counts(len(cells), sum(r['complete'] for r in cells),
                  sum(r['cell_runs'] == 0 for r in cells),
                  sum(bool(r.get('not_run')) for r in cells),
                  sum(r['cell_runs'] for r in cells),
                  sum(r['cell_expected'] for r in cells),
                  sum(r['settings_run'] for r in cells),
                  sum(r['settings'] for r in cells))


def _whole(spec: Spec, records: List[Dict[str, Any]]) -> bool:
    table = spec.table
    return ({(r['dataset'], r['row'], r['layers']) for r in records}
            == {(d, row, depth) for d in table['datasets']
                for row in table['rows'] for depth in table['depths']})


def _rows(spec: Spec, defaults: Dict[str, str]) -> List[RowSettings]:
    return [RowSettings(row, list(overrides), grid(spec, row),
                        budget(spec, row), defaults.get(row))
            for row, overrides in spec.table['rows'].items()]


def _equal_budget(budgets: Dict[str, int],
                  pairs: List[tuple]) -> Optional[int]:
    r"""The settings each compared row tries (:obj:`budgets`, row ->
    settings), where that is one number for every row of every comparison;
    :obj:`None` otherwise or without comparisons."""
    found = {budgets[r] for row, against in pairs for r in (row, *against)}
    return found.pop() if len(found) == 1 else None


def _reproduction(spec: Spec, cells: List[Dict[str, Any]]
                  ) -> Optional[Reproduction]:
    rule = spec.table.get('reproduced')
    if not rule:
        return None
    rule = {**REPRODUCED, **(rule if isinstance(rule, dict) else {})}
    by: Dict[Any, List[Dict[str, Any]]] = {True: [], False: [], None: [],
                                           UNCOMMITTED: []}
    for r in cells:
        if r['paper_mean'] is not None:
            said = reproduced(r, rule)
            by[UNCOMMITTED if said is not None and r.get('modified_runs')
               else said].append(r)
    return Reproduction(rule, by)


def depth_findings(spec: Spec, records: List[Dict[str, Any]],
                   sets: Sequence[str], runs_dir: Path,
                   defaults: Optional[Dict[str, str]] = None
                   ) -> DepthFindings:
    r"""Everything the report of :obj:`records` (the study's summarised
    cells, :func:`gnorm.study.findings.select.summarise`) says, as data. It marks
    the cells ``table.not_run`` names and adds the comparison columns to
    :obj:`records` (:func:`gnorm.study.findings.compare.views`: tuned, and
    budget-matched with ``default_`` in the names)."""
    # the spec, read once
    name, level = set_name(spec.name, sets), spec.level
    correction = spec.correction
    pairing, first, pairs = spec.pairing, primary(spec), compared(spec)
    rows = _rows(spec, defaults or {})
    source = (os.path.relpath(spec.source, REPO) if spec.own
              else spec.source.name)
    runs = os.path.relpath(runs_dir, spec.home())
    recipe = inherited_recipe(spec.source)
    # the cells and their comparisons
    not_run(spec, records)
    score = scores_said(records)
    budgets = {r.row: r.budget for r in rows}
    margin, need = spec.margin, spec.min_seeds
    found = views(records, pairs, budgets, first,
                  pairing, level, correction,
                  bool(spec.table.get('spread_rule')), score, margin, need)
    cells = found.cells['val']
    # their scores and the paper
    scores = {d: scores_said([r for r in cells if r['dataset'] == d])
              for d in dict.fromkeys(r['dataset'] for r in cells)}
    # what depth does
    gains = (depth_gains(cells, pairing, level, correction, margin, need)
             if len(spec.table['depths']) > 1 else [])
    return DepthFindings(
        name, source, runs, _whole(spec, records), records, cells,
        found.columns, found.sections, rows, _equal_budget(budgets, pairs),
        _reproduction(spec, cells), counts(cells), score, scores, level,
        correction, gains, family_size(family(gains)) if gains else None,
        recipe)
