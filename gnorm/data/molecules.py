r"""Molecule datasets for graph-level tasks, with the shortest paths a
Graphormer needs computed once per graph.

* ``molhiv``: :class:`ogb.graphproppred.PygGraphPropPredDataset`
  (``ogbg-molhiv``, 41,127 molecules, 9 atom / 3 bond feature columns),
  official scaffold split, binary classification scored by ROC-AUC from
  :class:`ogb.graphproppred.Evaluator`. Files in ``<root>/ogbg_molhiv/``.
* ``zinc``: :class:`torch_geometric.datasets.ZINC`, the 12k subset by
  default (``subset=True``; PyG's own default is the full 250k), one atom
  type and one bond type per atom and bond, regression scored by MAE. Raw
  files in ``<root>/zinc/raw/``.
* ``zinc_fixture``: a smoke-test pair, not a benchmark: trains on the exact
  1,000 ZINC-subset validation graphs and validates and tests on its 1,000
  test graphs (:func:`zinc_fixture`, read from the mirror).

A mirror folder (``GNORM_DATA_MIRROR`` / ``data.mirror``) is read offline:
``<mirror>/ogb_regenerated/ogbg_molhiv/`` is copied into the root, and the
ZINC index files found in ``<mirror>/zinc_partial/index/``; nothing is
downloaded then. :func:`zinc_fixture` reads the exact ZINC-subset val/test
graphs of ``<mirror>/zinc_partial/`` (tests and smoke runs only).

:class:`ShortestPaths` is the ``pre_transform``: it stores, per graph, the
shortest-path distance of every ordered node pair and the edges along one
shortest path of every pair (:func:`path_edges`; the sum of the distances,
all hops), so that the model's attention bias is look-ups only. The molhiv
and ZINC datasets compute them for all graphs at once when they process
(:func:`add_shortest_paths`, :func:`path_edges_many`: the same values, in
batches of graphs of one size). Processed files are named after
:obj:`ShortestPaths.LAYOUT`, so that files of another layout are never read.
"""
import contextlib
import importlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import ZINC
from torch_geometric.io import fs
from torch_geometric.transforms import BaseTransform

from gnorm.errors import ConfigError, DataError

# name -> (feature scheme of gnorm.models.Graphormer, outputs, metric,
#          True if higher is better)
GRAPH_DATASETS = {
    'molhiv': ('ogb', 1, 'rocauc', True),
    'zinc': ('zinc', 1, 'mae', False),
    'zinc_fixture': ('zinc', 1, 'mae', False),
}
# Files PyG's ZINC reads from <root>/zinc/raw/.
ZINC_RAW = ('train.pickle', 'val.pickle', 'test.pickle', 'train.index',
            'val.index', 'test.index')
_INT16_MAX = 32767
# The fix named when a graph task lacks its optional dependencies.
GRAPH_EXTRA = ("pip install \"gnorm[graph]\" (in a checkout: pip install "
               "-e \".[graph]\")")


def import_ogb(name: str = 'ogb'):
    r"""Imports module :obj:`name` of ``ogb`` (e.g.
    ``ogb.graphproppred``); raises :class:`DataError` naming the ``[graph]``
    extra that installs it (and RDKit) when ``ogb`` is missing."""
    try:
        importlib.import_module('ogb')  # not cached under name if missing
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or '').split('.')[0] not in ('ogb', 'rdkit'):
            raise
        raise DataError(f"the graph tasks need ogb and RDKit ({e}); "
                        f"{GRAPH_EXTRA}") from None


