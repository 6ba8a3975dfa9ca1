r"""Selection by validation: each (dataset, row, depth) cell of a depth
study shows the setting of the row's grid with the best mean validation
score over its seeds (and, labelled optimistic, the best mean test
score; and, for the budget-matched comparison, the row's default
setting). The score is the dataset's: accuracy, or ROC-AUC where the
dataset is scored by it (``dataset.metric: rocauc``; the runs record
``val_metric``, ``test_metric``). Ties are declared, not broken
silently: settings with equal means tie, the tie goes to the setting
listed first in the row's ``table.grid``, and the cell lists the tied
settings it did not choose.

Node accuracies are compared exactly: a run's accuracy is its number of
correct nodes over the split's size (``results.json``'s accuracy, a
float32, times ``dataset.split_sizes``, rounded), and a setting's mean is
the exact rational mean of those (:func:`exact_mean`), so that equal
counts tie whatever order float sums took. Scores without counts
(ROC-AUC) tie within :data:`TIE`."""
import json
from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from gnorm.errors import GnormError
from gnorm.results import UNITS, mean_std, plural, score_field, value
from gnorm.study.findings.diagnosis import cell_diagnosis
from gnorm.study.findings.sanity import (argmax_note, at_chance,
                                         config_split, flags, one_class_count,
                                         pooled_chance)
from gnorm.study.runs.compose import setting_label

# Means of metrics without counts closer than this are a tie.
TIE = 1e-9
# The split a metric is measured on: its place in dataset.split_sizes.
SPLIT_OF = {'train_acc': 0, 'val_acc': 1, 'test_acc': 2}


def score_words(metric: str) -> str:
    r"""A score :obj:`metric` in a report's words: ``accuracy``,
    ``ROC-AUC``."""
    return ('accuracy' if metric == 'acc'
            else UNITS.get(metric, UNITS['metric'])[0])


def scores_said(records: Sequence[Dict[str, Any]]) -> str:
    r"""The score of a report's cells :obj:`records` in words: ``accuracy``
    or ``ROC-AUC`` where all datasets share it, else accuracy with the
    others named, ``accuracy (ROC-AUC on minesweeper, tolokers)``."""
    by: Dict[str, List[str]] = {}
    for r in records:
        names = by.setdefault(r.get('metric', 'acc'), [])
        if r['dataset'] not in names:
            names.append(r['dataset'])
    if len(by) <= 1:
        return score_words(next(iter(by), 'acc'))
    main = 'acc' if 'acc' in by else next(iter(by))
    return f'{score_words(main)} (' + '; '.join(
        f"{score_words(m)} on {', '.join(names)}"
        for m, names in by.items() if m != main) + ')'


def cell_score(runs: Sequence[Dict[str, Any]]) -> Tuple[str, Dict[str, str]]:
    r"""The score of a cell whose finished runs are :obj:`runs` (all of one
    dataset): its metric (``acc``, ``rocauc``) and the field of each
    split (``{'val': 'val_acc', 'test': 'test_acc'}``)."""
    run = runs[0] if runs else {}
    return run.get('metric', 'acc'), {
        split: score_field(run, split) for split in ('val', 'test')}


def correct(run: Dict[str, Any], metric: str) -> Optional[Fraction]:
    r"""The exact accuracy :obj:`metric` (``val_acc``, ``test_acc``) of a
    node run: correct nodes / nodes of the split, recovered from the stored
    float and ``dataset.split_sizes``; :obj:`None` without sizes."""
    sizes = run.get('dataset', {}).get('split_sizes')
    if metric not in SPLIT_OF or not sizes:
        return None
    size = int(sizes[SPLIT_OF[metric]])
    if size <= 0:
        return None
    count = round(float(run[metric]) * size)
    if abs(count - float(run[metric]) * size) > 1e-3:
        return None  # not a count over this split: no exact value
    return Fraction(count, size)


