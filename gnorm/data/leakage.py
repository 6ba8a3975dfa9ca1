r"""Leakage of a split through duplicate nodes: test nodes whose exact
feature vector some training node has too. Platonov et al. ("A critical
look at the evaluation of GNNs under heterophily: are we really making
progress?", ICLR 2023) found Chameleon and Squirrel full of such twins,
often with the same label and the same neighbours, so that a model may
score on test nodes by recalling their training copies.
:func:`leakage` counts them for one split; every node run records it
(``results.json``: ``dataset.leakage``) and warns when a split leaks
(:data:`WARN_SHARE` of its test nodes or more have a duplicate in
training: the same features, label and neighbours)."""
from typing import Dict

import torch
from torch import Tensor

# A split leaks when at least this share of its test nodes has a duplicate
# among its training nodes: a twin of the same features, label and
# neighbours, which a graph network cannot tell from the test node. (A
# feature twin alone is no leak where features are coarse: every one of
# Minesweeper's test nodes has one.)
WARN_SHARE = 0.01


def _groups(rows: Tensor) -> Tensor:
    r"""A group id per row of :obj:`rows`: equal rows, equal ids."""
    return torch.unique(rows, dim=0, return_inverse=True)[1]


def _neighbourhoods(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""A group id per node: nodes with the same set of neighbours (the
    sources of the edges into it, duplicates counted once) share one."""
    src, dst = edge_index.cpu()
    key = torch.unique(dst * num_nodes + src)  # sorted by node, then source
    dst, src = key // num_nodes, key % num_nodes
    counts = torch.bincount(dst, minlength=num_nodes)
    width = int(counts.max()) if counts.numel() and dst.numel() else 0
    table = torch.full((num_nodes, max(width, 1)), -1, dtype=torch.long)
    start = torch.cumsum(counts, 0) - counts
    table[dst, torch.arange(dst.numel()) - start[dst]] = src
    return _groups(table)  # [num_nodes]: rows of sorted neighbours, -1 padded


def leakage(data, train_mask: Tensor, test_mask: Tensor
            ) -> Dict[str, int]:
    r"""How a split leaks through duplicate nodes of :obj:`data` (its
    ``x``, ``y`` and ``edge_index``): ``test`` (the test nodes),
    ``duplicated_in_train`` (test nodes with a training node of exactly
    the same feature vector), ``same_label`` (of those, test nodes with
    such a training twin of their own label) and ``same_neighbours`` (of
    those, test nodes with such a twin of their own label and the same
    set of neighbours).

    Args:
        data (torch_geometric.data.Data): The graph.
        train_mask (torch.Tensor): The training node mask (boolean, 1-D).
        test_mask (torch.Tensor): The test node mask (boolean, 1-D).
    """
    x, y = data.x.detach().cpu(), data.y.detach().cpu()
    train, test = train_mask.cpu(), test_mask.cpu()
    features = _groups(x)
    labels = features * (int(y.max()) + 1) + y  # feature group and label
    hoods = _groups(torch.stack(
        [labels, _neighbourhoods(data.edge_index, data.num_nodes)], dim=1))

    def twinned(ids: Tensor) -> int:
        known = torch.zeros(int(ids.max()) + 1, dtype=torch.bool)
        known[ids[train]] = True
        return int(known[ids[test]].sum())
    return {'test': int(test.sum()), 'duplicated_in_train': twinned(features),
            'same_label': twinned(labels), 'same_neighbours': twinned(hoods)}


def leaks(found: Dict[str, int]) -> bool:
    r"""Whether a split's :func:`leakage` reaches :data:`WARN_SHARE` of
    its test nodes with a duplicate in training (``same_neighbours``)."""
    return found['same_neighbours'] >= WARN_SHARE * max(found['test'], 1)
