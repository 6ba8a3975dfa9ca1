r"""Where the tokens and node pairs of a mini-batch of graphs go in a
:class:`~gnorm.models.Graphormer`: index tensors computed once per batch
from the batch's structure (its node counts, its shortest paths), before
the model runs.

Everything that depends on the *values* of the structure (the number of
tokens of the largest graph, the pairs of each graph, the hops of each
path) is read here, so that the model itself is embedding look-ups, index
copies and dense products whose shapes are the shapes of these tensors:
no value of the batch reaches the host inside the model, and
:func:`torch.compile` traces it in one graph (``fullgraph=True``) with
symbolic sizes. :func:`token_layout` can run in the data loader's workers
(:func:`add_token_layout` on a collated PyG batch), beside the model.

The packed tokens of a batch of :math:`B` graphs are
:math:`M = B + \text{num\_nodes}` rows: the :math:`B` graph tokens first
(row :math:`g` for graph :math:`g`), then the nodes in the batch's order
(row :math:`B + v` for node :math:`v`). The dense tokens are
:obj:`[B, T]`, :math:`T = 1 + \max_g n_g`, graph token at index :obj:`0`.
"""
from typing import Dict, Optional

import torch
from torch import Tensor

# The tensors of a layout; on a PyG batch each is stored as
# ``layout_<name>`` (see add_token_layout).
KEYS = ('mask', 'pos', 'pair_pos', 'path_pair', 'path_hop', 'path_edge',
        'order', 'token_batch', 'token_edge_index')
PREFIX = 'layout_'
# The max_dist a layout was built with (an int, or None: all hops); on a
# PyG batch ``layout_max_dist``, absent for None.
MAX_DIST = 'max_dist'


def _starts(counts: Tensor) -> Tensor:
    r"""The first index of each of the consecutive runs of :obj:`counts`."""
    return counts.cumsum(0) - counts


def _rows(counts: Tensor, total: int) -> Tensor:
    r"""For :obj:`total = counts.sum()` consecutive entries, the run
    each belongs to (:obj:`0` for the first :obj:`counts[0]`, ...)."""
    runs = torch.arange(counts.numel(), device=counts.device)
    return torch.repeat_interleave(runs, counts, output_size=total)