def exact_mean(runs: Sequence[Dict[str, Any]], metric: str
               ) -> Union[Fraction, float, None]:
    r"""The mean :obj:`metric` of :obj:`runs`: an exact :class:`Fraction`
    when every run gives its count (:func:`correct`), else the float
    mean; :obj:`None` without runs."""
    if not runs:
        return None
    counts = [correct(r, metric) for r in runs]
    if all(c is not None for c in counts):
        return sum(counts, Fraction(0)) / len(counts)
    return mean_std([r[metric] for r in runs])[0]


def _ties(best, mean) -> bool:
    if isinstance(best, Fraction) and isinstance(mean, Fraction):
        return mean == best
    return float(best) - float(mean) <= TIE


def _choose(groups: Dict[str, List[Dict[str, Any]]], expected: int,
            metric: str, order: Sequence[str] = ()
            ) -> Tuple[Optional[str], List[str]]:
    r"""The setting of :obj:`groups` with the best mean :obj:`metric`
    (:func:`exact_mean`), and the settings tied with it; only settings
    with every seed finished compete while there are any. A tie goes to
    the setting that comes first in :obj:`order` (the row's
    ``table.grid`` order: for ContraNorm's s, the smaller scale)."""
    if not groups:
        return None, []
    full = {s: g for s, g in groups.items() if len(g) >= expected} or groups
    means = {s: exact_mean(g, metric) for s, g in full.items()}
    best = max(means.values())
    rank = {s: k for k, s in enumerate(order)}
    tied = sorted((s for s in full if _ties(best, means[s])),
                  key=lambda s: rank.get(s, len(rank)))
    return tied[0], tied[1:]


def _tie_text(setting: str, runs: List[Dict[str, Any]], test: str) -> str:
    r"""``s=0.8: 87.98 ± 1.27``: a tied setting and its test score, the
    field :obj:`test` (%, mean ± std over its seeds)."""
    mean, std = mean_std([100 * r[test] for r in runs])
    return f'{setting}: {mean:.2f} ± {std:.2f}'


def _at_scales(groups: Dict[str, List[Dict[str, Any]]],
               runs: List[Dict[str, Any]], compared: Optional[str]) -> str:
    r"""gnorm's test accuracy at the scales of the authors' :obj:`runs`
    (:obj:`groups`: gnorm's finished runs of the cell by setting), as a
    clause; empty where gnorm ran none of them."""
    said = []
    for run in runs:
        ours = groups.get(setting_label({'norm.scale': run['scale']}), [])
        if ours:
            mean, std = mean_std([100 * r['test_acc'] for r in ours])
            said.append(f"{mean:.2f} ± {std:.2f} at s = {run['scale']:g} "
                        f"({plural(len(ours), 'seed')})")
    if not said:
        return ''
    return (f"; gnorm at the same scales: {'; '.join(said)}"
            + (f' (seed by seed, with a permutation test: {compared})'
               if compared else ''))


def _selected(groups: Dict[str, List[Dict[str, Any]]], expected: int,
              order: Sequence[str], selection: str, default: Optional[str],
              fields: Dict[str, str]) -> Tuple[Optional[str], List[str]]:
    r"""The setting a :obj:`selection` shows and the settings tied with
    it: ``val``/``test`` choose by that mean (of the split's field in
    :obj:`fields`), ``default`` is the row's default setting (never
    tied)."""
    if selection == 'default':
        return default, []
    return _choose(groups, expected, fields[selection], order)