def shortest_paths(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor,
                                                                 Tensor]:
    r"""Hop distances and first edges of shortest paths of one graph.

    Distances come from :func:`scipy.sparse.csgraph.shortest_path`
    (breadth-first search from every node). Edge :math:`e = (i \to u)`
    starts a shortest path from :math:`i` to :math:`j` when
    :math:`d(u, j) = d(i, j) - 1`; of those, the edge with the smallest id is
    kept. Following these first edges from :math:`i` to :math:`j` gives
    *the* path of the pair (:func:`path_edges`): at every node, the
    smallest-id edge that stays on a shortest path to :math:`j`.

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
    dist, first = _shortest_paths(edge_index.cpu().numpy(), num_nodes)
    return torch.from_numpy(dist), torch.from_numpy(first)


def _shortest_paths(edge_index: np.ndarray,
                    n: int) -> Tuple[np.ndarray, np.ndarray]:
    r""":func:`shortest_paths` on numpy arrays."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import shortest_path
    src, dst = edge_index
    num_edges = src.size
    adj = csr_array((np.ones(num_edges), (src, dst)), shape=(n, n))
    dist = shortest_path(adj, directed=True, unweighted=True)  # [n, n]
    dist = np.where(np.isinf(dist), -1, dist).astype(np.int64)

    # Candidate (edge e = i -> u, target j) where d(u, j) = d(i, j) - 1.
    ok = (dist[dst] >= 0) & (dist[dst] == dist[src] - 1)  # [E, n]
    edge_id, target = ok.nonzero()  # ascending edge ids
    first = np.full(n * n, num_edges, dtype=np.int64)
    np.minimum.at(first, src[edge_id] * n + target, edge_id)  # i * n + j
    first[first == num_edges] = -1
    return dist, first.reshape(n, n)  # [n, n], [n, n]


