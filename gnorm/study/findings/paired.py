r"""A paired study's findings, as data: every row against the first (the
baseline) seed by seed, where runs of one seed share the seed of initialisation and data
order. Per row: the metric at the best validation epoch, mean ± std over
its finished seeds; per row after the first: the differences to the
baseline over the seeds both finished, their mean and t interval
(:func:`gnorm.study.stats.paired_interval`), the reading, and where the
paper's difference (``table.paper``: row -> value) lies. A row after the
first shows the seeds of its differences only (its mean is over the seeds
its Δ is); a row whose runs of one seed trained on another split than the
baseline's (:func:`gnorm.study.runs.pairing.check_fingerprints`) is not compared.
:func:`paired_findings` gathers them, with what the report says of the
spec, as one :class:`PairedFindings`;
:mod:`gnorm.study.words.paired` says them in words.
A reading needs ``table.min_seeds`` paired seeds (default 5).

The rows after the first are one family: their test p-values are
adjusted together (``table.correction``: ``holm`` by default, or
``none``) and the readings use the adjusted p. Each difference is given at
both epoch rules: at each run's best validation epoch (the selected
weights) and at its last epoch, since a reading that changes with the rule
is a reading of the recipe as much as of the rows. The paper's difference
was measured with the paper's recipe: the report says whether the study's
is the same (``table.paper_recipe: same``) or not (the default)."""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.results import UNITS, mean_std, metric_name, score_field, value
from gnorm.study.findings.compare import verdict_kind
from gnorm.study.findings.select import score_words, split_test_train
from gnorm.study.runs.pairing import check_fingerprints
from gnorm.study.runs.runner import row_seeds
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import Spec, set_name
from gnorm.study.stats import (compare, equivalence_p, exact_p,
                               family_verdict, holm, pair_test_train,
                               paired_interval, where_in, verdict)

# Metrics whose lower values are the better ones.
LOWER_IS_BETTER = ('mae', 'loss')
# Why a row has no family verdict (``why_not``): its runs are no pairs of
# the baseline's (``unpaired`` says why), or too few seeds are.
UNPAIRED, FEW_SEEDS = 'unpaired', 'few seeds'


def label(spec: Spec, row: str) -> str:
    r"""The row's label: ``table.labels.<row>``, else its name."""
    return (spec.table.get('labels') or {}).get(row, row)


def short(record: Dict[str, Any]) -> str:
    r"""A row's label without its parenthesis."""
    return record['label'].split(' (')[0]


def kind(run: Dict[str, Any]) -> str:
    return (metric_name(run) or 'metric') if 'test_metric' in run else 'acc'


def factor(run: Dict[str, Any]) -> float:
    r"""What :obj:`run`'s metric is multiplied by in the report: 100 for
    accuracies and ROC-AUC (shown in %), 1 for an MAE."""
    return UNITS.get(kind(run), UNITS['metric'])[2]


def score(run: Dict[str, Any], split: str) -> float:
    r""":obj:`run`'s metric on :obj:`split` as the report shows it."""
    return factor(run) * run[score_field(run, split)]


def higher_is_better(spec: Spec, runs: Sequence[Dict[str, Any]]) -> bool:
    r"""``table.higher_is_better``, else from the runs' metric: an error
    (MAE, a loss) is better lower, an accuracy or ROC-AUC higher."""
    if 'higher_is_better' in spec.table:
        return bool(spec.table['higher_is_better'])
    return not any(kind(r) in LOWER_IS_BETTER for r in runs)


