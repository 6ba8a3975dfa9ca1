r"""What a verdict rests on, read from the runs: the test the splits imply
(decided from the runs' recorded splits, not the config's split name), a
chance screen that tells a row predicting one class from a working row
near its majority class (pooled over seeds whose test sets overlap),
equivalence within a margin beside difference, with the difference the
design can detect, and a report that refuses to screen without its data."""
import csv
import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from conftest import comparison_lines

from gnorm.errors import GnormError
from gnorm.study import stats
from gnorm.study.findings import compare as findings
from gnorm.study.findings import sanity
from gnorm.study.findings.select import split_test_train
from gnorm.study.spec.check import check_spec
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import SpecError


def _run(seed, split='platonov', split_index=None, fingerprint=None,
         sizes=(427, 302, 161), test=0.4):
    return {'status': 'ok', 'task': 'node', 'test_acc': test,
            'config': {'seed': seed, 'split': split,
                       'split_index': seed if split_index is None
                       else split_index, 'test_set': 'split'},
            'dataset': {'split_sizes': list(sizes),
                        'split_fingerprint': fingerprint}}


# --- the test the splits imply ---------------------------------------------

@pytest.mark.parametrize('split', ['platonov', 'geom_gcn', 'random'])
def test_seeds_on_different_stored_splits_get_the_corrected_t(split):
    r"""Seed k on the dataset's split k (Platonov's, Geom-GCN's) or on a
    random split of its own: the runs' fingerprints differ, so the seeds'
    training sets overlap and the corrected resampled t applies, with
    n_test/n_train from the recorded sizes. On the code before, only
    ``split: random`` got it."""
    runs = [_run(k, split, fingerprint=f'fp{k}') for k in range(10)]
    assert split_test_train(runs) == pytest.approx(161 / 427)


def test_the_configs_split_decides_only_where_no_fingerprint_is_recorded():
    by_index = [_run(k, 'geom_gcn') for k in range(5)]  # split_index = seed
    assert split_test_train(by_index) == pytest.approx(161 / 427)
    fixed = [_run(k, 'geom_gcn', split_index=0) for k in range(5)]
    assert split_test_train(fixed) is None
    # one fixed split, whatever the config calls it: the paired t
    same = [_run(k, 'random', fingerprint='one') for k in range(5)]
    assert split_test_train(same) is None


def test_resampled_runs_without_sizes_refuse_in_one_line():
    runs = [_run(k, fingerprint=f'fp{k}') for k in range(3)]
    del runs[1]['dataset']['split_sizes']
    with pytest.raises(GnormError, match='train on different splits but '
                       'one of them records no split sizes') as e:
        split_test_train(runs)
    assert '\n' not in str(e.value)


def test_no_exact_test_beside_the_corrected_t():
    a, b = {k: float(k) for k in range(10)}, {k: k + 0.5 for k in range(10)}
    assert stats.exact_p(a, b, stats.CORRECTED_T) is None
    assert stats.exact_p(a, b, stats.PAIRED_T) is not None


def test_the_committed_gcn_against_resnet_on_chameleon_filtered_is_no_win():
    r"""heterophily_baselines pairs seed k with Platonov's split k: with
    the corrected resampled t, GCN over ResNet on chameleon_filtered is
    no longer "beats"."""
    path = RESULTS / 'heterophily_baselines.csv'
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r['dataset'] ==
                'chameleon_filtered' and r['row'] == 'gcn']
    verdict = rows[0]['vs_resnet_verdict']
    assert verdict and verdict != 'beats'
    assert rows[0]['vs_resnet_method'] == stats.CORRECTED_T


# --- the chance screen --------------------------------------------------------

RESULTS = Path(__file__).resolve().parents[1] / 'experiments' / 'results'
POOL = 1800  # nodes of a pool whose splits put 450 in test (25 %)


def _test_sets(seeds, fixed=False, majority=0.35, rng=None):
    r"""Test sets of :obj:`seeds` splits of one pool of labelled nodes
    (the first ``majority`` share in class 0, the rest spread over 3
    classes), or one set for all with :obj:`fixed`."""
    rng = rng or random.Random(0)
    labels = [0 if i < majority * POOL else 1 + i % 3 for i in range(POOL)]
    sets = []
    for k in range(seeds):
        if not fixed or not sets:
            nodes = frozenset(rng.sample(range(POOL), 450))
            counts = [0] * 4
            for i in nodes:
                counts[labels[i]] += 1
            found = sanity.TestSet(nodes, counts)
        sets.append(found)
    return sets