def path_edges(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""Hop distances and the edges along one shortest path of every ordered
    node pair of a graph, flat.

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
    dist, edges = _path_edges(edge_index.cpu().numpy(), num_nodes)
    return torch.from_numpy(dist), torch.from_numpy(edges)


def _path_edges(edge_index: np.ndarray,
                n: int) -> Tuple[np.ndarray, np.ndarray]:
    r""":func:`path_edges` on numpy arrays."""
    dist, first = _shortest_paths(edge_index, n)
    dist, first = dist.reshape(-1), first.reshape(-1)  # [n * n]
    hops = max(int(dist.max(initial=0)), 0)
    target = np.tile(np.arange(n), n)  # [n * n]: j of pair i * n + j
    cur = np.arange(n * n)  # pair (node on the path, j), row-major
    steps = np.empty((n * n, hops), dtype=np.int64)  # [n * n, hops]
    for k in range(hops):  # all pairs at once, one hop per step
        edge = first[cur]  # [n * n], -1 once j is reached
        steps[:, k] = edge
        cur = np.where(edge >= 0, edge_index[1][edge] * n + target, cur)
    on_path = np.arange(hops) < dist[:, None]  # [n * n, hops]
    return dist, steps[on_path]  # pair-major, hop order


# Elements of the largest tensor of one batch of path_edges_many
# ([B, n, max(n, edges)]): bounds its memory (int64: 4 MB).
_BATCH_ELEMENTS = 1 << 19


def path_edges_many(edge_indices: Sequence[Tensor],
                    num_nodes: Sequence[int]) -> List[Tuple[Tensor, Tensor]]:
    r""":func:`path_edges` of many graphs at once: for every graph the same
    tensors, bit for bit, as :func:`path_edges` gives, computed for batches
    of graphs of one size (:func:`_path_edges_flat`) rather than graph by
    graph (about 3x faster on ogbg-molhiv at one thread,
    ``experiments/results/bench_paths_cpu.md``).

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
    r""":func:`_path_edges` of many graphs, graph after graph: the graphs of
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
        distances]`, the outputs of :func:`_path_edges` of all graphs
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
    r"""First edges of shortest paths of a batch of graphs (as
    :func:`_shortest_paths`): for pair :math:`(i, j)`, the smallest id of an
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
    :func:`load_molhiv` and :func:`load_zinc`, so that files written with
    another one are never read."""
    LAYOUT = 'paths2'

    def forward(self, data: Data) -> Data:
        n, num_edges = data.num_nodes, data.edge_index.size(1)
        _check_int16(n, num_edges)
        dist, edges = _path_edges(data.edge_index.numpy(), n)
        data.spd = torch.from_numpy(dist.astype(np.int16))  # [n * n]
        data.path_edge = torch.from_numpy(edges.astype(np.int16))  # [paths]
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


class _BatchedPaths:
    r"""Mixin of the in-memory datasets of :func:`load_molhiv` and
    :func:`load_zinc`: with :class:`ShortestPaths` as ``pre_transform``,
    :meth:`process` runs the parent's without it and adds the paths of all
    graphs at once where the parent collates them
    (:func:`add_shortest_paths`): the same files as graph by graph, about
    3x faster. ogb collates with ``self.collate``, PyG's
    ZINC with ``self.save``; both are replaced while the parent's
    :meth:`process` runs, and a parent that calls neither is an error."""
    def process(self) -> None:
        if type(self.pre_transform) is not ShortestPaths:
            return super().process()
        transform, self.pre_transform = self.pre_transform, None
        self._collated = 0
        self.collate, self.save = self._collate_paths, self._save_paths
        try:
            super().process()
            collated = self._collated
        finally:
            self.pre_transform = transform
            del self.collate, self.save, self._collated
        if not collated:
            raise RuntimeError(f"{type(self).__name__}.process() did not "
                               f"collate through collate() or save(); the "
                               f"shortest paths were not added")

    def _collate_paths(self, data_list: Sequence[Data]):
        data, slices = type(self).collate(data_list)
        self._collated += 1
        return add_shortest_paths(data, slices), slices

    def _save_paths(self, data_list: Sequence[Data], path: str) -> None:
        # InMemoryDataset.save with the paths added.
        data, slices = self._collate_paths(data_list)
        fs.torch_save((data.to_dict(), slices, data.__class__), path)


@contextlib.contextmanager
def _full_torch_load():
    r"""Lets ogb 1.3.6's :func:`torch.load` (no ``weights_only``) read its
    processed file under torch >= 2.6 while the block runs, without the
    warnings that ogb's own code triggers; the previous environment is
    restored afterwards."""
    key = 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'
    old = os.environ.get(key)
    os.environ[key] = '1'
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='.*(' + key +
                                    '|NumPy array is not writable)')
            yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


# The modules whose tqdm bars show while a dataset is read or processed.
BAR_MODULES = {'molhiv': ('ogb.io.read_graph_raw', 'ogb.io.read_graph_pyg',
                          'ogb.utils.url'),
               'zinc': ('torch_geometric.datasets.zinc', )}


@contextlib.contextmanager
def terminal_bars(modules: Sequence[str]):
    r"""While the block runs, the tqdm bars of :obj:`modules` show only on
    a terminal (tqdm's ``disable=None``): in a log file or a job's output
    every update of a bar is a carriage return and a line of text, tens of
    thousands of them while ogbg-molhiv is processed."""
    patched = []
    for name in modules:
        module = importlib.import_module(name)
        bar = getattr(module, 'tqdm', None)
        if bar is None:
            continue

        def quiet(*args, _bar=bar, **kwargs):
            kwargs.setdefault('disable', None)
            return _bar(*args, **kwargs)
        patched.append((module, bar))
        module.tqdm = quiet
    try:
        yield
    finally:
        for module, bar in patched:
            module.tqdm = bar


def _copy_tree(src: Path, dst: Path) -> None:
    r"""Copies the files of :obj:`src` that :obj:`dst` lacks (through a
    temporary name, so an interrupted copy leaves no truncated file)."""
    for path in sorted(src.rglob('*')):
        target = dst / path.relative_to(src)
        if path.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f'.{target.name}.tmp')
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)


def _mirror(mirror: Union[str, Path, None]) -> Optional[Path]:
    if mirror in (None, ''):
        return None
    mirror = Path(mirror).expanduser().resolve()
    if not mirror.is_dir():
        raise DataError(f"data mirror {mirror} is not a folder; fix "
                        f"GNORM_DATA_MIRROR / data.mirror or unset it to "
                        f"download")
    return mirror


def _molhiv_class():
    r""":class:`ogb.graphproppred.PygGraphPropPredDataset` with its processed
    file named after :obj:`ShortestPaths.LAYOUT` and the paths added in
    batches (:class:`_BatchedPaths`; ogb itself is imported on first use
    only)."""
    base = import_ogb('ogb.graphproppred').PygGraphPropPredDataset
    cls = globals().get('_PathsGraphPropPredDataset')
    if cls is None or cls.__bases__ != (_BatchedPaths, base):
        cls = type('_PathsGraphPropPredDataset', (_BatchedPaths, base), {
            '__module__': __name__,
            'processed_file_names': property(
                lambda self: f'geometric_data_processed_'
                             f'{ShortestPaths.LAYOUT}.pt')})
        globals()['_PathsGraphPropPredDataset'] = cls
    return cls


def __getattr__(name: str):
    # Lets pickle find the lazily made dataset class (spawned workers).
    if name == '_PathsGraphPropPredDataset':
        return _molhiv_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _PathsZINC(_BatchedPaths, ZINC):
    r""":class:`torch_geometric.datasets.ZINC` with its processed files in a
    folder named after :obj:`ShortestPaths.LAYOUT` and the paths added in
    batches (:class:`_BatchedPaths`)."""
    @property
    def processed_dir(self) -> str:
        return f'{super().processed_dir}_{ShortestPaths.LAYOUT}'


def load_molhiv(root: Union[str, Path] = 'data',
                mirror: Union[str, Path, None] = None):
    r"""ogbg-molhiv with :class:`ShortestPaths` and its scaffold split.

    Returns:
        (dataset, dict): The :class:`PygGraphPropPredDataset` and the split
        (``train`` / ``valid`` / ``test`` index tensors).
    """
    dataset_class = _molhiv_class()
    root = Path(root).expanduser().resolve()
    mirror = _mirror(mirror)
    if mirror is not None:
        src = mirror / 'ogb_regenerated' / 'ogbg_molhiv'
        if not (src / 'raw').is_dir():
            raise DataError(f"dataset 'molhiv': the mirror lacks {src}/raw/; "
                            f"put OGB's ogbg_molhiv folder (raw/, split/, "
                            f"RELEASE_v1.txt) there or unset "
                            f"GNORM_DATA_MIRROR to download")
        _copy_tree(src, root / 'ogbg_molhiv')
    try:
        with _full_torch_load(), terminal_bars(BAR_MODULES['molhiv']):
            dataset = dataset_class('ogbg-molhiv', root=str(root),
                                              pre_transform=ShortestPaths())
    except (OSError, ConnectionError) as e:
        raise DataError(f"dataset 'molhiv': cannot read or download "
                        f"{root}/ogbg_molhiv ({type(e).__name__}); put OGB's "
                        f"ogbg_molhiv folder there or set GNORM_DATA_MIRROR "
                        f"to a folder holding ogb_regenerated/ogbg_molhiv/"
                        ) from None
    return dataset, dataset.get_idx_split()


def load_zinc(root: Union[str, Path] = 'data',
              mirror: Union[str, Path, None] = None, subset: bool = True,
              ) -> Dict[str, 'torch_geometric.datasets.ZINC']:
    r"""ZINC with :class:`ShortestPaths`: the 12k subset (default) or, with
    :obj:`subset=False`, the full 250k. Offline (with a :obj:`mirror`), a
    missing raw file raises :class:`DataError` naming the files and the
    folder to put them in.

    Returns:
        dict: ``train`` / ``valid`` / ``test``
        :class:`torch_geometric.datasets.ZINC` datasets.
    """
    root = Path(root).expanduser().resolve() / 'zinc'
    raw = root / 'raw'
    mirror = _mirror(mirror)
    if mirror is not None:
        index = mirror / 'zinc_partial' / 'index'
        if index.is_dir():
            _copy_tree(index, raw)
        missing = [f for f in ZINC_RAW if not (raw / f).is_file()]
        if missing:
            raise DataError(f"dataset 'zinc': missing {', '.join(missing)} "
                            f"in {raw}/ (offline: the mirror {mirror} has "
                            f"no copy); put ZINC's files there (molecules.zip"
                            f" of benchmarking-gnns) or unset "
                            f"GNORM_DATA_MIRROR to let PyG download them")
    try:
        with terminal_bars(BAR_MODULES['zinc']):
            return {name: _PathsZINC(str(root), subset=subset, split=split,
                                     pre_transform=ShortestPaths())
                    for name, split in (('train', 'train'), ('valid', 'val'),
                                        ('test', 'test'))}
    except (OSError, ConnectionError) as e:
        missing = [f for f in ZINC_RAW if not (raw / f).is_file()]
        raise DataError(f"dataset 'zinc': missing {', '.join(missing)} in "
                        f"{raw}/ and the download failed ({type(e).__name__})"
                        f"; put the files there or set GNORM_DATA_MIRROR"
                        ) from None


def zinc_fixture(mirror: Union[str, Path], split: str = 'val',
                 limit: Optional[int] = None) -> List[Data]:
    r"""The exact 1,000 ZINC-subset :obj:`split` (``val`` or ``test``)
    graphs (the first :obj:`limit` of them if given) of
    ``<mirror>/zinc_partial/subset_<split>_graphs.npz``, as PyG's
    ZINC stores them (``x`` :obj:`[n, 1]` atom types, ``edge_attr``
    :obj:`[E]` bond types, ``y`` :obj:`[1]`), with :class:`ShortestPaths`.
    For tests and smoke runs: the ZINC training graphs are not there."""
    path = Path(mirror) / 'zinc_partial' / f'subset_{split}_graphs.npz'
    if not path.is_file():
        raise DataError(f"ZINC fixture {path} not found; set "
                        f"GNORM_DATA_MIRROR to the shared data folder")
    arrays = np.load(path)
    nodes, edges = arrays['node_ptr'], arrays['edge_ptr']
    atom = torch.from_numpy(arrays['atom_type'])
    edge_index = torch.from_numpy(arrays['edge_index'])
    bond = torch.from_numpy(arrays['bond_type'])
    y = torch.from_numpy(arrays['y'])
    transform = ShortestPaths()
    return [transform(Data(x=atom[nodes[g]:nodes[g + 1]].view(-1, 1),
                           edge_index=edge_index[:, edges[g]:edges[g + 1]],
                           edge_attr=bond[edges[g]:edges[g + 1]],
                           y=y[g:g + 1]))
            for g in range(len(nodes) - 1)[:limit]]


def graph_sizes(graphs) -> Tensor:
    r"""Number of nodes of every graph of :obj:`graphs` (a PyG in-memory
    dataset or a view of one, read from its slices without loading the
    graphs; or any sequence of :class:`Data`), int64."""
    slices = getattr(graphs, 'slices', None)
    if slices is not None and 'x' in slices:
        counts = slices['x'].diff()  # [graphs in the whole dataset]
        return counts[torch.as_tensor(list(graphs.indices()))]
    return torch.tensor([g.num_nodes for g in graphs], dtype=torch.long)


def load_graph_dataset(name: str, root: Union[str, Path] = 'data',
                       mirror: Union[str, Path, None] = None,
                       subset: bool = True, limit: Optional[int] = None,
                       ) -> Dict[str, object]:
    r"""The ``train`` / ``valid`` / ``test`` graphs of dataset :obj:`name`
    (one of :obj:`GRAPH_DATASETS`); :obj:`subset` is for ``zinc``,
    :obj:`limit` (graphs per split) for ``zinc_fixture`` only."""
    if name not in GRAPH_DATASETS:
        raise ConfigError(f"unknown graph dataset {name!r}; pass one of "
                          f"{', '.join(GRAPH_DATASETS)}")
    if name == 'zinc':
        return load_zinc(root, mirror, subset)
    if name == 'zinc_fixture':
        mirror = _mirror(mirror)
        if mirror is None:
            raise DataError("dataset 'zinc_fixture' is read from the mirror; "
                            "set GNORM_DATA_MIRROR to the shared data folder")
        test = zinc_fixture(mirror, 'test', limit)
        return {'train': zinc_fixture(mirror, 'val', limit), 'valid': test,
                'test': test}
    dataset, split = load_molhiv(root, mirror)
    return {k: dataset[split[k]] for k in ('train', 'valid', 'test')}
