r"""A paired study's findings (:mod:`gnorm.study.findings.paired`) in
words: the reading of each row against the baseline, the intervals and
p-values as the report prints them, and the report's reading in one
sentence (:func:`in_words`, which a README may quote). Nothing here
computes a statistic: every number and verdict comes from the records."""
from typing import Any, Dict, List, Optional

from gnorm.results import plural
from gnorm.study.findings.paired import FEW_SEEDS, UNPAIRED, PairedFindings
from gnorm.study.words.verdicts import mismatch_words, p_text, signed


def interval(mean: Optional[float], lo: Optional[float],
             hi: Optional[float], n: int, note: str = '') -> str:
    r"""``+1.23 [−0.40, +2.86] (n=5)``, with :obj:`note` after n
    (``(n=5, p=0.0123)``)."""
    if mean is None:
        return 'no paired seeds'
    after = f', {note}' if note else ''
    if lo is None:
        return f'{signed(mean)} (n={n}, no interval{after})'
    return f'{signed(mean)} [{signed(lo)}, {signed(hi)}] (n={n}{after})'


def reading(said: Optional[str], base: str, margin: float = 1.0) -> str:
    r"""A verdict on a row against :obj:`base`
    (:func:`gnorm.study.findings.paired.oriented`, or ``equivalent`` and
    ``undecided`` within :obj:`margin` points) in words."""
    return {None: 'no interval', 'beats': f'better than {base}',
            'loses': f'worse than {base}',
            'equivalent': f'equivalent to {base} within ±{margin:g}',
            'undecided': f'undecided against {base} at ±{margin:g}'}.get(
        said, f'not distinguishable from {base} at this recipe')


def p_words(found: PairedFindings, record: Dict[str, Any],
            key: str = 'test') -> str:
    r"""``p=0.0123, Holm 0.0369`` of a row's difference (its raw p and, in
    a Holm family, the adjusted one)."""
    raw, adjusted = record.get(f'{key}_p'), record.get(f'{key}_p_adj')
    if raw is None:
        return ''
    text = f'p={p_text(raw)}'
    if found.correction == 'holm' and adjusted is not None:
        text += f', Holm {p_text(adjusted)}'
    return text


def rules(found: PairedFindings, record: Dict[str, Any]) -> str:
    r"""The difference at both epoch rules: ``+0.27 [−1.08, +1.61] (n=32,
    p=…) at the best validation epoch; +1.07 [−0.12, +2.26] (…) at the
    last epoch``."""
    parts = []
    for key, rule in (('test', 'at the best validation epoch'),
                      ('test_last', 'at the last epoch')):
        text = interval(record[f'{key}_diff'], record[f'{key}_lo'],
                        record[f'{key}_hi'], record['pairs'],
                        p_words(found, record, key))
        parts.append(f'{text} {rule}')
    return '; '.join(parts)


def paper_recipe(found: PairedFindings) -> str:
    r"""Whose recipe the paper's values come from, in words."""
    return ('with this study\'s recipe' if found.same_recipe else
            "with the paper's own recipe, not this study's")


def paper_words(found: PairedFindings, record: Dict[str, Any]) -> str:
    r"""Where the paper's difference lies against the intervals at both
    epoch rules, and whose recipe it comes from; empty without one."""
    paper = record.get('paper_diff')
    if paper is None:
        return ''
    head = f"The paper's {signed(paper)} ({paper_recipe(found)})"
    places = [(record.get(f'paper_place{k}'), rule) for k, rule in
              (('', 'best validation epoch'), ('_last', 'last epoch'))]
    if all(where is None for where, _ in places):
        return f'{head} cannot be placed.'
    return head + ' lies ' + ' and '.join(
        ('inside' if where == 'inside' else where) + f' the interval at the '
        f'{rule}' for where, rule in places if where) + '.'


