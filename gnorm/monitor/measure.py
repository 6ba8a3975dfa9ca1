r"""How :class:`~gnorm.monitor.CollapseMonitor` measures the layer outputs
it kept: the inputs of the metrics prepared once per set of inputs
(:class:`Prepared`, host reads allowed), then every metric of a chunk of
layers of one shape at once, on the device, without a value read to the
host (:func:`measure`).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from gnorm.metrics.checks import check_batch, check_edge_index
from gnorm.metrics.pairs import (Pairs, draw_pairs, gap_hops, gap_of, mads,
                                 pair_masks, uniformities)
from gnorm.metrics.pointwise import (dense_effective_rank,
                                     graph_cosine_similarity, graph_variance)
from gnorm.metrics.rows import graph_sum, row_peaks

# The metrics recorded by default.
METRICS = ('effective_rank', 'cosine_similarity', 'variance',
           'dirichlet_energy', 'dirichlet_energy_normalized', 'mad',
           'mad_gap')
# The metrics recorded when asked for (metrics=[*METRICS, 'uniformity']).
OPTIONAL_METRICS = ('uniformity', )
# The metrics that read the graph's edges.
EDGE_METRICS = ('dirichlet_energy', 'dirichlet_energy_normalized', 'mad_gap')
# Largest number of entries of the temporary tensors of a chunk of layers
# measured together (rows [L, rows, d], pairwise distances [2, L, B, S, S]):
# small enough to be reused by the allocator instead of mapped afresh.
_CHUNK = 1 << 21


def need_edges(metrics: Sequence[str]) -> None:
    r"""Refuses :obj:`metrics` that read edges when there are none."""
    needs = [m for m in metrics if m in EDGE_METRICS]
    if needs:
        raise ValueError(f"CollapseMonitor.record: {', '.join(needs)} need "
                         f"the graph's edges; pass edge_index=data.edge_index "
                         f"or leave them out of metrics=")


class Prepared:
    r"""What the metrics of one set of inputs need, computed once (host
    reads allowed here): the rows the node metrics see, the graphs, the
    dense layout, the edges and the drawn pairs. :obj:`monitor` is the
    :class:`~gnorm.monitor.CollapseMonitor` (its :obj:`metrics`,
    :obj:`max_samples`, :obj:`seed`, :obj:`neighbor_hops`,
    :obj:`remote_hops`). With :obj:`graph_tokens`, the first row of each
    graph is its graph token, which uniformity leaves out."""
    def __init__(self, monitor, rows: int,
                 edge_index: Optional[Tensor], batch: Optional[Tensor],
                 batch_size: Optional[int], seeds: Optional[int],
                 device: torch.device, graph_tokens: bool = False):
        metrics = monitor.measured
        if seeds is not None:
            if batch is not None:
                raise ValueError("CollapseMonitor.record: pass 'batch' or "
                                 "'num_seed_nodes', not both")
            if not 0 < seeds <= rows:
                raise ValueError(f"CollapseMonitor.record: "
                                 f"num_seed_nodes={seeds} but the layer "
                                 f"output has {rows} rows")
        nodes = rows if seeds is None else seeds  # rows of the node metrics
        # The inputs where the outputs are (e.g. edges left on the CPU).
        edge_index = None if edge_index is None else edge_index.to(device)
        batch = batch.to(device) if isinstance(batch, Tensor) else batch
        probe = torch.empty(rows, 0, device=device)
        batch_vec, size = check_batch('CollapseMonitor.record', probe, batch,
                                       batch_size)
        self.rows, self.nodes, self.size = rows, nodes, size
        self.batch = batch_vec[:nodes]
        # Graphs sorted, zero-padded to [B, N] for the effective rank.
        order = torch.argsort(self.batch, stable=True)
        counts = torch.bincount(self.batch, minlength=size)  # [B]
        self.width = int(counts.max()) if nodes > 0 else 0
        starts = torch.cumsum(counts, 0) - counts
        sorted_batch = self.batch[order]
        self.order = order
        self.pos = sorted_batch * self.width + \
            torch.arange(nodes, device=device) - starts[sorted_batch]
        self.graphs = int((counts > 0).sum())
        # The graphs averaged over: those with nodes.
        self.nonempty = (counts > 0).nonzero().flatten()
        self.edges = None
        if edge_index is None:
            need_edges(metrics)
        else:
            check_edge_index('CollapseMonitor.record', edge_index, batch_vec)
            self.edges = _Edges(edge_index, batch_vec, size)
        self.pairs = None
        if 'mad' in metrics or 'mad_gap' in metrics:
            generator = torch.Generator().manual_seed(monitor.seed)
            with_hops = 'mad_gap' in metrics
            self.pairs = draw_pairs(
                nodes, self.batch, size, monitor.max_samples, generator,
                edge_index if with_hops else None,
                monitor.remote_hops - 1, graph_nodes=rows)
            # The masks of MAD (all pairs) and MADGap, in one block.
            hops = ([None] if 'mad' in metrics else []) + (gap_hops(
                monitor.neighbor_hops, monitor.remote_hops)
                if with_hops else [])
            self.masks = pair_masks(self.pairs, hops, torch.float32)
        self.uniform = None  # the drawn nodes of uniformity
        if 'uniformity' in metrics:
            self.uniform = self.pairs  # MAD's nodes, if the same candidates
            if graph_tokens or self.uniform is None:
                self.uniform = _uniform_pairs(self.batch, size, monitor,
                                              graph_tokens)


def _uniform_pairs(batch: Tensor, size: int, monitor,
                   graph_tokens: bool) -> Pairs:
    r"""The nodes of uniformity, drawn as MAD's are: of the rows of
    :obj:`batch`, or with :obj:`graph_tokens` (:obj:`batch` sorted) of
    those after each graph's first row, its graph token."""
    rows = torch.arange(batch.numel(), device=batch.device)
    if graph_tokens:
        first = torch.ones_like(batch, dtype=torch.bool)
        first[1:] = batch[1:] != batch[:-1]
        rows = rows[~first]  # the node tokens
    generator = torch.Generator().manual_seed(monitor.seed)
    pairs = draw_pairs(rows.numel(), batch[rows], size, monitor.max_samples,
                       generator)
    return pairs._replace(index=rows[pairs.index])  # rows of the output