def token_layout(edge_index: Tensor, spd: Tensor, path_edge: Tensor,
                 batch: Tensor, batch_size: Optional[int] = None,
                 max_dist: Optional[int] = None) -> Dict[str, Tensor]:
    r"""The layout of a batch of graphs.

    Args:
        edge_index (torch.Tensor): Edges :obj:`[2, E]` of the batch, the
            edges of each graph contiguous (as PyG batches them).
        spd (torch.Tensor): Flat shortest-path distances of every graph,
            :obj:`[P = sum_g n_g^2]` (row-major per graph, :obj:`-1`
            unreachable), as :class:`~gnorm.data.ShortestPaths`
            stores them.
        path_edge (torch.Tensor): Local edge ids along every pair's path,
            pair after pair, hops in order.
        batch (torch.Tensor): Sorted graph of each node :obj:`[num_nodes]`.
        batch_size (int, optional): Number of graphs :math:`B`.
            (default: :obj:`batch.max() + 1`)
        max_dist (int, optional): Keep only the first :obj:`max_dist` hops
            of every path (the model's multi-hop encoding reads no more).
            (default: :obj:`None`, all hops)

    Returns:
        dict: ``max_dist`` (as given: a model of a larger one refuses the
        layout, :func:`check_max_dist`) and int64 tensors (``mask`` bool):

        * ``mask`` :obj:`[B, T]`: the valid dense tokens;
        * ``pos`` :obj:`[M]`: flat index in the dense :obj:`[B, T]` of
          each packed token;
        * ``pair_pos`` :obj:`[P]`: flat index in the dense
          :obj:`[B, T, T]` of each node pair :math:`(i, j)` (at
          :math:`(1 + i, 1 + j)`, after the graph token);
        * ``path_pair``, ``path_hop``, ``path_edge`` :obj:`[L]`: for each
          kept hop of a path, its pair, its hop index :math:`k \geq 0`
          and its edge (batch-wide id);
        * ``order`` :obj:`[M]`: the packed tokens graph after graph, graph
          token first (for norms that take a sorted :obj:`batch`), with
          ``token_batch`` :obj:`[M]` (their graphs, sorted) and
          ``token_edge_index`` :obj:`[2, E]` (the edges between them, in
          that order).
    """
    device = batch.device
    B = int(batch.max()) + 1 if batch_size is None else batch_size
    num_nodes, P = batch.numel(), spd.numel()
    counts = torch.bincount(batch, minlength=B)  # [B]
    T = 1 + (int(counts.max()) if num_nodes else 0)
    graphs = torch.arange(B, device=device)
    local = torch.arange(num_nodes, device=device) - _starts(counts)[batch]
    pos = torch.cat([graphs * T, batch * T + 1 + local])  # [M]
    mask = torch.arange(T, device=device) < (counts + 1).view(-1, 1)

    expected = int(counts.square().sum())
    if P != expected:
        raise ValueError(f"token_layout: spd holds {P} pairs, the batch's "
                         f"graphs have {expected} (the "
                         f"sum of n_g^2); pass the spd of these graphs, "
                         f"e.g. from ShortestPaths")
    # The pairs of a graph are row-major: row i (node i) holds n_g pairs.
    row_len = torch.repeat_interleave(counts, counts, output_size=num_nodes)
    pair_row = _rows(row_len, P)  # [P]: node i of each pair
    j = torch.arange(P, device=device) - _starts(row_len)[pair_row]  # [P]
    pair_graph = batch[pair_row]  # [P]
    pair_pos = (pair_graph * T + 1 + local[pair_row]) * T + 1 + j  # [P]

    # Pair p owns the max(d_p, 0) entries of path_edge after those of the
    # pairs before it, in hop order; its first min(d_p, max_dist) are kept.
    length = spd.long().clamp(min=0)  # [P]
    hops = int(length.sum())
    if path_edge.numel() != hops:
        raise ValueError(f"token_layout: path_edge holds "
                         f"{path_edge.numel()} hops, spd's paths have "
                         f"{hops}; pass the path_edge of these "
                         f"graphs, e.g. from ShortestPaths")
    kept = length if max_dist is None else length.clamp(max=max_dist)
    path_pair = _rows(kept, int(kept.sum()))  # [L]
    path_hop = torch.arange(path_pair.numel(), device=device) - \
        _starts(kept)[path_pair]  # [L]
    entry = _starts(length)[path_pair] + path_hop  # [L], into path_edge
    edge_counts = torch.bincount(batch[edge_index[0]], minlength=B)  # [B]
    edge = path_edge[entry].long() + \
        _starts(edge_counts)[pair_graph[path_pair]]  # [L]

    # Graph after graph: graph token g at g + (nodes before g), node v at
    # v + batch[v] + 1.
    node_rank = torch.arange(num_nodes, device=device) + batch + 1
    graph_rank = _starts(counts) + graphs
    order = torch.empty(B + num_nodes, dtype=torch.long, device=device)
    order[graph_rank] = graphs
    order[node_rank] = torch.arange(B, B + num_nodes, device=device)
    return {'mask': mask, 'pos': pos, 'pair_pos': pair_pos,
            'path_pair': path_pair, 'path_hop': path_hop, 'path_edge': edge,
            'order': order, 'token_batch': _rows(counts + 1, B + num_nodes),
            'token_edge_index': node_rank[edge_index], MAX_DIST: max_dist}


def check_max_dist(layout: Dict[str, Tensor], max_dist: int) -> None:
    r"""Refuses a :obj:`layout` that keeps fewer than :obj:`max_dist` hops
    of a path (one built with a smaller :obj:`max_dist`, or one that does
    not record it): a model of multi-hop distance :obj:`max_dist` would
    silently miss the others. One built with a larger :obj:`max_dist` (or
    all hops) is read correctly: the model maps hops beyond its own to a
    zero row."""
    if MAX_DIST not in layout:
        raise ValueError(f"a Graphormer of max_dist={max_dist} got a token "
                         f"layout that records no max_dist; build it with "
                         f"token_layout(..., max_dist={max_dist})")
    built = layout[MAX_DIST]
    if built is not None and built < max_dist:
        raise ValueError(f"a Graphormer of max_dist={max_dist} got a token "
                         f"layout built with max_dist={built} (it would miss "
                         f"hops); build it with max_dist >= {max_dist}")


def add_token_layout(batch, max_dist: Optional[int] = None):
    r"""Stores :func:`token_layout` of a collated PyG batch on it
    (``layout_<name>``, moved to a device with the batch) and returns
    it; :func:`layout_of` reads it back."""
    layout = token_layout(batch.edge_index, batch.spd, batch.path_edge,
                          batch.batch, batch.num_graphs, max_dist)
    for key in KEYS:
        batch[PREFIX + key] = layout[key]
    if max_dist is not None:
        batch[PREFIX + MAX_DIST] = max_dist
    return batch


def layout_of(batch) -> Optional[Dict[str, Tensor]]:
    r"""The layout :func:`add_token_layout` stored on :obj:`batch`, or
    :obj:`None`."""
    if PREFIX + KEYS[0] not in batch:
        return None
    layout = {key: batch[PREFIX + key] for key in KEYS}
    stored = PREFIX + MAX_DIST
    layout[MAX_DIST] = batch[stored] if stored in batch else None
    return layout