def summarise(todo: List[Dict[str, Any]], found: Dict[str, Dict[str, Any]],
              paper: Dict, flag: Optional[Dict[str, Any]] = None,
              notes: Optional[Dict] = None,
              authors: Optional[Dict] = None,
              compared: Optional[str] = None,
              defaults: Optional[Dict[str, str]] = None
              ) -> List[Dict[str, Any]]:
    r"""One record per (dataset, row, depth, selection) of the cells
    :obj:`todo` (with their composed ``runs``): test accuracy mean and std
    over the seeds of the selected setting, counting only the finished
    runs of :obj:`found` whose config is that of one of the cell's runs;
    the paper's value and the difference. Rows with several settings get two
    selections: ``val`` (best mean validation accuracy) and ``test`` (best
    mean test accuracy: optimistic), and a third, ``default``, where
    :obj:`defaults` (row -> the label of its default setting) names one of
    its settings: the row at its default, for the budget-matched
    comparison. A record of a row in
    ``flag['rows']`` more than ``flag['paper_stds']`` paper stds from the
    paper gets a ``note`` (from :obj:`notes`, or that none is known), and,
    where :obj:`authors` (:func:`read_authors`) ran the cell, gnorm's
    accuracy at the scales they ran. ``flags`` are its sanity flags and
    ``at_chance`` whether they say it learned nothing
    (:func:`gnorm.study.findings.sanity.at_chance`)."""
    flag = flag or {}
    notes, authors = notes or {}, authors or {}
    defaults = defaults or {}
    records = []
    # In the table's order: datasets, rows, depths as the spec lists them.
    for cell in sorted(todo, key=lambda c: c.get('position', 0)):
        groups: Dict[str, List[Dict[str, Any]]] = {}
        for run in cell['runs']:
            if run['key'] in found:
                groups.setdefault(run['setting'], []).append(
                    found[run['key']])
        metric, fields = cell_score([r for g in groups.values() for r in g])
        several = len(cell['settings']) > 1
        where = (cell['dataset'], cell['row'], cell['depth'])
        order = [setting_label(s) for s in cell['settings']]
        default = defaults.get(cell['row'])
        selections = ('val', 'test') if several else ('val', )
        if several and default in order:
            selections += ('default', )
        for selection in selections:
            setting, tied = _selected(groups, cell['expected'], order,
                                      selection, default, fields)
            chosen = groups.get(setting, [])
            test_mean, test_std = mean_std(
                [100 * r[fields['test']] for r in chosen])
            val_mean, _ = mean_std([100 * r[fields['val']] for r in chosen])
            p_mean, p_std = paper.get(where, (None, None))
            diff = (None if test_mean is None or p_mean is None
                    else test_mean - p_mean)
            stds = None if diff is None or not p_std else diff / p_std
            note = None
            if (selection != 'default'
                    and cell['row'] in flag.get('rows', []) and stds is not None
                    and abs(stds) > flag.get('paper_stds', 2)):
                note = notes.get(where, notes.get(
                    (*where[:2], None), 'no explanation known yet: the '
                    "authors' code was not run at this cell"))
                if where in authors:
                    note += _at_scales(groups, authors[where], compared)
            cell_runs = sum(len(g) for g in groups.values())
            cell_expected = len(cell['settings']) * cell['expected']
            erank = [r.get('collapse', {}).get('effective_rank')
                     for r in chosen]
            pooled = pooled_chance(chosen)
            records.append(dict(
                dataset=cell['dataset'], row=cell['row'],
                layers=cell['depth'], metric=metric,
                selection=selection if several else '',
                setting=setting if several else None,
                settings_run=len(groups), settings=len(cell['settings']),
                runs=len(chosen), expected=cell['expected'],
                cell_runs=cell_runs, cell_expected=cell_expected,
                complete=cell_runs == cell_expected,
                test_mean=test_mean, test_std=test_std, val_mean=val_mean,
                paper_mean=p_mean, paper_std=p_std, diff=diff,
                diff_paper_stds=stds, note=note,
                ties='; '.join(_tie_text(t, groups[t], fields['test'])
                               for t in tied),
                flags=flags(chosen, cell['expected'], pooled),
                one_class_seeds=one_class_count(chosen),
                argmax_note=argmax_note(chosen),
                diagnosis=cell_diagnosis(chosen),
                chance_share=pooled and 100 * pooled.chance,
                chance_threshold=pooled and 100 * pooled.threshold,
                chance_z=pooled and pooled.z,
                modified_runs=sum(bool((r.get('source') or {}).get(
                    'modified')) for r in chosen),
                test_by_seed={value(r, 'seed'): 100 * r[fields['test']]
                              for r in chosen},
                fingerprint_by_seed={
                    value(r, 'seed'): r.get('dataset', {}).get(
                        'split_fingerprint') for r in chosen},
                test_train=split_test_train(chosen),
                erank=_curve(erank, _mean), erank_min=_curve(erank, min),
                erank_max=_curve(erank, max),
            ))
            records[-1]['at_chance'] = at_chance(records[-1])
    # A cell without runs is scored as its dataset's cells with runs.
    metric_of = {r['dataset']: r['metric'] for r in records if r['runs']}
    for r in records:
        r['metric'] = metric_of.get(r['dataset'], r['metric'])
    return records


