r"""Pairwise smoothness metrics: MAD and MADGap of the `"Measuring and
Relieving the Over-smoothing Problem for Graph Neural Networks from the
Topological View" <https://arxiv.org/abs/1909.03211>`_ paper (Chen et al.,
AAAI 2020), re-exported by :mod:`gnorm.metrics`.

The pairs of a graph are those of at most :obj:`max_samples` of its nodes,
drawn as :func:`gnorm.metrics.uniformity` draws them; hop distances between
the drawn nodes are those of the whole graph, found by a breadth-first
search from the drawn nodes along :obj:`edge_index` (no dense
:math:`N \times N` matrix).
"""
import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from gnorm.metrics.checks import (check_batch, check_edge_index,
                                   check_inputs, check_samples, check_x)
from gnorm.metrics.pointwise import dense_uniformity
from gnorm.metrics.rows import finish, sort_by_graph, subsample, unit_rows

# Largest number of entries of one [num_edges, sources] block of the search.
_SEARCH_CHUNK = 1 << 24


def hop_distances(edge_index: Tensor, num_nodes: int, sources: Tensor,
                  max_hops: int) -> Tensor:
    r"""Hop distances from the nodes :obj:`sources` to every node, along the
    edges of :obj:`edge_index` taken in both directions.

    Args:
        edge_index (torch.Tensor): The edges :obj:`[2, num_edges]`.
        num_nodes (int): The number of nodes.
        sources (torch.Tensor): The node indices :obj:`[S]` to search from.
        max_hops (int): Search depth; farther (or unreachable) nodes get
            :obj:`max_hops + 1`.

    Returns:
        torch.Tensor: The distances :obj:`[S, num_nodes]` (int64).
    """
    src, dst = edge_index[0].long(), edge_index[1].long()
    src, dst = torch.cat([src, dst]), torch.cat([dst, src])  # both directions
    S = sources.numel()
    dist = torch.full((S, num_nodes), max_hops + 1, dtype=torch.long,
                      device=edge_index.device)
    chunk = max(1, _SEARCH_CHUNK // max(1, src.numel(), num_nodes))
    for start in range(0, S, chunk):
        cols = sources[start:start + chunk]
        reach = torch.zeros(num_nodes, cols.numel(), dtype=torch.bool,
                            device=edge_index.device)  # [N, s]
        reach[cols, torch.arange(cols.numel(), device=cols.device)] = True
        block = dist[start:start + chunk].t()  # [N, s], a view of dist
        block[reach] = 0
        for hop in range(1, max_hops + 1):
            spread = torch.zeros(num_nodes, cols.numel(),
                                 device=edge_index.device)
            spread.index_add_(0, dst, reach[src].float())
            new = (spread > 0) & ~reach
            block[new] = hop
            reach |= new
    return dist


class Pairs(NamedTuple):
    r"""The drawn nodes of each graph as a padded :obj:`[B, S]` block:
    :obj:`index` (rows of :obj:`x`, sorted by graph), their places
    :obj:`pos` in the flattened block, :obj:`valid` :obj:`[B, S]`, and
    the hop distances :obj:`dist` :obj:`[B, S, S]` between them (or
    :obj:`None`)."""
    index: Tensor
    pos: Tensor
    valid: Tensor
    dist: Optional[Tensor]


def draw_pairs(num_nodes: int, batch: Tensor, size: int, max_samples: int,
               generator: Optional[torch.Generator] = None,
               edge_index: Optional[Tensor] = None,
               max_hops: int = 0, graph_nodes: Optional[int] = None,
               ) -> Pairs:
    r"""The :class:`Pairs` of checked inputs (:obj:`batch` of
    :obj:`num_nodes` entries, :obj:`size` graphs): at most
    :obj:`max_samples` nodes of each graph (the rule of
    :func:`gnorm.metrics.uniformity`) and, given :obj:`edge_index`, their
    hop distances up to :obj:`max_hops` in the graph of
    :obj:`graph_nodes` nodes (default: :obj:`num_nodes`; more when the
    candidates are its first rows, the seed nodes of a sampled
    subgraph). Reads values to the host; what it returns lets
    :func:`mads` and :func:`uniformities` run without."""
    device = batch.device
    order = torch.arange(num_nodes, device=device)
    order, sorted_batch = sort_by_graph(order.unsqueeze(-1), batch)
    order = order.squeeze(-1)
    keep = None
    if num_nodes > 0:
        keep = subsample(sorted_batch, size, max_samples, generator)
    if keep is not None:
        order, sorted_batch = order[keep], sorted_batch[keep]
    counts = torch.bincount(sorted_batch, minlength=size)  # [B]
    S = int(counts.max()) if size > 0 and num_nodes > 0 else 0
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=device) - starts[sorted_batch]
    pos = sorted_batch * S + rank  # [kept]
    valid = torch.zeros(size * S, dtype=torch.bool, device=device)
    valid[pos] = True
    dist = None
    if edge_index is not None:
        far = hop_distances(edge_index, graph_nodes or num_nodes, order,
                            max_hops)
        # Row of `far` and node of each place of the block, 0 if padded.
        row = torch.zeros(size * S, dtype=torch.long, device=device)
        row[pos] = torch.arange(order.numel(), device=device)
        node = torch.zeros(size * S, dtype=torch.long, device=device)
        node[pos] = order
        row, node = row.view(size, S), node.view(size, S)
        dist = far[row.unsqueeze(-1), node.unsqueeze(-2)]  # [B, S, S]
    return Pairs(order, pos, valid.view(size, S), dist)


