r"""A depth study's comparisons as data: per (dataset, depth) with both
cells complete, the difference of the test scores with its interval and
the p of its test (:mod:`gnorm.study.stats`: paired by seed, the
corrected resampled t where the seeds resample the split, or Welch, as
``table.pairing`` says and the runs' splits show), the exact test's p,
the p adjusted over the family and the verdict it gives, of the kind the
rows' sanity flags make it (:func:`verdict_kind`); where two cells are
not compared, why (:data:`REASONS`). :mod:`gnorm.study.words.verdicts`
says these findings in words; nothing here writes a sentence.

The comparisons of a table are one **family** (:func:`family`): every
comparison the spec plans, a comparison without a test as p = 1
(:func:`planned_p`), adjusted together (``table.correction``: ``holm``,
the default, or ``none``).

One module: a comparison, its family, its section and the power of its
exact test are one computation over the same cells (the family's
adjustment reads every comparison's p, a section's detectable difference
reads the family's size); split, each part would import the others."""
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.findings.sanity import IMPROVING, at_chance
from gnorm.study.findings.select import scores_said
from gnorm.study.runs.pairing import split_mismatch
from gnorm.study.stats import (MARGIN, MIN_SEEDS, Interval, compare,
                               detectable, equivalence_p, exact_floor, exact_p,
                               family_verdict, holm, pair_test_train,
                               paired_interval, seeds_for_exact,
                               spread_verdict)

NOT_COMPARED = 'not compared'
NOT_RUN = 'not run'
SPLITS_DIFFER = 'splits differ'
# Why two cells are not compared (Comparison.why): a cell not run here
# (table.not_run), missing or partial, splits that differ, a score that is
# not a number, or no such cell.
MISSING, PARTIAL = 'missing', 'partial'
NOT_A_NUMBER, NO_CELL = 'not a number', 'no such cell'
FEW_SEEDS = 'too few seeds'
REASONS = (NOT_RUN, MISSING, PARTIAL, SPLITS_DIFFER, NOT_A_NUMBER, NO_CELL,
           FEW_SEEDS)
UNCOMMITTED = 'uncommitted code'
# The kinds of verdict (Comparison.verdict): the family's "beats" or "loses"
# says what was beaten, a row that learned or one at chance (flagged as
# predicting one class or no better than chance, :mod:`gnorm.study.
# sanity`); a difference the family does not hold is either equivalence
# within the study's margin (two one-sided tests, Holm over the family)
# or undecided.
BEATS, LOSES, SAME = 'beats', 'loses', 'not distinguishable'
EQUIVALENT, UNDECIDED = 'equivalent', 'undecided'
OVER_CHANCE = 'trains where the other is at chance'
UNDER_CHANCE = 'at chance where the other trains'
BOTH_AT_CHANCE = 'both at chance'
KINDS = (BEATS, OVER_CHANCE, LOSES, UNDER_CHANCE, EQUIVALENT, UNDECIDED,
         BOTH_AT_CHANCE)
# The verdicts that say one row is better (a difference held family-wise).
STRONG = (BEATS, OVER_CHANCE, LOSES, UNDER_CHANCE)


def verdict_kind(said: Optional[str], ours_at_chance: bool,
                 other_at_chance: bool, equivalent: bool = False
                 ) -> Optional[str]:
    r"""What a family verdict :obj:`said` (beats, loses, not
    distinguishable) is of two rows, one or both of which may be at
    chance: both at chance, whatever the p (:data:`BOTH_AT_CHANCE`);
    "beats" over a row at chance (:data:`OVER_CHANCE`: it trains where
    the other does not, not "it beats a baseline"); "loses" while at
    chance to a row that learned (:data:`UNDER_CHANCE`); not
    distinguishable: :data:`EQUIVALENT` where the equivalence test holds
    family-wise (:obj:`equivalent`), else :data:`UNDECIDED`; otherwise
    :obj:`said`."""
    if said is None:
        return None
    if ours_at_chance and other_at_chance:
        return BOTH_AT_CHANCE
    if said == BEATS and other_at_chance:
        return OVER_CHANCE
    if said == LOSES and ours_at_chance:
        return UNDER_CHANCE
    if said == SAME:
        return EQUIVALENT if equivalent else UNDECIDED
    return said
