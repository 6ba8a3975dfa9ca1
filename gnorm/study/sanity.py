r"""Sanity flags of a depth study's cells: runs that learned nothing
(their test accuracy is no better than predicting the test nodes'
majority class everywhere) and runs still improving when training stopped (their best
validation epoch is the last one evaluated). A verdict against such a row
says less than it seems: a norm "beats" a baseline that was never trained
to its end, or that collapsed to one class. A cell is flagged when most of
its seeds are (:func:`flags`).

The majority-class accuracy of a run is measured on its own split: the
share of its test nodes in their most frequent class, the accuracy of a
model that predicts that one class everywhere (:func:`chance_accuracy`,
from the dataset the run's config names; :obj:`None` where it cannot be
loaded, e.g. without the data). "Within noise" is at most two binomial
standard errors above it, :math:`c + 2 \sqrt{c (1 - c) / n_\mathrm{test}}`
(:func:`at_chance`). A run scored by ROC-AUC is at chance within two
standard errors of a random ranking's 0.5 on its test nodes,
:math:`0.5 + 2 \sqrt{(n_1 + n_0 + 1) / (12 n_1 n_0)}` for
:math:`n_1` positive and :math:`n_0` negative nodes (the Mann-Whitney
statistic's spread without a signal; :func:`auc_at_chance`).
"""
import copy
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

AT_CHANCE = 'at chance'
IMPROVING = 'still improving'
# Words of a flag, as the reports explain it.
MEANING = {
    AT_CHANCE: 'most seeds are no better than predicting the majority '
               'class of their test nodes everywhere: accuracy at most two '
               'binomial standard errors above that class\'s share (a '
               'one-sided screen: a row far below it, e.g. one predicting '
               'a minority class, is at chance too)',
    IMPROVING: 'most seeds reach their best validation accuracy at the '
               'last evaluated epoch: training stopped while the row was '
               'still improving',
}
# How a run scored by ROC-AUC is at chance, added to MEANING where a
# report has such runs (:func:`meaning`).
AUC_CHANCE = ('; scored by ROC-AUC, within two standard errors of a random '
              'ranking\'s 0.5')
_COUNTS: Dict[str, Optional[List[int]]] = {}


def meaning(flag: str, said: str = 'accuracy') -> str:
    r"""The words of :obj:`flag` in a report whose cells are scored by
    :obj:`said` (:func:`gnorm.study.select.scores_said`)."""
    if flag == AT_CHANCE and 'ROC-AUC' in said:
        return MEANING[flag] + AUC_CHANCE
    return MEANING[flag].replace('validation accuracy', f'validation {said}')


def _split_key(config: Dict[str, Any]) -> str:
    r"""What decides a run's test nodes: its dataset, split and seed."""
    seed = config.get('seed') if config.get('split') == 'random' else 0
    return json.dumps([config.get('dataset'), config.get('split'),
                       config.get('split_index'), seed,
                       config.get('test_set')], sort_keys=True)


def class_counts_of_test(run: Dict[str, Any]) -> Optional[List[int]]:
    r"""The number of :obj:`run`'s test nodes in each class, from the
    graph and split its config names, read from ``$GNORM_DATA_MIRROR``
    where set; :obj:`None` for a run that is no node run or whose data
    cannot be loaded. Computed once per split."""
    config = run.get('config') or {}
    if run.get('task', 'node') != 'node' or 'dataset' not in config:
        return None
    key = _split_key(config)
    if key not in _COUNTS:
        _COUNTS[key] = _class_counts(config)
    return _COUNTS[key]


def chance_accuracy(run: Dict[str, Any]) -> Optional[float]:
    r"""The share of :obj:`run`'s test nodes in their most frequent class
    (a fraction; :func:`class_counts_of_test`)."""
    counts = class_counts_of_test(run)
    return max(counts) / sum(counts) if counts else None


def _class_counts(config: Dict[str, Any]) -> Optional[List[int]]:
    from omegaconf import OmegaConf

    from gnorm.errors import GnormError
    from gnorm.train.node import load_data
    config = copy.deepcopy(config)
    data_options = config.setdefault('data', {})
    data_options['mirror'] = (os.environ.get('GNORM_DATA_MIRROR')
                              or data_options.get('mirror'))
    try:
        data = load_data(OmegaConf.create(config))
    except (GnormError, OSError, RuntimeError, ValueError, KeyError):
        return None
    labels = data.y[data.test_mask]
    if labels.numel() == 0:
        return None
    return labels.bincount().tolist()


def at_chance(accuracy: float, chance: float, n_test: int) -> bool:
    r"""Whether :obj:`accuracy` (a fraction) is within noise of
    :obj:`chance` on :obj:`n_test` nodes: at most two binomial standard
    errors above it."""
    return accuracy <= chance + 2 * math.sqrt(chance * (1 - chance)
                                              / max(n_test, 1))


def auc_at_chance(auc: float, positives: int, negatives: int) -> bool:
    r"""Whether the ROC-AUC :obj:`auc` on :obj:`positives` and
    :obj:`negatives` test nodes is within two standard errors of a random
    ranking's 0.5."""
    if not positives or not negatives:
        return True
    return auc <= 0.5 + 2 * math.sqrt((positives + negatives + 1)
                                      / (12 * positives * negatives))


def _run_at_chance(run: Dict[str, Any]) -> Optional[bool]:
    if run.get('metric') == 'rocauc' and 'test_metric' in run:
        counts = class_counts_of_test(run)
        if not counts or len(counts) != 2:
            return None
        return auc_at_chance(float(run['test_metric']), counts[1], counts[0])
    chance = chance_accuracy(run)
    sizes = run.get('dataset', {}).get('split_sizes')
    if chance is None or not sizes or 'test_acc' not in run:
        return None
    return at_chance(float(run['test_acc']), chance, int(sizes[2]))


def still_improving(run: Dict[str, Any]) -> bool:
    r"""Whether :obj:`run`'s best validation epoch is its last evaluated
    one."""
    epochs = (run.get('curve') or {}).get('epoch') or []
    last = epochs[-1] if epochs else (
        run.get('config', {}).get('train', {}).get('epochs'))
    return run.get('best_epoch') is not None and run['best_epoch'] == last


def chance_count(runs: Sequence[Dict[str, Any]]) -> int:
    r"""How many of :obj:`runs` are at chance (no better than the majority
    class; ROC-AUC: than a random ranking): a cell shows it where its
    seeds split."""
    return sum(bool(_run_at_chance(r)) for r in runs)


def flags(runs: Sequence[Dict[str, Any]], expected: int) -> List[str]:
    r"""The flags of a cell whose chosen setting has :obj:`runs` (of
    :obj:`expected` seeds): :data:`AT_CHANCE` when more than half of them
    are at chance, :data:`IMPROVING` when more than half are still
    improving."""
    found = []
    half = max(len(runs), expected) / 2
    if runs and chance_count(runs) > half:
        found.append(AT_CHANCE)
    if runs and sum(still_improving(r) for r in runs) > half:
        found.append(IMPROVING)
    return found