def pair_mask(pairs: Pairs, hops: Optional[Tuple[int, Optional[int]]],
              ) -> Tensor:
    r"""The pairs :math:`i \neq j` of drawn nodes of one graph
    :obj:`[B, S, S]` whose hop distance lies in :obj:`hops`
    (:obj:`(low, high)`, :obj:`high=None`: no upper bound, unreachable
    nodes included); all pairs if :obj:`hops` is :obj:`None`."""
    valid = pairs.valid
    B, S = valid.shape
    mask = valid.unsqueeze(-1) & valid.unsqueeze(-2)  # [B, S, S]
    mask &= ~torch.eye(S, dtype=torch.bool, device=valid.device)
    if hops is not None:
        low, high = hops
        mask &= pairs.dist >= low
        if high is not None:
            mask &= pairs.dist <= high
    return mask


def pair_masks(pairs: Pairs,
               hops: Sequence[Optional[Tuple[int, Optional[int]]]],
               dtype: torch.dtype) -> Tensor:
    r"""The :func:`pair_mask` of each of the :obj:`K` entries of
    :obj:`hops` as 0 and 1 of :obj:`dtype`, :obj:`[B, S, K, S]`, the
    layout :func:`mads` takes."""
    return torch.stack([pair_mask(pairs, h) for h in hops], -2).to(dtype)


def _drawn_rows(x: Tensor, pairs: Pairs) -> Tensor:
    r"""The drawn rows of :obj:`x` :obj:`[..., num_nodes, d]` scaled to
    unit norm, graph by graph, zero-padded :obj:`[n * B, S, d]` (:obj:`n`
    the outputs of the leading dimensions)."""
    B, S = pairs.valid.shape
    u = unit_rows(x.index_select(-2, pairs.index))  # [..., kept, d]
    lead, d = u.shape[:-2], u.size(-1)
    dense = u.new_zeros(*lead, B * S, d).index_copy(-2, pairs.pos, u)
    return dense.view(math.prod(lead) * B, S, d)


def uniformities(x: Tensor, pairs: Pairs) -> Tensor:
    r""":func:`gnorm.metrics.uniformity` :obj:`[..., B]` of the drawn
    rows of :obj:`x` :obj:`[..., num_nodes, d]` of each graph, without
    reading a value to the host."""
    B, S = pairs.valid.shape
    lead = x.shape[:-2]
    mask = pairs.valid.expand(*lead, B, S).reshape(math.prod(lead) * B, S)
    return dense_uniformity(_drawn_rows(x, pairs), mask).view(*lead, B)


