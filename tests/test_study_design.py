r"""What a verdict means: the test the design implies (paired studies on
resampled splits too), verdicts that say what was beaten (a row that
learned or one at chance), a family fixed in advance, exact tests beside
the t tests."""
import math

import numpy as np
import pytest

from conftest import comparison_lines
from scipy import stats as scipy_stats

from gnorm.study import stats
from gnorm.study.findings import compare as study_compare
from gnorm.study.findings import paired as study_paired
from gnorm.study.findings.sanity import NO_BETTER
from gnorm.study.spec.load import load_spec
from gnorm.study.words import verdicts as depth_words
from gnorm.study.words.flags import MEANING
from gnorm.study.words.paired import verdict_words


# --- paired studies choose their test from the design ----------------------

# Per-seed test accuracies (fractions) of a paired study on splits
# resampled from one pool: 8 seeds, every run on its own random split.
BASE = [0.60, 0.62, 0.58, 0.61, 0.63, 0.59, 0.60, 0.62]
DIFFS = [0.03, 0.09, -0.01, 0.07, 0.01, 0.06, 0.045, 0.0268]


def _node_run(row, seed, test, split='random'):
    r"""A finished node run of :obj:`row` on its split of :obj:`seed`
    (train 300, val 100, test 100 nodes: n_test/n_train = 1/3)."""
    return {
        'status': 'ok', 'tag': row, 'test_acc': test, 'val_acc': test,
        'selected_epoch': 5, 'best_epoch': 5, 'runtime_s': 1.0,
        'curve': {'epoch': [1, 2, 3, 4, 5], 'test_acc': [test] * 5},
        'dataset': {'split_sizes': [300, 100, 100],
                    'split_fingerprint': (f'{split}{seed}' if split == 'random'
                                          else split)},
        'config': {'seed': seed, 'split': split, 'tag': row}}


def _paired_records(split):
    spec = load_spec('sepnorm_molhiv_cpu')
    spec.table.update(seeds=list(range(8)), paper={}, labels={})
    runs = [_node_run('none', s, BASE[s], split) for s in range(8)]
    runs += [_node_run('contranorm', s, BASE[s] + DIFFS[s], split)
             for s in range(8)]
    return spec, study_paired.summarise(spec, runs, ['none', 'contranorm'])


def test_a_paired_study_on_resampled_splits_uses_the_corrected_t():
    r"""Pairs on splits resampled from one pool overlap in training: the
    paired study reads them with the corrected resampled t (as a depth
    study does), the plain paired t beside it; here the plain t would
    call the row better and the corrected one cannot tell them apart."""
    spec, (_, row) = _paired_records('random')
    a = {s: 100 * BASE[s] for s in range(8)}
    b = {s: 100 * (BASE[s] + DIFFS[s]) for s in range(8)}
    corrected = stats.corrected_interval(a, b, 100 / 300, spec.level)
    naive = stats.paired_interval(a, b, spec.level)
    assert row['method'] == stats.CORRECTED_T
    assert row['test_train'] == pytest.approx(1 / 3)
    assert (row['test_lo'], row['test_hi'], row['test_p']) == \
        pytest.approx((corrected.lo, corrected.hi, corrected.p))
    assert (row['test_naive_lo'], row['test_naive_p']) == \
        pytest.approx((naive.lo, naive.p))
    assert naive.p < 0.05 < corrected.p  # the design decides the verdict
    assert verdict_words(row, 'none').startswith('undecided against none')


def test_a_paired_study_on_a_fixed_split_keeps_the_paired_t():
    spec, (_, row) = _paired_records('public')
    assert row['method'] == stats.PAIRED_T and row['test_train'] is None
    assert row['test_naive_p'] is None
    assert verdict_words(row, 'none') == 'better than none'


@pytest.mark.parametrize('pairing,ratio,method', [
    ('seed', None, stats.PAIRED_T), ('seed', 0.25, stats.CORRECTED_T),
    ('none', None, stats.WELCH), ('none', 0.25, stats.WELCH)])
def test_one_function_decides_the_test(pairing, ratio, method):
    assert stats.design_test(pairing, ratio) == method
    a, b = {0: 1.0, 1: 2.0, 2: 4.0}, {0: 2.0, 1: 2.5, 2: 6.0}
    assert stats.compare(a, b, pairing, test_train=ratio).method == method


# --- verdicts say what was beaten ------------------------------------------

def _cell(row, values, depth=2, flags=()):
    return dict(dataset='cora', row=row, layers=depth, selection='',
                complete=True, cell_runs=len(values), runs=len(values),
                test_by_seed=dict(enumerate(values)),
                fingerprint_by_seed={}, flags=list(flags), metric='acc')


