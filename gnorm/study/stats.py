r"""The statistics of a study, in one place: how two rows of runs compare.

A comparison of row B with row A is the difference of their means,
:math:`\Delta = \bar b - \bar a`, with a confidence interval from
:mod:`scipy.stats`:

* **paired by seed** (:func:`paired_interval`), where seed :math:`k` of
  every row draws the same split and data order (``table.pairing: seed``):
  the one-sample t interval of the per-seed differences
  :math:`d_k = b_k - a_k` over the seeds both rows finished,
  :math:`\bar d \pm t_{(1 + \mathrm{level}) / 2,\, n - 1}\, s_d / \sqrt n`;
* **unpaired** (:func:`welch_interval`), where the split is fixed and seeds
  only draw initialisations (``table.pairing: none``): Welch's interval,
  :math:`\bar b - \bar a \pm t_{(1 + \mathrm{level}) / 2,\, \nu}
  \sqrt{s_a^2 / n_a + s_b^2 / n_b}` with the Welch–Satterthwaite
  degrees of freedom :math:`\nu`.

:func:`verdict` reads an interval: B **beats** A when the interval lies
above 0, **loses** when it lies below, and is otherwise **not
distinguishable** from A with these seeds. Standard deviations of the
intervals use ddof=1; the means ± std shown beside them in the reports use
ddof=0 (:func:`gnorm.results.mean_std`).
"""
import itertools
import math
import random
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from scipy import stats

from gnorm.results import mean_std

LEVEL = 0.95
PAIRINGS = ('seed', 'none')
VERDICTS = ('beats', 'loses', 'not distinguishable')


@dataclass(frozen=True)
class Interval:
    r"""A difference of means with its confidence interval: ``lo`` and
    ``hi`` are :obj:`None` when there are too few values for one; ``n`` is
    the number of paired seeds (paired) or ``(n_a, n_b)`` as text
    (unpaired); ``seeds``: the paired seeds, ``diffs``: the difference of
    each."""
    diff: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    n: str
    paired: bool
    seeds: tuple = ()
    diffs: tuple = ()

    @property
    def verdict(self) -> Optional[str]:
        return verdict(self.lo, self.hi)