def split_of(run: Dict[str, Any]) -> Optional[str]:
    r"""What identifies the split :obj:`run` trained and was tested on:
    its recorded split fingerprint (:func:`gnorm.data.split_fingerprint`
    of its masks), else, for a run that records none, its config's split,
    split index, test set and, for ``split: random``, seed; :obj:`None`
    for a run with neither."""
    recorded = (run.get('dataset') or {}).get('split_fingerprint')
    if recorded:
        return recorded
    config = run.get('config') or {}
    return json.dumps(config_split(config)) if 'split' in config else None


def split_test_train(runs: Sequence[Dict[str, Any]]) -> Optional[float]:
    r"""The mean :math:`n_\mathrm{test}/n_\mathrm{train}` of :obj:`runs`
    (a row's seeds) where they train on different splits of one pool of
    nodes, for the corrected resampled t; :obj:`None` where every run has
    the same split (the paired t). Decided from the runs' recorded splits
    (:func:`split_of`: fingerprints of the masks), whatever made them
    (``split: random``, the dataset's stored splits indexed by seed, a
    user's list), not from the config's split name; the sizes are each
    run's recorded ``dataset.split_sizes``. Raises :class:`GnormError`
    for runs on different splits that record no sizes: the corrected t
    needs them, and the plain paired t would be too narrow."""
    splits = {split_of(r) for r in runs}
    if len(splits) < 2:
        return None
    ratios = []
    for r in runs:
        sizes = (r.get('dataset') or {}).get('split_sizes')
        if not sizes or not sizes[0]:
            raise GnormError(
                f"runs of {value(r, 'tag') or 'a row'} train on different "
                f"splits but {r.get('path') or 'one of them'} records no "
                f"split sizes (dataset.split_sizes): the corrected "
                f"resampled t needs n_test/n_train; re-run it")
        ratios.append(sizes[2] / sizes[0])
    return sum(ratios) / len(ratios)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _curve(curves: List[Optional[List[float]]], how) -> Optional[List]:
    r""":obj:`how` (mean, min, max) of :obj:`curves` per layer; :obj:`None`
    if no curve."""
    curves = [c for c in curves if c]
    if not curves:
        return None
    return [how(v) for v in zip(*curves)]


# How far a cell may lie from the paper's value and still reproduce it:
# within this many of the paper's standard deviations, or, for a score
# without counts (ROC-AUC), within this many points.
REPRODUCED = {'paper_stds': 2.0, 'points': 1.5}


def reproduced(record: Dict[str, Any], rule: Dict[str, float]
               ) -> Optional[bool]:
    r"""Whether a cell :obj:`record` reproduces the paper's value: its
    test mean within ``rule['paper_stds']`` of the paper's stds (accuracy)
    or within ``rule['points']`` points (ROC-AUC) of it; :obj:`None`
    without runs, without every seed, or without a paper value."""
    if record['diff'] is None or record['runs'] < record['expected']:
        return None
    if record.get('metric', 'acc') == 'acc':
        return abs(record['diff']) <= rule['paper_stds'] * record['paper_std']
    return abs(record['diff']) <= rule['points']
