r"""Sanity flags of a depth study's cells: rows that learned nothing and
rows still improving when training stopped. A verdict against such a row
says less than it seems: a norm "beats" a baseline that was never trained
to its end, or that predicts one class.

Three flags, each of a cell (the seeds of its chosen setting):

* **predicts one class** (:data:`ONE_CLASS`), where the score is
  accuracy: most seeds put at least :data:`ONE_CLASS_SHARE` of their
  test nodes in one class, counted from the predictions each run records
  (``results.json``'s ``test_predictions``). That is a collapse: the
  model ignores its input. Runs older than that record say nothing here
  (:func:`one_class`). Where the score is a ranking (ROC-AUC), the argmax
  says nothing of it: a model that ranks the nodes well but whose argmax
  is the majority class (normal for a task with 20 % positives) learned,
  so there the ranking test below decides alone, and one class by argmax
  is a note of the cell with its class counts (:func:`argmax_note`),
  never a flag.
* **no better than the majority class** (:data:`NO_BETTER`; **no
  better than a random ranking**, :data:`NO_BETTER_AUC`, for ROC-AUC):
  a one-sided test pooled
  over the cell's seeds (:func:`pooled_chance`) does not show the score
  above chance at level :data:`CHANCE_ALPHA`. For accuracy, chance is the
  majority class of each run's test nodes: the statistic is
  :math:`\sum_k c_k - \sum_k n_k m_k` (correct nodes against the
  majority class's share :math:`m_k` of run :math:`k`'s :math:`n_k` test
  nodes). For ROC-AUC, a random ranking's 0.5: the statistic is
  :math:`\sum_k (\mathrm{AUC}_k - 1/2)`. Seeds of one pool's splits share
  test nodes, so their scores are not independent: the variance counts
  each pair of runs by the test nodes they share,
  :math:`\mathrm{Var} = \sum_{k, l} w_k w_l \sigma_k \sigma_l
  |T_k \cap T_l| / \sqrt{n_k n_l}`, with :math:`\sigma_k^2 = m_k (1 -
  m_k) / n_k` (accuracy, weight :math:`w_k = n_k`: each node correct with
  probability :math:`m_k`, a node counted as often as test sets hold it)
  or :math:`(n_1 + n_0 + 1) / (12 n_1 n_0)` (the Mann–Whitney statistic's
  null variance; weight 1). Disjoint test sets give the binomial's
  variance; seeds on one fixed split give that of one test set, however
  many seeds. A row is flagged where it is not shown better; a row far
  below chance (a minority class everywhere) is flagged too.
* **still improving** (:data:`IMPROVING`): most seeds reach their best
  validation score in the last tenth of their epochs
  (:data:`LAST_PART`, :func:`still_improving`): training stopped while
  the row still improved, so more epochs may change its score.

The test nodes of each run come from the dataset and split its config
names, read from ``$GNORM_DATA_MIRROR`` where set; a node run whose data
cannot be loaded stops the report with one line
(:class:`gnorm.errors.GnormError`): a report never says "not flagged"
for a cell it could not screen.
"""
import copy
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

from scipy import stats

from gnorm.errors import GnormError

ONE_CLASS = 'predicts one class'
NO_BETTER = 'no better than the majority class'
NO_BETTER_AUC = 'no better than a random ranking'
IMPROVING = 'still improving'
# The flags that say a row learned nothing: a verdict against it is of
# its own kind (gnorm.study.findings.compare.verdict_kind).
CHANCE_FLAGS = (ONE_CLASS, NO_BETTER, NO_BETTER_AUC)
# A run predicts one class when this share of its test nodes or more is
# predicted in one class: a model that ignores its input puts every node
# in one class; 95 % leaves room for a few nodes whose features alone push
# them over (a stated threshold, not one fitted to gnorm's runs).
ONE_CLASS_SHARE = 0.95
# The one-sided level of the pooled test against chance, and its z.
CHANCE_ALPHA = 0.05
CHANCE_Z = float(stats.norm.ppf(1 - CHANCE_ALPHA))
# A run is still improving when its best validation epoch lies in the last
# tenth of its epochs: a run that had converged would have peaked earlier
# as often as late, and a peak this late says that more epochs may raise it.
LAST_PART = 0.1


def at_chance(record: Dict[str, Any]) -> bool:
    r"""Whether a cell :obj:`record` is flagged as learning nothing
    (:data:`CHANCE_FLAGS`)."""
    return any(f in CHANCE_FLAGS for f in record.get('flags', ()))


_TEST_SETS: Dict[str, Optional['TestSet']] = {}


@dataclass(frozen=True)
class TestSet:
    r"""The test nodes of a run (sorted indices) and how many of them are
    in each class; how many of its training and validation nodes are."""
    nodes: frozenset
    label_counts: List[int]
    train_counts: tuple = ()
    val_counts: tuple = ()

    @property
    def majority(self) -> float:
        r"""The share of the test nodes in their most frequent class."""
        return max(self.label_counts) / sum(self.label_counts)


