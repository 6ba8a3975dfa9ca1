r"""Does a row beat the others? A depth study's section, from
``table.compare`` (``rows``: the rows to read, ``against``: the rows they
are compared with): per (dataset, depth) with both cells complete, the
difference of the test accuracies with its confidence interval and the
p of its test (:mod:`gnorm.study.stats`: paired by seed, the corrected
resampled t where the seeds resample the split, or Welch, as
``table.pairing`` says and the runs' splits show).

The comparisons of a table are one **family** (:func:`family`): their
p-values are adjusted together (``table.correction``: ``holm``, the
default, or ``none``), and every verdict, in the table and in words, reads
the adjusted p. The family is read twice: with each row's setting chosen
by validation (tuned: a row with a larger grid had more tries), and with
every row at its default setting (budget-matched: one setting each).
Cells whose chosen runs learned nothing or were still improving
(:mod:`gnorm.study.sanity`) are named beside the verdicts."""
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.pairing import split_mismatch
from gnorm.study.sanity import AT_CHANCE, MEANING, meaning
from gnorm.study.select import scores_said
from gnorm.study.stats import (CORRECTED_T, PAIRED_T, WELCH, Interval,
                               compare, exact_floor, exact_p, family_verdict,
                               holm, pair_test_train, paired_interval,
                               seeds_for_exact, spread_verdict)

NOT_COMPARED = 'not compared'
NOT_RUN = 'not run'
SPLITS_DIFFER = 'splits differ'
# The kinds of verdict (Found.verdict): the family's "beats" or "loses"
# says what was beaten, a row that learned or one at chance (no better
# than the majority class, :mod:`gnorm.study.sanity`).
BEATS, LOSES, SAME = 'beats', 'loses', 'not distinguishable'
OVER_CHANCE = 'trains where the other is at chance'
UNDER_CHANCE = 'at chance where the other trains'
BOTH_AT_CHANCE = 'both at chance'
KINDS = (BEATS, OVER_CHANCE, LOSES, UNDER_CHANCE, SAME, BOTH_AT_CHANCE)
# The verdicts that say one row is better (a difference held family-wise).
STRONG = (BEATS, OVER_CHANCE, LOSES, UNDER_CHANCE)
# A verdict as the in-words paragraph says it of a row; {other}: the row
# it is compared with.
SAID = {BEATS: 'beats', LOSES: 'loses', SAME: 'is not distinguishable',
        OVER_CHANCE: 'trains where {other} collapsed (at chance)',
        UNDER_CHANCE: 'collapsed (at chance) where {other} trains',
        BOTH_AT_CHANCE: 'is at chance, as {other} is'}


def said_of(verdict: str, other: str, named: bool = False) -> str:
    r"""The words of :obj:`verdict` against :obj:`other`; with
    :obj:`named`, the other row is named even where the words do not
    (``beats layernorm``)."""
    words = SAID[verdict]
    if '{other}' in words:
        return words.format(other=other)
    return f'{words} {other}' if named else words


def verdict_kind(said: Optional[str], ours_at_chance: bool,
                 other_at_chance: bool) -> Optional[str]:
    r"""What a family verdict :obj:`said` (beats, loses, not
    distinguishable) is of two rows, one or both of which may be at
    chance: both at chance, whatever the p (:data:`BOTH_AT_CHANCE`);
    "beats" over a row at chance (:data:`OVER_CHANCE`: it trains where
    the other collapsed, not "it beats a baseline"); "loses" while at
    chance to a row that learned (:data:`UNDER_CHANCE`); otherwise
    :obj:`said`."""
    if said is None:
        return None
    if ours_at_chance and other_at_chance:
        return BOTH_AT_CHANCE
    if said == BEATS and other_at_chance:
        return OVER_CHANCE
    if said == LOSES and ours_at_chance:
        return UNDER_CHANCE
    return said
# (dataset, row, depth) of a cell; (dataset, row, other, depth) of a
# comparison.
Key = Tuple[str, str, int]
Pair = Tuple[str, str, str, int]


@dataclass
class Found:
    r"""One comparison of a family: its interval (:obj:`None` when the
    cells are not compared, :obj:`why` then says why), the p adjusted in
    the family, the verdict that p gives, and the plain paired t interval
    where the corrected resampled t replaced it."""
    interval: Optional[Interval]
    why: str = ''
    p_adj: Optional[float] = None
    verdict: Optional[str] = None
    naive: Optional[Interval] = None
    flags: str = ''
    chance: Tuple[bool, bool] = (False, False)
    exact_p: Optional[float] = None
    exact_p_adj: Optional[float] = None


