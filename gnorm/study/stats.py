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

* **paired over resampled splits** (:func:`corrected_interval`), where
  seed :math:`k` trains on split :math:`k` of one pool of nodes
  (``split: random``, or the dataset's stored splits indexed by seed:
  the runs' split fingerprints differ, :func:`gnorm.study.findings.select.
  split_test_train`): the training sets of the splits overlap, so the
  differences are not independent and the plain paired t interval is too
  narrow. The corrected resampled t of Nadeau & Bengio (2003, "Inference
  for the generalization error", Machine Learning 52) multiplies the
  variance of the mean by :math:`(1/k + n_\mathrm{test}/n_\mathrm{train})
  / (1/k)`: :math:`\bar d \pm t_{(1 + \mathrm{level}) / 2,\, k - 1}
  \sqrt{(1/k + n_\mathrm{test}/n_\mathrm{train})\, s_d^2}`.

Every interval comes with the two-sided p of its test, its standard
error and degrees of freedom: :func:`equivalence_p` reads it as two
one-sided tests against a margin (equivalence), :func:`detectable` gives
the smallest difference the design detects with 80 % power. A table of
comparisons is one **family**: :func:`holm` adjusts their p-values (Holm's
step-down, 1979: it holds the family-wise error rate at the level and is
uniformly more powerful than Bonferroni), and :func:`family_verdict` reads
an adjusted p: B **beats** A when it is below :math:`1 - \mathrm{level}`
and B's mean is the higher, **loses** when it is below and B's mean is the
lower, and is otherwise **not distinguishable** from A with these seeds.
:func:`verdict` reads one interval alone (the same as an unadjusted p).
Standard deviations of the intervals use ddof=1; the means ± std shown
beside them in the reports use ddof=0 (:func:`gnorm.results.mean_std`).

One module: every test a study may use, its intervals and its family
adjustment, so that the choice between them (:func:`design_test`) and
every number a report prints come from one place that a statistician
can check in one read.
"""
import itertools
import math
import random
import statistics
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from scipy import optimize, stats

from gnorm.errors import renamed
from gnorm.results import mean_std

LEVEL = 0.95
# The fewest seeds per row a verdict (beats, loses, equivalent) reads, in
# depth and paired studies alike (``table.min_seeds``): below it the
# variance rests on too few degrees of freedom to be read.
MIN_SEEDS = 5
PAIRINGS = ('seed', 'none')
VERDICTS = ('beats', 'loses', 'not distinguishable')


# How an interval was made (Interval.method).
PAIRED_T, CORRECTED_T, WELCH = 'paired t', 'corrected resampled t', 'Welch'
CORRECTIONS = ('holm', 'none')


@dataclass(frozen=True)
class Interval:
    r"""A difference of means with its confidence interval and the
    two-sided p of its test: ``lo``, ``hi`` and ``p`` are :obj:`None` when
    there are too few values; ``n`` is the number of paired seeds (paired)
    or ``(n_a, n_b)`` as text (unpaired); ``seeds``: the paired seeds,
    ``diffs``: the difference of each; ``method``: :data:`PAIRED_T`,
    :data:`CORRECTED_T` or :data:`WELCH`."""
    diff: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    n: str
    paired: bool
    seeds: tuple = ()
    diffs: tuple = ()
    p: Optional[float] = None
    method: str = PAIRED_T
    se: Optional[float] = None
    df: Optional[float] = None

    @property
    def verdict(self) -> Optional[str]:
        return verdict(self.lo, self.hi)


def _constant(values: Sequence[float]) -> bool:
    return all(v == values[0] for v in values)


def mean_interval(values: Sequence[float], level: float = LEVEL,
                  inflation: float = 1.0) -> tuple:
    r"""The mean of :obj:`values`, its t interval (:math:`n - 1` degrees
    of freedom) and the two-sided p of the mean being 0:
    ``(mean, lo, hi, p)``; the variance of the mean is multiplied by
    :obj:`inflation` (:func:`corrected_interval`). No bounds and no p for
    fewer than two values, no mean for none; values without spread give
    the point as interval and p = 1 for a mean of 0, else 0."""
    return _mean_test(values, level, inflation)[:4]


def _mean_test(values: Sequence[float], level: float = LEVEL,
               inflation: float = 1.0) -> tuple:
    r""":func:`mean_interval` and the standard error of the mean with its
    degrees of freedom: ``(mean, lo, hi, p, se, df)`` (se 0 for values
    without spread, :obj:`None` for fewer than two)."""
    values = [float(v) for v in values]
    if not values:
        return None, None, None, None, None, None
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None, None, None, None, None
    if _constant(values):  # no spread: the interval is the point
        return mean, mean, mean, float(mean == 0), 0.0, n - 1
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd * math.sqrt(inflation / n)
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return mean, mean - half, mean + half, p, se, n - 1


def _paired(a: Dict[int, float], b: Dict[int, float]) -> tuple:
    seeds = tuple(sorted(s for s in b if s in a))
    return seeds, tuple(b[s] - a[s] for s in seeds)


def paired_interval(a: Dict[int, float], b: Dict[int, float],
                    level: float = LEVEL) -> Interval:
    r""":obj:`b` − :obj:`a` seed by seed (both: seed -> value), over the
    seeds both have: the paired t interval."""
    seeds, diffs = _paired(a, b)
    mean, lo, hi, p, se, df = _mean_test(diffs, level)
    return Interval(mean, lo, hi, str(len(seeds)), True, seeds, diffs, p,
                    PAIRED_T, se, df)


def corrected_interval(a: Dict[int, float], b: Dict[int, float],
                       test_train: float, level: float = LEVEL
                       ) -> Interval:
    r""":obj:`b` − :obj:`a` seed by seed over splits resampled from one
    pool, :obj:`test_train` = :math:`n_\mathrm{test}/n_\mathrm{train}`
    of a split: Nadeau & Bengio's corrected resampled t interval, whose
    variance of the mean is :math:`(1/k + n_\mathrm{test}/n_\mathrm{train})
    s_d^2` for :math:`k` paired seeds instead of the paired t's
    :math:`s_d^2 / k`."""
    if not test_train > 0:
        raise ValueError(f'test_train must be > 0, got {test_train}')
    seeds, diffs = _paired(a, b)
    k = len(seeds)
    mean, lo, hi, p, se, df = _mean_test(
        diffs, level, 1 + k * test_train if k else 1.0)
    return Interval(mean, lo, hi, str(k), True, seeds, diffs, p, CORRECTED_T,
                    se, df)


def welch_interval(a: Sequence[float], b: Sequence[float],
                   level: float = LEVEL) -> Interval:
    r"""mean(:obj:`b`) − mean(:obj:`a`) with Welch's interval; no bounds
    unless both have two values or more."""
    n = f'{len(a)}+{len(b)}'
    if not a or not b:
        return Interval(None, None, None, n, False, method=WELCH)
    diff = sum(b) / len(b) - sum(a) / len(a)
    if len(a) < 2 or len(b) < 2:
        return Interval(diff, None, None, n, False, method=WELCH)
    if _constant(list(a)) and _constant(list(b)):
        return Interval(diff, diff, diff, n, False, p=float(diff == 0),
                        method=WELCH, se=0.0, df=len(a) + len(b) - 2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        test = stats.ttest_ind(list(b), list(a), equal_var=False)
        low, high = test.confidence_interval(level)
    df = float(test.df)
    se = math.sqrt(statistics.variance(a) / len(a)
                   + statistics.variance(b) / len(b))
    return Interval(diff, float(low), float(high), n, False,
                    p=float(test.pvalue), method=WELCH, se=se, df=df)


def pair_test_train(a: Optional[float], b: Optional[float]
                    ) -> Optional[float]:
    r"""The :math:`n_\mathrm{test}/n_\mathrm{train}` of a pair of rows
    whose splits are resampled: the larger of the two rows' (the wider
    corrected interval); :obj:`None` unless both are resampled."""
    return None if a is None or b is None else max(a, b)


def design_test(pairing: str, test_train: Optional[float]) -> str:
    r"""The test a study's design implies, for depth and paired studies
    alike: paired by seed (``pairing: seed``) over splits resampled from
    one pool (:obj:`test_train`, the splits'
    :math:`n_\mathrm{test}/n_\mathrm{train}`, given), the corrected
    resampled t (:data:`CORRECTED_T`); paired on one split, the paired t
    (:data:`PAIRED_T`); unpaired (``none``), Welch's (:data:`WELCH`)."""
    if pairing == 'seed':
        return CORRECTED_T if test_train else PAIRED_T
    if pairing == 'none':
        return WELCH
    raise ValueError(f'pairing must be one of {PAIRINGS}, got {pairing!r}')


def compare(a: Dict[int, float], b: Dict[int, float], pairing: str,
            level: float = LEVEL, test_train: Optional[float] = None
            ) -> Interval:
    r"""Row :obj:`b` against row :obj:`a` (seed -> value each) with the
    test :func:`design_test` chooses: paired by seed, the corrected
    resampled t interval when the seeds resample the split
    (:obj:`test_train`: its :math:`n_\mathrm{test}/n_\mathrm{train}`),
    else the paired t; unpaired, Welch's."""
    method = design_test(pairing, test_train)
    if method == CORRECTED_T:
        return corrected_interval(a, b, test_train, level)
    if method == PAIRED_T:
        return paired_interval(a, b, level)
    return welch_interval(list(a.values()), list(b.values()), level)


# The margin of equivalence of a study (``table.margin``), in points of
# its score, and the power at which it states the difference its design
# detects.
MARGIN = 1.0
POWER = 0.8


def equivalence_p(found: Interval, margin: float) -> Optional[float]:
    r"""The p of the two one-sided tests (TOST; Schuirmann 1987, Lakens
    2017) that the difference of :obj:`found` lies within
    :math:`\pm` :obj:`margin`: the larger of the p of
    :math:`H_0: \Delta \le -m` against :math:`\Delta > -m` and of
    :math:`H_0: \Delta \ge m` against :math:`\Delta < m`, each a t test
    with the interval's standard error and degrees of freedom (the
    corrected resampled t's inflated variance where it made the
    interval). A p below :math:`\alpha` is equivalence at level
    :math:`\alpha`: the :math:`1 - 2\alpha` interval inside the margin.
    :obj:`None` without a standard error."""
    if not margin > 0:
        raise ValueError(f'margin must be > 0, got {margin}')
    if found.diff is None or found.se is None or found.df is None:
        return None
    if found.se == 0:
        return 0.0 if abs(found.diff) < margin else 1.0
    lower = stats.t.sf((found.diff + margin) / found.se, found.df)
    upper = stats.t.cdf((found.diff - margin) / found.se, found.df)
    return float(max(lower, upper))


def detectable(found: Interval, alpha: float, power: float = POWER
               ) -> Optional[float]:
    r"""The smallest difference a two-sided t test at level :obj:`alpha`
    (e.g. a family's first Holm threshold, :math:`\alpha / m`) detects
    with probability :obj:`power`, given the spread :obj:`found` observed
    (its standard error, inflated where the corrected resampled t made
    it, and degrees of freedom :math:`\nu`): :math:`\delta\,
    \mathrm{se}`, where the noncentral t with :math:`\nu` degrees of
    freedom and noncentrality :math:`\delta` passes the test's critical
    value with probability :obj:`power` (where scipy cannot evaluate it,
    the usual :math:`t_{1 - \alpha/2} + t_\mathrm{power}`). :obj:`None`
    without a standard error."""
    if found.se is None or not found.df:
        return None
    critical = stats.t.ppf(1 - alpha / 2, found.df)

    def missed(shift: float) -> float:  # the far tail, below -critical,
        return stats.nct.sf(critical, found.df, shift) - power  # is ~0

    approximate = critical + stats.t.ppf(power, found.df)
    try:
        shift = optimize.brentq(missed, 0.0, 2 * approximate + 2)
    except ValueError:  # the noncentral t out of scipy's range (ν tiny)
        shift = approximate
    return float(shift * found.se)


def holm(pvalues: Sequence[Optional[float]]) -> List[Optional[float]]:
    r"""Holm's step-down adjustment of :obj:`pvalues` (one family; a
    :obj:`None`, a comparison without a test, and a NaN, a test of
    values that are not numbers, are left out of the family and stay
    :obj:`None`): the :math:`i`-th smallest of :math:`m` becomes
    :math:`\max_{j \le i} \min(1, (m - j + 1)\, p_{(j)})`. Rejecting
    where the adjusted p is below :math:`\alpha` holds the probability of
    any false rejection in the family at :math:`\alpha`. A comparison
    planned but not run yet enters as p = 1 (:func:`gnorm.study.findings.compare.
    family`): it counts in :math:`m` and can reject nothing."""
    order = sorted((p, k) for k, p in enumerate(pvalues)
                   if p is not None and not math.isnan(p))
    m = len(order)
    adjusted: List[Optional[float]] = [None] * len(pvalues)
    running = 0.0
    for j, (p, k) in enumerate(order):
        running = max(running, min(1.0, (m - j) * p))
        adjusted[k] = running
    return adjusted


def family_verdict(diff: Optional[float], p: Optional[float],
                   level: float = LEVEL) -> Optional[str]:
    r"""``beats`` when the (adjusted) :obj:`p` is below
    :math:`1 - \mathrm{level}` and :obj:`diff` > 0, ``loses`` when it is
    below and :obj:`diff` < 0, else ``not distinguishable``; :obj:`None`
    without a test."""
    if p is None or diff is None:
        return None
    if p < 1 - level and diff != 0:
        return 'beats' if diff > 0 else 'loses'
    return 'not distinguishable'


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


def where_in(x: float, lo: float, hi: float) -> str:
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


# Above this many paired values, the sign-flip test samples its signs.
SIGN_FLIP_EXACT = 16


def sign_flip_p(diffs: Sequence[float], samples: int = SAMPLES,
                seed: int = 0) -> Tuple[float, bool]:
    r"""Two-sided sign-flip p-value of the mean of the paired differences
    :obj:`diffs` being 0: the share of the :math:`2^n` sign assignments
    whose mean is at least as large in absolute value as the observed
    (every one up to :data:`SIGN_FLIP_EXACT` values, else :obj:`samples`
    random ones, the observed counted once). Exact under the null that
    each difference is as likely negative as positive, with no normality
    assumed. Returns (p, exact)."""
    values = [abs(float(d)) for d in diffs]
    if not values:
        raise ValueError('sign_flip_p needs at least one difference')
    observed = abs(sum(float(d) for d in diffs))
    tolerance = 1e-9 * max(1.0, observed)

    def extreme(signs) -> bool:
        return abs(sum(s * v for s, v in zip(signs, values))) >= \
            observed - tolerance

    if len(values) <= SIGN_FLIP_EXACT:
        flips = list(itertools.product((1, -1), repeat=len(values)))
        return sum(map(extreme, flips)) / len(flips), True
    rng = random.Random(seed)
    hits = sum(extreme([rng.choice((1, -1)) for _ in values])
               for _ in range(samples))
    return (hits + 1) / (samples + 1), False


def smallest_sign_flip_p(n: int, samples: int = SAMPLES) -> float:
    r"""The smallest p :func:`sign_flip_p` can return for :obj:`n`
    differences, whatever they are: the observed signs and their mirror
    (all flipped) are as extreme, so :math:`2 / 2^n` exactly, and
    :math:`1 / (\mathrm{samples} + 1)` when sampled."""
    if n < 1:
        raise ValueError(f'smallest_sign_flip_p needs n >= 1, got {n}')
    return 2 / 2 ** n if n <= SIGN_FLIP_EXACT else 1 / (samples + 1)


def exact_p(a: Dict[int, float], b: Dict[int, float], method: str
            ) -> Optional[float]:
    r"""The exact test beside an interval made by :obj:`method`: the
    sign-flip test of the paired differences (paired t) or the
    permutation test of the two rows (Welch); :obj:`None` without values
    to test, and beside the corrected resampled t: the sign-flip test
    assumes independent differences, and seeds on overlapping resampled
    splits are not (the corrected t is the only test there)."""
    if method == CORRECTED_T:
        return None
    if method == WELCH:
        if not a or not b:
            return None
        return permutation_p(list(a.values()), list(b.values()))[0]
    diffs = _paired(a, b)[1]
    return sign_flip_p(diffs)[0] if diffs else None


def exact_floor(method: str, n: int) -> float:
    r"""The smallest p the exact test beside :obj:`method` can give with
    :obj:`n` seeds (per row, or paired)."""
    if method == WELCH:
        return smallest_p(n, n)
    return smallest_sign_flip_p(n)


def seeds_for_exact(method: str, threshold: float, limit: int = 64
                    ) -> Optional[int]:
    r"""The fewest seeds (per row; paired seeds for a paired test) with
    which the exact test beside :obj:`method` can give a p below
    :obj:`threshold` (e.g. Holm's first, :math:`\alpha / m`);
    :obj:`None` beyond :obj:`limit`."""
    for n in range(2, limit + 1):
        if exact_floor(method, n) < threshold:
            return n
    return None


# The former name, for one release.
placed = renamed(where_in, 'gnorm.study.stats.placed')
