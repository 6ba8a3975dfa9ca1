r"""Scores of node predictions for many runs at once, on the device, with
no value read back to the host: accuracy (:func:`accuracy`) and, for
binary labels, ROC-AUC (:func:`roc_auc`), each over a node mask per run.
A node dataset's config names its score (``metric``: :data:`SCORES`).
:func:`class_counts` counts predicted classes and labels of a mask, the
record a chance screen reads (a run predicting one class everywhere)."""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# The scores of a node dataset (its config's ``metric``): accuracy, or the
# ROC-AUC of the positive class (label 1) of binary labels.
SCORES = ('acc', 'rocauc')


def accuracy(pred: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    r"""The share of the nodes of :obj:`mask` whose predicted class
    :obj:`pred` is their label :obj:`y`, per run.

    Args:
        pred (torch.Tensor): Predicted classes :obj:`[runs, nodes]`.
        y (torch.Tensor): Labels :obj:`[nodes]`.
        mask (torch.Tensor): The nodes scored, :obj:`[runs, nodes]`
            (boolean).

    Returns:
        torch.Tensor: :obj:`[runs]` (float32).
    """
    correct = (pred == y).float()  # [runs, nodes]
    mask = mask.float()
    return (correct * mask).sum(-1) / mask.sum(-1)


def roc_auc(score: Tensor, y: Tensor, mask: Optional[Tensor] = None,
            ) -> Tensor:
    r"""The area under the ROC curve of :obj:`score` for the positive
    nodes (:obj:`y == 1`) against the negative ones (:obj:`y == 0`), over
    the nodes of :obj:`mask`, per run: the share of (positive, negative)
    pairs the score orders right, a tie counting one half,

    .. math::
        \mathrm{AUC} = \frac{1}{|P| |N|} \sum_{i \in P} \left(
        |\{j \in N : s_j < s_i\}| + \tfrac{1}{2}
        |\{j \in N : s_j = s_i\}| \right),

    which is the Mann-Whitney statistic of the ranks with ties averaged
    (:func:`sklearn.metrics.roc_auc_score`). One sort per run: the
    negatives below and level with each score are counted from the sorted
    order (:func:`torch.searchsorted`), in integers, so that ties are
    decided on exact counts. A run with no positive or no negative node
    gets NaN.

    Args:
        score (torch.Tensor): Scores :obj:`[..., nodes]`, higher meaning
            more likely positive (e.g. a logit).
        y (torch.Tensor): Labels in :math:`\{0, 1\}` :obj:`[nodes]` (or
            the shape of :obj:`score`).
        mask (torch.Tensor, optional): The nodes scored, boolean, the shape
            of :obj:`score`; :obj:`None`: all. (default: :obj:`None`)

    Returns:
        torch.Tensor: :obj:`[...]` (float64).
    """
    positive = (y == 1).expand_as(score)
    negative = (y == 0).expand_as(score)
    if mask is not None:
        positive, negative = positive & mask, negative & mask
    score, order = score.detach().contiguous().sort(dim=-1)  # [..., nodes]
    positive = positive.gather(-1, order).long()  # sorted as the scores
    negative = negative.gather(-1, order).long()
    # below[..., k]: the negatives among the first k sorted nodes
    below = F.pad(negative.cumsum(-1), (1, 0))  # [..., nodes + 1]
    first = torch.searchsorted(score, score, side='left')  # [..., nodes]
    after = torch.searchsorted(score, score, side='right')  # [..., nodes]
    # 2 * (negatives below a node + half of those level with it)
    twice = below.gather(-1, first) + below.gather(-1, after)
    wins = (twice * positive).sum(-1)  # [...]
    pairs = 2 * positive.sum(-1) * negative.sum(-1)  # [...]
    return wins.double() / pairs.double()


def class_counts(values: Tensor, mask: Tensor, num_classes: int) -> Tensor:
    r"""How many nodes of :obj:`mask` have each class of :obj:`values`
    (predicted classes or labels), per run.

    Args:
        values (torch.Tensor): Classes :obj:`[runs, nodes]` (or
            :obj:`[nodes]`, shared by the runs).
        mask (torch.Tensor): The nodes counted, :obj:`[runs, nodes]`
            (boolean).
        num_classes (int): The number of classes.

    Returns:
        torch.Tensor: :obj:`[runs, num_classes]` (int64).
    """
    values = values.expand_as(mask)
    one_hot = F.one_hot(values.long(), num_classes)  # [runs, nodes, C]
    return (one_hot * mask.unsqueeze(-1).long()).sum(-2)