def mads(x: Tensor, pairs: Pairs, masks: Tensor) -> Tensor:
    r"""MAD :obj:`[..., B, K]` of the drawn rows of :obj:`x`
    :obj:`[..., num_nodes, d]` of each graph over the pairs of each of the
    :obj:`K` masks (:func:`pair_masks`), without reading a value to the
    host: the cosine distances of all drawn pairs, those that count (the
    paper leaves zero distances out), then each mask's sums and counts
    per row as one matrix product."""
    B, S = pairs.valid.shape
    lead = x.shape[:-2]
    n = math.prod(lead)  # outputs measured at once
    dense = _drawn_rows(x, pairs)  # [n * B, S, d]
    stats = dense.new_empty(2, n * B, S, S)  # distances, counted
    one = dense.new_ones(()).expand(n * B, S, S)
    # The distance, one minus the cosine similarity.
    dist = torch.baddbmm(one, dense, dense.mT, alpha=-1, out=stats[0])
    # Zero (<= 4 eps) distances do not count; a nan stays nan.
    torch.nn.functional.threshold(dist, 4 * torch.finfo(dist.dtype).eps,
                                  0.0, inplace=True).clamp_(max=2)
    torch.gt(dist, 0, out=stats[1])  # 1 where a distance counts
    rows = stats.view(2 * n, B * S, S).transpose(0, 1)  # [B * S, 2n, S]
    K = masks.size(-2)
    table = masks.view(B * S, K, S) @ rows.mT  # [B * S, K, 2n]
    table = table.view(B, S, K, 2, *lead).movedim((3, 0, 1, 2),
                                                   (0, -3, -2, -1))
    sums, counts = table  # [..., B, S, K] each
    return _mad(sums, counts, masks.sum((1, 3)) > 0)


def _mad(sums: Tensor, counts: Tensor, any_pair: Tensor) -> Tensor:
    r"""MAD :obj:`[..., B, K]` from each row's sum :obj:`sums` and count
    :obj:`counts` of the distances that count :obj:`[..., B, S, K]`, and
    whether each mask has a pair at all :obj:`[B, K]`."""
    # Zero distances count neither in a row's mean nor (a row without a
    # nonzero distance) in the mean over rows.
    row_mean = sums / counts.clamp(min=1)
    rows = (counts > 0).sum(-2)  # [..., B, K]
    out = row_mean.sum(-2) / rows.clamp(min=1)
    # No pair at all: undefined (nan); pairs at zero distance only: 0.
    return torch.where(any_pair, out, torch.full_like(out, float('nan')))


def _check_hops(fn: str, hops) -> None:
    ok = (isinstance(hops, tuple) and len(hops) == 2
          and isinstance(hops[0], int) and hops[0] >= 0
          and (hops[1] is None
               or (isinstance(hops[1], int) and hops[1] >= hops[0])))
    if not ok:
        raise ValueError(f"'{fn}' expects 'hops' as (low, high) with "
                         f"0 <= low <= high, or high=None (got {hops!r})")


