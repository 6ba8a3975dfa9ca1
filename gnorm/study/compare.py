r"""Does a row beat the others? A depth study's section, from
``table.compare`` (``rows``: the rows to read, ``against``: the rows they
are compared with): per (dataset, depth) with both cells complete, the
difference of the test accuracies (setting chosen by validation) with its
confidence interval (:mod:`gnorm.study.stats`: paired by seed or Welch,
as ``table.pairing`` says), the verdict, and the cells where the rule of
earlier reports (a difference beyond the larger std) reads otherwise."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.stats import VERDICTS, Interval, compare, spread_verdict

NOT_COMPARED = 'not compared'
NOT_RUN = 'not run'
# A verdict as the in-words paragraph says it of a row.
SAID = {'beats': 'beats', 'loses': 'loses',
        'not distinguishable': 'is not distinguishable'}
Key = Tuple[str, str, int]


def shown(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""One record per cell: the setting chosen by validation."""
    return [r for r in records if r['selection'] != 'test']


def partial(r: Dict[str, Any]) -> str:
    r"""``1 of 12 settings`` (or ``3 of 5 runs``) for a partial cell."""
    if r['settings_run'] < r['settings']:
        return f"{r['settings_run']} of {r['settings']} settings"
    return f"{r['cell_runs']} of {r['cell_expected']} runs"


def signed(x: float) -> str:
    return f'{x:+.2f}'.replace('-', '\u2212')


def interval_text(found: Interval) -> str:
    r"""``Δ +1.23 [−0.40, +2.86], n=5`` (paired: n seeds; unpaired:
    ``n=5+5``)."""
    if found.diff is None:
        return 'no runs'
    if found.lo is None:
        return f'Δ {signed(found.diff)}, n={found.n}, no interval'
    return (f'Δ {signed(found.diff)} [{signed(found.lo)}, '
            f'{signed(found.hi)}], n={found.n}')


def versus(ours: Dict[str, Any], other: Dict[str, Any], pairing: str,
           level: float) -> Tuple[str, Optional[Interval]]:
    r""":obj:`ours` against :obj:`other` (two records of one dataset and
    depth): the text of the table's cell and the interval (:obj:`None`
    when a cell is not complete)."""
    for r in (ours, other):
        if r.get('not_run'):
            return f"{NOT_RUN} here: {r['row']}, {r['not_run']}", None
        if not r['complete']:
            return (f"{NOT_COMPARED}: {r['row']} "
                    + ('missing' if r['cell_runs'] == 0 else
                       f'partial ({partial(r)})')), None
    found = compare(other['test_by_seed'], ours['test_by_seed'], pairing,
                    level)
    said = found.verdict or NOT_COMPARED
    if said in ('beats', 'loses'):
        said = f'**{said}**'
    return f'{said} ({interval_text(found)})', found


def annotate(records: List[Dict[str, Any]], row: str,
             against: Sequence[str], pairing: str, level: float) -> List[str]:
    r"""Adds to each record of :obj:`row` (setting chosen by validation)
    its Δ, interval, n and verdict against each row of :obj:`against` at
    the same dataset and depth (``vs_<other>_diff``, ``_lo``, ``_hi``,
    ``_n``, ``_verdict``; empty where a cell is not complete); returns the
    names of the added columns."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in shown(records)}
    columns = [f'vs_{o}_{k}' for o in against
               for k in ('diff', 'lo', 'hi', 'n', 'verdict')]
    for (dataset, name, depth), ours in by.items():
        if name != row:
            continue
        for o in against:
            other = by.get((dataset, o, depth))
            found = versus(ours, other, pairing, level)[1] if other else None
            ours.update({f'vs_{o}_diff': found and found.diff,
                         f'vs_{o}_lo': found and found.lo,
                         f'vs_{o}_hi': found and found.hi,
                         f'vs_{o}_n': found and found.n,
                         f'vs_{o}_verdict': found and found.verdict})
    return columns


def rule_text(row: str, pairing: str, level: float) -> str:
    r"""The section's rule in words."""
    how = ('paired by seed: seed k of every row draws the same split, so '
           'the interval is the t interval of the per-seed differences '
           '(n = the seeds both rows finished)'
           if pairing == 'seed' else
           "unpaired: the split is fixed and seeds draw only the "
           "initialisation, so the interval is Welch's (n = the seeds of "
           'each row)')
    return (f'Rule: {row} (setting chosen by validation) beats a row at a '
            f'(dataset, depth) when the {level:.0%} confidence interval of '
            f'Δ = {row} − that row (test accuracy, %) lies above 0, loses '
            f'when it lies below 0, and is otherwise not distinguishable '
            f'from it with these seeds; {how}. Only complete cells (every '
            f'setting with every seed) are compared.')


