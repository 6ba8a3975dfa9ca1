r"""The shortest paths a :class:`~gnorm.models.Graphormer` reads, computed
once per graph: :class:`ShortestPaths` (a PyG ``pre_transform``) stores
the hop distance of every ordered node pair and the edges along one
shortest path of every pair (:func:`path_edges`; at every node the
smallest-id edge that stays on a shortest path), so that the model's
attention bias is look-ups only.

One implementation serves one graph and many: the graphs of one size are
stacked into padded batches, whose distances are breadth-first levels of
batched adjacency products (:func:`_distances`), whose first edges are a
scatter-min over the edges (:func:`_first_edges`) and whose paths are
walked all pairs at once (:func:`_walk`). Datasets compute the paths of
all their graphs at once (:func:`add_shortest_paths`,
:func:`path_edges_many`).
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

_INT16_MAX = 32767


def shortest_paths(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor,
                                                                 Tensor]:
    r"""Hop distances and first edges of shortest paths of one graph.

    Distances are breadth-first levels (:func:`_distances`). Edge
    :math:`e = (i \to u)` starts a shortest path from :math:`i` to :math:`j`
    when :math:`d(u, j) = d(i, j) - 1`; of those, the edge with the smallest
    id is kept (:func:`_first_edges`). Following these first edges from
    :math:`i` to :math:`j` gives *the* path of the pair (:func:`path_edges`):
    at every node, the smallest-id edge that stays on a shortest path to
    :math:`j`.

    Args:
        edge_index (torch.Tensor): Directed edges :obj:`[2, num_edges]`.
        num_nodes (int): Number of nodes :math:`n`.

    Returns:
        (torch.Tensor, torch.Tensor): :obj:`dist` :obj:`[n, n]` (int64,
        :obj:`-1` where :math:`j` is unreachable from :math:`i`, :obj:`0`
        on the diagonal) and :obj:`first_edge` :obj:`[n, n]` (int64, the
        id of the first edge of a shortest path from :math:`i` to :math:`j`,
        :obj:`-1` where there is none).
    """
    n, num_edges = num_nodes, edge_index.size(1)
    if n == 0:
        return (torch.empty(0, 0, dtype=torch.long),
                torch.empty(0, 0, dtype=torch.long))
    src, dst = _batch_edges(edge_index.cpu().long().numpy(),
                            np.array([0, num_edges]), np.array([0]))
    dist = _distances(src, dst, n).view(1, n, n)  # [1, n, n]
    first, _ = _first_edges(dist, src, dst)  # [n * n], num_edges: none
    first = first.long().masked_fill(first == num_edges, -1)
    return dist.view(n, n), first.view(n, n)


def path_edges(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""Hop distances and the edges along one shortest path of every ordered
    node pair of a graph, flat (:func:`path_edges_many` of one graph).

    The path of :math:`(i, j)` follows the first edges of
    :func:`shortest_paths` from :math:`i` until :math:`j` (at every node,
    the smallest-id edge that stays on a shortest path to :math:`j`); the
    pairs come in row-major order, the edges of a pair in hop order, so
    pair :math:`(i, j)` owns the :math:`\max(d(i, j), 0)` entries after
    those of the pairs before it.

    Returns:
        (torch.Tensor, torch.Tensor): :obj:`dist` :obj:`[n * n]` (int64,
        :obj:`-1` unreachable) and :obj:`edges` :obj:`[sum of the
        distances]` (int64 local edge ids).
    """
    (out, ) = path_edges_many([edge_index], [num_nodes])
    return out


# Elements of the largest tensor of one batch of path_edges_many
# ([B, n, max(n, edges)]): bounds its memory (int64: 4 MB).
_BATCH_ELEMENTS = 1 << 19