def runs_by_seed(record: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    r"""The runs of a row's :obj:`record` by their ``seed`` (runs that do
    not record one are left out)."""
    return {value(r, 'seed'): r for r in record['runs_list']
            if value(r, 'seed') is not None}


def by_seed(runs: Sequence[Dict[str, Any]], split: str) -> Dict[int, float]:
    r"""Each run's metric on :obj:`split` (:func:`score`) by the run's
    ``seed`` (runs that do not record one are left out); ``test_last``:
    the test metric at the run's last epoch (:func:`last_score`)."""
    how = last_score if split == 'test_last' else (
        lambda run: score(run, split))
    found = {value(r, 'seed'): how(r) for r in runs
             if value(r, 'seed') is not None}
    return {seed: v for seed, v in found.items() if v is not None}


def last_score(run: Dict[str, Any]) -> Optional[float]:
    r""":obj:`run`'s test metric at its last epoch (from its curve), as the
    report shows it; :obj:`None` for a run whose curve lacks it."""
    values = (run.get('curve') or {}).get(score_field(run, 'test'))
    return factor(run) * values[-1] if values else None


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
        enough=len(ok) >= spec.min_seeds, test_mean=test,
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
    validation), their mean and interval by the test the design implies
    (:func:`gnorm.study.stats.compare`: the corrected resampled t where
    the seeds resample the split, with the plain paired t's bounds and p
    beside it as ``..._naive_...``, else the paired t), the exact
    sign-flip p (``test_exact_p``), the paper's difference and where it
    lies; none where the two rows' runs are no pairs, for the reason
    :obj:`unpaired` (``why_not``)."""
    ours = [] if unpaired else record['runs_list']
    ratio = None if unpaired else pair_test_train(
        split_test_train(base['runs_list']), split_test_train(ours))
    for key in ('test', 'val', 'test_last'):
        a, b = by_seed(base['runs_list'], key), by_seed(ours, key)
        found = compare(a, b, 'seed', spec.level, ratio)
        naive = paired_interval(a, b, spec.level) if ratio else None
        record.update({
            f'{key}_diffs': [round(d, 4) for d in found.diffs],
            f'{key}_diff': found.diff, f'{key}_lo': found.lo,
            f'{key}_hi': found.hi, f'{key}_p': found.p,
            f'{key}_naive_lo': naive and naive.lo,
            f'{key}_naive_hi': naive and naive.hi,
            f'{key}_naive_p': naive and naive.p,
            f'{key}_equivalence_p': equivalence_p(found, spec.margin)})
        if key == 'test':
            record['paired_seeds'] = list(found.seeds)
            record['method'] = found.method
            record['test_train'] = ratio
            record['test_exact_p'] = (exact_p(a, b, found.method)
                                      if found.diffs else None)
    record['pairs'] = len(record['paired_seeds'])
    record['margin'] = spec.margin
    record['paper_diff'] = (None if None in (record['paper'], base['paper'])
                            else record['paper'] - base['paper'])
    record['higher'] = higher_is_better(
        spec, base['runs_list'] + record['runs_list'])
    record['unpaired'] = unpaired
    record['decides'] = not unpaired and record['pairs'] >= spec.min_seeds
    record['why_not'] = (UNPAIRED if unpaired else
                         None if record['decides'] else FEW_SEEDS)
    record['test_alone'] = (oriented(verdict(record['test_lo'],
                                             record['test_hi']),
                                     record['higher'])
                            if record['test_lo'] is not None else None)
    for key in ('test', 'test_last'):
        record[f'paper_place{key[4:]}'] = (
            where_in(record['paper_diff'], record[f'{key}_lo'],
                   record[f'{key}_hi'])
            if record['paper_diff'] is not None
            and record[f'{key}_lo'] is not None else None)


def summarise(spec: Spec, runs: List[Dict[str, Any]],
              rows: Sequence[str]) -> List[Dict[str, Any]]:
    r"""One record per row: test and validation metric (%) at the best
    validation epoch, mean ± std (ddof=0) over the finished seeds, the
    epochs run and selected, the paper's value; every row after the first
    also gets its differences to the first row seed by seed (the seeds
    both finished, which its record then keeps alone: :func:`compared`),
    their mean and t interval, and the family's verdict."""
    records = [row_record(spec, runs, row) for row in rows]
    records = records[:1] + [compared(spec, r, records[0])
                             for r in records[1:]]
    read_family(spec, records[1:])
    return records


def read_family(spec: Spec, records: List[Dict[str, Any]]) -> None:
    r"""Adjusts the test p of the rows that decide (enough paired seeds)
    together (:func:`gnorm.study.stats.holm`, unless ``table.correction``
    is ``none``), and their equivalence p the same way, and sets each
    one's ``test_p_adj``, ``test_equivalence_p_adj`` and ``test_found``
    (:func:`oriented`; a difference the family does not hold reads
    ``equivalent`` where the equivalence test holds, else ``undecided``),
    at the best validation epoch and (``test_last_...``) at the last
    epoch."""
    deciding = [r for r in records if r['decides']]
    for key in ('test', 'test_last'):
        raw = [r[f'{key}_p'] for r in deciding]
        adjusted = holm(raw) if spec.correction == 'holm' else raw
        same = [1.0 if r[f'{key}_equivalence_p'] is None
                else r[f'{key}_equivalence_p'] for r in deciding]
        same = holm(same) if spec.correction == 'holm' else same
        for r, p, q in zip(deciding, adjusted, same):
            r[f'{key}_p_adj'] = p
            r[f'{key}_equivalence_p_adj'] = q
            r[f'{key}_found'] = verdict_kind(
                oriented(family_verdict(r[f'{key}_diff'], p, spec.level),
                         r['higher']), False, False,
                equivalent=q is not None and q < 1 - spec.level)


