r"""A depth study's comparisons (:mod:`gnorm.study.findings.compare`) in words:
does a row beat the others? Per (dataset, depth), the verdict with its
difference, interval and p (:func:`cell_text`), the section's rule, the
table, the paragraph the README quotes (:func:`in_words`), the counts of
each kind of verdict, what the exact tests can say and the flagged
cells. The family is read twice: with each row's setting chosen by
validation (tuned: a row with a larger grid had more tries), and with
every row at its default setting (budget-matched: one setting each).
Nothing here computes a statistic: every number and verdict comes from
the findings.

One module: the words of a depth study's verdicts, rules, counts, flags
and diagnoses are one vocabulary; the README quotes the paragraph
(:func:`in_words`) built from the same phrases as the report's table,
which must not drift apart."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.monitor.diagnosis import TRAINS
from gnorm.study.findings.compare import (BEATS, BOTH_AT_CHANCE, EQUIVALENT,
                                          FEW_SEEDS, KINDS, LOSES, MISSING,
                                          NOT_A_NUMBER, NOT_COMPARED, NOT_RUN,
                                          OVER_CHANCE, PARTIAL, SAME,
                                          SPLITS_DIFFER, STRONG, UNCOMMITTED,
                                          UNDECIDED, UNDER_CHANCE, Comparison,
                                          Detectable, ExactPower, FamilySize,
                                          Pair, Section)
from gnorm.study.runs.pairing import Mismatch
from gnorm.study.stats import CORRECTED_T, PAIRED_T, WELCH, Interval
from gnorm.study.words.flags import MEANING, meaning

# A verdict as the in-words paragraph says it of a row; {other}: the row
# it is compared with, {margin}: the study's margin of equivalence.
SAID = {BEATS: 'beats', LOSES: 'loses', SAME: 'is not distinguishable',
        EQUIVALENT: 'is equivalent within ±{margin}',
        UNDECIDED: 'is undecided at ±{margin}',
        OVER_CHANCE: 'trains where {other} is no better than chance',
        UNDER_CHANCE: 'is no better than chance where {other} trains',
        BOTH_AT_CHANCE: 'is no better than chance, as {other} is'}
# The verdicts against a row at chance: their words say why it failed.
CHANCE_KINDS = (OVER_CHANCE, UNDER_CHANCE, BOTH_AT_CHANCE)


def said_of(verdict: str, other: str, named: bool = False,
            margin: float = 1.0) -> str:
    r"""The words of :obj:`verdict` against :obj:`other`; with
    :obj:`named`, the other row is named even where the words do not
    (``beats layernorm``); :obj:`margin`: the study's margin of
    equivalence, in points."""
    words = SAID[verdict].replace('{margin}', f'{margin:g}')
    if '{other}' in words:
        return words.format(other=other)
    return f'{words} {other}' if named else words


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


def mismatch_words(mismatch: Mismatch) -> str:
    r"""Two rows' runs on different splits
    (:func:`gnorm.study.runs.pairing.split_mismatch`) in one line."""
    seed, a, b = mismatch
    return (f"seed {seed}: the runs' splits differ (split fingerprints {a} "
            f'and {b})')


def why_text(f: Comparison) -> str:
    r"""Why a comparison has no interval, in words
    (:data:`gnorm.study.findings.compare.REASONS`)."""
    d = f.detail
    if f.why == NOT_RUN:
        return f"{NOT_RUN} here: {d['row']}, {d['reason']}"
    if f.why == MISSING:
        return f"{NOT_COMPARED}: {d['row']} missing"
    if f.why == PARTIAL:
        return f"{NOT_COMPARED}: {d['row']} partial ({partial(d)})"
    if f.why == SPLITS_DIFFER:
        return (f'{NOT_COMPARED}, {SPLITS_DIFFER}: '
                f"{mismatch_words(d['mismatch'])}")
    if f.why == NOT_A_NUMBER:
        return f'{NOT_COMPARED}: a score is not a number'
    if f.why == FEW_SEEDS:
        return f"{FEW_SEEDS} (n={d['n']}; {d['need']} needed): no verdict"
    return f.why or NOT_COMPARED


def cell_text(f: Comparison, correction: str) -> str:
    r"""A comparison's cell of the table: the verdict (in bold when it
    holds family-wise: a difference or an equivalence), Δ, interval, p and adjusted p, flags."""
    if f.interval is None:
        return why_text(f)
    said = f.verdict or NOT_COMPARED
    if said in STRONG or said == EQUIVALENT:  # each holds family-wise
        said = f'**{said}**'
    text = f'{said} ({interval_text(f.interval)}'
    if f.interval.p is not None:
        text += f', p={p_text(f.interval.p)}'
        if correction == 'holm':
            text += f', Holm {p_text(f.p_adj)}'
    if f.verdict in (EQUIVALENT, UNDECIDED) and f.equivalence_p is not None:
        text += f'; within ±{f.margin:g}: p={p_text(f.equivalence_p)}'
        if correction == 'holm':
            text += f', Holm {p_text(f.equivalence_p_adj)}'
    text += ')'
    if f.verdict in (EQUIVALENT, UNDECIDED) and _excludes_zero(f.interval):
        text += '; the interval, unadjusted, excludes 0 alone'
    if f.verdict == UNDECIDED and f.interval.lo is not None:
        text += (f'; interval {f.interval.hi - f.interval.lo:.2f} points '
                 f'wide')
    if f.modified:
        text += '; rests on runs of uncommitted code'
    text += f'; flagged: {f.flags}' if f.flags else ''
    return text + ''.join(f"; {row}'s runs {diagnosis_text(told)}"
                          for row, told in f.failing)


def _excludes_zero(found: Interval) -> bool:
    return found.lo is not None and (found.lo > 0 or found.hi < 0)


METHODS = {
    PAIRED_T: 'the paired t interval of the per-seed differences (every '
              'seed of both rows on one fixed split, as the runs record)',
    CORRECTED_T: 'the corrected resampled t interval of the per-seed '
                 'differences (seed k of both rows on split k of one pool '
                 'of nodes, as the runs\' split fingerprints show, so that '
                 'their training sets overlap; Nadeau & Bengio 2003: the '
                 'variance of the mean (1/k + n_test/n_train) s², not '
                 's²/k, n_test/n_train from the runs\' recorded split '
                 'sizes; the plain paired t interval is in the CSV). No '
                 'exact test beside it: the sign-flip test assumes '
                 'independent seeds, and these seeds share nodes',
    WELCH: "unpaired: the split is fixed and seeds draw only the "
           "initialisation, Welch's interval (n = the seeds of each row)",
}


def rule_text(row: str, family: FamilySize, level: float,
              correction: str, said: str = 'accuracy',
              margin: float = 1.0) -> str:
    r"""The section's rule in words: the test, the :obj:`family` and its
    correction, the kinds of verdict (equivalence within :obj:`margin`
    points among them), for cells scored by :obj:`said`."""
    methods = family.methods or [PAIRED_T]
    size, run = family.planned, family.tested
    how = ('Holm-adjusted p (Holm\'s step-down over the family: the '
           f'chance of any false "beats" or "loses" among its '
           f'{size} comparisons is at most {1 - level:.0%})'
           if correction == 'holm' else
           'unadjusted p (`table.correction: none`: each comparison read '
           'alone; among many, some will pass by chance)')
    return (f'Rule: {row} beats a row at a (dataset, depth) when the '
            f'{how} of Δ = {row} − that row (test {said}, %) is below '
            f'{1 - level:.2f} and Δ > 0, loses when it is below and '
            f'Δ < 0. Otherwise it is equivalent to it within ±{margin:.1f} '
            f'points when the two one-sided tests of |Δ| < {margin:.1f} '
            f'(TOST), adjusted over the family the same way, give p below '
            f'{1 - level:.2f} (`table.margin`), and undecided when they do '
            f'not: these seeds cannot tell. Where a row is flagged as '
            f'learning nothing (it predicts one class, or its seeds pooled '
            f'are not shown above chance), the verdict says so: '
            f'"{OVER_CHANCE}" (a difference over a row that learned '
            f'nothing, not a win over a baseline), "{UNDER_CHANCE}", '
            f'"{BOTH_AT_CHANCE}". Interval ({level:.0%}, each comparison '
            f'alone, unadjusted) and p: '
            + '; '.join(METHODS[m] for m in methods) + '. '
            f'The family, fixed in advance: the {size} comparisons the '
            f'spec plans, of which {run} have run; a comparison not run '
            f'yet counts as p = 1, so that cells added later can add '
            f'verdicts and never remove one. Bold: a verdict that holds '
            f'family-wise, a difference or an equivalence within the '
            f'margin. Only complete cells (every setting with every '
            f'seed) are compared.')


VIEWS = {'val': 'setting chosen by validation',
         'default': "every row at its default setting (one setting each: "
                    "equal tuning budgets)"}


def comparison(section: Optional[Section], level: float,
               correction: str = 'holm', role: str = '') -> List[str]:
    r"""The section saying, per dataset and depth, whether a row beats
    each of the others (:class:`gnorm.study.findings.compare.Section`: each row
    with its setting chosen by validation, or at its default);
    :obj:`role`: ``primary`` or ``secondary`` where the report reads both
    views (``table.primary`` says which decides). Then :func:`in_words`,
    the counts of each kind of verdict, what the exact tests can say, the
    flagged cells and, where the section has them, the cells the rule of
    earlier reports reads otherwise. No lines without a section."""
    if section is None:
        return []
    row, against, view = section.row, section.against, section.view
    mine = section.mine
    others = " and ".join(against)
    heading = (f'## Does {row} beat {others}?' if role != 'secondary' else
               f'### {row} against {others}, {HEADINGS[view]} (secondary '
               f'view)')
    lines = [heading, '', f'Each row: {VIEWS[view]}. ' + ROLES.get(role, '')
             + rule_text(row, section.size, level, correction,
                         section.score, section.margin), '']
    lines += verdict_table(mine, against, correction)
    lead = 'Secondary view, in words' if role == 'secondary' else 'In words'
    lines += ['', in_words(row, section.verdicts,
                           family_words(section.size, correction), lead,
                           section.margin, failed_by_cell(mine),
                           improving_by_cell(mine)),
              '', kind_counts(mine)]
    sensitivity = detectable_words(section.detect, level, correction,
                                   section.size.planned)
    if sensitivity:
        lines += ['', sensitivity]
    exact = exact_words(section.power, level, correction)
    if exact:
        lines += ['', exact]
    lines += ['', flagged_text(mine, section.score)]
    if section.differ is not None:
        lines += ['', disagreements(section.differ)]
    return lines


HEADINGS = {'val': 'each row tuned by validation',
            'default': 'at equal budgets'}
ROLES = {'primary': 'This is the primary view (`table.primary`): its '
                    'verdicts are the study\'s. ',
         'secondary': 'A secondary view, shown for the record: its '
                      'verdicts are not the study\'s (the primary view, '
                      'above, decides). '}


def family_words(family: FamilySize, correction: str) -> str:
    r"""How a family's verdicts were read, in words: ``Holm-adjusted over
    a family of 48 planned, 32 run``."""
    if correction != 'holm':
        return 'each comparison alone'
    size, run = family.planned, family.tested
    return (f'Holm-adjusted over a family of {size}'
            + (f' planned, {run} run' if run < size else ''))


def detectable_words(detect: Optional[Detectable], level: float,
                     correction: str, planned: int) -> str:
    r"""The smallest difference the section's design detects
    (:class:`gnorm.study.findings.compare.Detectable`) in one sentence; empty
    without a tested comparison."""
    if detect is None:
        return ''
    alpha = 1 - level
    where = (f"the family's first Holm threshold α/m = {alpha:g}/{planned}"
             if correction == 'holm' else f'α = {alpha:g}')
    tests = ' and '.join(detect.methods)
    spread = (f' (median over {detect.comparisons} comparisons; '
              f'{detect.least:.1f} to {detect.most:.1f})'
              if detect.comparisons > 1 else '')
    return (f'What this design can tell apart: with {detect.seeds} '
            f'{"paired seeds" if detect.methods != ("Welch", ) else "seeds per row"} '
            f'({tests}), differences under {detect.median:.1f} points '
            f'cannot be told apart here{spread}: the difference detected '
            f'with 80 % power at {where}, given the spread of each '
            f"comparison's differences. An undecided cell is one of these.")


def kind_counts(found: Dict[Pair, Comparison]) -> str:
    r"""How many verdicts of each kind :obj:`found` holds, in words:
    ``Verdicts: 3 beats, 7 trains where the other is at chance, 30 not
    distinguishable; 16 not compared``."""
    counts = {k: sum(f.verdict == k for f in found.values()) for k in KINDS}
    none = sum(f.verdict is None for f in found.values())
    said = ', '.join(f'{n} {k}' for k, n in counts.items() if n)
    return (f"Verdicts: {said or 'none yet'}"
            + (f'; {none} not compared' if none else '') + '.')


def exact_words(power: Optional[ExactPower], level: float,
                correction: str) -> str:
    r"""What the exact tests beside the t tests say of a family
    (:func:`gnorm.study.findings.compare.exact_power`): whether they can reach
    Holm's first threshold (:math:`\alpha / m`) with these seeds at all,
    and how many verdicts they give; where they cannot, the verdicts rest
    on the t test's normality assumption and the words say how many seeds
    an exact verdict needs."""
    if power is None:
        return ''
    alpha = 1 - level
    threshold = power.threshold
    exact = ' and '.join('the sign-flip test of the per-seed differences'
                         if m != WELCH else 'the permutation test of the '
                         'two rows\' seeds' for m in power.methods)
    head = (f'Exact tests: beside each t test, {exact} (no normality '
            f'assumed; CSV: `exact_p`, `exact_p_adj`). ')
    where = ('Holm\'s first threshold' if correction == 'holm'
             else 'the threshold')
    if not power.reachable:
        method, n = power.least
        floor, need = power.floors[power.least], power.need
        return (head + f'With {_seeds_text(method, n)} it cannot give a p '
                f'below {floor:.4g}, above {where} {threshold:.4g} '
                f'(α = {alpha:.2f} over {power.planned}): every verdict '
                f'here rests on the t test\'s assumption that the '
                f'differences are normal. An exact verdict would need '
                + (f'{_seeds_text(method, need)}.' if need else
                   'more seeds than 64.'))
    read = ('Holm-adjusted the same way' if correction == 'holm'
            else 'each read alone')
    held = power.held
    return (head + f'{power.reachable} of the {power.tests} tested '
            f'comparisons can reach {where} {threshold:.4g}; the exact '
            f'tests, {read}, hold {held} difference'
            f"{'s' if held != 1 else ''} where the t tests hold "
            f'{power.strong}.')


def _seeds_text(method: str, n: int) -> str:
    return (f'{n} seeds per row' if method == WELCH
            else f'{n} paired seeds')


def verdict_table(found: Dict[Pair, Comparison], against: Sequence[str],
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



def flagged_text(found: Dict[Pair, Comparison], said: str = 'accuracy') -> str:
    r"""The compared cells whose runs are flagged (sanity), in words, each
    flag with the cells it holds at, for cells scored by :obj:`said`; that
    no compared cell is flagged, without any."""
    named = {}
    for (dataset, _, _, depth), f in found.items():
        if f.flags:
            named.setdefault(f.flags, []).append((dataset, depth))
    if not named:
        return 'No compared cell is flagged (at chance or undertrained).'
    meanings = [m for m in MEANING if any(m in flags for flags in named)]
    return ('Flagged, at chance or undertrained (a verdict against such a '
            'row says little about the norms), cell by cell: '
            + '; '.join(f'{flags} at {cells_text(cells)}'
                        for flags, cells in named.items())
            + '. ' + ' '.join(f'"{m}": {meaning(m, said)}.'
                              for m in meanings))


def _old(verdict: str) -> str:
    return 'within the spread' if verdict == 'not distinguishable' \
        else verdict


def disagreements(differ: List[Tuple[Pair, str, str]]) -> str:
    r"""Where the rule of earlier reports (beats or loses when Δ exceeds
    the larger of the two stds, ddof=0) reads a compared cell otherwise
    than the family's verdict
    (:func:`gnorm.study.findings.compare.old_rule_differs`)."""
    differ = [f'{dataset} L={depth} vs {other}: {_old(old)}, the verdict: '
              f'{new}' for (dataset, _, other, depth), old, new in differ]
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


def diagnosis_text(told: Optional[Dict[str, Any]], short: bool = False
                   ) -> str:
    r"""``rank-collapsed 6/10 at epoch 1-6 (effective rank of layer 12
    1.1, cut 1.5: ...); then untrainable from epoch 10 (6 of them)``, and
    ``; metric-only, no gradients recorded`` where so; with :obj:`short`,
    the label, count and onset, and what followed. Empty without a
    diagnosis."""
    if not told:
        return ''
    text = (f"{told['label']} {told['count']}/{told['runs']}"
            + when_text(told['label'], told.get('onset'),
                        told.get('onset_exact', True)))
    others = [f'{k} {n}' for k, n in (told.get('counts') or {}).items()
              if k != told['label']]
    then = told.get('then')
    followed = (f"; then {then['label']}"
                + when_text(then['label'], then['onset'], then['exact'])
                + f" ({then['count']} of them)" if then else '')
    followed += f"; the others: {', '.join(others)}" if others else ''
    if short:
        return text + followed
    if told.get('measure') and told['label'] != TRAINS:
        at = '' if told['layer'] is None else f" of layer {told['layer']}"
        of = f" {told['relative']}" if told.get('relative') else ''
        text += (f" ({told['measure']}{at} {told['value']:.3g}, "
                 f"cut {told['cut']:g}{of})")
    text += followed
    if told['metric_only']:
        text += '; metric-only, no gradients recorded'
    return text


def when_text(label: str, onset: Optional[Sequence[int]], exact: bool
              ) -> str:
    r"""`` at epoch 1`` / `` from epoch 2-10`` (vanishing gradients) /
    `` by epoch 40`` (known to hold by then, no earlier record) for the
    first and last epoch a cell's runs' failure began at; empty without
    one."""
    if not onset:
        return ''
    lo, hi = onset
    span = f'{lo}' if lo == hi else f'{lo}–{hi}'
    word = ('by' if not exact else 'from' if label == 'untrainable'
            else 'at')
    return f' {word} epoch {span}'


def failed_by_cell(found: Dict[Pair, Comparison]
                   ) -> Dict[Tuple[str, str, int], tuple]:
    r"""Per (other row, dataset, depth), the rows at chance there with
    their runs' majority label and whether it is metric-only
    (:attr:`Comparison.failing`)."""
    return {(other, dataset, depth): tuple(
                (row, told['label'], told['metric_only'])
                for row, told in f.failing)
            for (dataset, _, other, depth), f in found.items()
            if f.failing}


def improving_by_cell(found: Dict[Pair, Comparison]
                      ) -> Dict[Tuple[str, str, int], tuple]:
    r"""Per (other row, dataset, depth), the rows still improving there
    (:attr:`Comparison.improving`)."""
    return {(other, dataset, depth): f.improving
            for (dataset, _, other, depth), f in found.items()
            if f.improving}


def improving_text(cells: Sequence[Tuple[str, int]], other: str,
                   improving: Dict[Tuple[str, str, int], tuple]) -> str:
    r"""Which of :obj:`cells` (against :obj:`other`) rest on a row
    still improving when training stopped: `` (still improving, more
    epochs may change it: mynorm at minesweeper L=12)``; nothing where
    none does."""
    by: Dict[str, List[Tuple[str, int]]] = {}
    for dataset, depth in cells:
        for name in improving.get((other, dataset, depth), ()):
            by.setdefault(name, []).append((dataset, depth))
    if not by:
        return ''
    return ' (still improving, more epochs may change it: ' + '; '.join(
        f'{name} at {cells_text(where)}' for name, where in by.items()) + ')'


def failed_text(cells: Sequence[Tuple[str, int]], other: str,
                failed: Dict[Tuple[str, str, int], tuple]) -> str:
    r"""Why the rows at chance failed at :obj:`cells` (against
    :obj:`other`), by label: `` (layernorm's runs: oversmoothed at cora
    L=16, untrainable at citeseer L=32)``; a row whose runs show none of
    the diagnosed failures says so; the cells whose runs recorded no
    gradients are named metric-only."""
    by: Dict[Tuple[str, str], List[Tuple[str, int]]] = {}
    metric_only: Dict[str, List[Tuple[str, int]]] = {}
    for dataset, depth in cells:
        for name, label, only in failed.get((other, dataset, depth), ()):
            by.setdefault((name, label), []).append((dataset, depth))
            if only:
                metric_only.setdefault(name, []).append((dataset, depth))
    rows: Dict[str, List[str]] = {}
    for (name, label), where in by.items():
        said = 'none of the diagnosed failures' if label == TRAINS else label
        rows.setdefault(name, []).append(f'{said} at {cells_text(where)}')
    told = [f"{name}'s runs: {'; '.join(parts)}"
            + (f' (metric-only, no gradients recorded, at '
               f'{cells_text(metric_only[name])})'
               if name in metric_only else '')
            for name, parts in rows.items()]
    return f" ({'; '.join(told)})" if told else ''


def in_words(row: str, verdicts: Dict[str, Dict[str, list]],
             how: str = '', lead: str = 'In words',
             margin: float = 1.0,
             failed: Optional[Dict[Tuple[str, str, int], tuple]] = None,
             improving: Optional[Dict[Tuple[str, str, int], tuple]] = None
             ) -> str:
    r"""The comparison's table in one paragraph (the README quotes it):
    per other row, the cells where :obj:`row` beats it, loses, or is not
    distinguishable from it, and which cells are not compared yet, not
    compared because their splits differ, or not run here
    (``table.not_run``); :obj:`how`: how the verdicts were read (e.g.
    ``Holm-adjusted over a family of 32``); :obj:`failed`: why the rows
    at chance failed, per cell (:func:`failed_by_cell`), said after the
    verdicts against a row at chance; :obj:`improving`: the rows still
    improving when training stopped, per cell
    (:func:`improving_by_cell`), said after any verdict of their cells."""
    parts = []
    for other, found in verdicts.items():
        said = [f"{said_of(verdict, other, margin=margin)} at "
                f"{cells_text(found[verdict])}"
                + (failed_text(found[verdict], other, failed or {})
                   if verdict in CHANCE_KINDS else '')
                + improving_text(found[verdict], other, improving or {})
                for verdict in KINDS if found.get(verdict)]
        left = [f"{why}: {cells_text(found[key])}"
                for key, why in ((NOT_COMPARED, 'not compared yet, '
                                  'incomplete'),
                                 (SPLITS_DIFFER, 'not compared, the '
                                  'splits differ'),
                                 (FEW_SEEDS, 'not read, too few seeds'),
                                 (UNCOMMITTED, 'not quoted, runs of '
                                  'uncommitted code'),
                                 (NOT_RUN, 'not run here'))
                if found.get(key)]
        parts.append(f"against {other}, {row} "
                     + ('; '.join(said) if said else 'has no complete cell')
                     + (f" ({'; '.join(left)})" if left else ''))
    return f"{lead}{f' ({how})' if how else ''}: " + '. '.join(
        p[0].upper() + p[1:] if i else p for i, p in enumerate(parts)) + '.'