def path_edges_many(edge_indices: Sequence[Tensor],
                    num_nodes: Sequence[int]) -> List[Tuple[Tensor, Tensor]]:
    r""":func:`path_edges` of many graphs at once, computed for batches of
    graphs of one size (:func:`_path_edges_flat`): for every graph the same
    tensors, bit for bit, as alone, in a fraction of the time.

    Args:
        edge_indices (list of torch.Tensor): Directed edges :obj:`[2,
            num_edges]` (local node ids) of every graph.
        num_nodes (list of int): Number of nodes of every graph.

    Returns:
        list of (torch.Tensor, torch.Tensor): :obj:`dist` :obj:`[n * n]` and
        :obj:`edges` :obj:`[sum of the distances]` (int64) of every graph.
    """
    nodes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)  # [G]
    if len(edge_indices) != nodes.size:
        raise ValueError(f"got {len(edge_indices)} edge indices for "
                         f"{nodes.size} graphs")
    edges = np.array([e.size(1) for e in edge_indices], dtype=np.int64)
    edge_index = (torch.cat([e.cpu().long() for e in edge_indices], 1)
                  .numpy() if edge_indices else np.zeros((2, 0), np.int64))
    dist, paths, path_ptr = _path_edges_flat(edge_index, nodes, edges)
    dist_ptr = _ptr(nodes * nodes)  # [G + 1]
    return [(torch.from_numpy(dist[dist_ptr[g]:dist_ptr[g + 1]]),
             torch.from_numpy(paths[path_ptr[g]:path_ptr[g + 1]]))
            for g in range(nodes.size)]


def _ptr(counts: np.ndarray) -> np.ndarray:
    r"""Offsets :obj:`[len(counts) + 1]` of segments of these lengths."""
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])


