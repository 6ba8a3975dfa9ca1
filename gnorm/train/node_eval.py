r"""How node runs are evaluated, on the device and for every run at once:
each run's metrics on its masks (accuracy or ROC-AUC, :func:`evaluate`),
its predictions on the test nodes, the test nodes' ranking scores, the
constant predictor a run is judged against (:func:`constant_predictor`)
and the masked loss.
"""
import contextlib
from typing import Any, Dict, List, NamedTuple, Optional, Union

import torch
import torch.nn.functional as F

from gnorm.monitor import CollapseMonitor
from gnorm.train.node_setup import metric_names
from gnorm.train.scores import accuracy, class_counts, roc_auc


class MaskIndex(NamedTuple):
    r"""The nodes of a mask :obj:`[runs, nodes]` as (run, node) pairs,
    sorted by run, and their number per run: found once, so that a loss
    over them needs no data-dependent shape (no host round-trip)."""
    run: torch.Tensor
    node: torch.Tensor
    count: torch.Tensor


def mask_index(mask: torch.Tensor) -> MaskIndex:
    r"""The :class:`MaskIndex` of :obj:`mask` (:obj:`[runs, nodes]`)."""
    run, node = mask.nonzero(as_tuple=True)  # sorted by run
    return MaskIndex(run, node, torch.bincount(run, minlength=mask.size(0)))


def run_metrics(out: torch.Tensor, data, val_index: MaskIndex,
             metric: str = 'acc') -> torch.Tensor:
    r"""Per run (rows), the columns of :obj:`METRICS` of the logits
    :obj:`out` (:obj:`[(runs,) nodes, classes]`), on the device: the
    score :obj:`metric` (accuracy, or the ROC-AUC of class 1 by its
    log-odds against class 0) of the training, validation and test nodes
    and the validation loss."""
    out = out.view(-1, *out.shape[-2:])  # [runs, nodes, classes]
    if metric == 'rocauc':
        odds = out[..., 1].float() - out[..., 0].float()  # [runs, nodes]
        columns = [roc_auc(odds, data.y, data[f'{split}_mask']).float()
                   for split in ('train', 'val', 'test')]
    else:
        pred = out.argmax(dim=-1)  # [runs, nodes]
        columns = [accuracy(pred, data.y, data[f'{split}_mask'])
                   for split in ('train', 'val', 'test')]
    columns.insert(2, masked_cross_entropy(out.float(), data.y, val_index))
    return torch.stack(columns, dim=-1)  # [runs, 4]


@torch.no_grad()
def evaluate(model: torch.nn.Module, data,
             monitor: Optional[CollapseMonitor] = None, step: int = 0,
             metric: str = 'acc') -> Dict[str, Any]:
    r"""Per run: scores :obj:`metric` (fractions) and validation loss of
    :obj:`model` in evaluation mode (lists, one entry per run, under
    :func:`metric_names`; the masks of :obj:`data` are :obj:`[runs,
    nodes]`); with :obj:`monitor`, its forward pass is recorded (as
    :obj:`step`) on the full graph."""
    model.eval()
    graph = model.prepare(data.x, data.edge_index)
    with contextlib.ExitStack() as stack:
        if monitor is not None:
            stack.enter_context(monitor.record(step,
                                               edge_index=data.edge_index))
        out = model(data.x, graph)
    values = run_metrics(out, data, mask_index(data.val_mask),
                      metric).T.tolist()
    return {**dict(zip(metric_names(metric), values)),
            'test_predictions': predicted_on_test(out, data, metric)}


def predicted_on_test(out: torch.Tensor, data, metric: str = 'acc'
                     ) -> List[Dict[str, Any]]:
    r"""Per run, what the logits :obj:`out` predict on its test nodes: the
    number of test nodes predicted in each class (``class_counts``, by the
    largest logit), the number whose label is each class
    (``label_counts``), and for a dataset scored by ROC-AUC the share
    predicted positive (``positive_rate``). A chance screen reads them
    (:mod:`gnorm.study.findings.sanity`): a run that puts nearly every test node in
    one class has collapsed, whatever its accuracy."""
    out = out.view(-1, *out.shape[-2:])  # [runs, nodes, classes]
    num_classes = out.size(-1)
    mask = data.test_mask
    predicted = class_counts(out.argmax(dim=-1), mask, num_classes).tolist()
    labels = class_counts(data.y, mask, num_classes).tolist()
    found = []
    for r, (pred, true) in enumerate(zip(predicted, labels)):
        record = {'class_counts': pred, 'label_counts': true}
        if metric == 'rocauc':
            record['positive_rate'] = pred[1] / max(sum(pred), 1)
            record['scores'] = ranked_scores(out[r], data.y, mask[r])
        found.append(record)
    return found


# Significant digits of the stored test scores: enough that the ROC-AUC
# recomputed from them equals the run's to 1e-6 (ties that rounding could
# make are that rare).
SCORE_DIGITS = 7


def ranked_scores(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
                ) -> Dict[str, Any]:
    r"""What an outside reader needs to recompute a run's test ROC-AUC: the
    score of each test node (``log_odds``, class 1's logit less class 0's,
    :data:`SCORE_DIGITS` significant digits) and its label (``labels``, a
    string of ``0`` and ``1``), in the order of the nodes' indices."""
    nodes = mask.nonzero().view(-1)
    odds = (out[nodes, 1].double() - out[nodes, 0].double()).tolist()
    return {'log_odds': [float(f'{v:.{SCORE_DIGITS}g}') for v in odds],
            'labels': ''.join(str(int(v)) for v in y[nodes].tolist())}


def constant_predictor(data, run: int, metric: str) -> Dict[str, float]:
    r"""What a constant predictor reaches on run :obj:`run`'s nodes, the
    ground against which a diagnosis says a run learned nothing: the
    cross-entropy of the training nodes' class frequencies
    (``train_loss``, nats: the lowest loss a model that ignores its input
    reaches) and its validation score (``val_score``: the majority class's
    share of the validation nodes, or a constant ranking's 0.5 for
    ROC-AUC)."""
    def counts(split: str) -> torch.Tensor:
        return torch.bincount(data.y[data[f'{split}_mask'][run]],
                              minlength=int(data.y.max()) + 1).double()
    train = counts('train')
    p = train / train.sum().clamp_min(1)
    loss = float(-torch.special.xlogy(p, p).sum())
    val = counts('val')
    score = 0.5 if metric == 'rocauc' else float(val.max()
                                                 / val.sum().clamp_min(1))
    return {'train_loss': loss, 'val_score': score}


def masked_cross_entropy(out: torch.Tensor, y: torch.Tensor,
                         mask: Union[torch.Tensor, MaskIndex],
                         ) -> torch.Tensor:
    r"""Per run, the mean cross-entropy of :obj:`out` (:obj:`[runs,
    nodes, classes]`) over the nodes of :obj:`mask` (:obj:`[runs,
    nodes]`, or its :class:`MaskIndex`), computed for those nodes only."""
    run, node, count = mask if isinstance(mask, MaskIndex) else \
        mask_index(mask)
    loss = F.cross_entropy(out[run, node], y[node], reduction='none')
    total = loss.new_zeros(out.size(0)).index_add(0, run, loss)
    return total / count  # [runs]