def oriented(said: Optional[str], higher: bool = True) -> Optional[str]:
    r"""A verdict on a difference (``beats``, ``loses``, ``not
    distinguishable``; :obj:`None` without an interval) of a row against
    the baseline, where a difference above 0 is better when :obj:`higher`
    is, else worse."""
    if said in ('beats', 'loses') and not higher:
        return 'loses' if said == 'beats' else 'beats'
    return said


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




def metric_said(spec: Spec, runs: Sequence[Dict[str, Any]] = ()) -> str:
    r"""The metric's name in the report: ``table.metric``, else the score
    of :obj:`runs` (``accuracy``, ``ROC-AUC``, ``MAE``), else
    ``metric``."""
    if spec.table.get('metric'):
        return str(spec.table['metric'])
    kinds = {kind(r) for r in runs}
    if len(kinds) != 1:
        return 'metric'
    return score_words(kinds.pop())


@dataclass(frozen=True)
class RowCurve:
    r"""A row's validation metric as its plot shows it (scaled as the
    report shows it): per epoch, its seeds' values; and each seed's value
    at its selected epoch, with their mean and std."""
    label: str                     # the row's short label
    runs: int
    epochs: List[int]
    per_epoch: List[List[float]]   # the seeds' values at each epoch
    seeds: List[float]             # each run's, at its selected epoch
    val_mean: Optional[float]
    val_std: Optional[float]


def row_curve(record: Dict[str, Any]) -> RowCurve:
    r"""The :class:`RowCurve` of a row's :obj:`record`."""
    per_epoch: Dict[int, List[float]] = {}
    for run in record['runs_list']:
        scale, key = factor(run), score_field(run, 'val')
        for e, v in zip(run['curve']['epoch'], run['curve'][key]):
            per_epoch.setdefault(e, []).append(scale * v)
    epochs = sorted(per_epoch)
    return RowCurve(short(record), record['runs'], epochs,
                    [per_epoch[e] for e in epochs],
                    [score(run, 'val') for run in record['runs_list']],
                    record['val_mean'], record['val_std'])


@dataclass
class PairedFindings:
    r"""A paired report's content as data (:func:`paired_findings`): the
    rows' records and everything the report says of the spec, computed
    before any word is written."""
    name: str                       # the report's name (overrides added)
    source: str                     # the spec file as the report names it
    runs: str                       # the runs folder, from the spec's home
    records: List[Dict[str, Any]]   # every row, the baseline first; each
                                    # with its ``short`` label and the
                                    # ``metric_said`` of its runs
    base: str                       # the baseline's short label
    metric: str                     # the metric of all runs, in words
    level: float
    correction: str
    margin: float
    min_seeds: int
    family: int                     # the rows that decide (Holm's family)
    same_recipe: bool               # the paper's values are of this recipe
    config: Dict[str, Any]          # the study's config, resolved
    beside: List[Tuple[str, Dict[str, Any]]]  # table.beside, composed
    curves: List[RowCurve]
    one_epoch: bool                 # every run has one epoch: no curve


def _resolved(cfg) -> Dict[str, Any]:
    from omegaconf import OmegaConf
    return OmegaConf.to_container(cfg, resolve=True)


def paired_findings(spec: Spec, cfg, runs: List[Dict[str, Any]],
                    runs_dir: Path, sets: Sequence[str]) -> PairedFindings:
    r"""A paired study's findings from its :obj:`runs` (read from
    :obj:`runs_dir`, made with the overrides :obj:`sets`) in one pass: the
    rows' records (:func:`summarise`), their curves, and what the report
    says of the spec (its config :obj:`cfg` and ``table.beside``'s
    experiments composed)."""
    records = summarise(spec, runs, list(spec.table['rows']))
    for r in records:
        r['short'] = short(r)
        r['metric_said'] = metric_said(spec, r['runs_list'])
    every = [run for r in records for run in r['runs_list']]
    home = spec.home()
    return PairedFindings(
        name=set_name(spec.name, sets),
        source=os.path.relpath(spec.source, home),
        runs=os.path.relpath(runs_dir, home), records=records,
        base=records[0]['short'], metric=metric_said(spec, every),
        level=spec.level, correction=spec.correction, margin=spec.margin,
        min_seeds=spec.min_seeds,
        family=sum(bool(r.get('decides')) for r in records[1:]),
        same_recipe=spec.table.get('paper_recipe') == 'same',
        config=_resolved(cfg),
        beside=[(other, _resolved(compose([f'experiment={other}'])))
                for other in spec.table.get('beside') or []],
        curves=[row_curve(r) for r in records],
        one_epoch=one_epoch(records))


def one_epoch(records: Sequence[Dict[str, Any]]) -> bool:
    r"""Whether every run of the rows' :obj:`records` has at most one
    epoch (no curve to draw)."""
    return all(len(run['curve']['epoch']) <= 1
               for r in records for run in r['runs_list'])