def _screen(monkeypatch, sets, tests, predictions=None):
    runs = []
    for k, (found, test) in enumerate(zip(sets, tests)):
        run = {'task': 'node', 'test_acc': test, 'seed': k,
               'config': {'dataset': 'pool', 'seed': k}}
        if predictions is not None:
            run['test_predictions'] = {'class_counts': predictions[k]}
        runs.append(run)
    by_run = {id(r): s for r, s in zip(runs, sets)}
    monkeypatch.setattr(sanity, 'tested_nodes', lambda run: by_run[id(run)])
    return runs


def test_the_pooled_variance_counts_each_node_as_often_as_test_sets_hold_it(
        monkeypatch):
    r"""The pooled test's variance of Σ correct, computed from pairwise
    overlaps, equals the per-node reference m(1 - m) Σ_i c_i² (c_i: how
    many test sets hold node i), and the binomial's for disjoint sets."""
    sets = _test_sets(10)
    m = sum(s.majority * len(s.nodes) for s in sets) / (450 * 10)
    runs = _screen(monkeypatch, sets, [m] * 10)
    found = sanity.pooled_chance(runs)
    holds = {}
    for s in sets:
        for i in s.nodes:
            holds[i] = holds.get(i, 0) + 1
    per_node = sum(c * c for c in holds.values())
    # all majorities equal here only up to sampling: compare with the
    # weights the formula uses, run by run
    reference = sum(
        math.sqrt(a.majority * (1 - a.majority) * b.majority
                  * (1 - b.majority)) * len(a.nodes & b.nodes)
        for a, b in itertools.product(sets, sets))
    threshold_sd = (found.threshold - found.chance) * 4500 / sanity.CHANCE_Z
    assert threshold_sd ** 2 == pytest.approx(reference)
    assert reference == pytest.approx(m * (1 - m) * per_node, rel=0.02)
    disjoint = [sanity.TestSet(frozenset(range(450 * k, 450 * (k + 1))),
                               [158, 100, 100, 92]) for k in range(4)]
    runs = _screen(monkeypatch, disjoint, [0.40] * 4)
    found = sanity.pooled_chance(runs)
    c = 158 / 450
    assert found.z == pytest.approx(
        (0.40 - c) * 1800 / math.sqrt(1800 * c * (1 - c)))


def test_a_working_row_near_its_majority_class_is_not_flagged(monkeypatch):
    r"""Each seed 4.2 points above a 35 % majority class: within two
    binomial standard errors of it on each of its 450 test nodes (the old
    per-seed screen flagged such a row), but pooled over 10 seeds, z > 3
    even with the overlap counted: not flagged."""
    sets = _test_sets(10)
    tests = [s.majority + 0.042 for s in sets]
    for s, t in zip(sets, tests):
        m = s.majority
        assert t <= m + 2 * math.sqrt(m * (1 - m) / 450)
    runs = _screen(monkeypatch, sets, tests,
                   predictions=[[200, 150, 60, 40]] * 10)
    found = sanity.pooled_chance(runs)
    assert found.z > 3
    assert sanity.flags(runs, 10) == []


def test_a_row_at_its_majority_class_is_flagged_however_many_seeds_share_a_split(
        monkeypatch):
    r"""Seeds on one fixed split add no test nodes: their pooled z is
    that of one test set, so 10 seeds a point above chance stay flagged,
    as one seed would."""
    sets = _test_sets(10, fixed=True)
    runs = _screen(monkeypatch, sets, [sets[0].majority + 0.01] * 10)
    found = sanity.pooled_chance(runs)
    m = sets[0].majority
    assert found.z == pytest.approx(0.01 / math.sqrt(m * (1 - m) / 450))
    assert sanity.NO_BETTER in sanity.flags(runs, 10)