def shown(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell: the setting chosen by validation."""
    return [r for r in records if r['selection'] in ('', 'val')]


def at_default(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell of a row with a default setting: the row at
    it (``default``), or its only setting (a row without grid)."""
    return [r for r in records if r['selection'] in ('', 'default')]


def partial(r: Dict[str, Any]) -> str:
    r"""``1 of 12 settings`` (or ``3 of 5 runs``) for a partial cell."""
    if r['settings_run'] < r['settings']:
        return f"{r['settings_run']} of {r['settings']} settings"
    return f"{r['cell_runs']} of {r['cell_expected']} runs"


def signed(x: float) -> str:
    return f'{x:+.2f}'.replace('-', '\u2212')


def p_text(p: float) -> str:
    r"""A p-value in four decimals, or ``<0.0001``."""
    return '<0.0001' if p < 0.0001 else f'{p:.4f}'


def interval_text(found: Interval) -> str:
    r"""``Δ +1.23 [−0.40, +2.86], n=5`` (paired: n seeds; unpaired:
    ``n=5+5``)."""
    if found.diff is None:
        return 'no runs'
    if found.lo is None:
        return f'Δ {signed(found.diff)}, n={found.n}, no interval'
    return (f'Δ {signed(found.diff)} [{signed(found.lo)}, '
            f'{signed(found.hi)}], n={found.n}')


def _pair(ours: Dict[str, Any], other: Dict[str, Any], pairing: str,
          level: float) -> Found:
    r""":obj:`ours` against :obj:`other` (two records of one dataset and
    depth), before the family's adjustment."""
    for r in (ours, other):
        if r.get('not_run'):
            return Found(None, f"{NOT_RUN} here: {r['row']}, {r['not_run']}")
        if not r['complete']:
            return Found(None, f"{NOT_COMPARED}: {r['row']} "
                         + ('missing' if r['cell_runs'] == 0 else
                            f'partial ({partial(r)})'))
    mismatch = pairing == 'seed' and split_mismatch(
        ours.get('fingerprint_by_seed') or {},
        other.get('fingerprint_by_seed') or {})
    if mismatch:
        return Found(None, f'{NOT_COMPARED}, {SPLITS_DIFFER}: {mismatch}')
    ratio = (pair_test_train(ours.get('test_train'),
                             other.get('test_train'))
             if pairing == 'seed' else None)
    found = compare(other['test_by_seed'], ours['test_by_seed'], pairing,
                    level, ratio)
    if found.p is not None and math.isnan(found.p):
        return Found(None, f'{NOT_COMPARED}: a score is not a number')
    naive = (paired_interval(other['test_by_seed'], ours['test_by_seed'],
                             level) if ratio else None)
    flagged = [f"{r['row']} {', '.join(r['flags'])}" for r in (ours, other)
               if r.get('flags')]
    return Found(found, naive=naive, flags='; '.join(flagged),
                 chance=(AT_CHANCE in ours.get('flags', ()),
                         AT_CHANCE in other.get('flags', ())),
                 exact_p=exact_p(other['test_by_seed'], ours['test_by_seed'],
                                 found.method))


def family(records: List[Dict[str, Any]],
           compared: Sequence[Tuple[str, Sequence[str]]], pairing: str,
           level: float, correction: str = 'holm') -> Dict[Pair, Found]:
    r"""Every comparison of :obj:`compared` ((row, the rows it is compared
    with) pairs) at every (dataset, depth) of :obj:`records` (one record
    per cell: :func:`shown` or :func:`at_default`), with p-values adjusted
    together (:func:`gnorm.study.stats.holm` for ``holm``) and the
    verdicts they give."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in records}
    found: Dict[Pair, Found] = {}
    for (dataset, name, depth), ours in by.items():
        for row, against in compared:
            if name != row:
                continue
            for o in against:
                other = by.get((dataset, o, depth))
                found[dataset, row, o, depth] = (
                    _pair(ours, other, pairing, level) if other
                    else Found(None, 'no such cell'))
    adjust(found, level, correction)
    return found


def planned_p(f: Found, exact: bool = False) -> float:
    r"""A comparison's p as its family counts it: its test's (or, with
    :obj:`exact`, its exact test's), or 1 for a comparison planned but
    without a test yet (not run, incomplete, splits that differ): it
    counts in the family and can reject nothing, so that adding cells
    can only add verdicts."""
    p = f.interval and (f.exact_p if exact else f.interval.p)
    return 1.0 if p is None else p


def adjust(found: Dict[Pair, Found], level: float,
           correction: str = 'holm') -> None:
    r"""Sets the adjusted p (t and exact tests) and the verdict of each
    comparison of :obj:`found`, one family: every comparison planned,
    those without a test as p = 1 (:func:`planned_p`)."""
    keys = list(found)
    for exact in (False, True):
        raw = [planned_p(found[k], exact) for k in keys]
        adjusted = holm(raw) if correction == 'holm' else raw
        for k, p in zip(keys, adjusted):
            f = found[k]
            if f.interval is None:
                continue
            if exact:
                f.exact_p_adj = p if f.exact_p is not None else None
                continue
            f.p_adj = p if f.interval.p is not None else None
            f.verdict = verdict_kind(
                family_verdict(f.interval.diff, f.p_adj, level), *f.chance)


def tested(found: Dict[Pair, Found]) -> int:
    r"""The comparisons of a family with a test."""
    return sum(f.p_adj is not None for f in found.values())


def planned(found: Dict[Pair, Found]) -> int:
    r"""The size of a family: every comparison planned, run or not."""
    return len(found)


def cell_text(f: Found, correction: str) -> str:
    r"""A comparison's cell of the table: the verdict (in bold when it
    holds family-wise), Δ, interval, p and adjusted p, flags."""
    if f.interval is None:
        return f.why
    said = f.verdict or NOT_COMPARED
    if said in STRONG:
        said = f'**{said}**'
    text = f'{said} ({interval_text(f.interval)}'
    if f.interval.p is not None:
        text += f', p={p_text(f.interval.p)}'
        if correction == 'holm':
            text += f', Holm {p_text(f.p_adj)}'
    text += ')'
    if said == SAME and _excludes_zero(f.interval):
        text += '; the interval, unadjusted, excludes 0 alone'
    return text + (f'; flagged: {f.flags}' if f.flags else '')


def _excludes_zero(found: Interval) -> bool:
    return found.lo is not None and (found.lo > 0 or found.hi < 0)


def annotate(records: List[Dict[str, Any]], found: Dict[Pair, Found],
             view: str = '') -> List[str]:
    r"""Adds to each record of a compared row its comparisons with each
    other row at the same dataset and depth (``vs_<other>_<view>diff``,
    ``_lo``, ``_hi``, ``_n``, ``_method``, ``_p``, ``_p_adj``,
    ``_verdict``, the plain paired t's ``_naive_lo``, ``_naive_hi``
    where the corrected resampled t replaced it, and the exact test's
    ``_exact_p`` and ``_exact_p_adj``; empty where a cell is not
    compared); returns the names of the added columns."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in records}
    fields = ('diff', 'lo', 'hi', 'n', 'method', 'p', 'p_adj', 'verdict',
              'naive_lo', 'naive_hi', 'exact_p', 'exact_p_adj')
    columns: List[str] = []
    for (dataset, row, other, depth), f in found.items():
        names = [f'vs_{other}_{view}{k}' for k in fields]
        columns += [c for c in names if c not in columns]
        i, n = f.interval, f.naive
        by[dataset, row, depth].update(zip(names, (
            i and i.diff, i and i.lo, i and i.hi, i and i.n,
            i and i.method, i and i.p, f.p_adj, f.verdict,
            n and n.lo, n and n.hi, f.exact_p, f.exact_p_adj)))
    return columns


METHODS = {
    PAIRED_T: 'the paired t interval of the per-seed differences (seed k '
              'of every row trains and tests on the same fixed split)',
    CORRECTED_T: 'paired by seed over splits resampled from one pool of '
                 'nodes, whose training sets overlap: the corrected '
                 'resampled t interval of the per-seed differences '
                 '(Nadeau & Bengio 2003: the variance of the mean '
                 '(1/k + n_test/n_train) s², not s²/k; the plain paired t '
                 'interval is in the CSV)',
    WELCH: "unpaired: the split is fixed and seeds draw only the "
           "initialisation, Welch's interval (n = the seeds of each row)",
}


def rule_text(row: str, found: Dict[Pair, Found], level: float,
              correction: str, said: str = 'accuracy') -> str:
    r"""The section's rule in words: the test, the family and its
    correction, the kinds of verdict, for cells scored by :obj:`said`."""
    methods = sorted({f.interval.method for f in found.values()
                      if f.interval}) or [PAIRED_T]
    size, run = planned(found), tested(found)
    how = ('Holm-adjusted p (Holm\'s step-down over the family: the '
           f'chance of any false "beats" or "loses" among its '
           f'{size} comparisons is at most {1 - level:.0%})'
           if correction == 'holm' else
           'unadjusted p (`table.correction: none`: each comparison read '
           'alone; among many, some will pass by chance)')
    return (f'Rule: {row} beats a row at a (dataset, depth) when the '
            f'{how} of Δ = {row} − that row (test {said}, %) is below '
            f'{1 - level:.2f} and Δ > 0, loses when it is below and '
            f'Δ < 0, and is otherwise not distinguishable from it with '
            f'these seeds. Where a row is at chance (no better than '
            f'predicting the majority class), the verdict says so: '
            f'"{OVER_CHANCE}" (a difference over a row that learned '
            f'nothing, not a win over a baseline), "{UNDER_CHANCE}", '
            f'"{BOTH_AT_CHANCE}". Interval ({level:.0%}, each comparison '
            f'alone, unadjusted) and p: '
            + '; '.join(METHODS[m] for m in methods) + '. '
            f'The family, fixed in advance: the {size} comparisons the '
            f'spec plans, of which {run} have run; a comparison not run '
            f'yet counts as p = 1, so that cells added later can add '
            f'verdicts and never remove one. Bold: a verdict that holds '
            f'family-wise. Only complete cells (every setting with every '
            f'seed) are compared.')


VIEWS = {'val': 'setting chosen by validation',
         'default': "every row at its default setting (one setting each: "
                    "equal tuning budgets)"}


def comparison(records: List[Dict[str, Any]], row: str,
               against: Sequence[str], pairing: str, level: float,
               spread_rule: bool = False, correction: str = 'holm',
               found: Optional[Dict[Pair, Found]] = None,
               view: str = 'val', role: str = '') -> List[str]:
    r"""The section saying, per dataset and depth, whether :obj:`row`
    beats each of :obj:`against`, each row with its setting chosen by
    validation (:obj:`view` ``val``) or at its default (``default``);
    :obj:`found`: the family (by default this section's comparisons
    alone); :obj:`role`: ``primary`` or ``secondary`` where the report
    reads both views (``table.primary`` says which decides). Then
    :func:`in_words`, the counts of each kind of verdict, what the exact
    tests can say, the flagged cells and, with :obj:`spread_rule`, where
    the rule of earlier reports reads a cell otherwise. No lines without
    those rows."""
    cells = shown(records) if view == 'val' else at_default(records)
    by = {(r['dataset'], r['row'], r['layers']): r for r in cells}
    against = [o for o in against if any(k[1] == o for k in by)]
    if not against or not any(k[1] == row for k in by):
        return []
    if found is None:
        found = family(cells, [(row, against)], pairing, level, correction)
    mine = {k: f for k, f in found.items() if k[1] == row and k[2] in against}
    others = " and ".join(against)
    heading = (f'## Does {row} beat {others}?' if role != 'secondary' else
               f'### {row} against {others}, {HEADINGS[view]} (secondary '
               f'view)')
    lines = [heading, '', f'Each row: {VIEWS[view]}. ' + ROLES.get(role, '')
             + rule_text(row, found, level, correction,
                         scores_said(cells)), '']
    lines += verdict_table(mine, against, correction)
    lead = 'Secondary view, in words' if role == 'secondary' else 'In words'
    lines += ['', in_words(row, _verdicts(mine, against),
                           family_words(found, correction), lead),
              '', kind_counts(mine)]
    exact = exact_words(found, level, correction)
    if exact:
        lines += ['', exact]
    flagged = flagged_text(mine, scores_said(cells))
    if flagged:
        lines += ['', flagged]
    if spread_rule and view == 'val':
        lines += ['', disagreements(_differ(mine, by))]
    return lines


HEADINGS = {'val': 'each row tuned by validation',
            'default': 'at equal budgets'}
ROLES = {'primary': 'This is the primary view (`table.primary`): its '
                    'verdicts are the study\'s. ',
         'secondary': 'A secondary view, shown for the record: its '
                      'verdicts are not the study\'s (the primary view, '
                      'above, decides). '}


def family_words(found: Dict[Pair, Found], correction: str) -> str:
    r"""How a family's verdicts were read, in words: ``Holm-adjusted over
    a family of 48 planned, 32 run``."""
    if correction != 'holm':
        return 'each comparison alone'
    size, run = planned(found), tested(found)
    return (f'Holm-adjusted over a family of {size}'
            + (f' planned, {run} run' if run < size else ''))


def kind_counts(found: Dict[Pair, Found]) -> str:
    r"""How many verdicts of each kind :obj:`found` holds, in words:
    ``Verdicts: 3 beats, 7 trains where the other is at chance, 30 not
    distinguishable; 16 not compared``."""
    counts = {k: sum(f.verdict == k for f in found.values()) for k in KINDS}
    none = sum(f.verdict is None for f in found.values())
    said = ', '.join(f'{n} {k}' for k, n in counts.items() if n)
    return (f"Verdicts: {said or 'none yet'}"
            + (f'; {none} not compared' if none else '') + '.')


def exact_words(found: Dict[Pair, Found], level: float,
                correction: str) -> str:
    r"""What the exact tests beside the t tests say of the family
    :obj:`found`: whether they can reach Holm's first threshold
    (:math:`\alpha / m`) with these seeds at all, and how many verdicts
    they give; where they cannot, the verdicts rest on the t test's
    normality assumption and the words say how many seeds an exact
    verdict needs."""
    tests = [f for f in found.values() if f.interval and f.exact_p is not None]
    if not tests:
        return ''
    alpha = 1 - level
    threshold = alpha / planned(found) if correction == 'holm' else alpha
    methods = sorted({f.interval.method for f in tests})
    exact = ' and '.join('the sign-flip test of the per-seed differences'
                         if m != WELCH else 'the permutation test of the '
                         'two rows\' seeds' for m in methods)
    floors = {(m, n): exact_floor(m, n) for m, n in
              {(f.interval.method, _seeds(f.interval)) for f in tests}}
    reachable = [f for f in tests
                 if floors[f.interval.method, _seeds(f.interval)] < threshold]
    held = sum(f.exact_p_adj is not None and f.exact_p_adj < alpha
               for f in tests)
    strong = sum(f.verdict in STRONG for f in tests)
    head = (f'Exact tests: beside each t test, {exact} (no normality '
            f'assumed; CSV: `exact_p`, `exact_p_adj`). ')
    where = ('Holm\'s first threshold' if correction == 'holm'
             else 'the threshold')
    if not reachable:
        (method, n), floor = min(floors.items(), key=lambda kv: kv[1])
        need = seeds_for_exact(method, threshold)
        return (head + f'With {_seeds_text(method, n)} it cannot give a p '
                f'below {floor:.4g}, above {where} {threshold:.4g} '
                f'(α = {alpha:.2f} over {planned(found)}): every verdict '
                f'here rests on the t test\'s assumption that the '
                f'differences are normal. An exact verdict would need '
                + (f'{_seeds_text(method, need)}.' if need else
                   'more seeds than 64.'))
    read = ('Holm-adjusted the same way' if correction == 'holm'
            else 'each read alone')
    return (head + f'{len(reachable)} of the {len(tests)} tested '
            f'comparisons can reach {where} {threshold:.4g}; the exact '
            f'tests, {read}, hold {held} difference'
            f"{'s' if held != 1 else ''} where the t tests hold {strong}.")


def _seeds(found: Interval) -> int:
    r"""The seeds of a comparison per row (the paired seeds, or the
    fewer of the two rows' for an unpaired one)."""
    if found.paired:
        return int(found.n)
    return min(int(n) for n in found.n.split('+'))


def _seeds_text(method: str, n: int) -> str:
    return (f'{n} seeds per row' if method == WELCH
            else f'{n} paired seeds')


def verdict_table(found: Dict[Pair, Found], against: Sequence[str],
                  correction: str) -> List[str]:
    r"""A line per (dataset, depth), a column per compared row."""
    lines = ['| dataset | layers | ' + ' | '.join(
        f'vs {o}' for o in against) + ' |', '|---|---|' + '---|' * len(
        against)]
    row = next(iter(found))[1]
    for dataset, depth in dict.fromkeys((k[0], k[3]) for k in found):
        texts = [cell_text(found[dataset, row, o, depth], correction)
                 if (dataset, row, o, depth) in found else 'no such cell'
                 for o in against]
        lines.append(f'| {dataset} | {depth} | ' + ' | '.join(texts) + ' |')
    return lines



def said(found: Optional[Found]) -> str:
    r"""A comparison's verdict, or why it has none: :data:`NOT_RUN`,
    :data:`SPLITS_DIFFER` or :data:`NOT_COMPARED` (also for no
    comparison)."""
    if found is None:
        return NOT_COMPARED
    return found.verdict or (NOT_RUN if found.why.startswith(NOT_RUN) else
                             SPLITS_DIFFER if SPLITS_DIFFER in found.why
                             else NOT_COMPARED)


def _verdicts(found: Dict[Pair, Found], against: Sequence[str]
              ) -> Dict[str, Dict[str, list]]:
    verdicts: Dict[str, Dict[str, list]] = {o: {} for o in against}
    for (dataset, _, other, depth), f in found.items():
        verdicts[other].setdefault(said(f), []).append((dataset, depth))
    return verdicts


def _differ(found: Dict[Pair, Found], by: Dict[Key, Dict[str, Any]]
            ) -> List[str]:
    r"""The cells where the rule of earlier reports reads otherwise than
    the family's verdict."""
    differ = []
    for (dataset, row, other, depth), f in found.items():
        if not f.verdict:
            continue
        old = spread_verdict(
            list(by[dataset, other, depth]['test_by_seed'].values()),
            list(by[dataset, row, depth]['test_by_seed'].values()))
        if old != f.verdict:
            differ.append(f'{dataset} L={depth} vs {other}: {_old(old)}, '
                          f'the verdict: {f.verdict}')
    return differ


def flagged_text(found: Dict[Pair, Found], said: str = 'accuracy') -> str:
    r"""The compared cells whose runs are flagged (sanity), in words, for
    cells scored by :obj:`said`; empty without any."""
    named = {}
    for (dataset, _, _, depth), f in found.items():
        if f.flags:
            named.setdefault(f.flags, []).append((dataset, depth))
    if not named:
        return ''
    meanings = sorted({m for flags in named for m in MEANING
                       if m in flags})
    return ('Flagged, at chance or undertrained (a verdict against such a '
            'row says little about the norms): ' + '; '.join(f'{flags} at {cells_text(cells)}'
                                   for flags, cells in named.items())
            + '. ' + ' '.join(f'"{m}": {meaning(m, said)}.'
                              for m in meanings))


def _old(verdict: str) -> str:
    return 'within the spread' if verdict == 'not distinguishable' \
        else verdict


def disagreements(differ: List[str]) -> str:
    r"""Where the rule of earlier reports (beats or loses when Δ exceeds
    the larger of the two stds, ddof=0) reads a compared cell otherwise
    than the family's verdict."""
    rule = ('The rule of earlier reports (beats or loses when |Δ| exceeds '
            'the larger of the two seeds\' stds, else within the spread)')
    if not differ:
        return f'{rule} reads every compared cell as the verdict does.'
    return (f'{rule} reads {len(differ)} compared '
            f"cell{'s' if len(differ) > 1 else ''} otherwise: "
            + '; '.join(differ) + '.')


def cells_text(cells: Sequence[Tuple[str, int]]) -> str:
    r"""``cora L=2/4/32, citeseer L=8``: (dataset, depth) cells, the
    depths of a dataset together, in the order given."""
    by: Dict[str, List[str]] = {}
    for dataset, depth in cells:
        by.setdefault(dataset, []).append(str(depth))
    return ', '.join(f"{d} L={'/'.join(depths)}" for d, depths in by.items())


def in_words(row: str, verdicts: Dict[str, Dict[str, list]],
             how: str = '', lead: str = 'In words') -> str:
    r"""The comparison's table in one paragraph (the README quotes it):
    per other row, the cells where :obj:`row` beats it, loses, or is not
    distinguishable from it, and which cells are not compared yet, not
    compared because their splits differ, or not run here
    (``table.not_run``); :obj:`how`: how the verdicts were read (e.g.
    ``Holm-adjusted over a family of 32``)."""
    parts = []
    for other, found in verdicts.items():
        said = [f"{said_of(verdict, other)} at {cells_text(found[verdict])}"
                for verdict in KINDS if found.get(verdict)]
        left = [f"{why}: {cells_text(found[key])}"
                for key, why in ((NOT_COMPARED, 'not compared yet, '
                                  'incomplete'),
                                 (SPLITS_DIFFER, 'not compared, the '
                                  'splits differ'),
                                 (NOT_RUN, 'not run here'))
                if found.get(key)]
        parts.append(f"against {other}, {row} "
                     + ('; '.join(said) if said else 'has no complete cell')
                     + (f" ({'; '.join(left)})" if left else ''))
    return f"{lead}{f' ({how})' if how else ''}: " + '. '.join(
        p[0].upper() + p[1:] if i else p for i, p in enumerate(parts)) + '.'