def mad(x: Tensor, edge_index: Optional[Tensor] = None,
        batch: Optional[Tensor] = None, batch_size: Optional[int] = None,
        hops: Optional[Tuple[int, Optional[int]]] = None,
        max_samples: int = 2048,
        generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Computes the Mean Average Distance (MAD) of node features from the
    `"Measuring and Relieving the Over-smoothing Problem for Graph Neural
    Networks from the Topological View" <https://arxiv.org/abs/1909.03211>`_
    paper (Eqs. 1-4).

    .. math::
        D_{ij} = 1 - \frac{\mathbf{h}_i^{\top} \mathbf{h}_j}
        {\|\mathbf{h}_i\|_2 \|\mathbf{h}_j\|_2}, \qquad
        \bar{D}_i = \frac{\sum_j M_{ij} D_{ij}}
        {\sum_j \mathbb{1}(M_{ij} D_{ij} > 0)}, \qquad
        \mathrm{MAD} = \frac{\sum_i \bar{D}_i}
        {\sum_i \mathbb{1}(\bar{D}_i > 0)},

    over the nodes of a graph, where the mask :math:`M_{ij} = 1` selects
    the pairs :math:`i \neq j` whose hop distance lies in :obj:`hops`
    (all pairs if :obj:`None`). As in the paper, zero distances count
    neither in a row's mean nor, for a row without a nonzero distance, in
    the mean over rows; "zero" is :math:`\leq 4\epsilon` of :obj:`x`'s
    dtype. The value is :math:`0` when every selected pair is at zero
    distance (complete smoothing) and :obj:`nan` when no pair is selected.
    A zero row has distance :math:`1` to every row. A graph with more than
    :obj:`max_samples` nodes is evaluated on :obj:`max_samples` of its
    nodes drawn as in :func:`gnorm.metrics.uniformity`; their hop
    distances are those of the whole graph (edges taken in both
    directions).

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        edge_index (torch.Tensor, optional): The edge indices of shape
            :obj:`[2, num_edges]`; needed with :obj:`hops`.
            (default: :obj:`None`)
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)
        hops (tuple, optional): :obj:`(low, high)`: the pairs at hop distance
            :math:`\text{low} \leq \phi(i, j) \leq \text{high}`;
            :obj:`high=None` has no upper bound (unreachable pairs included).
            :obj:`(1, 3)` are the paper's neighbour pairs, :obj:`(8, None)`
            its remote pairs. (default: :obj:`None`: all pairs)
        max_samples (int, optional): The largest number of nodes per graph
            used; larger graphs are subsampled. (default: :obj:`2048`)
        generator (torch.Generator, optional): The random number generator
            for the subsampling; the global one if :obj:`None`.
            (default: :obj:`None`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    batch_vec, size = check_inputs('mad', x, batch, batch_size,
                                   max_samples)
    if hops is not None:
        _check_hops('mad', hops)
        if edge_index is None:
            raise ValueError("'mad' needs 'edge_index' to select pairs by "
                             "'hops'")
        check_edge_index('mad', edge_index, batch_vec)
    max_hops = 0 if hops is None else (hops[1] if hops[1] is not None
                                       else hops[0] - 1)
    pairs = draw_pairs(x.size(0), batch_vec, size, max_samples, generator,
                       edge_index if hops is not None else None, max_hops)
    masks = pair_masks(pairs, [hops], x.dtype)
    return finish(mads(x, pairs, masks).squeeze(-1), batch)


def mad_gap(x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None,
            batch_size: Optional[int] = None, neighbor_hops: int = 3,
            remote_hops: int = 8, max_samples: int = 2048,
            generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Computes MADGap from the `"Measuring and Relieving the
    Over-smoothing Problem for Graph Neural Networks from the Topological
    View" <https://arxiv.org/abs/1909.03211>`_ paper (Eq. 5): the
    :func:`mad` of remote pairs minus that of neighbour pairs,

    .. math::
        \mathrm{MADGap} = \mathrm{MAD}^{\text{rmt}}
        - \mathrm{MAD}^{\text{neb}},

    with the neighbour pairs at hop distance :math:`1 \leq \phi(i, j) \leq`
    :obj:`neighbor_hops` and the remote pairs at :math:`\phi(i, j) \geq`
    :obj:`remote_hops` or unreachable (the paper's defaults: 3 and 8). A
    small or negative gap means remote nodes look as alike as neighbours:
    information from far away has smoothed the representation. Both MADs
    use the same drawn nodes (at most :obj:`max_samples` per graph, see
    :func:`mad`); the value is :obj:`nan` for a graph without neighbour or
    without remote pairs among them.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        edge_index (torch.Tensor): The edge indices of shape
            :obj:`[2, num_edges]`.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)
        neighbor_hops (int, optional): The largest hop distance of a
            neighbour pair. (default: :obj:`3`)
        remote_hops (int, optional): The smallest hop distance of a remote
            pair. (default: :obj:`8`)
        max_samples (int, optional): The largest number of nodes per graph
            used; larger graphs are subsampled. (default: :obj:`2048`)
        generator (torch.Generator, optional): The random number generator
            for the subsampling; the global one if :obj:`None`.
            (default: :obj:`None`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    check_x('mad_gap', x)
    check_samples('mad_gap', max_samples)
    if not (isinstance(neighbor_hops, int) and isinstance(remote_hops, int)
            and 1 <= neighbor_hops < remote_hops):
        raise ValueError(f"'mad_gap' expects integers 1 <= neighbor_hops < "
                         f"remote_hops (got {neighbor_hops!r}, "
                         f"{remote_hops!r})")
    batch_vec, size = check_batch('mad_gap', x, batch, batch_size)
    check_edge_index('mad_gap', edge_index, batch_vec)
    pairs = draw_pairs(x.size(0), batch_vec, size, max_samples, generator,
                       edge_index, remote_hops - 1)
    masks = pair_masks(pairs, gap_hops(neighbor_hops, remote_hops), x.dtype)
    return finish(gap_of(mads(x, pairs, masks)), batch)


def gap_hops(neighbor_hops: int, remote_hops: int) -> List[Tuple]:
    r"""The hops of MADGap's masks: remote pairs, then neighbour pairs."""
    return [(remote_hops, None), (1, neighbor_hops)]


def gap_of(values: Tensor) -> Tensor:
    r"""MADGap :obj:`[..., B]` from the :func:`mads` :obj:`[..., B, 2]`
    of the masks of :func:`gap_hops`."""
    return values[..., 0] - values[..., 1]