def test_a_row_that_predicts_one_class_reads_so(monkeypatch):
    sets = _test_sets(10)
    one = [[440, 5, 3, 2]] * 7 + [[200, 150, 60, 40]] * 3
    runs = _screen(monkeypatch, sets, [s.majority for s in sets],
                   predictions=one)
    assert sanity.one_class_count(runs) == 7
    assert sanity.flags(runs, 10)[:2] == [sanity.ONE_CLASS, sanity.NO_BETTER]
    records = [_record('contranorm', [60.0, 61, 62, 63, 61]),
               _record('layernorm', [35.0] * 5, [sanity.ONE_CLASS])]
    lines = comparison_lines(records, 'contranorm', ['layernorm'], 'none',
                             0.95)
    assert any('layernorm predicts one class at cora L=2' in x
               for x in lines)
    words = next(x for x in lines if x.startswith('In words'))
    assert 'contranorm trains where layernorm is no better than chance' \
        in words


def test_a_roc_auc_row_is_screened_against_a_random_ranking(monkeypatch):
    sets = [sanity.TestSet(frozenset(range(400 * k, 400 * (k + 1))),
                           [300, 100]) for k in range(3)]
    runs = _screen(monkeypatch, sets, [0.0] * 3)
    for r in runs:
        r.update(metric='rocauc', test_metric=0.52)
    found = sanity.pooled_chance(runs)
    sd = math.sqrt(401 / (12 * 100 * 300))
    assert found.z == pytest.approx(3 * 0.02 / math.sqrt(3 * sd ** 2))
    assert sanity.flags(runs, 3) == [sanity.NO_BETTER_AUC]


def test_a_report_refuses_to_screen_runs_whose_data_does_not_load(
        tmp_path, monkeypatch):
    r"""Without the data, the screen never answers "not flagged": one
    line names the dataset and the mirror."""
    monkeypatch.setattr(sanity, '_TEST_SETS', {})
    monkeypatch.setenv('GNORM_DATA_MIRROR', str(tmp_path / 'empty'))
    run = {'task': 'node', 'test_acc': 0.4,
           'config': {'dataset': {'name': 'squirrel_filtered',
                                  'default_split': 'platonov'},
                      'split': 'platonov', 'split_index': 3, 'seed': 3,
                      'test_set': 'split',
                      'data': {'root': str(tmp_path / 'data')}}}
    with pytest.raises(GnormError) as e:
        sanity.pooled_chance([run])
    said = str(e.value)
    assert said.startswith('cannot screen the runs of squirrel_filtered for '
                           'chance: its data does not load (GNORM_DATA_'
                           f'MIRROR={tmp_path / "empty"}')
    assert '\n' not in said


# --- equivalence beside difference ------------------------------------------

def test_equivalence_p_is_two_one_sided_t_tests():
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.2, 0.6, 10)
    a = {k: 50.0 + 0.3 * k for k in range(10)}
    b = {k: a[k] + d for k, d in enumerate(diffs)}
    found = stats.paired_interval(a, b)
    lower = scipy_stats.ttest_1samp(diffs, -1.0, alternative='greater')
    upper = scipy_stats.ttest_1samp(diffs, 1.0, alternative='less')
    assert stats.equivalence_p(found, 1.0) == pytest.approx(
        max(lower.pvalue, upper.pvalue))
    # the corrected t's inflated variance widens it: less equivalence
    corrected = stats.corrected_interval(a, b, 0.4)
    assert stats.equivalence_p(corrected, 1.0) > \
        stats.equivalence_p(found, 1.0)
    welch = stats.welch_interval(list(a.values()), list(b.values()))
    ref = scipy_stats.ttest_ind(list(b.values()), list(a.values()),
                                equal_var=False)
    assert welch.df == pytest.approx(ref.df)
    assert welch.diff / welch.se == pytest.approx(ref.statistic)


def test_detectable_is_the_difference_found_80_percent_of_the_time():
    r"""Paired differences drawn with the observed spread and a true mean
    of the detectable size pass the two-sided t test at α/m in about 80 %
    of draws."""
    found = stats.paired_interval({k: 0.0 for k in range(10)},
                                  {k: float(k % 3) for k in range(10)})
    alpha = 0.05 / 40
    size = stats.detectable(found, alpha)
    sd = found.se * math.sqrt(10)
    rng = np.random.default_rng(0)
    draws = rng.normal(size, sd, (20000, 10))
    p = scipy_stats.ttest_1samp(draws, 0.0, axis=1).pvalue
    assert (p < alpha).mean() == pytest.approx(0.8, abs=0.015)
    assert stats.detectable(found, alpha, 0.5) < size


def _record(row, values, flags=(), depth=2):
    return dict(dataset='cora', row=row, layers=depth, selection='',
                complete=True, cell_runs=len(values), runs=len(values),
                test_by_seed=dict(enumerate(values)),
                fingerprint_by_seed={}, flags=list(flags), metric='acc')