TRAINED = [60.0, 62.0, 61.0, 63.0, 62.5]
COLLAPSED = [7.79] * 5
ONE_CLASS_ELSEWHERE = [30.19, 30.19, 30.2, 30.19, 30.18]


@pytest.mark.parametrize('ours,other,kind', [
    ((TRAINED, ()), ([50.0, 51.0, 49.0, 50.5, 50.2], ()), 'beats'),
    ((TRAINED, ()), (COLLAPSED, (NO_BETTER,)), study_compare.OVER_CHANCE),
    ((COLLAPSED, (NO_BETTER,)), (TRAINED, ()), study_compare.UNDER_CHANCE),
    ((COLLAPSED, (NO_BETTER,)), (ONE_CLASS_ELSEWHERE, (NO_BETTER,)),
     study_compare.BOTH_AT_CHANCE),
])
def test_a_verdict_over_a_row_at_chance_is_its_own_kind(ours, other, kind):
    records = [_cell('contranorm', ours[0], flags=ours[1]),
               _cell('layernorm', other[0], flags=other[1])]
    found = study_compare.family(records, [('contranorm', ['layernorm'])],
                                 'none', 0.95)
    assert found['cora', 'contranorm', 'layernorm', 2].verdict == kind
    lines = comparison_lines(records, 'contranorm', ['layernorm'],
                                     'none', 0.95)
    words = next(x for x in lines if x.startswith('In words'))
    counts = next(x for x in lines if x.startswith('Verdicts: '))
    assert f'1 {kind}' in counts
    if kind == study_compare.OVER_CHANCE:
        assert 'contranorm trains where layernorm is no better than ' \
            'chance at cora L=2' in words and 'beats' not in words


def test_no_better_than_chance_is_worded_as_a_pooled_one_sided_test():
    words = MEANING[NO_BETTER]
    assert 'pooled' in words and 'one-sided' in words
    assert 'the test nodes the seeds\' splits share' in words
    assert 'two binomial standard errors' not in words


def test_a_flagged_cell_shows_its_pooled_z_and_its_one_class_seeds():
    from gnorm.study.reports.depth import _cell as cell_text
    record = dict(runs=10, expected=10, test_mean=23.14, test_std=9.0,
                  setting=None, ties='', flags=[NO_BETTER], at_chance=True,
                  paper_mean=None,
                  not_run=None, one_class_seeds=4, chance_z=0.41,
                  chance_share=35.07)
    text = cell_text(record)
    assert 'flagged: no better than the majority class' in text
    assert 'pooled z 0.41 against chance 35.07' in text
    assert '4 of 10 seeds predict one class' in text
    record['one_class_seeds'] = None  # runs older than the record
    assert 'the flag rests on the pooled test alone' in cell_text(record)


# --- the family is fixed in advance ----------------------------------------

def test_a_comparison_not_run_counts_in_the_family_as_p_1():
    r"""Planned comparisons without runs enter Holm's family as p = 1:
    the family's size is what the spec plans, and adding cells can only
    add verdicts."""
    base = [_cell('contranorm', TRAINED), _cell('pairnorm',
                                                [58.0, 61.0, 59.0, 60.0, 60.5])]
    planned = base + [
        {**_cell('contranorm', [], depth=d), 'complete': False,
         'cell_runs': 0, 'not_run': 'GPU work'} for d in (4, 8)] + [
        {**_cell('pairnorm', [], depth=d), 'complete': False,
         'cell_runs': 0, 'not_run': 'GPU work'} for d in (4, 8)]
    alone = study_compare.family(base, [('contranorm', ['pairnorm'])],
                                 'seed', 0.95)
    fixed = study_compare.family(planned, [('contranorm', ['pairnorm'])],
                                 'seed', 0.95)
    key = ('cora', 'contranorm', 'pairnorm', 2)
    assert study_compare.planned(fixed) == 3
    assert study_compare.tested(fixed) == 1
    assert fixed[key].p_adj == pytest.approx(min(1, 3 * alone[key].p_adj))
    assert depth_words.family_words(study_compare.family_size(fixed),
                                    'holm') == \
        'Holm-adjusted over a family of 3 planned, 1 run'


def test_a_spec_declares_its_primary_view():
    from gnorm.study.spec.check import check_spec
    from gnorm.study.spec.table import SpecError
    spec = load_spec('table3_fair')
    spec.table['primary'] = 'budget'
    check_spec(spec)
    spec.table['primary'] = 'cheapest'
    with pytest.raises(SpecError, match='table.primary must be one of '
                       'tuned, budget'):
        check_spec(spec)


