r"""A paired study: every row against the first (the baseline) seed by
seed, where runs of one seed share the seed of initialisation and data
order. Per row: the metric at the best validation epoch, mean ± std over
its finished seeds; per row after the first: the differences to the
baseline over the seeds both finished, their mean and t interval
(:func:`gnorm.study.stats.paired_interval`), the reading, and where the
paper's difference (``table.paper``: row -> value) lies. A row after the
first shows the seeds of its differences only (its mean is over the seeds
its Δ is); a row whose runs of one seed trained on another split than the
baseline's (:func:`gnorm.study.pairs.check_fingerprints`) is not compared.
A reading needs ``table.min_seeds`` paired seeds (default 5)."""
from typing import Any, Dict, List, Optional, Sequence

from gnorm.results import UNITS, mean_std, metric_name, plural, value
from gnorm.study.compare import signed
from gnorm.study.pairs import check_fingerprints
from gnorm.study.runner import row_seeds
from gnorm.study.spec import Spec
from gnorm.study.stats import paired_interval, placed, verdict

MIN_SEEDS = 5
# Metrics whose lower values are the better ones.
LOWER_IS_BETTER = ('mae', 'loss')


def label(spec: Spec, row: str) -> str:
    r"""The row's label: ``table.labels.<row>``, else its name."""
    return (spec.table.get('labels') or {}).get(row, row)


def short(record: Dict[str, Any]) -> str:
    r"""A row's label without its parenthesis."""
    return record['label'].split(' (')[0]


def min_seeds(spec: Spec) -> int:
    return int(spec.table.get('min_seeds', MIN_SEEDS))


def field(run: Dict[str, Any], split: str) -> str:
    r"""The field of :obj:`run`'s metric on :obj:`split`: a graph run's
    ``<split>_metric``, a node run's ``<split>_acc``."""
    return f'{split}_metric' if f'{split}_metric' in run else f'{split}_acc'


def _kind(run: Dict[str, Any]) -> str:
    return (metric_name(run) or 'metric') if 'test_metric' in run else 'acc'


def factor(run: Dict[str, Any]) -> float:
    r"""What :obj:`run`'s metric is multiplied by in the report: 100 for
    accuracies and ROC-AUC (shown in %), 1 for an MAE."""
    return UNITS.get(_kind(run), UNITS['metric'])[2]


def score(run: Dict[str, Any], split: str) -> float:
    r""":obj:`run`'s metric on :obj:`split` as the report shows it."""
    return factor(run) * run[field(run, split)]


def higher_is_better(spec: Spec, runs: Sequence[Dict[str, Any]]) -> bool:
    r"""``table.higher_is_better``, else from the runs' metric: an error
    (MAE, a loss) is better lower, an accuracy or ROC-AUC higher."""
    if 'higher_is_better' in spec.table:
        return bool(spec.table['higher_is_better'])
    return not any(_kind(r) in LOWER_IS_BETTER for r in runs)