class _Edges:
    r"""The edges of the Dirichlet energies, as pairs of nodes:
    :math:`\|\mathbf{x}_i - \mathbf{x}_j\|` is that of edge :obj:`(j, i)`
    and of :obj:`(i, j)`, and :math:`0` for a self-loop, so each pair
    :obj:`i < j` is measured once, weighted by its count of edges (half
    the work for an undirected graph stored with both directions); and
    the graph of each pair and the nodes of each graph."""
    def __init__(self, edge_index: Tensor, batch: Tensor, size: int):
        rows = batch.numel()
        src, dst = edge_index[0].long(), edge_index[1].long()
        deg = torch.bincount(dst, minlength=rows)  # in-degree
        scale = (1 + deg).double().rsqrt()  # [rows], cast to the outputs'
        low, high = torch.minimum(src, dst), torch.maximum(src, dst)
        keep = low != high  # self-loops add 0
        key, count = torch.unique(low[keep] * rows + high[keep],
                                  return_counts=True)  # [P]
        i, j = key // rows, key % rows  # the pairs i < j
        self.weight = count.double()  # [P], edges per pair
        # Bags of two rows: x_i - x_j, then s_i x_i - s_j x_j.
        ends = torch.stack([i, j], -1).flatten()  # [2P]
        self.bags = torch.cat([ends, ends])  # [4P]
        self.offsets = torch.arange(0, self.bags.numel(), 2,
                                    device=self.bags.device)  # [2P]
        signs = torch.tensor([1.0, -1.0], dtype=torch.float64,
                             device=scale.device).repeat(i.numel())
        self.signs = torch.cat([signs, signs * scale[ends]])  # [4P]
        self.batch, self.size = batch[i], size  # graph of each pair
        self.counts = torch.bincount(batch, minlength=size)  # [B]

    def energies(self, x: Tensor) -> Tensor:
        r""":func:`gnorm.metrics.dirichlet_energy` without and with
        :obj:`normalized=True` of the outputs :obj:`x` :obj:`[L, rows,
        d]`, :obj:`[2, L, B]`: layer by layer, the differences
        :obj:`[2P, d]` of both as one weighted sum of bags of two rows
        (:func:`~torch.nn.functional.embedding_bag`, no gathered rows),
        their squared norms summed by a matrix-vector product."""
        signs = self.signs.to(x.dtype)
        sq = x.new_empty(x.size(0), 2, self.weight.numel())  # [L, 2, P]
        ones = x.new_ones(x.size(-1))
        for h, out in zip(x, sq):
            diff = torch.nn.functional.embedding_bag(
                self.bags, h, self.offsets, mode='sum',
                per_sample_weights=signs)  # [2P, d]
            torch.mv(diff.square_(), ones, out=out.view(-1))
        sq = sq.transpose(0, 1) * self.weight.to(x.dtype)  # [2, L, P]
        total = graph_sum(sq, self.batch, self.size, -1)  # [2, L, B]
        return total / self.counts.to(total.dtype).clamp(min=1)


def _dense(nodes: Tensor, p: Prepared) -> Tensor:
    r"""The node rows :obj:`[L, nodes, d]` graph by graph, zero-padded
    :obj:`[L, B, N, d]` (padding adds only zero singular values)."""
    if p.size == 1:  # one graph: no padding
        return nodes.unsqueeze(1)  # [L, 1, nodes, d]
    dense = nodes.new_zeros(nodes.size(0), p.size * p.width, nodes.size(-1))
    dense = dense.index_copy(1, p.pos, nodes.index_select(1, p.order))
    return dense.view(nodes.size(0), p.size, p.width, -1)