def test_the_secondary_view_is_labelled_and_not_read_as_the_verdict():
    from gnorm.study.reports import depth as depth_report
    spec = load_spec('table3_paper')
    shown = depth_report.primary(spec)
    assert shown == 'val'
    spec.table['primary'] = 'budget'
    assert depth_report.primary(spec) == 'default'


# --- exact tests beside t ---------------------------------------------------

def test_sign_flip_p_is_scipys_exact_permutation_test():
    rng = np.random.default_rng(0)
    for n in (3, 6, 10):
        diffs = rng.normal(0.5, 1.0, n).round(3)
        ours, exact = stats.sign_flip_p(diffs)
        ref = scipy_stats.permutation_test(
            (diffs,), np.mean, permutation_type='samples',
            alternative='two-sided', n_resamples=np.inf).pvalue
        assert exact and ours == pytest.approx(ref)


def test_the_exact_tests_floor_and_the_seeds_it_needs():
    assert stats.smallest_sign_flip_p(10) == pytest.approx(2 / 1024)
    assert stats.exact_floor(stats.WELCH, 5) == pytest.approx(2 / 252)
    # Holm's first threshold over 32 at 5 %: 0.05/32 = 0.00156 > 2/2^11
    assert stats.seeds_for_exact(stats.PAIRED_T, 0.05 / 32) == 11
    assert stats.seeds_for_exact(stats.WELCH, 0.05 / 40) == 7


def test_a_report_says_when_its_verdicts_rest_on_normality():
    r"""5 + 5 seeds, a family of 40: the exact permutation test cannot go
    below 2/252 = .0079, above Holm's first threshold .00125; the words
    say so and how many seeds an exact verdict would need."""
    records = []
    for depth in range(20):
        records += [_cell('contranorm', [x + depth for x in TRAINED], depth),
                    _cell('pairnorm', [x + depth - 5 for x in TRAINED],
                          depth)]
        records += [_cell('layernorm', [x + depth for x in TRAINED], depth)]
    found = study_compare.family(
        records, [('contranorm', ['pairnorm', 'layernorm'])], 'none', 0.95)
    words = depth_words.exact_words(
        study_compare.exact_power(found, 0.95, 'holm'), 0.95, 'holm')
    assert 'cannot give a p below 0.007937, above Holm\'s first threshold ' \
        '0.00125 (α = 0.05 over 40)' in words
    assert 'rests on the t test\'s assumption' in words
    assert words.endswith('An exact verdict would need 7 seeds per row.')
    # the words change, the verdicts do not
    assert {f.verdict for k, f in found.items() if k[2] == 'pairnorm'} == \
        {'beats'}


# --- Holm and NaN -----------------------------------------------------------

def test_a_nan_p_is_left_out_of_the_family_not_voiding_it():
    adjusted = stats.holm([0.01, math.nan, 0.02, 0.03])
    assert adjusted[1] is None
    assert adjusted[0] == pytest.approx(0.03)
    assert adjusted[2] == pytest.approx(0.04)
    assert adjusted[3] == pytest.approx(0.04)


# --- a study of baselines against their paper -------------------------------

def _paper_cell(metric, diff, std, runs=10):
    return dict(dataset='d', row='gcn', layers=3, selection='', runs=runs,
                expected=10, metric=metric, diff=diff, paper_std=std,
                paper_mean=40.0, test_mean=40.0 + diff)


@pytest.mark.parametrize('metric,diff,std,said', [
    ('acc', 3.0, 1.47, False), ('acc', -2.9, 1.47, True),
    ('rocauc', 1.4, 0.52, True), ('rocauc', -1.6, 0.52, False)])
def test_a_cell_reproduces_within_2_paper_stds_or_1_5_roc_auc_points(
        metric, diff, std, said):
    from gnorm.study.findings.select import REPRODUCED, reproduced
    assert reproduced(_paper_cell(metric, diff, std), REPRODUCED) is said
    assert reproduced(_paper_cell(metric, diff, std, runs=5),
                      REPRODUCED) is None  # not every seed yet


def test_per_dataset_overrides_go_to_that_datasets_runs_only():
    from gnorm.study.runs.compose import cells
    spec = load_spec('heterophily_baselines')
    found = {c['dataset']: c['base'] for c in cells(
        spec, ['chameleon_filtered', 'minesweeper'], ['gcn'], [3], [0])}
    assert 'model.hidden_channels=128' in found['minesweeper']
    assert not any('hidden_channels' in o
                   for o in found['chameleon_filtered'])


def test_the_residual_studies_pair_run_k_with_split_k():
    from conftest import compose_train
    for name in ('heterophily_baselines', 'strong_depth'):
        cfg = compose_train(f'experiment={name}',
                            'dataset=chameleon_filtered', 'seed=7')
        assert cfg.split == 'platonov' and cfg.split_index == 7