def _path_edges_flat(edge_index: np.ndarray, num_nodes: np.ndarray,
                     num_edges: np.ndarray, dtype=np.int64,
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    r""":func:`path_edges` of many graphs, graph after graph: the graphs of
    one size are stacked into padded batches (:func:`_batches`); a batch's
    distances are breadth-first levels of batched adjacency products
    (:func:`_distances`), its first edges a scatter-min over its edges
    (:func:`_first_edges`), its paths walked all pairs at once
    (:func:`_walk`). The distances of all graphs come first, as they place
    the paths in the output.

    Args:
        edge_index (numpy.ndarray): The edges of all graphs, graph after
            graph, :obj:`[2, sum of num_edges]` (local node ids).
        num_nodes (numpy.ndarray): Nodes of every graph :obj:`[G]`.
        num_edges (numpy.ndarray): Edges of every graph :obj:`[G]`.
        dtype: Of the outputs (int16 for datasets: the values are cast).

    Returns:
        (numpy.ndarray, numpy.ndarray, numpy.ndarray): :obj:`dist`
        :obj:`[sum of n * n]` and :obj:`edges` :obj:`[sum of the
        distances]`, the outputs of :func:`path_edges` of all graphs
        concatenated, and :obj:`path_ptr` :obj:`[G + 1]` (int64), where the
        edges of every graph start in :obj:`edges`.
    """
    edge_ptr = _ptr(num_edges)  # [G + 1]
    dist_ptr = _ptr(num_nodes * num_nodes)  # [G + 1]
    dist = np.empty(int(dist_ptr[-1]), dtype=dtype)  # [sum of n * n]
    length = np.zeros(num_nodes.size, dtype=np.int64)  # [G] path entries
    batches = list(_batches(num_nodes, num_edges))
    for n, graphs in batches:
        src, dst = _batch_edges(edge_index, edge_ptr, graphs)
        d = _distances(src, dst, n)  # [B, n * n]
        dist[dist_ptr[graphs, None] + np.arange(n * n)] = d.numpy()
        length[graphs] = d.clamp(min=0).sum(1).numpy()

    path_ptr = _ptr(length)  # [G + 1]
    paths = np.empty(int(path_ptr[-1]), dtype=dtype)  # [sum of distances]
    for n, graphs in batches:
        src, dst = _batch_edges(edge_index, edge_ptr, graphs)
        d = torch.from_numpy(
            dist[dist_ptr[graphs, None] + np.arange(n * n)]).long()
        first, after = _first_edges(d.view(-1, n, n), src, dst)
        _walk(d, first, after, path_ptr[graphs], paths)
    return dist, paths, path_ptr


def _batches(num_nodes: np.ndarray, num_edges: np.ndarray):
    r"""Yields :obj:`(n, graphs)`: the ids of graphs of :obj:`n > 0` nodes,
    in batches whose :obj:`[B, n, max(n, edges)]` tensors hold at most
    :obj:`_BATCH_ELEMENTS` elements (one graph at least)."""
    order = np.argsort(num_nodes, kind='stable')  # [G]
    sizes, starts = np.unique(num_nodes[order], return_index=True)
    for n, group in zip(sizes.tolist(), np.split(order, starts[1:])):
        if n == 0:
            continue
        width = n * max(n, int(num_edges[group].max()))
        per = max(1, _BATCH_ELEMENTS // width)
        for start in range(0, group.size, per):
            yield n, group[start:start + per]


def _batch_edges(edge_index: np.ndarray, edge_ptr: np.ndarray,
                 graphs: np.ndarray) -> Tuple[Tensor, Tensor]:
    r"""The edges of :obj:`graphs`, padded to the most edges :math:`E` of
    one of them: :obj:`src`, :obj:`dst` :obj:`[B, E]` (int64), edge
    :obj:`e` of a graph in column :obj:`e`. The padding is self-loops of
    node 0: never on a shortest path, and already in :math:`A + I`."""
    counts = edge_ptr[graphs + 1] - edge_ptr[graphs]  # [B]
    slot = np.arange(counts.max(initial=0))  # [E]
    valid = slot < counts[:, None]  # [B, E]
    ids = np.where(valid, edge_ptr[graphs, None] + slot, 0)  # [B, E]
    src = np.where(valid, edge_index[0][ids], 0)
    dst = np.where(valid, edge_index[1][ids], 0)
    return torch.from_numpy(src), torch.from_numpy(dst)


def _distances(src: Tensor, dst: Tensor, n: int) -> Tensor:
    r"""Hop distances of a batch of graphs of :obj:`n` nodes (edges from
    :func:`_batch_edges`), by breadth-first search from every node at once:
    the nodes reached from :math:`i` within :math:`k` hops are row
    :math:`i` of :math:`R_k = \min(R_{k - 1} (A + I), 1)`, :math:`R_0 = I`.
    After :math:`K` products, :math:`(i, j)` was reached in :math:`c = K + 1
    - d(i, j)` of them, so the sum of the :math:`R_k` gives the distances.
    A graph is done once a product reaches no new pair; done graphs leave
    the batch once they are a quarter of it.

    Returns:
        torch.Tensor: :obj:`[B, n * n]` (int64, row-major, :obj:`-1`
        unreachable).
    """
    batch = src.size(0)
    graph = torch.arange(batch)[:, None].expand_as(src)  # [B, E]
    adj = torch.eye(n).repeat(batch, 1, 1)  # [B, n, n]: A + I
    adj[graph, src, dst] = 1.0
    reach = torch.eye(n).repeat(batch, 1, 1)  # [B, n, n]: R_k
    count = reach.clone()  # [B, n, n]: sum of the R_k
    exact = torch.float32 if n * n < 2**24 else torch.float64  # for sums
    size = torch.full((batch, ), float(n), dtype=exact)  # sums of R_k
    left = torch.arange(batch)  # [B'] the graphs not yet written
    dist = torch.empty(batch, n * n, dtype=torch.long)
    products = 0
    while left.numel():
        products += 1
        reach = torch.bmm(reach, adj).clamp_(max=1.0)
        count.add_(reach)
        grown = reach.sum((1, 2), dtype=exact)  # [B']
        done = grown == size
        size = grown
        if 4 * int(done.sum()) < max(left.numel(), 4):
            continue
        count_done = count[done].view(-1, n * n)  # [done, n * n]
        dist[left[done]] = torch.where(count_done > 0,
                                       products + 1 - count_done, -1).long()
        keep = ~done
        left, size = left[keep], size[keep]
        reach, adj, count = reach[keep], adj[keep], count[keep]
    return dist


def _first_edges(dist: Tensor, src: Tensor,
                 dst: Tensor) -> Tuple[Tensor, Tensor]:
    r"""First edges of shortest paths of a batch of graphs (see
    :func:`shortest_paths`): for pair :math:`(i, j)`, the smallest id of an
    edge :math:`i \to u` with :math:`d(u, j) = d(i, j) - 1`, by a scatter-min
    over the edges.

    Args:
        dist (torch.Tensor): Hop distances :obj:`[B, n, n]` (int64).
        src, dst (torch.Tensor): The edges of :func:`_batch_edges`
            :obj:`[B, E]`.

    Returns:
        (torch.Tensor, torch.Tensor): :obj:`first` :obj:`[B * n * n]` (the
        edge id, :math:`E` where there is none) and :obj:`after` :obj:`[B *
        n * n]` (the flat index of pair :math:`(u, j)`, the rest of the
        path; that of :math:`(0, j)` where there is none).
    """
    batch, n, num_edges = dist.size(0), dist.size(1), src.size(1)
    dist = dist.int()  # int32: less to move
    to_dst = dist.gather(1, dst[:, :, None].expand(-1, -1, n))  # d(u, j)
    to_src = dist.gather(1, src[:, :, None].expand(-1, -1, n))  # d(i, j)
    ok = (to_dst >= 0) & (to_dst == to_src - 1)  # [B, E, n]
    edge = torch.arange(num_edges, dtype=torch.int)[:, None].expand(-1, n)
    first = torch.full((batch, n, n), num_edges, dtype=torch.int)
    first.scatter_reduce_(1, src[:, :, None].expand(-1, -1, n),
                          torch.where(ok, edge, num_edges), 'amin')
    first = first.view(batch, n * n)  # [B, n * n]
    dst = torch.cat([dst, dst.new_zeros(batch, 1)], 1)  # [B, E + 1]
    after = dst.gather(1, first.long()) * n  # [B, n * n]: u * n
    after += torch.arange(0, batch * n * n, n * n)[:, None]  # graph b
    after += torch.arange(n).repeat(n)  # j
    return first.view(-1), after.view(-1)


def _walk(dist: Tensor, first: Tensor, after: Tensor, path_start: np.ndarray,
          out: np.ndarray) -> None:
    r"""Writes the edges along the path of every pair of a batch of graphs
    into :obj:`out`: from pair :math:`(i, j)`, its first edge, then those of
    the pair :math:`(u, j)` it leads to, :math:`d(i, j)` times. The pairs
    are sorted by distance, longest first, so that the pairs still walking
    at hop :math:`k` are a prefix.

    Args:
        dist (torch.Tensor): Hop distances :obj:`[B, n * n]` (int64).
        first, after (torch.Tensor): :obj:`[B * n * n]` each, from
            :func:`_first_edges`.
        path_start (numpy.ndarray): Where the paths of every graph start in
            :obj:`out` :obj:`[B]`.
        out (numpy.ndarray): The paths of all graphs :obj:`[sum of the
            distances]`.
    """
    hops = dist.clamp(min=0)  # [B, n * n]
    pos = hops.view(-1).cumsum(0).view_as(hops) - hops  # [B, n * n]
    pos += torch.from_numpy(path_start - pos[:, 0].numpy())[:, None]
    hops = hops.view(-1).numpy()  # [B * n * n]
    key = hops.astype(np.int16 if dist.size(1) <= 2**30 else np.int64)
    order = np.argsort(-key, kind='stable')  # int16: a radix sort
    longer = np.cumsum(np.bincount(hops)[::-1])[::-1][1:]  # [most hops]
    order = order[:longer[0]] if longer.size else order[:0]  # [P]
    pos = pos.view(-1).numpy()[order]  # [P] where the next edge goes
    pair = order  # [P] the pair the walk is at
    first = first.numpy().astype(out.dtype)  # [B * n * n]
    after = after.numpy()  # [B * n * n]
    for active in longer.tolist():  # hop after hop
        at = pair[:active]  # in range: 'clip' only skips the bounds checks
        out[pos[:active]] = np.take(first, at, mode='clip')
        pos[:active] += 1
        pair[:active] = np.take(after, at, mode='clip')


class ShortestPaths(BaseTransform):
    r"""Stores the shortest paths of a graph for a Graphormer (see
    :func:`path_edges`): ``spd``, the hop distance of every ordered node
    pair, flat :obj:`[num_nodes * num_nodes]` in row-major order (pair
    :math:`(i, j)` at :math:`i n + j`, :obj:`-1` where unreachable), and
    ``path_edge``, the local ids of the edges along the path of every pair,
    pair after pair, :obj:`[sum of the distances]`. Both are int16, so that
    PyG's collation only concatenates them; :class:`gnorm.models.Graphormer`
    turns them into its attention bias with look-ups, no walk.

    :obj:`LAYOUT` names this layout in the processed files of
    :func:`~gnorm.data.load_molhiv` and :func:`~gnorm.data.load_zinc`, so
    that files written with another one are never read."""
    LAYOUT = 'paths2'

    def forward(self, data: Data) -> Data:
        n, num_edges = data.num_nodes, data.edge_index.size(1)
        _check_int16(n, num_edges)
        dist, edges, _ = _path_edges_flat(
            data.edge_index.cpu().long().numpy(), np.array([n]),
            np.array([num_edges]), dtype=np.int16)
        data.spd = torch.from_numpy(dist)  # [n * n]
        data.path_edge = torch.from_numpy(edges)  # [paths]
        return data


def _check_int16(num_nodes: int, num_edges: int) -> None:
    if max(num_nodes, num_edges) > _INT16_MAX:
        raise ValueError(f"ShortestPaths stores int16 ids; got a graph "
                         f"with {num_nodes} nodes and {num_edges} edges (max "
                         f"{_INT16_MAX})")


def add_shortest_paths(data: Data, slices: Optional[Dict[str, Tensor]],
                       ) -> Data:
    r"""Adds ``spd`` and ``path_edge`` of :class:`ShortestPaths` to the
    graphs of a PyG in-memory dataset's storage (:obj:`data` and
    :obj:`slices` of :meth:`InMemoryDataset.collate`, local edge ids), all
    graphs at once (:func:`_path_edges_flat`): the storage that collating
    the graphs after :class:`ShortestPaths` gives, bit for bit. The tensors
    are added in place (:obj:`slices` too, unless :obj:`None`: a lone graph,
    as :meth:`InMemoryDataset.collate` keeps it).

    Returns:
        torch_geometric.data.Data: :obj:`data`.
    """
    if slices is None:
        return ShortestPaths()(data)
    nodes = getattr(data._store, '_num_nodes', None)  # [G] ints, if given
    if nodes is None:
        nodes = slices['x'].diff()
    nodes = np.asarray(nodes, dtype=np.int64)  # [G]
    edges = slices['edge_index'].diff().numpy()  # [G]
    _check_int16(int(nodes.max(initial=0)), int(edges.max(initial=0)))
    dist, paths, path_ptr = _path_edges_flat(
        data.edge_index.numpy(), nodes, edges, dtype=np.int16)
    data.spd = torch.from_numpy(dist)  # [sum of n * n]
    data.path_edge = torch.from_numpy(paths)  # [sum of the distances]
    slices['spd'] = torch.from_numpy(_ptr(nodes * nodes))  # [G + 1]
    slices['path_edge'] = torch.from_numpy(path_ptr)  # [G + 1]
    return data