def test_not_distinguishable_reads_equivalent_or_undecided():
    rng = np.random.default_rng(0)
    base = list(60 + rng.normal(0, 2, 10))
    close = [b + d for b, d in zip(base, rng.normal(0.05, 0.2, 10))]
    wide = [b + d for b, d in zip(base, rng.normal(0.3, 4.0, 10))]
    records = [_record('contranorm', close), _record('layernorm', base),
               _record('contranorm', wide, depth=4),
               _record('layernorm', base, depth=4)]
    found = findings.family(records, [('contranorm', ['layernorm'])],
                            'seed', 0.95)
    assert found['cora', 'contranorm', 'layernorm', 2].verdict == \
        findings.EQUIVALENT
    assert found['cora', 'contranorm', 'layernorm', 4].verdict == \
        findings.UNDECIDED
    lines = comparison_lines(records, 'contranorm', ['layernorm'], 'seed',
                             0.95)
    words = next(x for x in lines if x.startswith('In words'))
    assert 'is equivalent within ±1 at cora L=2' in words
    assert 'is undecided at ±1 at cora L=4' in words
    table = next(x for x in lines if x.startswith('| cora | 4 |'))
    assert 'points wide' in table
    sensitivity = next(x for x in lines if x.startswith('What this design'))
    assert 'with 10 paired seeds (paired t), differences under' in \
        sensitivity


def test_a_margin_that_is_not_a_positive_number_is_refused(tmp_path):
    from gnorm.study.spec.check import _check_margin
    from test_queue import tiny_spec
    spec = load_spec(str(tiny_spec(tmp_path)))
    spec.table['margin'] = 'one'
    with pytest.raises(SpecError, match='table.margin must be a number > 0'):
        check_spec(spec)  # the whole check reads it
    spec.table['margin'] = 2.5
    _check_margin(spec)
    for bad in (0, -1, float('nan'), float('inf'), True):
        spec.table['margin'] = bad
        with pytest.raises(SpecError, match='table.margin must be a number '
                           '> 0'):
            _check_margin(spec)


@pytest.mark.slow  # ~20 s: plans heterophily_baselines before it refuses
def test_regenerating_a_report_without_its_data_refuses_in_one_line(
        tmp_path, monkeypatch, capsys):
    from gnorm.study.cli import main as study
    monkeypatch.setattr(sanity, '_TEST_SETS', {})
    monkeypatch.chdir(tmp_path)  # no data/ folder with processed graphs
    monkeypatch.setenv('GNORM_DATA_MIRROR', str(tmp_path / 'empty'))
    out = tmp_path / 'out'
    assert study(['heterophily_baselines', '--report-only', '--out',
                  str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        'error: no report: cannot screen the runs of ')
    assert f'GNORM_DATA_MIRROR={tmp_path / "empty"}' in err[0]
    assert not out.exists()  # no report says "not flagged"


def test_one_class_by_argmax_is_a_note_where_the_score_is_a_ranking(
        monkeypatch):
    r"""Ten runs that rank well above chance (ROC-AUC 0.73) but put every
    test node in the majority class by argmax (normal at 20 % positives):
    not flagged; the cell notes the class counts. Scored by accuracy, the
    same predictions are a chance flag."""
    sets = [sanity.TestSet(frozenset(range(400 * k, 400 * (k + 1))),
                           [320, 80]) for k in range(10)]
    runs = _screen(monkeypatch, sets, [0.0] * 10, [[400, 0]] * 10)
    for r in runs:
        r.update(metric='rocauc', test_metric=0.73)
        r['test_predictions']['label_counts'] = [320, 80]
    assert sanity.flags(runs, 10) == []
    note = sanity.argmax_note(runs)
    assert note == {'seeds': 10, 'runs': 10, 'predicted': [4000, 0],
                    'labels': [3200, 800]}
    from gnorm.study.reports.depth import chance_text
    text = chance_text({'flags': [], 'at_chance': False,
                        'argmax_note': note, 'chance_z': 31.5,
                        'runs': 10, 'one_class_seeds': 10})
    assert 'predicted [4000, 0], labels [3200, 800]' in text
    assert 'its ranking test decides' in text
    for r in runs:
        r.pop('metric')
    assert sanity.ONE_CLASS in sanity.flags(runs, 10)