# (dataset, row, depth) of a cell; (dataset, row, other, depth) of a
# comparison.
Key = Tuple[str, str, int]
Pair = Tuple[str, str, str, int]


@dataclass
class Comparison:
    r"""One comparison of a family: its interval (:obj:`None` when the
    cells are not compared: :obj:`why` then says why, one of
    :data:`REASONS`, with :obj:`detail`), the p adjusted in the family,
    the verdict that p gives, and the plain paired t interval where the
    corrected resampled t replaced it; the p of the equivalence test
    within :math:`\pm` :obj:`margin` (:func:`gnorm.study.stats.
    equivalence_p`) and adjusted in the family; whether a compared cell
    rests on runs of uncommitted code (:obj:`modified`); why the rows at
    chance failed (:obj:`failing`: per such row, its name and its runs'
    diagnosis, :func:`gnorm.study.findings.diagnosis.cell_diagnosis`); the rows
    still improving when training stopped (:obj:`improving`,
    :data:`gnorm.study.findings.sanity.IMPROVING`)."""
    interval: Optional[Interval]
    why: str = ''
    detail: Dict[str, Any] = field(default_factory=dict)
    p_adj: Optional[float] = None
    verdict: Optional[str] = None
    naive: Optional[Interval] = None
    flags: str = ''
    chance: Tuple[bool, bool] = (False, False)
    exact_p: Optional[float] = None
    exact_p_adj: Optional[float] = None
    equivalence_p: Optional[float] = None
    equivalence_p_adj: Optional[float] = None
    margin: float = MARGIN
    modified: bool = False
    failing: Tuple[Tuple[str, Dict[str, Any]], ...] = ()
    improving: Tuple[str, ...] = ()