def config_split(config: Dict[str, Any]) -> List[Any]:
    r"""What a run's config says of its split: split, split index, test
    set, and for ``split: random`` the seed that draws it."""
    seed = config.get('seed') if config.get('split') == 'random' else None
    return [config.get('split'), config.get('split_index'),
            config.get('test_set'), seed]


def _split_key(config: Dict[str, Any]) -> str:
    r"""What decides a run's test nodes: its dataset and split."""
    return json.dumps([config.get('dataset'), *config_split(config)],
                      sort_keys=True)


def tested_nodes(run: Dict[str, Any]) -> Optional[TestSet]:
    r"""The :class:`TestSet` of :obj:`run`, from the graph and split its
    config names (loaded once per split); :obj:`None` for a run that is
    no node run or names no dataset. Raises :class:`GnormError` where the
    data cannot be loaded."""
    config = run.get('config') or {}
    if run.get('task', 'node') != 'node' or 'dataset' not in config:
        return None
    key = _split_key(config)
    if key not in _TEST_SETS:
        _TEST_SETS[key] = _load_test_set(config)
    return _TEST_SETS[key]


def chance_accuracy(run: Dict[str, Any]) -> Optional[float]:
    r"""The share of :obj:`run`'s test nodes in their most frequent class
    (a fraction; :func:`tested_nodes`)."""
    found = tested_nodes(run)
    return found.majority if found else None


def _load_test_set(config: Dict[str, Any]) -> Optional[TestSet]:
    from omegaconf import OmegaConf

    from gnorm.train.common import one_line
    from gnorm.train.node_setup import load_data
    config = copy.deepcopy(config)
    data_options = config.setdefault('data', {})
    mirror = (os.environ.get('GNORM_DATA_MIRROR')
              or data_options.get('mirror'))
    data_options['mirror'] = mirror
    dataset = config['dataset']
    name = dataset.get('name') if isinstance(dataset, dict) else dataset
    try:
        data = load_data(OmegaConf.create(config))
    except Exception as e:  # whatever stops the loading, in one line
        raise GnormError(
            f"cannot screen the runs of {name} for chance: its data does "
            f"not load (GNORM_DATA_MIRROR={mirror or 'unset'}: "
            f"{one_line(e)}); "
            f"set GNORM_DATA_MIRROR to a folder with its raw files "
            f"(docs/data.rst)") from None
    mask = data.test_mask
    labels = data.y[mask]
    if labels.numel() == 0:
        return None
    classes = int(data.y.max()) + 1

    def counts(part):
        return tuple(data.y[part].bincount(minlength=classes).tolist())
    return TestSet(frozenset(mask.nonzero().view(-1).tolist()),
                   labels.bincount().tolist(), counts(data.train_mask),
                   counts(data.val_mask))


def constant_predictor(run: Dict[str, Any]) -> Optional[Dict[str, float]]:
    r"""What a constant predictor reaches on :obj:`run`'s nodes, for a
    run that does not record it (``dataset.constant``, as
    :func:`gnorm.train.node_eval.constant_predictor` writes it): the entropy of
    its training labels (``train_loss``, nats) and the majority class's
    share of its validation nodes (``val_score``; 0.5 for ROC-AUC), from
    the split its config names; :obj:`None` where that is unknown."""
    found = tested_nodes(run)
    if found is None or not found.train_counts:
        return None
    total = sum(found.train_counts)
    loss = -sum(c / total * math.log(c / total)
                for c in found.train_counts if c)
    val = found.val_counts
    score = (0.5 if run.get('metric') == 'rocauc'
             else max(val) / max(sum(val), 1))
    return {'train_loss': loss, 'val_score': score}


def one_class(run: Dict[str, Any]) -> Optional[bool]:
    r"""Whether :obj:`run` put :data:`ONE_CLASS_SHARE` or more of its test
    nodes in one class, from its recorded ``test_predictions``;
    :obj:`None` for a run that records none."""
    counts = (run.get('test_predictions') or {}).get('class_counts')
    if not counts or not sum(counts):
        return None
    return max(counts) / sum(counts) >= ONE_CLASS_SHARE


@dataclass(frozen=True)
class Pooled:
    r"""The pooled test of a cell's seeds against chance
    (:func:`pooled_chance`): the seeds' pooled score and chance's (fractions:
    accuracy weighted by test nodes, or the mean ROC-AUC), the one-sided
    z, and the pooled score a cell of these splits needs to be shown above
    chance (:obj:`threshold`)."""
    seeds: int
    score: float
    chance: float
    z: float
    threshold: float
    metric: str

    @property
    def flagged(self) -> bool:
        return not self.z >= CHANCE_Z