def comparison(records: List[Dict[str, Any]], row: str,
               against: Sequence[str], pairing: str, level: float,
               spread_rule: bool = False) -> List[str]:
    r"""The section saying, per dataset and depth, whether :obj:`row`
    beats each of :obj:`against`; then :func:`in_words` and, with
    :obj:`spread_rule`, where the rule of earlier reports reads a cell
    otherwise. No lines without those rows."""
    by = {(r['dataset'], r['row'], r['layers']): r for r in shown(records)}
    against = [o for o in against if any(k[1] == o for k in by)]
    if not against or not any(k[1] == row for k in by):
        return []
    lines = [f'## Does {row} beat {" and ".join(against)}?', '',
             rule_text(row, pairing, level), '',
             '| dataset | layers | ' + ' | '.join(
                 f'vs {o}' for o in against) + ' |',
             '|---|---|' + '---|' * len(against)]
    verdicts: Dict[str, Dict[str, List[str]]] = {o: {} for o in against}
    differ: List[str] = []
    for (dataset, name, depth), ours in by.items():
        if name != row:
            continue
        texts = []
        for o in against:
            other = by.get((dataset, o, depth))
            text, found = (versus(ours, other, pairing, level) if other
                           else ('no such cell', None))
            texts.append(text)
            where = f'{dataset} L={depth}'
            said = found.verdict if found and found.verdict else (
                NOT_RUN if _not_run(ours, other) else NOT_COMPARED)
            verdicts[o].setdefault(said, []).append((dataset, depth))
            if found and found.verdict:
                old = spread_verdict(list(other['test_by_seed'].values()),
                                     list(ours['test_by_seed'].values()))
                if old != found.verdict:
                    differ.append(f'{where} vs {o}: {_old(old)}, the '
                                  f'interval: {found.verdict}')
        lines.append(f'| {dataset} | {depth} | ' + ' | '.join(texts) + ' |')
    lines += ['', in_words(row, verdicts)]
    return lines + (['', disagreements(differ)] if spread_rule else [])


def _old(verdict: str) -> str:
    return 'within the spread' if verdict == 'not distinguishable' \
        else verdict


def disagreements(differ: List[str]) -> str:
    r"""Where the rule of earlier reports (beats or loses when Δ exceeds
    the larger of the two stds, ddof=0) reads a compared cell otherwise
    than the interval."""
    rule = ('The rule of earlier reports (beats or loses when |Δ| exceeds '
            'the larger of the two seeds\' stds, else within the spread)')
    if not differ:
        return f'{rule} reads every compared cell as the interval does.'
    return (f'{rule} reads {len(differ)} compared '
            f"cell{'s' if len(differ) > 1 else ''} otherwise: "
            + '; '.join(differ) + '.')


def _not_run(*records: Optional[Dict[str, Any]]) -> bool:
    r"""Whether a record of a cell left for another machine
    (``table.not_run``) keeps the cells from being compared."""
    return any(r is not None and r.get('not_run') for r in records)


def cells_text(cells: Sequence[Tuple[str, int]]) -> str:
    r"""``cora L=2/4/32, citeseer L=8``: (dataset, depth) cells, the
    depths of a dataset together, in the order given."""
    by: Dict[str, List[str]] = {}
    for dataset, depth in cells:
        by.setdefault(dataset, []).append(str(depth))
    return ', '.join(f"{d} L={'/'.join(depths)}" for d, depths in by.items())


def in_words(row: str, verdicts: Dict[str, Dict[str, list]]) -> str:
    r"""The comparison's table in one paragraph (the README quotes it):
    per other row, the cells where :obj:`row` beats it, loses, or is not
    distinguishable from it, and which cells are not compared yet or not
    run here (``table.not_run``)."""
    parts = []
    for other, found in verdicts.items():
        said = [f"{SAID[verdict]} at {cells_text(found[verdict])}"
                for verdict in VERDICTS if found.get(verdict)]
        left = [f"{why}: {cells_text(found[key])}"
                for key, why in ((NOT_COMPARED, 'not compared yet, '
                                  'incomplete'),
                                 (NOT_RUN, 'not run here'))
                if found.get(key)]
        parts.append(f"against {other}, {row} "
                     + ('; '.join(said) if said else 'has no complete cell')
                     + (f" ({'; '.join(left)})" if left else ''))
    return 'In words: ' + '. '.join(
        p[0].upper() + p[1:] if i else p for i, p in enumerate(parts)) + '.'
