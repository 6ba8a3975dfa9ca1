r"""gnorm.study.stats against values computed by hand and by scipy: the
p-value of every interval, Nadeau & Bengio's corrected resampled t,
Holm's step-down adjustment and the verdict read from an adjusted p."""
import math

import pytest
from scipy import stats as scipy_stats

from gnorm.study import stats

A = {0: 81.2, 1: 79.8, 2: 80.5, 3: 82.0, 4: 80.1}
B = {0: 82.0, 1: 80.9, 2: 81.1, 3: 83.2, 4: 80.6}


def test_paired_p_is_scipys_paired_t_test():
    found = stats.paired_interval(A, B)
    expected = scipy_stats.ttest_rel(list(B.values()), list(A.values()))
    assert found.p == pytest.approx(expected.pvalue, rel=1e-10)
    assert found.method == stats.PAIRED_T
    low, high = expected.confidence_interval(0.95)
    assert (found.lo, found.hi) == pytest.approx((low, high), rel=1e-10)


def test_welch_p_is_scipys():
    found = stats.welch_interval(list(A.values()), list(B.values()))
    expected = scipy_stats.ttest_ind(list(B.values()), list(A.values()),
                                     equal_var=False)
    assert found.p == pytest.approx(expected.pvalue, rel=1e-10)
    assert found.method == stats.WELCH


def test_corrected_resampled_t_by_hand():
    # k = 5 differences, n_test / n_train = 1/3 (a 60/20/20 split):
    # variance of the mean (1/5 + 1/3) s^2 instead of s^2 / 5.
    diffs = [B[s] - A[s] for s in sorted(A)]
    k, mean = 5, sum(diffs) / 5
    var = sum((d - mean) ** 2 for d in diffs) / (k - 1)
    se = math.sqrt((1 / k + 1 / 3) * var)
    t = mean / se
    q = scipy_stats.t.ppf(0.975, k - 1)
    found = stats.corrected_interval(A, B, 1 / 3)
    assert found.method == stats.CORRECTED_T
    assert found.diff == pytest.approx(mean)
    assert (found.lo, found.hi) == pytest.approx((mean - q * se,
                                                  mean + q * se))
    assert found.p == pytest.approx(2 * scipy_stats.t.sf(abs(t), k - 1))
    # wider than the plain paired t, by sqrt(1 + k * n_test / n_train)
    naive = stats.paired_interval(A, B)
    assert (found.hi - found.lo) / (naive.hi - naive.lo) == \
        pytest.approx(math.sqrt(1 + 5 / 3))
    assert found.p > naive.p


def test_compare_picks_the_corrected_t_for_resampled_splits():
    assert stats.compare(A, B, 'seed', test_train=0.25).method == \
        stats.CORRECTED_T
    assert stats.compare(A, B, 'seed').method == stats.PAIRED_T
    assert stats.compare(A, B, 'none').method == stats.WELCH


def test_holm_by_hand():
    # sorted: .01 (x4 = .04), .02 (x3 = .06), .03 (x2 = .06), .04 (x1 = .04
    # -> kept monotone at .06)
    found = stats.holm([0.03, 0.01, None, 0.04, 0.02])
    assert found[2] is None  # no test: not in the family (m = 4)
    assert [round(p, 10) for p in found if p is not None] == \
        [0.06, 0.04, 0.06, 0.06]
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0]
    assert stats.holm([]) == []


def test_holm_never_rejects_less_than_bonferroni():
    ps = [0.001, 0.004, 0.012, 0.02, 0.2]
    holm = stats.holm(ps)
    assert all(h <= min(1, len(ps) * p) + 1e-15 for h, p in zip(holm, ps))
    assert all(h >= p for h, p in zip(holm, ps))


def test_family_verdict_reads_the_adjusted_p():
    assert stats.family_verdict(1.2, 0.01) == 'beats'
    assert stats.family_verdict(-1.2, 0.01) == 'loses'
    assert stats.family_verdict(1.2, 0.07) == 'not distinguishable'
    assert stats.family_verdict(1.2, None) is None
    # a cell that beats alone (p = .007) but not in a family of 40 (Holm)
    raw = [0.007] + [0.5] * 39
    assert stats.family_verdict(1.0, raw[0]) == 'beats'
    assert stats.family_verdict(1.0, stats.holm(raw)[0]) == \
        'not distinguishable'


def test_no_spread_gives_the_point_and_p_0_or_1():
    same = stats.paired_interval({0: 1.0, 1: 2.0}, {0: 2.0, 1: 3.0})
    assert (same.lo, same.hi, same.p) == (1.0, 1.0, 0.0)
    equal = stats.paired_interval({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0})
    assert equal.p == 1.0