def chosen_by_validation(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell: the setting chosen by validation."""
    return [r for r in records if r['selection'] in ('', 'val')]


def at_default(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell of a row with a default setting: the row at
    it (``default``), or its only setting (a row without grid)."""
    return [r for r in records if r['selection'] in ('', 'default')]


def design_pairing(ours: Dict[str, Any], other: Dict[str, Any],
                   pairing: str) -> str:
    r"""How the runs of two cells pair, from their runs' splits whatever
    ``table.pairing`` says: seed by seed (``seed``) where either cell's
    runs train on different splits of one pool (their split fingerprints
    differ, :func:`gnorm.study.findings.select.split_test_train`), since seed
    :math:`k` of both then trains on split :math:`k` only if the
    fingerprints agree (checked next: else the cells are not compared),
    and the corrected resampled t is the test those splits imply;
    otherwise :obj:`pairing`."""
    resampled = (ours.get('test_train') is not None
                 or other.get('test_train') is not None)
    return 'seed' if resampled else pairing


def compare_cells(ours: Dict[str, Any], other: Dict[str, Any],
                  pairing: str, level: float, margin: float = MARGIN,
                  min_seeds: int = MIN_SEEDS) -> Comparison:
    r""":obj:`ours` against :obj:`other` (two records of one dataset and
    depth), before the family's adjustment, with the test the runs'
    splits imply (:func:`design_pairing`); no interval below
    :obj:`min_seeds` seeds per row (:data:`FEW_SEEDS`)."""
    for r in (ours, other):
        if r.get('not_run'):
            return Comparison(None, NOT_RUN, dict(row=r['row'],
                                             reason=r['not_run']))
        if not r['complete']:
            return Comparison(None, MISSING if r['cell_runs'] == 0 else PARTIAL,
                         {k: r[k] for k in ('row', 'settings_run',
                                            'settings', 'cell_runs',
                                            'cell_expected')})
    pairing = design_pairing(ours, other, pairing)
    mismatch = pairing == 'seed' and split_mismatch(
        ours.get('fingerprint_by_seed') or {},
        other.get('fingerprint_by_seed') or {})
    if mismatch:
        return Comparison(None, SPLITS_DIFFER, dict(mismatch=mismatch))
    ratio = (pair_test_train(ours.get('test_train'),
                             other.get('test_train'))
             if pairing == 'seed' else None)
    found = compare(other['test_by_seed'], ours['test_by_seed'], pairing,
                    level, ratio)
    if found.p is not None and math.isnan(found.p):
        return Comparison(None, NOT_A_NUMBER)
    if seeds_per_row(found) < min_seeds:
        return Comparison(None, FEW_SEEDS, dict(n=seeds_per_row(found),
                                                need=min_seeds,
                                                diff=found.diff))
    naive = (paired_interval(other['test_by_seed'], ours['test_by_seed'],
                             level) if ratio else None)
    flagged = [f"{r['row']} {', '.join(r['flags'])}" for r in (ours, other)
               if r.get('flags')]
    return Comparison(found, naive=naive, flags='; '.join(flagged),
                      chance=(at_chance(ours), at_chance(other)),
                      exact_p=exact_p(other['test_by_seed'],
                                      ours['test_by_seed'], found.method),
                      equivalence_p=equivalence_p(found, margin),
                      margin=margin,
                      modified=bool(ours.get('modified_runs')
                                    or other.get('modified_runs')),
                      failing=tuple((r['row'], r['diagnosis'])
                                    for r in (other, ours)
                                    if at_chance(r) and r.get('diagnosis')),
                      improving=tuple(r['row'] for r in (ours, other)
                                      if IMPROVING in r.get('flags', ())))


def family(records: List[Dict[str, Any]],
           compared: Sequence[Tuple[str, Sequence[str]]], pairing: str,
           level: float, correction: str = 'holm',
           margin: float = MARGIN, min_seeds: int = MIN_SEEDS
           ) -> Dict[Pair, Comparison]:
    r"""Every comparison of :obj:`compared` ((row, the rows it is compared
    with) pairs) at every (dataset, depth) of :obj:`records` (one record
    per cell: :func:`shown` or :func:`at_default`), with p-values adjusted
    together (:func:`gnorm.study.stats.holm` for ``holm``) and the
    verdicts they give."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in records}
    found: Dict[Pair, Comparison] = {}
    for (dataset, name, depth), ours in by.items():
        for row, against in compared:
            if name != row:
                continue
            for o in against:
                other = by.get((dataset, o, depth))
                found[dataset, row, o, depth] = (
                    compare_cells(ours, other, pairing, level, margin,
                                  min_seeds)
                    if other else Comparison(None, NO_CELL))
    adjust(found, level, correction)
    return found


# The tests of a comparison a family adjusts: the t test (its interval's),
# the exact test beside it, the equivalence test.
T, EXACT, EQUIVALENCE = 't', 'exact', 'equivalence'


def planned_p(f: Comparison, test: str = T) -> float:
    r"""A comparison's p as its family counts it: its :obj:`test`'s
    (:data:`T`, :data:`EXACT` or :data:`EQUIVALENCE`), or 1 for a
    comparison planned but without that test yet (not run, incomplete,
    splits that differ): it counts in the family and can reject nothing,
    so that adding cells can only add verdicts."""
    p = f.interval and {T: f.interval.p, EXACT: f.exact_p,
                        EQUIVALENCE: f.equivalence_p}[test]
    return 1.0 if p is None else p


def adjust(found: Dict[Pair, Comparison], level: float,
           correction: str = 'holm') -> None:
    r"""Sets the adjusted p (t, exact and equivalence tests, each over the
    family) and the verdict of each comparison of :obj:`found`, one
    family: every comparison planned, those without a test as p = 1
    (:func:`planned_p`). A difference the family does not hold is
    equivalence where the equivalence test's adjusted p is below
    :math:`1 - \mathrm{level}` (the same family-wise control as
    "beats"), else undecided."""
    keys = list(found)
    adjusted = {}
    for test in (T, EXACT, EQUIVALENCE):
        raw = [planned_p(found[k], test) for k in keys]
        adjusted[test] = holm(raw) if correction == 'holm' else raw
    for k, p, exact, equivalence in zip(keys, adjusted[T], adjusted[EXACT],
                                        adjusted[EQUIVALENCE]):
        f = found[k]
        if f.interval is None:
            continue
        f.exact_p_adj = exact if f.exact_p is not None else None
        f.equivalence_p_adj = (equivalence if f.equivalence_p is not None
                               else None)
        f.p_adj = p if f.interval.p is not None else None
        f.verdict = verdict_kind(
            family_verdict(f.interval.diff, f.p_adj, level), *f.chance,
            equivalent=(f.equivalence_p_adj is not None
                        and f.equivalence_p_adj < 1 - level))


def tested(found: Dict[Pair, Comparison]) -> int:
    r"""The comparisons of a family with a test."""
    return sum(f.p_adj is not None for f in found.values())


def planned(found: Dict[Pair, Comparison]) -> int:
    r"""The size of a family: every comparison planned, run or not."""
    return len(found)


def annotate(records: List[Dict[str, Any]], found: Dict[Pair, Comparison],
             view: str = '') -> List[str]:
    r"""Adds to each record of a compared row its comparisons with each
    other row at the same dataset and depth (``vs_<other>_<view>diff``,
    ``_lo``, ``_hi``, ``_n``, ``_method``, ``_p``, ``_p_adj``,
    ``_verdict``, the plain paired t's ``_naive_lo``, ``_naive_hi``
    where the corrected resampled t replaced it, the exact test's
    ``_exact_p`` and ``_exact_p_adj``, the equivalence test's
    ``_equivalence_p`` and ``_equivalence_p_adj``; empty where a cell is
    not compared); returns the names of the added columns."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in records}
    fields = ('diff', 'lo', 'hi', 'n', 'method', 'p', 'p_adj', 'verdict',
              'naive_lo', 'naive_hi', 'exact_p', 'exact_p_adj',
              'equivalence_p', 'equivalence_p_adj')
    columns: List[str] = []
    for (dataset, row, other, depth), f in found.items():
        names = [f'vs_{other}_{view}{k}' for k in fields]
        columns += [c for c in names if c not in columns]
        i, n = f.interval, f.naive
        by[dataset, row, depth].update(zip(names, (
            i and i.diff, i and i.lo, i and i.hi, i and i.n,
            i and i.method, i and i.p, f.p_adj, f.verdict,
            n and n.lo, n and n.hi, f.exact_p, f.exact_p_adj,
            f.equivalence_p, f.equivalence_p_adj)))
    return columns


def verdict_or_reason(found: Optional[Comparison]) -> str:
    r"""A comparison's verdict, or why it has none: :data:`NOT_RUN`,
    :data:`SPLITS_DIFFER` or :data:`NOT_COMPARED` (also for no
    comparison); :data:`UNCOMMITTED` for a verdict on runs of
    uncommitted code, which the words in a paragraph do not quote."""
    if found is None:
        return NOT_COMPARED
    if found.verdict and found.modified:
        return UNCOMMITTED
    return found.verdict or (found.why if found.why in (
        NOT_RUN, SPLITS_DIFFER, FEW_SEEDS) else NOT_COMPARED)


def by_other(found: Dict[Pair, Comparison], against: Sequence[str]
             ) -> Dict[str, Dict[str, list]]:
    r"""Per other row of :obj:`against`, the (dataset, depth) cells of
    each verdict or reason (:func:`verdict_or_reason`)."""
    verdicts: Dict[str, Dict[str, list]] = {o: {} for o in against}
    for (dataset, _, other, depth), f in found.items():
        verdicts[other].setdefault(verdict_or_reason(f), []).append(
            (dataset, depth))
    return verdicts


def old_rule_differs(found: Dict[Pair, Comparison], by: Dict[Key, Dict[str, Any]]
                     ) -> List[Tuple[Pair, str, str]]:
    r"""The comparisons where the rule of earlier reports
    (:func:`gnorm.study.stats.spread_verdict`) reads otherwise than the
    family's verdict: (comparison, the old rule's verdict, the
    family's)."""
    differ = []
    for (dataset, row, other, depth), f in found.items():
        if not f.verdict:
            continue
        old = spread_verdict(
            list(by[dataset, other, depth]['test_by_seed'].values()),
            list(by[dataset, row, depth]['test_by_seed'].values()))
        held = SAME if f.verdict in (EQUIVALENT, UNDECIDED) else f.verdict
        if old != held:  # the old rule knows no equivalence
            differ.append(((dataset, row, other, depth), old, f.verdict))
    return differ


def seeds_per_row(found: Interval) -> int:
    r"""The seeds of a comparison per row (the paired seeds, or the
    fewer of the two rows' for an unpaired one)."""
    if found.paired:
        return int(found.n)
    return min(int(n) for n in found.n.split('+'))


@dataclass
class ExactPower:
    r"""What the exact tests beside a family's t tests can say: the
    comparisons with an exact p (:obj:`tests`), the threshold a p must
    pass (Holm's first, :math:`\alpha / m`, or :math:`\alpha`), the
    tests' methods, their smallest possible p by (method, seeds per row)
    (:obj:`floors`), how many can pass the threshold at all
    (:obj:`reachable`), the differences the exact tests hold and those
    the t tests hold, and, where none can pass, the seeds an exact verdict
    needs (:obj:`need`, :obj:`None` above 64) for the method and seeds of
    the smallest floor (:obj:`least`)."""
    tests: int
    threshold: float
    planned: int
    methods: List[str]
    floors: Dict[Tuple[str, int], float]
    reachable: int
    held: int
    strong: int
    least: Optional[Tuple[str, int]] = None
    need: Optional[int] = None


def exact_power(found: Dict[Pair, Comparison], level: float,
                correction: str) -> Optional[ExactPower]:
    r""":class:`ExactPower` of the family :obj:`found`; :obj:`None`
    without an exact test."""
    tests = [f for f in found.values() if f.interval and f.exact_p is not None]
    if not tests:
        return None
    alpha = 1 - level
    threshold = alpha / planned(found) if correction == 'holm' else alpha
    floors = {(m, n): exact_floor(m, n) for m, n in
              {(f.interval.method, seeds_per_row(f.interval)) for f in tests}}
    reachable = sum(floors[f.interval.method, seeds_per_row(f.interval)]
                    < threshold for f in tests)
    power = ExactPower(
        len(tests), threshold, planned(found),
        sorted({f.interval.method for f in tests}), floors, reachable,
        held=sum(f.exact_p_adj is not None and f.exact_p_adj < alpha
                 for f in tests),
        strong=sum(f.verdict in STRONG for f in tests))
    if not reachable:
        power.least = min(floors, key=floors.get)
        power.need = seeds_for_exact(power.least[0], threshold)
    return power


@dataclass
class FamilySize:
    r"""A family's comparisons: :obj:`planned` (every one the spec plans),
    :obj:`tested` (those with a test) and the tests' methods."""
    planned: int
    tested: int
    methods: List[str]


def family_size(found: Dict[Pair, Comparison]) -> FamilySize:
    r"""The :class:`FamilySize` of the family :obj:`found`."""
    return FamilySize(planned(found), tested(found),
                      sorted({f.interval.method for f in found.values()
                              if f.interval}))


@dataclass
class Section:
    r"""What a report's comparison section says: :obj:`row` against the
    rows of :obj:`against` that have cells, in the :obj:`view` ``val``
    (each row's setting chosen by validation) or ``default`` (every row at
    its default), the family :obj:`found` and this row's comparisons in it
    (:obj:`mine`), what the exact tests can say (:obj:`power`), the
    comparisons the rule of earlier reports reads otherwise
    (:obj:`differ`, where asked), the name of the score (:obj:`score`),
    the family's size (:obj:`size`) and, per other row, the cells of each
    verdict or reason (:obj:`verdicts`, :func:`by_other`)."""
    row: str
    against: List[str]
    view: str
    found: Dict[Pair, Comparison]
    mine: Dict[Pair, Comparison]
    power: Optional[ExactPower]
    differ: Optional[List[Tuple[Pair, str, str]]]
    score: str
    size: FamilySize
    verdicts: Dict[str, Dict[str, list]]
    detect: Optional['Detectable'] = None
    margin: float = MARGIN


@dataclass(frozen=True)
class Detectable:
    r"""The smallest difference a section's design detects with 80 %
    power at the family's first threshold (:math:`\alpha / m` under Holm,
    :math:`\alpha` alone), given the spread of each comparison's paired
    differences (:func:`gnorm.study.stats.detectable`): the median over
    the section's tested comparisons, the least and the most, how many,
    the seeds of the median comparison and the tests' methods."""
    median: float
    least: float
    most: float
    comparisons: int
    seeds: int
    methods: Tuple[str, ...]


def detectable_of(found: Dict[Pair, Comparison], mine: Dict[Pair, Comparison],
                  level: float, correction: str) -> Optional[Detectable]:
    r"""The :class:`Detectable` difference of the comparisons :obj:`mine`
    in the family :obj:`found`; :obj:`None` without a tested one."""
    alpha = 1 - level
    if correction == 'holm':
        alpha /= planned(found)
    sizes = sorted(((d, f.interval) for f in mine.values() if f.interval
                    for d in [detectable(f.interval, alpha)]
                    if d is not None), key=lambda pair: pair[0])
    if not sizes:
        return None
    middle = sizes[(len(sizes) - 1) // 2]
    return Detectable(
        statistics.median(d for d, _ in sizes), sizes[0][0], sizes[-1][0],
        len(sizes), seeds_per_row(middle[1]),
        tuple(sorted({i.method for _, i in sizes})))


def section(records: List[Dict[str, Any]], row: str,
            against: Sequence[str], found: Dict[Pair, Comparison], level: float,
            correction: str = 'holm', view: str = 'val',
            spread_rule: bool = False,
            score: Optional[str] = None) -> Optional[Section]:
    r"""The :class:`Section` of :obj:`row` against :obj:`against` over the
    cells of :obj:`records` in :obj:`view`, from the family :obj:`found`
    (:func:`family`); :obj:`None` where :obj:`row` or all of
    :obj:`against` have no cell. With :obj:`spread_rule`, in the ``val``
    view, it holds :func:`old_rule_differs` too. :obj:`score`: the cells'
    score in words (default: :func:`gnorm.study.findings.select.scores_said`)."""
    cells = chosen_by_validation(records) if view == 'val' else at_default(records)
    by = {(r['dataset'], r['row'], r['layers']): r for r in cells}
    against = [o for o in against if any(k[1] == o for k in by)]
    if not against or not any(k[1] == row for k in by):
        return None
    mine = {k: f for k, f in found.items() if k[1] == row and k[2] in against}
    differ = (old_rule_differs(mine, by) if spread_rule and view == 'val'
              else None)
    return Section(row, against, view, found, mine,
                   exact_power(found, level, correction), differ,
                   score or scores_said(cells), family_size(found),
                   by_other(mine, against),
                   detectable_of(found, mine, level, correction),
                   next((f.margin for f in mine.values()), MARGIN))


@dataclass
class Views:
    r"""A depth table's comparisons in its two views (:func:`views`): the
    families (``val``: each row's setting chosen by validation;
    ``default``: every row at its default), the columns
    :func:`annotate` added to the cells, and the sections in the report's
    order as (role, whether it is the primary view, :class:`Section`);
    :obj:`cells`, one record per cell in each view."""
    cells: Dict[str, List[Dict[str, Any]]]
    found: Dict[str, Dict[Pair, Comparison]]
    columns: List[str]
    sections: List[Tuple[str, bool, Section]]


def views(records: List[Dict[str, Any]],
          compared: Sequence[Tuple[str, Sequence[str]]],
          budgets: Dict[str, int], primary: str, pairing: str, level: float,
          correction: str = 'holm', spread_rule: bool = False,
          score: Optional[str] = None, margin: float = MARGIN,
          min_seeds: int = MIN_SEEDS) -> Views:
    r"""The :class:`Views` of :obj:`records` (every record of a depth
    table) for :obj:`compared` ((row, the rows it is compared with)
    pairs). Each compared row gets its :obj:`primary` view (``val`` or
    ``default``) and, where the settings its comparison's rows try
    (:obj:`budgets`) differ, the other view too, labelled ``secondary``
    (its role is empty where the two views are one). It adds the
    comparison columns to :obj:`records` (``default_`` in the names of
    the budget-matched view's). :obj:`margin`: the study's margin of
    equivalence (``table.margin``), in points of its score."""
    cells = {'val': chosen_by_validation(records),
             'default': at_default(records)}
    found = {view: family(cells[view], compared, pairing, level, correction,
                          margin, min_seeds)
             for view in ('val', 'default')}
    columns = (annotate(cells['val'], found['val'])
               + annotate(cells['default'], found['default'], 'default_'))
    out = []
    for row, against in compared:
        both = len({budgets[r] for r in (row, *against)}) > 1
        for view in (primary, 'default' if primary == 'val' else 'val'):
            if view != primary and not both:
                continue
            role = ('' if not both else 'primary' if view == primary
                    else 'secondary')
            found_section = section(records, row, against, found[view],
                                    level, correction, view, spread_rule,
                                    score)
            if found_section is not None:
                out.append((role, view == primary, found_section))
    return Views(cells, found, columns, out)
