r"""What depth does for each row of a depth study, as data: per (dataset,
row), the row's complete cells by depth, the depth its mean validation
score chooses, and that depth's test score against the row's shallowest
complete cell, seed by seed (seed k of both cells trains on split k), with
the test the design implies (:func:`gnorm.study.findings.compare.compare_cells`:
the corrected resampled t where the splits resample one pool). The
(dataset, row) pairs of the table are one family, adjusted as the study's
comparisons are (:func:`gnorm.study.findings.compare.adjust`); a pair without a
test counts as p = 1, so that cells added later can add verdicts and never
remove one. Choosing the depth by validation keeps the test score of the
chosen depth an honest estimate; a row whose best depth is its shallowest
has nothing to test. :mod:`gnorm.study.reports.depth` says it in words;
nothing here writes a sentence."""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.monitor.diagnosis import OVERFITS, TRAINS
from gnorm.study.findings.compare import (MISSING, Comparison, Pair, adjust,
                                          compare_cells)
from gnorm.study.findings.sanity import at_chance
from gnorm.study.stats import MARGIN, MIN_SEEDS

# Why a row's depths are not compared (Comparison.why, beside
# gnorm.study.findings.compare.REASONS): its best depth is its shallowest.
SHALLOWEST = 'best at its shallowest depth'


@dataclass
class DepthGain:
    r"""What depth does for one row on one dataset: the test means of its
    complete cells read here (:obj:`means`, (depth, mean) by depth), its
    shallowest of them and the one its mean validation score chooses
    (:obj:`best`; :obj:`None` without a complete cell), the comparison of
    the two (:obj:`found`: best − shallowest, adjusted in the family), the
    depths of those cells at chance, and the depths not read: complete but
    of uncommitted code (:obj:`uncommitted`), or not complete though meant
    to run here (:obj:`left`; the cells ``table.not_run`` leaves to
    another machine are not listed); the cells whose runs mostly fail
    (:obj:`failing`: (depth, the cell's diagnosis,
    :func:`gnorm.study.findings.diagnosis.cell_diagnosis`), :func:`fails`)."""
    dataset: str
    row: str
    means: Tuple[Tuple[int, float], ...]
    shallow: Optional[int]
    best: Optional[int]
    found: Comparison
    at_chance: Tuple[int, ...] = ()
    uncommitted: Tuple[int, ...] = ()
    left: Tuple[int, ...] = ()
    failing: Tuple[Tuple[int, Dict[str, Any]], ...] = ()


def _best(cells: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    r"""The cell of the highest mean validation score, the shallower on a
    tie."""
    return max(cells, key=lambda r: (r['val_mean'], -r['layers']))


def _gain(dataset: str, row: str, cells: List[Dict[str, Any]],
          pairing: str, level: float, margin: float,
          min_seeds: int = MIN_SEEDS) -> DepthGain:
    read = [r for r in cells if r['complete']
            and not r.get('modified_runs')]
    uncommitted = tuple(r['layers'] for r in cells
                        if r['complete'] and r.get('modified_runs'))
    left = tuple(r['layers'] for r in cells
                 if not r['complete'] and not r.get('not_run'))
    if not read:
        return DepthGain(dataset, row, (), None, None,
                         Comparison(None, MISSING), (), uncommitted, left)
    shallow, best = read[0], _best(read)
    found = (Comparison(None, SHALLOWEST) if best is shallow
             else compare_cells(best, shallow, pairing, level, margin,
                                min_seeds))
    return DepthGain(dataset, row,
                     tuple((r['layers'], r['test_mean']) for r in read),
                     shallow['layers'], best['layers'], found,
                     tuple(r['layers'] for r in read if at_chance(r)),
                     uncommitted, left,
                     tuple((r['layers'], r['diagnosis']) for r in read
                           if fails(r.get('diagnosis'))))


def fails(told: Optional[Dict[str, Any]]) -> bool:
    r"""Whether a cell's diagnosis (:func:`gnorm.study.findings.diagnosis.
    cell_diagnosis`) is a failure: a label other than trains or overfits,
    held by more than half of the cell's runs."""
    return bool(told) and told['label'] not in (TRAINS, OVERFITS) and \
        2 * told['count'] > told['runs']


def depth_gains(cells: List[Dict[str, Any]], pairing: str, level: float,
                correction: str = 'holm', margin: float = MARGIN,
                min_seeds: int = MIN_SEEDS) -> List[DepthGain]:
    r"""The :class:`DepthGain` of every (dataset, row) of :obj:`cells`
    (one record per cell, the setting chosen by validation), in the
    cells' order, adjusted together as one family."""
    by: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in cells:
        by.setdefault((r['dataset'], r['row']), []).append(r)
    gains = [_gain(dataset, row,
                   sorted(found, key=lambda r: r['layers']),
                   pairing, level, margin, min_seeds)
             for (dataset, row), found in by.items()]
    adjust(family(gains), level, correction)
    return gains


def family(gains: Sequence[DepthGain]) -> Dict[Pair, Comparison]:
    r"""The comparisons of :obj:`gains` as one family, keyed as a study's
    comparisons are: (dataset, row, ``shallowest``, best depth)."""
    return {(g.dataset, g.row, 'shallowest', g.best or 0): g.found
            for g in gains}