def pooled_chance(runs: Sequence[Dict[str, Any]]) -> Optional[Pooled]:
    r"""The :class:`Pooled` test of :obj:`runs` (a cell's seeds) against
    chance (the module's text); :obj:`None` without runs or where a run
    has no test set (:func:`tested_nodes`) or no score."""
    parts = []
    for run in runs:
        found = tested_nodes(run)
        if found is None:
            return None
        part = _part(run, found)
        if part is None:
            return None
        parts.append((found, *part))
    if not parts:
        return None
    metric = 'rocauc' if runs[0].get('metric') == 'rocauc' else 'acc'
    total = sum(w for _, w, _, _, _ in parts)
    excess = sum(w * (s - c) for _, w, s, c, _ in parts)
    variance = sum(
        wk * wl * sk * sl * len(tk.nodes & tl.nodes)
        / math.sqrt(len(tk.nodes) * len(tl.nodes))
        for tk, wk, _, _, sk in parts for tl, wl, _, _, sl in parts)
    spread = math.sqrt(variance)
    chance = sum(w * c for _, w, _, c, _ in parts) / total
    z = (excess / spread if spread else
         math.inf if excess > 0 else -math.inf)
    return Pooled(len(parts), chance + excess / total, chance, z,
                  chance + CHANCE_Z * spread / total, metric)


def _part(run: Dict[str, Any], found: TestSet) -> Optional[tuple]:
    r"""(weight, score, chance, sd) of :obj:`run` on its test nodes
    :obj:`found` (fractions)."""
    n = len(found.nodes)
    if run.get('metric') == 'rocauc':
        if 'test_metric' not in run or len(found.label_counts) != 2:
            return None
        negatives, positives = found.label_counts
        if not positives or not negatives:
            return None
        sd = math.sqrt((positives + negatives + 1)
                       / (12 * positives * negatives))
        return 1.0, float(run['test_metric']), 0.5, sd
    if 'test_acc' not in run:
        return None
    m = found.majority
    return float(n), float(run['test_acc']), m, math.sqrt(m * (1 - m) / n)


def still_improving(run: Dict[str, Any]) -> bool:
    r"""Whether :obj:`run`'s best validation epoch lies in the last tenth
    (:data:`LAST_PART`) of its epochs: after epoch
    :math:`\lfloor 0.9\,E \rfloor` of :math:`E`, the last evaluated
    one (or the configured number where no curve is recorded)."""
    epochs = (run.get('curve') or {}).get('epoch') or []
    last = epochs[-1] if epochs else (
        run.get('config', {}).get('train', {}).get('epochs'))
    best = run.get('best_epoch')
    if best is None or not last:
        return False
    return best > math.floor((1 - LAST_PART) * last)


def ranks(runs: Sequence[Dict[str, Any]]) -> bool:
    r"""Whether :obj:`runs` are scored by a ranking (ROC-AUC), where
    chance is a random ranking and the argmax says nothing of it."""
    return bool(runs) and runs[0].get('metric') == 'rocauc'


def argmax_note(runs: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    r"""Where :obj:`runs` are scored by a ranking (:func:`ranks`) and some
    of them put :data:`ONE_CLASS_SHARE` or more of their test nodes in one
    class by argmax: how many (``seeds`` of ``runs``) and the predicted and
    true class counts of their test nodes summed over the runs
    (``predicted``, ``labels``); :obj:`None` otherwise. A note, not a
    flag: a good ranking may put every node in the majority class by
    argmax."""
    if not ranks(runs):
        return None
    seeds = one_class_count(runs)
    if not seeds:
        return None
    recorded = [r['test_predictions'] for r in runs
                if (r.get('test_predictions') or {}).get('class_counts')]
    width = max(len(t['class_counts']) for t in recorded)

    def summed(key):
        total = [0] * width
        for t in recorded:
            for i, c in enumerate(t.get(key) or []):
                total[i] += c
        return total
    return {'seeds': seeds, 'runs': len(runs),
            'predicted': summed('class_counts'),
            'labels': summed('label_counts')}


def one_class_count(runs: Sequence[Dict[str, Any]]) -> Optional[int]:
    r"""How many of :obj:`runs` predict one class (:func:`one_class`);
    :obj:`None` where none records its predictions."""
    found = [one_class(r) for r in runs]
    if all(f is None for f in found):
        return None
    return sum(bool(f) for f in found)


def flags(runs: Sequence[Dict[str, Any]], expected: int,
          pooled: Optional[Pooled] = None) -> List[str]:
    r"""The flags of a cell whose chosen setting has :obj:`runs` (of
    :obj:`expected` seeds): :data:`ONE_CLASS` when more than half of them
    predict one class (scored by accuracy; never for a ranking score,
    :func:`ranks`), :data:`NO_BETTER` when the :obj:`pooled` test
    (:func:`pooled_chance`, computed here if not given) does not show them
    above chance (:data:`NO_BETTER`, or :data:`NO_BETTER_AUC` for
    ROC-AUC), :data:`IMPROVING` when more than half are still
    improving."""
    found = []
    if not runs:
        return found
    half = max(len(runs), expected) / 2
    if not ranks(runs) and (one_class_count(runs) or 0) > half:
        found.append(ONE_CLASS)
    pooled = pooled or pooled_chance(runs)
    if pooled is not None and pooled.flagged:
        found.append(NO_BETTER_AUC if pooled.metric == 'rocauc'
                     else NO_BETTER)
    if sum(still_improving(r) for r in runs) > half:
        found.append(IMPROVING)
    return found