def _chunk(x: Tensor, p: Prepared) -> int:
    r"""How many layers with outputs like :obj:`x` (:obj:`[rows, d]`, or
    :obj:`[runs, rows, d]`) are measured together."""
    outputs = x.numel() // (x.size(-2) * x.size(-1))  # R runs: R outputs
    size = x.size(-2) * x.size(-1)  # [rows, d]
    for pairs in (p.pairs, p.uniform):  # distances and counts [2, B, S, S]
        if pairs is not None:
            size = max(size, 2 * pairs.valid.numel() * pairs.valid.size(-1))
    return max(1, _CHUNK // max(1, size * outputs))


def _values(x: Tensor, p: Prepared, metrics: Sequence[str]) -> Tensor:
    r"""The :obj:`metrics` of the outputs :obj:`x` :obj:`[L, rows, d]` of
    :obj:`L` layers, averaged over the graphs, and whether each output is
    finite: :obj:`[L, metrics + 1]`, on the device, no value read to the
    host."""
    peak = row_peaks(x)  # [L, rows]; nan or inf in a row: nan or inf
    finite = peak.isfinite().all(-1)  # [L]
    values = _metrics(x, peak, p, metrics)
    out = [values[m].index_select(-1, p.nonempty).to(torch.float64)
           .nanmean(-1) for m in metrics]  # [L] each
    return torch.stack(out + [finite.to(torch.float64)], -1)


def _metrics(x: Tensor, peak: Tensor, p: Prepared,
             metrics: Sequence[str]) -> Dict[str, Tensor]:
    r"""Each of the :obj:`metrics` of the outputs :obj:`x` :obj:`[L, rows,
    d]` (the largest absolute entry of each row :obj:`peak` :obj:`[L,
    rows]`), per graph :obj:`[L, B]`."""
    nodes = x[:, :p.nodes]  # [L, nodes, d]
    out = {}
    if 'effective_rank' in metrics:
        out['effective_rank'] = dense_effective_rank(_dense(nodes, p))
    if 'cosine_similarity' in metrics:
        out['cosine_similarity'] = graph_cosine_similarity(
            nodes, p.batch, p.size, peak[:, :p.nodes])
    if 'variance' in metrics:
        out['variance'] = graph_variance(nodes, p.batch, p.size, 'mean')
    if p.edges is not None and any(m.startswith('dirichlet_energy')
                                   for m in metrics):
        out['dirichlet_energy'], out['dirichlet_energy_normalized'] = \
            p.edges.energies(x)
    if p.pairs is not None:
        values = mads(nodes, p.pairs, p.masks.to(x.dtype))  # [L, B, K]
        if 'mad' in metrics:  # the first mask
            out['mad'] = values[..., 0]
        if 'mad_gap' in metrics:  # the last two masks
            out['mad_gap'] = gap_of(values[..., -2:])
    if p.uniform is not None:
        out['uniformity'] = uniformities(x, p.uniform)
    return out


def measure(outputs: Dict[str, Tuple[Tensor, Prepared]],
            metrics: Sequence[str],
            dtype: Optional[torch.dtype]) -> Dict[str, Tensor]:
    r"""The :obj:`metrics` of every layer's output (:obj:`{name: (output,
    its Prepared inputs)}`) computed in :obj:`dtype` (:obj:`None`: the
    outputs'), averaged over the graphs, and whether the output is
    finite: :obj:`{name: [metrics + 1]}` (:obj:`[runs, metrics + 1]` for
    stacked runs), on the device. Layers of one shape and inputs are
    stacked and measured together, in chunks of layers."""
    groups: Dict[Any, List[str]] = {}
    for name, (x, p) in outputs.items():
        groups.setdefault((id(p), tuple(x.shape), x.dtype, x.device),
                          []).append(name)
    values = {}
    for names in groups.values():
        p = outputs[names[0]][1]
        runs = outputs[names[0]][0].dim() == 3
        per = _chunk(outputs[names[0]][0], p)
        for start in range(0, len(names), per):
            chunk = names[start:start + per]
            stacked = torch.stack([outputs[n][0] for n in chunk])
            if dtype is not None:
                stacked = stacked.to(dtype)
            if runs:  # [L, runs, rows, d]: every run an output of its own
                table = _values(stacked.flatten(0, 1), p, metrics)
                table = table.view(*stacked.shape[:2], -1)  # [L, R, M+1]
            else:  # [L, rows, d]
                table = _values(stacked, p, metrics)  # [L, M + 1]
            for name, row in zip(chunk, table):
                values[name] = row
    return {name: values[name] for name in outputs}