def sentence(found: PairedFindings, record: Dict[str, Any]) -> str:
    r"""The plain reading of a row's paired difference in the test metric
    to the baseline at both epoch rules, the verdict (family-wise, at the
    best validation epoch; and at the last epoch where it reads
    otherwise), and the paper's difference placed in the intervals where
    the paper has one."""
    n, base = record['pairs'], found.base
    head = (f"**{record['short']}** − {base}, test "
            f"{record['metric_said']}: ")
    if record.get('unpaired'):
        return f"{head}{verdict_words(record, base)}."
    need = found.min_seeds
    if record['test_lo'] is None or not record.get('decides'):
        alone = reading(record['test_alone'], base, record.get('margin', 1.0))
        text = (f"{head}{rules(found, record)}: not enough seeds to decide "
                f"({plural(n, 'paired seed')}, {need} needed)"
                + (f'; the interval of these {n} alone reads "{alone}".'
                   if record['test_lo'] is not None else '.'))
    else:
        said = verdict_words(record, base)
        last = reading(record['test_last_found'], base,
                       record.get('margin', 1.0))
        text = f"{head}{rules(found, record)}: {said}"
        if last != said:
            text += f" (at the last epoch: {last})"
        text += '.'
    paper = paper_words(found, record)
    return f'{text} {paper}' if paper else text


def _holds(x: float, lo: float, hi: float, what: str) -> str:
    return f"{'holds' if lo <= x <= hi else 'excludes'} {what}"


def in_words(found: PairedFindings) -> str:
    r"""The report's reading in one sentence (a README may quote it): for
    each row with the paper's difference, its interval at both epoch
    rules and whether each holds 0 and the paper's value (from its own
    recipe); then the other rows' readings (family-wise)."""
    base, need = found.base, found.min_seeds
    parts: List[str] = []
    others: Dict[str, List[str]] = {}
    for r in found.records[1:]:
        if r.get('unpaired'):
            others.setdefault(verdict_words(r, base), []).append(r['short'])
        elif not r.get('decides') or r['test_lo'] is None:
            others.setdefault(f'fewer than {need} paired seeds, not '
                              f'enough to decide', []).append(r['short'])
        elif r['paper_diff'] is None:
            others.setdefault(verdict_words(r, base), []).append(r['short'])
        else:
            paper = f"the paper's {signed(r['paper_diff'])}"
            said = [f"{interval(r[f'{k}_diff'], r[f'{k}_lo'], r[f'{k}_hi'], r['pairs'])}"
                    f" {rule}, which {_holds(0.0, r[f'{k}_lo'], r[f'{k}_hi'], '0')}"
                    f" and {_holds(r['paper_diff'], r[f'{k}_lo'], r[f'{k}_hi'], paper)}"
                    for k, rule in (('test', 'at the best validation epoch'),
                                    ('test_last', 'at the last epoch'))
                    if r[f'{k}_lo'] is not None]
            parts.append(f"{r['short']} − {base}, test "
                         f"{r['metric_said']}: " + '; '.join(said)
                         + f" ({paper} comes {paper_recipe(found)})")
    parts += [f"{', '.join(rows)}: {said}" for said, rows in others.items()]
    family = found.family
    how = ('' if found.correction != 'holm' or not family else
           f" (readings Holm-adjusted over the {plural(family, 'row')} "
           'compared)')
    return '; '.join(parts) + how + '.'


def verdict_words(record: Dict[str, Any], base: str) -> str:
    r"""A row's reading against :obj:`base` in words: not compared (and
    why), not enough seeds, or the family's verdict at the best
    validation epoch (:func:`reading`)."""
    if record.get('why_not') == UNPAIRED:
        return f"not compared: {mismatch_words(record['unpaired'])}"
    if record.get('why_not') == FEW_SEEDS:
        return 'not enough seeds to decide'
    return reading(record.get('test_found'), base,
                   record.get('margin', 1.0))


def worded(found: PairedFindings) -> List[Dict[str, Any]]:
    r"""The rows' records with their readings as text, for the CSV: each
    compared row's ``verdict`` and, where it decides, ``test_verdict`` and
    ``test_last_verdict`` (the two epoch rules)."""
    base, records = found.base, found.records
    rows = [dict(records[0])]
    for r in records[1:]:
        words = dict(r, verdict=verdict_words(r, base))
        if r.get('decides'):
            words.update(test_verdict=reading(r['test_found'], base,
                                              r['margin']),
                         test_last_verdict=reading(r['test_last_found'],
                                                   base, r['margin']))
        rows.append(words)
    return rows