def _bounds(test, *samples, level: float) -> tuple:
    r"""The :obj:`level` interval of scipy's :obj:`test` of
    :obj:`samples` (its warning of nearly equal values silenced: the
    interval is then narrow, as it should be)."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        low, high = test(*samples).confidence_interval(level)
    return float(low), float(high)


def _constant(values: Sequence[float]) -> bool:
    return all(v == values[0] for v in values)


def mean_interval(values: Sequence[float], level: float = LEVEL,
                  ) -> tuple:
    r"""The mean of :obj:`values` and its t interval (:math:`n - 1`
    degrees of freedom): ``(mean, lo, hi)``; no bounds for fewer than two
    values, no mean for none."""
    values = [float(v) for v in values]
    if not values:
        return None, None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None, None
    if _constant(values):  # no spread: the interval is the point
        return mean, mean, mean
    return (mean, *_bounds(stats.ttest_1samp, values, 0.0, level=level))


def paired_interval(a: Dict[int, float], b: Dict[int, float],
                    level: float = LEVEL) -> Interval:
    r""":obj:`b` − :obj:`a` seed by seed (both: seed -> value), over the
    seeds both have."""
    seeds = tuple(sorted(s for s in b if s in a))
    diffs = tuple(b[s] - a[s] for s in seeds)
    mean, lo, hi = mean_interval(diffs, level)
    return Interval(mean, lo, hi, str(len(seeds)), True, seeds, diffs)


def welch_interval(a: Sequence[float], b: Sequence[float],
                   level: float = LEVEL) -> Interval:
    r"""mean(:obj:`b`) − mean(:obj:`a`) with Welch's interval; no bounds
    unless both have two values or more."""
    n = f'{len(a)}+{len(b)}'
    if not a or not b:
        return Interval(None, None, None, n, False)
    diff = sum(b) / len(b) - sum(a) / len(a)
    if len(a) < 2 or len(b) < 2:
        return Interval(diff, None, None, n, False)
    if _constant(list(a)) and _constant(list(b)):
        return Interval(diff, diff, diff, n, False)
    return Interval(diff, *_bounds(_welch, list(b), list(a), level=level),
                    n, False)


def _welch(b: List[float], a: List[float]):
    return stats.ttest_ind(b, a, equal_var=False)


def compare(a: Dict[int, float], b: Dict[int, float], pairing: str,
            level: float = LEVEL) -> Interval:
    r"""Row :obj:`b` against row :obj:`a` (seed -> value each) under
    :obj:`pairing` (one of :data:`PAIRINGS`)."""
    if pairing == 'seed':
        return paired_interval(a, b, level)
    if pairing == 'none':
        return welch_interval(list(a.values()), list(b.values()), level)
    raise ValueError(f'pairing must be one of {PAIRINGS}, got {pairing!r}')


def verdict(lo: Optional[float], hi: Optional[float]) -> Optional[str]:
    r"""``beats`` (the interval above 0), ``loses`` (below 0), ``not
    distinguishable``; :obj:`None` without an interval."""
    if lo is None or hi is None:
        return None
    if lo > 0:
        return 'beats'
    if hi < 0:
        return 'loses'
    return 'not distinguishable'


def placed(x: float, lo: float, hi: float) -> str:
    r"""Where :obj:`x` lies relative to [:obj:`lo`, :obj:`hi`]:
    ``inside``, ``above`` or ``below``."""
    return 'above' if x > hi else 'below' if x < lo else 'inside'


def spread_verdict(a: List[float], b: List[float]) -> Optional[str]:
    r"""The rule reports used before intervals, kept to show where it and
    :func:`verdict` disagree: B beats A when its mean exceeds A's by more
    than the larger of the two stds (ddof=0), loses when below by more,
    else is within the spread (``not distinguishable``)."""
    if not a or not b:
        return None
    (mean_a, std_a), (mean_b, std_b) = mean_std(a), mean_std(b)
    diff, spread = mean_b - mean_a, max(std_a, std_b)
    return ('beats' if diff > spread else 'loses' if diff < -spread
            else 'not distinguishable')


# Above this many splits of the pooled runs, the test samples them.
EXACT_LIMIT = 200_000
SAMPLES = 100_000


def permutation_p(a: Sequence[float], b: Sequence[float],
                  samples: int = SAMPLES, seed: int = 0) -> Tuple[float, bool]:
    r"""Two-sided permutation p-value of the difference of the means of
    :obj:`a` and :obj:`b`: the share of the splits of the pooled values into
    groups of their sizes whose difference is at least as large in absolute
    value (every split when there are at most :data:`EXACT_LIMIT`, else
    :obj:`samples` random ones, the observed split counted once). Returns
    (p, exact)."""
    pooled, n = list(a) + list(b), len(a)
    total = sum(pooled)
    observed = abs(sum(a) / n - (total - sum(a)) / len(b))
    tolerance = 1e-9 * max(1.0, observed)

    def extreme(first: float) -> bool:
        return abs(first / n - (total - first) / len(b)) >= \
            observed - tolerance

    if math.comb(len(pooled), n) <= EXACT_LIMIT:
        splits = [sum(c) for c in itertools.combinations(pooled, n)]
        return sum(map(extreme, splits)) / len(splits), True
    rng = random.Random(seed)
    hits = sum(extreme(sum(rng.sample(pooled, n))) for _ in range(samples))
    return (hits + 1) / (samples + 1), False


def smallest_p(n_a: int, n_b: int, samples: int = SAMPLES) -> float:
    r"""The smallest p :func:`permutation_p` can return for groups of
    :obj:`n_a` and :obj:`n_b` values, whatever the values: below it no
    threshold can be reached. The exact test counts the observed split
    among the :math:`\binom{n_a + n_b}{n_a}` splits, and with
    :math:`n_a = n_b` also its mirror (the groups swapped: the same
    absolute difference), so its least p is :math:`2 / \binom{2n}{n}`
    then and :math:`1 / \binom{n_a + n_b}{n_a}` otherwise (values far
    apart: no other split is as extreme). The sampled test (more than
    :data:`EXACT_LIMIT` splits) gives at least
    :math:`1 / (\mathrm{samples} + 1)`."""
    if n_a < 1 or n_b < 1:
        raise ValueError(f'smallest_p needs a value in each group, got '
                         f'{n_a} and {n_b}')
    splits = math.comb(n_a + n_b, n_a)
    if splits > EXACT_LIMIT:
        return 1 / (samples + 1)
    return (2 if n_a == n_b else 1) / splits