def runs_by_seed(record: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    r"""The runs of a row's :obj:`record` by their ``seed`` (runs that do
    not record one are left out)."""
    return {value(r, 'seed'): r for r in record['runs_list']
            if value(r, 'seed') is not None}


def by_seed(runs: Sequence[Dict[str, Any]], split: str) -> Dict[int, float]:
    r"""Each run's metric on :obj:`split` (:func:`score`) by the run's
    ``seed`` (runs that do not record one are left out)."""
    return {value(r, 'seed'): score(r, split) for r in runs
            if value(r, 'seed') is not None}


def reading(lo: Optional[float], hi: Optional[float], base: str,
            higher: bool = True) -> str:
    r"""An interval of a difference to :obj:`base` in words; above 0 is
    better when :obj:`higher` is (else below 0)."""
    said = verdict(lo, hi) if higher else verdict(
        None if hi is None else -hi, None if lo is None else -lo)
    return {None: 'no interval', 'beats': f'better than {base}',
            'loses': f'worse than {base}'}.get(
        said, f'not distinguishable from {base} at this recipe')


def interval(mean: Optional[float], lo: Optional[float],
             hi: Optional[float], n: int) -> str:
    r"""``+1.23 [−0.40, +2.86] (n=5)``."""
    if mean is None:
        return 'no paired seeds'
    if lo is None:
        return f'{signed(mean)} (n={n}, no interval)'
    return f'{signed(mean)} [{signed(lo)}, {signed(hi)}] (n={n})'


def _last(run: Dict[str, Any]) -> int:
    return run['curve']['epoch'][-1]


def row_record(spec: Spec, runs: List[Dict[str, Any]],
               row: str) -> Dict[str, Any]:
    r"""A row's finished runs, summarised (see :func:`summarise`)."""
    ok = [r for r in runs if value(r, 'tag') == row
          and r.get('status') == 'ok']
    test, test_std = mean_std([score(r, 'test') for r in ok])
    val, val_std = mean_std([score(r, 'val') for r in ok])
    return dict(
        row=row, label=label(spec, row), runs=len(ok),
        expected=len(row_seeds(spec, row)),
        enough=len(ok) >= min_seeds(spec), test_mean=test,
        test_std=test_std, val_mean=val, val_std=val_std,
        seeds=sorted(by_seed(ok, 'test')),
        epochs=sorted({_last(r) for r in ok}),
        best_epochs=sorted(r['selected_epoch'] for r in ok),
        best_before_last=sum(r['selected_epoch'] < _last(r) for r in ok),
        runtime_s=mean_std([r['runtime_s'] for r in ok])[0],
        paper=(spec.table.get('paper') or {}).get(row), runs_list=ok)


def against(spec: Spec, record: Dict[str, Any], base: Dict[str, Any],
            unpaired: Optional[str] = None) -> None:
    r"""Adds :obj:`record`'s paired differences to :obj:`base` (test and
    validation), their mean and t interval, the paper's difference and
    the reading; none where the two rows' runs are no pairs, for the
    reason :obj:`unpaired`."""
    ours = [] if unpaired else record['runs_list']
    for key in ('test', 'val'):
        found = paired_interval(by_seed(base['runs_list'], key),
                                by_seed(ours, key), spec.level)
        record.update({
            f'{key}_diffs': [round(d, 4) for d in found.diffs],
            f'{key}_diff': found.diff, f'{key}_lo': found.lo,
            f'{key}_hi': found.hi})
        record['paired_seeds'] = list(found.seeds)
    record['pairs'] = len(record['paired_seeds'])
    record['paper_diff'] = (None if None in (record['paper'], base['paper'])
                            else record['paper'] - base['paper'])
    record['higher'] = higher_is_better(
        spec, base['runs_list'] + record['runs_list'])
    record['unpaired'] = unpaired
    record['verdict'] = _verdict(spec, record, short(base))
    record['paper_place'] = (
        placed(record['paper_diff'], record['test_lo'], record['test_hi'])
        if record['paper_diff'] is not None and record['test_lo'] is not None
        else None)


def _verdict(spec: Spec, record: Dict[str, Any], base: str) -> str:
    r"""The reading of :obj:`record`'s paired differences to :obj:`base`,
    or why there is none."""
    if record['unpaired']:
        return f"not compared: {record['unpaired']}"
    if record['pairs'] < min_seeds(spec):
        return 'not enough seeds to decide'
    return reading(record['test_lo'], record['test_hi'], base,
                   record['higher'])


def summarise(spec: Spec, runs: List[Dict[str, Any]],
              rows: Sequence[str]) -> List[Dict[str, Any]]:
    r"""One record per row: test and validation metric (%) at the best
    validation epoch, mean ± std (ddof=0) over the finished seeds, the
    epochs run and selected, the paper's value; every row after the first
    also gets its differences to the first row seed by seed (the seeds
    both finished, which its record then keeps alone: :func:`compared`),
    their mean and t interval, and the reading."""
    records = [row_record(spec, runs, row) for row in rows]
    return records[:1] + [compared(spec, r, records[0]) for r in records[1:]]


def compared(spec: Spec, record: Dict[str, Any],
             base: Dict[str, Any]) -> Dict[str, Any]:
    r""":obj:`record` of a row against the first row's :obj:`base`: over
    the seeds both finished (the row's other seeds left out, so that its
    mean is over the seeds of its differences), unless runs of one seed
    trained on different splits: then not compared, every seed kept."""
    unpaired = check_fingerprints(runs_by_seed(base), runs_by_seed(record))
    paired = set(runs_by_seed(base)) & set(runs_by_seed(record))
    if not unpaired and paired:
        record = row_record(spec, [r for r in record['runs_list']
                                   if value(r, 'seed') in paired],
                            record['row'])
    against(spec, record, base, unpaired)
    return record


def sentence(spec: Spec, record: Dict[str, Any], base: str) -> str:
    r"""The plain reading of a row's paired difference in the test metric
    to :obj:`base`, with the paper's difference placed in the interval
    where the paper has one."""
    n, lo, hi = record['pairs'], record['test_lo'], record['test_hi']
    if record.get('unpaired'):
        return (f"**{short(record)}** − {base}, test {metric(spec)}: "
                f"{record['verdict']}.")
    head = (f"**{short(record)}** − {base}, test {metric(spec)}: "
            f"{interval(record['test_diff'], lo, hi, n)}")
    said = reading(lo, hi, base, record.get('higher', True))
    need = min_seeds(spec)
    if n < need:
        text = (f"{head}: not enough seeds to decide "
                f"({plural(n, 'paired seed')}, {need} needed)"
                + (f'; the interval of these {n} alone reads "{said}".'
                   if lo is not None else '.'))
    else:
        text = f'{head}: {said}.'
    paper = record.get('paper_diff')
    if paper is None:
        return text
    if lo is None:
        return f"{text} The paper's {signed(paper)} cannot be placed."
    where = placed(paper, lo, hi)
    return (f"{text} The paper's {signed(paper)} lies "
            + ('inside the interval.' if where == 'inside'
               else f'outside the interval ({where} it).'))


def metric(spec: Spec) -> str:
    r"""The metric's name in the report: ``table.metric``."""
    return str(spec.table.get('metric', 'metric'))


def _holds(x: float, lo: float, hi: float, what: str) -> str:
    return f"{'holds' if lo <= x <= hi else 'excludes'} {what}"


def in_words(spec: Spec, records: List[Dict[str, Any]]) -> str:
    r"""The report's reading in one sentence (a README may quote it): for
    each row with the paper's difference, its interval and whether it
    holds 0 and the paper's value; then the other rows' readings."""
    base = short(records[0])
    need = min_seeds(spec)
    parts, others = [], {}
    for r in records[1:]:
        if r.get('unpaired'):
            others.setdefault(r['verdict'], []).append(short(r))
        elif r['pairs'] < need or r['test_lo'] is None:
            others.setdefault(f'fewer than {need} paired seeds, not '
                              f'enough to decide', []).append(short(r))
        elif r['paper_diff'] is None:
            others.setdefault(r['verdict'], []).append(short(r))
        else:
            lo, hi = r['test_lo'], r['test_hi']
            paper = 'the paper’s ' + signed(r['paper_diff'])
            parts.append(
                f"{short(r)} − {base}, test {metric(spec)} "
                f"{interval(r['test_diff'], lo, hi, r['pairs'])}: the "
                f"interval {_holds(0.0, lo, hi, '0')} and "
                f"{_holds(r['paper_diff'], lo, hi, paper)}")
    parts += [f"{', '.join(rows)}: {said}" for said, rows in others.items()]
    return '; '.join(parts) + '.'
