import math
from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import LayerNorm, Parameter
from torch_geometric.typing import OptTensor
from torch_geometric.utils import scatter

from gnorm.nn._inputs import check_batch, check_edge_index
from gnorm.nn._nystrom import nystrom_negatives
from gnorm.nn._sparse import (CSREdges, IndexEdges, as_dtype, csr_patterns,
                              edge_sum, masked_sums, uses_csr)
from gnorm.nn.stacked import layer_norm

NEGATIVES = ('all', 'non_neighbors')
KERNELS = ('exact', 'nystrom')
# The least temperature of kernel='nystrom': its factors exp(r.l / tau)
# (|r.l| <= 4) reach e^40 there, and overflow float32 below ~0.045.
MIN_NYSTROM_TEMPERATURE = 0.1

# Head dimension multiple of the attention: CUDA's memory-efficient kernel
# takes float32 heads only in multiples of 8 (else the MATH kernel builds
# the n x n matrix); zero columns add nothing to the scores.
_HEAD_MULTIPLE = 8


class MaskedPairs(NamedTuple):
    r"""The pairs that non-neighbour negatives leave out, for one graph
    (or one mini-batch): node :obj:`dst[e]` does not contrast with
    :obj:`src[e]` (every edge and every self-loop, sorted), and
    whether a node keeps any negative as a row (:obj:`valid`) and as a
    column (:obj:`col_valid`), :obj:`[num_nodes, 1]`. Each pair is there
    once, or, when :obj:`keep` is given, as often as :obj:`edge_index`
    lists it, :obj:`keep` (:obj:`[pairs]`, boolean) marking one copy of
    each. Built once per graph by :func:`masked_pairs` and reused by every
    layer and every epoch, with the CSR :obj:`patterns` of the pairs
    (:func:`gnorm.nn._sparse.csr_patterns`) when built once."""
    src: Tensor
    dst: Tensor
    valid: Tensor
    col_valid: Tensor
    dst_order: Tensor  # sorts the pairs by dst, then src
    keep: OptTensor = None
    patterns: Optional[Tuple[Tuple[Tensor, Tensor],
                             Tuple[Tensor, Tensor]]] = None


def masked_pairs(edge_index: Tensor, num_nodes: int,
                 batch: OptTensor = None,
                 batch_size: Optional[int] = None,
                 compact: bool = True) -> MaskedPairs:
    r"""The :class:`MaskedPairs` of :obj:`edge_index` (not checked: check
    it first, e.g. with :func:`gnorm.nn._inputs.check_edge_index`), its
    repeated pairs dropped (:obj:`compact`: a host read, once per graph;
    the CSR patterns of the pairs are then derived too) or marked by
    :obj:`keep` (shapes that depend on the sizes only, for a forward pass
    without host reads)."""
    loop = torch.arange(num_nodes, device=edge_index.device)
    key = torch.cat([edge_index[0].long() * num_nodes + edge_index[1],
                     loop * (num_nodes + 1)]).sort().values  # src, then dst
    keep = torch.ones_like(key, dtype=torch.bool)
    keep[1:] = key[1:] != key[:-1]  # the first copy of each pair
    if compact:
        key, keep = key[keep], None
    src, dst = key.div(num_nodes, rounding_mode='floor'), key % num_nodes
    # A row (column) whose whole graph is masked out has no negatives.
    ones = torch.ones_like(dst) if keep is None else keep.long()
    size = (dst.new_full((num_nodes, ), num_nodes) if batch is None else
            graph_places(batch)[1])  # each node's graph size
    valid = size > scatter(ones, dst, 0, dim_size=num_nodes)
    col_valid = size > scatter(ones, src, 0, dim_size=num_nodes)
    dst_order = torch.argsort(dst * num_nodes + src)
    patterns = csr_patterns(src, dst, dst_order, num_nodes) if compact \
        else None
    return MaskedPairs(src, dst, valid.unsqueeze(-1), col_valid.unsqueeze(-1),
                       dst_order, keep, patterns)


def pair_edges(pairs: MaskedPairs, like: Tensor,
               csr: Optional[bool] = None) -> IndexEdges:
    r"""The edge operations along :obj:`pairs` for inputs like
    :obj:`like`: sparse CSR kernels (on the patterns :obj:`pairs` holds,
    else derived here) where :func:`gnorm.nn._sparse.uses_csr` says so (or
    :obj:`csr`), index gathers and scatters otherwise."""
    if not (uses_csr(like) if csr is None else csr):
        return IndexEdges(pairs.src, pairs.dst)
    return CSREdges(pairs.src, pairs.dst, pairs.dst_order, like.size(-2),
                    pairs.patterns)


def graph_places(batch: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Every node's place among the nodes of its graph (counted in the
    order of :obj:`batch`) and its graph's node count, :obj:`[num_nodes]`
    each, for graph ids :obj:`batch` in any order, as PyG's norms take
    them. Computed on the stable sort of :obj:`batch` (the identity order
    for a sorted one) and put back in the order of the nodes: index ops
    only, no value read."""
    ids, order = torch.sort(batch, stable=True)  # the nodes graph by graph
    first = torch.searchsorted(ids, ids)  # each graph's first sorted place
    count = torch.searchsorted(ids, ids, right=True) - first
    nodes = torch.arange(batch.numel(), device=batch.device)
    places = torch.stack([nodes - first, count])  # [2, num_nodes], sorted
    # places[:, j] belongs to node order[j]
    return places.scatter(1, order.expand(2, -1), places).unbind()


def dense_index(batch: Tensor, batch_size: Optional[int],
                ) -> Tuple[Tensor, Tensor]:
    r"""The place of every node in a dense batch :obj:`[B, M]` (:obj:`M`
    the largest graph; the nodes of a graph in their order in
    :obj:`batch`, which may be in any order), as flat indices
    :obj:`[num_nodes]` into :obj:`B * M`, and the mask of real nodes
    :obj:`[B, M]`: index ops only (no boolean indexing), so that
    :func:`torch.compile` takes it; :obj:`M` (and :obj:`B` without
    :obj:`batch_size`) are the only values read."""
    pos = graph_places(batch)[0]  # place in its graph
    if batch.numel() == 0:
        B, M = batch_size or 0, 0
    else:
        B = batch_size if batch_size is not None else int(batch.max()) + 1
        M = int(pos.max()) + 1
        torch._check(M >= 1)  # for torch.compile: M is a dynamic size
    index = batch * M + pos
    mask = torch.zeros(B * M, dtype=torch.bool, device=batch.device)
    return index, mask.index_fill_(0, index, True).view(B, M)


def to_dense(x: Tensor, index: Tensor, mask: Tensor) -> Tensor:
    r""":obj:`x` :obj:`[num_nodes, c]` in the dense batch :obj:`[B, M, c]`
    of :func:`dense_index`, zero-padded."""
    out = x.new_zeros(mask.numel(), x.size(-1)).index_copy(0, index, x)
    return out.view(*mask.shape, x.size(-1))


def _width(columns: int) -> int:
    r"""The head dimension of the attention for :obj:`columns` columns:
    the next multiple of :obj:`_HEAD_MULTIPLE`."""
    return -(-columns // _HEAD_MULTIPLE) * _HEAD_MULTIPLE


def _pad(t: Tensor, width: int) -> Tensor:
    r""":obj:`t` with zero columns up to :obj:`width` (itself if it has
    them)."""
    return t if t.size(-1) == width else F.pad(t, (0, width - t.size(-1)))


def _heads(t: Tensor) -> Tensor:
    r""":obj:`[(runs,) nodes, c]` as one head of attention
    :obj:`[runs or 1, 1, nodes, c]` (a view)."""
    return t.view(-1, 1, *t.shape[-2:])


def _softmax_product(xn: Tensor, x: Tensor, temperature: float) -> Tensor:
    r""":math:`\mathrm{softmax}(\hat{\mathbf{X}} \hat{\mathbf{X}}^{\top} /
    \tau) \mathbf{X}` of one graph (or runs of one graph,
    :obj:`[(runs,) n, d]`): scaled dot-product attention, queries = keys =
    :obj:`xn`, one head padded to a multiple of :obj:`_HEAD_MULTIPLE`
    columns (the same scores and outputs)."""
    d = x.size(-1)
    q = _pad(_heads(xn), _width(d))
    v = q if x is xn else _pad(_heads(x), _width(d))
    out = F.scaled_dot_product_attention(q, q, v, scale=1.0 / temperature)
    if out.size(-1) != d:
        return out[..., :d].reshape(x.shape)
    return out.view(x.shape)  # [(runs,) n, d]


class _AnchoredKeys(torch.autograd.Function):
    r"""Queries :math:`(\hat{x}, 1, \ldots, 1)` :obj:`[B, 1, N, D]` and
    keys :math:`(\hat{x}, 0, \ldots, 0)` with the anchor :math:`e_d`
    appended, :obj:`[B, 1, N + 1, D]`, of :obj:`xn` :obj:`[(B,) N, d]`;
    built outside autograd, whose backward pass is two slices."""
    @staticmethod
    def forward(ctx, xn: Tensor, width: int) -> Tuple[Tensor, Tensor]:
        ctx.shape, d = xn.shape, xn.size(-1)
        xn = _heads(xn)  # [B, 1, N, d]
        q = F.pad(xn, (0, width - d), value=1.0)  # [B, 1, N, D]
        k = F.pad(xn, (0, width - d, 0, 1))  # [B, 1, N + 1, D]
        k[..., -1, d].fill_(1.0)  # the anchor: e_d
        return q, k

    @staticmethod
    def backward(ctx, grad_q: Tensor, grad_k: Tensor):
        d = ctx.shape[-1]
        grad = grad_q[..., :d] + grad_k[..., :-1, :d]  # [B, 1, N, d]
        return grad.view(ctx.shape), None


class _AnchoredValues(torch.autograd.Function):
    r"""Values :math:`(v, [1,] 0, \ldots, 0)` with the anchor's value
    :math:`e_{c [+ 1]}` appended, :obj:`[B, 1, N + 1, D]`, of :obj:`v`
    :obj:`[(B,) N, c]` (the bracketed column of ones if :obj:`ones`)."""
    @staticmethod
    def forward(ctx, v: Tensor, width: int, ones: bool) -> Tensor:
        ctx.shape, c = v.shape, v.size(-1)
        out = F.pad(v, (0, 1), value=1.0) if ones else v
        out = F.pad(_heads(out), (0, width - out.size(-1), 0, 1))
        out[..., -1, c + ones].fill_(1.0)  # the anchor
        return out  # [B, 1, N + 1, D]

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad[..., :-1, :ctx.shape[-1]].reshape(ctx.shape), None, None


def _dense(t: Tensor, layout: Optional[Tuple[Tensor, Tensor]]) -> Tensor:
    r""":obj:`t` :obj:`[(runs,) nodes, c]` itself for one graph
    (:obj:`layout` :obj:`None`), else its zero-padded dense batch
    :obj:`[B, M, c]` of :func:`dense_index`'s layout."""
    return t if layout is None else to_dense(t, *layout)


def _anchored_keys(xn: Tensor, layout: Optional[Tuple[Tensor, Tensor]],
                   ) -> Tuple[Tensor, Tensor, OptTensor]:
    r"""Queries :obj:`[B, 1, N, D]`, keys :obj:`[B, 1, N + 1, D]` and key
    mask (:obj:`None` for one graph) of :func:`_anchored_attention` for
    the normalised rows :obj:`xn` :obj:`[(runs,) nodes, d]` in the dense
    :obj:`layout` of :func:`dense_index` (:obj:`None` for one graph);
    :obj:`D` is the multiple of :obj:`_HEAD_MULTIPLE` above :obj:`d + 1`."""
    q, k = _AnchoredKeys.apply(_dense(xn, layout), _width(xn.size(-1) + 2))
    keys = None
    if layout is not None:  # [B, 1, N, N + 1]: a view, no memory
        keys = F.pad(layout[1], (0, 1), value=True)[:, None, None, :]
        keys = keys.expand(-1, 1, q.size(-2), -1)
    return q, k, keys


def _anchored_attention(queries: Tuple[Tensor, Tensor, OptTensor],
                        v: Tensor, layout: Optional[Tuple[Tensor, Tensor]],
                        temperature: float, ones: bool) -> Tensor:
    r"""For values :obj:`v` :obj:`[(runs,) nodes, c]`, the attention
    :obj:`[(runs,) nodes, D]` of every node :math:`i` on the nodes
    :math:`j` of its graph and one *anchor*: columns :obj:`:c` hold
    :math:`\sum_j e^{S_{ij}} v_j`, then (if :obj:`ones`) one column
    :math:`\sum_j e^{S_{ij}}`, then one column :math:`e^{m}`, all divided
    by :math:`e^{m} + \sum_j e^{S_{ij}}` (:math:`m = 1/\tau`); the
    remaining columns are zero padding.

    The :obj:`queries` (of :func:`_anchored_keys`) are :math:`(\hat{x}_i,
    1, \ldots, 1)`, the keys :math:`(\hat{x}_j, 0, \ldots, 0)` and the
    anchor key :math:`e_d`, so a real logit is :math:`\hat{x}_i^\top
    \hat{x}_j / \tau` and the anchor's is :math:`m`, the largest a real
    pair can have: its weight reveals the row's normaliser, which scaled
    dot-product attention does not return. In a mini-batch, padded keys
    are masked out (after the scaling), so graphs never see each other at
    any :math:`\tau`."""
    q, k, keys = queries
    width = q.size(-1)
    v_d = _AnchoredValues.apply(_dense(v, layout), width, ones)
    out = F.scaled_dot_product_attention(q, k, v_d, attn_mask=keys,
                                         scale=1.0 / temperature)
    if layout is None:
        return out.view(*v.shape[:-1], width)  # [(runs,) n, D]
    return out.reshape(-1, width).index_select(0, layout[0])


class _Normalize(torch.autograd.Function):
    r""":func:`normalize`: the rows of :obj:`x` divided by their clamped
    norms, and a backward pass of a few ops (autograd's takes ~15)."""
    @staticmethod
    def forward(ctx, x: Tensor, eps: float) -> Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        scale = norm.clamp_min(eps)
        xn = x / scale
        ctx.save_for_backward(xn, norm, scale)
        return xn

    @staticmethod
    def backward(ctx, grad: Tensor):
        xn, norm, scale = ctx.saved_tensors
        # (grad - xn (xn . grad)) / |x|, and grad / eps where |x| < eps
        dot = (xn * grad).sum(-1, keepdim=True)
        dot = dot.masked_fill_(scale > norm, 0.0)
        return (grad - xn * dot) / scale, None


def normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    r""":func:`torch.nn.functional.normalize` of the rows of :obj:`x`
    (:math:`x / \max(\lVert x \rVert_2, \epsilon)`), the same values and
    gradients, by one autograd node with a short backward pass."""
    return _Normalize.apply(x, eps)


def each_run(negatives: Callable[..., Tensor], x: Tensor, xn: Tensor,
             *args) -> Tensor:
    r""":obj:`negatives(x[r], xn[r], *args)` for every run of inputs
    :obj:`[runs, num_nodes, d]`, stacked: the runs of a mini-batch of graphs
    one after the other."""
    return torch.stack([negatives(x_r, xn_r, *args)
                        for x_r, xn_r in zip(x, xn)])


def contrastive_negatives(
    x: Tensor,
    xn: Tensor,
    temperature: float = 1.0,
    batch: OptTensor = None,
    batch_size: Optional[int] = None,
    edge_index: Union[Tensor, MaskedPairs, None] = None,
    symmetric: bool = False,
) -> Tensor:
    r"""The negative term :math:`\mathbf{X}_{\text{neg}}` of ContraNorm.

    With :math:`S_{ij} = \hat{x}_i^\top \hat{x}_j / \tau` on the L2-normalised
    rows :math:`\hat{x}` and :math:`K_{ij} = M_{ij} e^{S_{ij}}`, where the
    mask :math:`M` is one everywhere, or zero for :math:`j = i` and for every
    edge :math:`j \to i` of :obj:`edge_index` when it is given:

    .. math::
        \mathbf{X}_{\text{neg}} = \mathbf{D}_r^{-1} \mathbf{K} \mathbf{X}
        \; \big(+ \, \mathbf{K} \mathbf{D}_c^{-1} \mathbf{X}
        \text{ if symmetric}\big),

    :math:`\mathbf{D}_r, \mathbf{D}_c` holding the row and column sums of
    :math:`\mathbf{K}`, each graph of :obj:`batch` on its own. No
    :math:`n \times n` tensor is built: the full sums come from scaled
    dot-product attention (queries = keys = :math:`\hat{x}`), the masked
    pairs are subtracted along the sparse edges. A node without any
    negative (e.g. the only node of its graph) gets a zero row.
    :obj:`edge_index` may also be its :class:`MaskedPairs`, built once by
    :func:`masked_pairs` for all layers.

    :obj:`x` and :obj:`xn` may carry a leading run dimension
    (:obj:`[runs, num_nodes, d]`, one graph or mini-batch per run): the
    attention of all runs is then one batched kernel.
    """
    if x.dim() == 3 and batch is not None:  # mini-batches of graphs per run
        return each_run(contrastive_negatives, x, xn, temperature, batch,
                        batch_size, edge_index, symmetric)
    if edge_index is None and not symmetric and batch is None:
        return _softmax_product(xn, x, temperature)

    d = x.size(-1)
    # [sum_j exp(S_ij) x_j, Z_i, e^m] / (e^m + Z_i), Z_i = sum_j exp(S_ij)
    layout = None if batch is None else dense_index(batch, batch_size)
    queries = _anchored_keys(xn, layout)
    out = _anchored_attention(queries, x, layout, temperature, True)
    num_den, a, _ = out.split([d + 1, 1, out.size(-1) - d - 2], dim=-1)
    valid = None

    if edge_index is not None:
        pairs = edge_index if isinstance(edge_index, MaskedPairs) else \
            masked_pairs(edge_index, x.size(-2), batch, batch_size,
                         compact=False)
        ops = pair_edges(pairs, x)
        # Memory O(edges) per layer: no [edges, d] tensor is kept. The
        # masked pairs' [sum_j w_ij x_j, sum_j w_ij], w = exp(S - m).
        sums, w = masked_sums(xn, x, ops, 1.0 / temperature, pairs.keep)
        num_den = num_den - a * sums
        valid, col_valid = pairs.valid, pairs.col_valid
    num, den = num_den.split([d, 1], dim=-1)
    if valid is not None:  # rows without negatives: divided by 1, zeroed
        den = den + valid.logical_not()

    x_neg = num / den
    if symmetric:
        # Column sums divided by e^m: Z_j / e^m (S is symmetric), less
        # the masked pairs' column sums.
        col_den = out[..., d:d + 1] / a
        if edge_index is not None:
            col_den = col_den - scatter(w, pairs.src, -1, dim_size=x.size(-2),
                                        reduce='sum').unsqueeze(-1)
            col_den = torch.where(col_valid, col_den, 1.0)
        v = (x / col_den).to(x.dtype)  # the edge sums' type back to x's
        if edge_index is not None:
            v = torch.where(col_valid, v, 0.0)
        out = _anchored_attention(queries, v, layout, temperature, False)
        col = out[..., :d] / out[..., d:d + 1]
        if edge_index is not None:
            col = col - edge_sum(w, v, ops)
        x_neg = x_neg + col
    if valid is not None:
        x_neg = x_neg * valid
    return as_dtype(x_neg, x.dtype)  # edge sums run in sum_dtype (>= float32)


def _graph_edges(edge_index: Union[Tensor, MaskedPairs], batch: Tensor,
                 nodes: Tensor, graph: Tensor) -> Tensor:
    r"""The edges (or the kept masked pairs) of :obj:`edge_index` that end
    in graph :obj:`graph` of :obj:`batch`, numbered as in :obj:`nodes`,
    the graph's nodes."""
    if isinstance(edge_index, MaskedPairs):
        edge_index = torch.stack([edge_index.src, edge_index.dst]) \
            if edge_index.keep is None else torch.stack(
                [edge_index.src, edge_index.dst])[:, edge_index.keep]
    local = torch.full_like(batch, -1)
    local[nodes] = torch.arange(nodes.numel(), device=batch.device)
    return local[edge_index[:, batch[edge_index[1]] == graph]]


def approximate_negatives(
    x: Tensor,
    xn: Tensor,
    temperature: float,
    landmarks: int,
    batch: OptTensor = None,
    batch_size: Optional[int] = None,
    edge_index: Union[Tensor, MaskedPairs, None] = None,
    symmetric: bool = False,
) -> Tensor:
    r""":func:`contrastive_negatives` with the kernel approximated by
    Nyström on :obj:`landmarks` landmarks per graph
    (:func:`gnorm.nn._nystrom.nystrom_negatives`): a graph of at most
    :obj:`landmarks` nodes is computed exactly (Nyström with every node a
    landmark is the exact kernel, and costs more). A mini-batch whose
    graphs all have at most :obj:`landmarks` nodes is computed exactly in
    one call; otherwise graph by graph (a loop with host reads, eager mode
    only), each on its own landmarks. Runs :obj:`[runs, num_nodes, d]`
    each get their own landmarks."""
    if batch is not None and batch.numel() > 0:
        if int(graph_places(batch)[1].max()) <= landmarks:
            return contrastive_negatives(x, xn, temperature, batch,
                                         batch_size, edge_index, symmetric)
        outs, order = [], []
        for graph in batch.unique():
            nodes = (batch == graph).nonzero().view(-1)
            edges = None if edge_index is None else \
                _graph_edges(edge_index, batch, nodes, graph)
            outs.append(approximate_negatives(
                x.index_select(-2, nodes), xn.index_select(-2, nodes),
                temperature, landmarks, edge_index=edges,
                symmetric=symmetric))
            order.append(nodes)
        # the graphs' rows back in the order of the nodes
        return torch.cat(outs, -2).index_select(-2, torch.cat(order).argsort())
    if x.size(-2) <= landmarks:
        return contrastive_negatives(x, xn, temperature, None, None,
                                     edge_index, symmetric)
    pairs = ops = None
    if edge_index is not None:
        pairs = edge_index if isinstance(edge_index, MaskedPairs) else \
            masked_pairs(edge_index, x.size(-2))
        ops = pair_edges(pairs, x)
    return nystrom_negatives(x, xn, temperature, landmarks, pairs, ops,
                             symmetric)


class ContraNorm(torch.nn.Module):
    r"""Applies the contrastive normalization from the `"ContraNorm: A
    Contrastive Learning Perspective on Oversmoothing and Beyond"
    <https://arxiv.org/abs/2303.06562>`_ paper.

    .. math::
        \mathbf{X}^{\prime} = \mathrm{LN}\Big((1 + s) \, \mathbf{X} - s \,
        \mathrm{softmax}\big(\hat{\mathbf{X}} \hat{\mathbf{X}}^{\top} / \tau
        \big) \mathbf{X}\Big)

    where :math:`\hat{\mathbf{X}}` holds the L2-normalised rows of
    :math:`\mathbf{X}` and each graph of a mini-batch is normalised on its
    own. The paper's :math:`s / \tau` factor is the :math:`s` here, as in the
    authors' code. The options follow the authors' variants (one
    difference, under :obj:`learnable_scale`):
    :obj:`identity=False` drops the :math:`+ s \mathbf{X}` term,
    :obj:`negatives="non_neighbors"` (their graph code) gives zero weight to
    each node itself and to the nodes it receives an edge from,
    :obj:`symmetric=True` adds the column-softmax term
    :math:`\mathbf{A}\mathbf{D}^{-1}\mathbf{X}` of the paper's Eq. (6),
    :obj:`pre_norm=True` replaces :math:`\mathbf{X}` by
    :math:`\hat{\mathbf{X}}` in the update.

    Memory is :math:`O(n d)` for every option (plus one weight per edge with
    non-neighbour negatives): the softmax product is scaled dot-product
    attention with queries = keys = :math:`\hat{\mathbf{X}}` and values
    :math:`\mathbf{X}`, and masked pairs are subtracted along the edges, so
    no :math:`n \times n` matrix is ever built, and the backward pass keeps
    no :math:`|\mathcal{E}| \times d` tensor either. The subtraction
    loses relative precision when the masked pairs hold almost all of a
    row's weight (very small :math:`\tau`).

    The forward pass reads no value back from the device to check its
    inputs (only their shapes and types; values under
    :class:`~gnorm.nn.validate_inputs`), so the layer compiles with
    :func:`torch.compile(fullgraph=True) <torch.compile>`, also with
    :obj:`batch` and :obj:`edge_index`. A mini-batch (:obj:`batch`) is
    normalised in a dense, padded layout whose size, the largest graph's
    node count, is the one value read (and the number of graphs, without
    :obj:`batch_size`).

    The input may carry a leading run dimension, :obj:`[runs, num_nodes,
    in_channels]`: each run is normalised on its own, and the attention of
    all runs is one batched kernel. :class:`gnorm.nn.Stacked` uses it to
    apply the layers of :obj:`R` independent runs (their weights and scales
    stacked along that dimension) in one call.

    The exact product costs :math:`O(n^2 d)` time per graph of :math:`n`
    nodes. :obj:`kernel="nystrom"` approximates it in linear time
    (:func:`approximate_negatives`): around the mean direction :math:`u`
    of the rows, :math:`e^{\hat{x}_i^\top \hat{x}_j / \tau} \propto a_i
    a_j (1 + \kappa(r_i, r_j))` exactly, with :math:`r_i = \hat{x}_i - u`,
    :math:`a_i = e^{u^\top r_i / \tau}` and :math:`\kappa(r, r') =
    e^{r^\top r' / \tau} - 1`; the constant term is summed exactly and
    :math:`\kappa` by Nyström, :math:`\tilde{\kappa} = C W^{-1}
    C^\top`, on :obj:`landmarks` k-means centroids :math:`\ell`
    (:math:`C = \kappa(r, \ell)`, :math:`W = \kappa(\ell, \ell)`).
    Time :math:`O(n k d)` (:math:`O(n k (d + k) + |\mathcal{E}| k)` with
    non-neighbour negatives, whose masked pairs get the same approximate
    kernel), memory :math:`O(n (k + d))`. The landmarks are a function of
    the input alone (k-means on a fixed-seed sample of the nodes, no
    global random state): every call, in training and in evaluation,
    gives the same output for the same input. A graph of at most
    :obj:`landmarks` nodes is computed exactly. Measured at the default
    :math:`k = 64`, :math:`\tau \in \{0.5, 1\}`
    (:obj:`experiments/results/contranorm_linear_error.md`): on the norm
    inputs of trained DeepGCN (Cora) and ResGNN (Minesweeper) models, mean
    cosine 0.2 to 0.94, the node-specific part of
    :math:`\mathbf{X}_{\text{neg}}` (rows minus their mean) is within
    2 % of the exact one (1 % at :math:`k = 128`) and the output within
    0.25 %; smoothed inputs keep their small node-specific part (the
    expansion around :math:`u`; at mean cosine 0.999 within 2 %, closer
    than the exact layer in float32). Inaccurate where
    the similarities spread widest: on i.i.d. Gaussian rows of 64 channels
    (cosines :math:`0 \pm 0.12`) the node-specific error is ~35 % at
    :math:`\tau = 1` and ~40 % at :math:`\tau = 0.5` (9 % and 16 % at
    :math:`k = 128`; the output within 0.5 %), and it grows as
    :math:`\tau` shrinks; it falls as :math:`k` grows. Not for
    :func:`torch.compile`.

    Args:
        in_channels (int): Size of each input sample.
        scale (float, optional): Scale :math:`s \geq 0`; :obj:`0` (with a
            fixed scale) makes the layer a plain LayerNorm.
            (default: :obj:`1.0`)
        temperature (float, optional): Temperature :math:`\tau > 0`.
            (default: :obj:`1.0`)
        identity (bool, optional): Use :math:`(1 + s)\mathbf{X} - s
            \mathbf{X}_{\text{neg}}` rather than :math:`\mathbf{X} - s
            \mathbf{X}_{\text{neg}}`. (default: :obj:`True`)
        negatives (str, optional): :obj:`"all"` nodes of the graph, or
            :obj:`"non_neighbors"`, which needs :obj:`edge_index` in
            :meth:`forward`. (default: :obj:`"all"`)
        symmetric (bool, optional): Add the column-softmax term (Eq. 6
            without the stop-gradient). (default: :obj:`False`)
        learnable_scale (bool, optional): Learn one scale per channel,
            initialised at :obj:`scale`. With :obj:`identity=True` the
            update stays :math:`(1 + s)\mathbf{X} - s
            \mathbf{X}_{\text{neg}}`; the authors' ViT code computes
            :math:`s \mathbf{X} - s \mathbf{X}_{\text{neg}}` in this case
            (:obj:`ViT_imagenet/models.py`). gnorm keeps one formula so that
            a learnable scale starts as the fixed-scale layer of the same
            :obj:`scale` (and :obj:`scale=0` as the identity), and only
            learning moves it away; theirs starts at
            :math:`s(\mathbf{X} - \mathbf{X}_{\text{neg}})`.
            (default: :obj:`False`)
        positive_scale (bool, optional): Keep the learnable scale positive
            by learning its logarithm. (default: :obj:`False`)
        pre_norm (bool, optional): Use :math:`\hat{\mathbf{X}}` as values
            and identity term. (default: :obj:`False`)
        layer_norm (bool, optional): Append an affine
            :class:`torch.nn.LayerNorm`. (default: :obj:`True`)
        kernel (str, optional): :obj:`"exact"`, or :obj:`"nystrom"` for
            the linear-time approximation. (default: :obj:`"exact"`)
        landmarks (int, optional): Landmarks :math:`k \geq 1` per graph
            of :obj:`kernel="nystrom"`. (default: :obj:`64`)
    """
    takes_runs = True  # forward takes [runs, ...] inputs (gnorm.nn.Stacked)
    takes_pairs = True  # forward takes MaskedPairs as edge_index (DeepGCN)

    def __init__(
        self,
        in_channels: int,
        scale: float = 1.0,
        temperature: float = 1.0,
        identity: bool = True,
        negatives: str = 'all',
        symmetric: bool = False,
        learnable_scale: bool = False,
        positive_scale: bool = False,
        pre_norm: bool = False,
        layer_norm: bool = True,
        kernel: str = 'exact',
        landmarks: int = 64,
    ):
        super().__init__()
        name = self.__class__.__name__
        check_args(name, in_channels, scale, temperature)
        if negatives not in NEGATIVES:
            raise ValueError(f"{name}: unknown negatives={negatives!r}; "
                             f"pass one of {NEGATIVES}")
        if kernel not in KERNELS:
            raise ValueError(f"{name}: unknown kernel={kernel!r}; pass one "
                             f"of {KERNELS}")
        if isinstance(landmarks, bool) or not isinstance(landmarks, int) \
                or landmarks < 1:
            raise ValueError(f"{name}: landmarks must be an int >= 1, got "
                             f"{landmarks!r}; pass e.g. landmarks=64")
        if kernel == 'nystrom' and temperature < MIN_NYSTROM_TEMPERATURE:
            raise ValueError(f"{name}: kernel='nystrom' needs temperature >= "
                             f"{MIN_NYSTROM_TEMPERATURE} (its factors, up to "
                             f"exp(4 / temperature), near float32's "
                             f"limit below), got "
                             f"{temperature}; use kernel='exact'")
        if positive_scale and not learnable_scale:
            raise ValueError(f"{name}: positive_scale=True needs "
                             f"learnable_scale=True")
        if positive_scale and scale == 0:
            raise ValueError(f"{name}: positive_scale=True needs scale > 0 "
                             f"(it learns log(scale))")

        self.in_channels = in_channels
        self.scale = float(scale)
        self.temperature = float(temperature)
        self.identity = identity
        self.negatives = negatives
        self.symmetric = symmetric
        self.learnable_scale = learnable_scale
        self.positive_scale = positive_scale
        self.pre_norm = pre_norm
        self.kernel = kernel
        self.landmarks = landmarks

        if learnable_scale:
            self.scale_param = Parameter(torch.empty(in_channels))
        else:
            self.register_parameter('scale_param', None)
        self.norm = LayerNorm(in_channels) if layer_norm else None

        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module."""
        if self.scale_param is not None:
            init = math.log(self.scale) if self.positive_scale else self.scale
            torch.nn.init.constant_(self.scale_param, init)
        if self.norm is not None:
            self.norm.reset_parameters()

    def forward(self, x: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None,
                edge_index: Union[Tensor, MaskedPairs, None] = None,
                ) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Node features of shape
                :obj:`[(runs,) num_nodes, in_channels]`.
            batch (torch.Tensor, optional): Graph assignment vector of shape
                :obj:`[num_nodes]`, in any order. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs.
                (default: :obj:`None`)
            edge_index (torch.Tensor, optional): Edges :obj:`[2, num_edges]`,
                needed for :obj:`negatives="non_neighbors"`; or their
                :class:`MaskedPairs` from :func:`masked_pairs`, built and
                checked once for many layers (it is not checked again).
                (default: :obj:`None`)
        """
        check_input(self, x, batch, batch_size, edge_index)
        if self.negatives == 'non_neighbors' and edge_index is None:
            raise ValueError(f"{self}: negatives='non_neighbors' needs "
                             f"edge_index; call norm(x, batch, batch_size, "
                             f"edge_index=edge_index) or use "
                             f"negatives='all'")

        if self.scale_param is not None or contrasts(self.scale):
            xn = normalize(x)
            value = xn if self.pre_norm else x
            edges = edge_index if self.negatives == 'non_neighbors' \
                else None
            if self.kernel == 'nystrom':
                x_neg = approximate_negatives(
                    value, xn, self.temperature, self.landmarks, batch,
                    batch_size, edges, self.symmetric)
            else:
                x_neg = contrastive_negatives(
                    value, xn, self.temperature, batch, batch_size, edges,
                    self.symmetric)
            s = self.scale
            if self.scale_param is not None:
                s = self.scale_param.unsqueeze(-2)  # [(runs,) 1, channels]
                if self.positive_scale:
                    s = s.exp()
            x = _combine(value, x_neg, s, self.identity)

        if self.norm is not None:
            x = layer_norm(x, self.norm)
        return x

    def __repr__(self) -> str:
        args = [f'{self.in_channels}', f'scale={self.scale}']
        defaults = dict(temperature=1.0, identity=True, negatives='all',
                        symmetric=False, learnable_scale=False,
                        positive_scale=False, pre_norm=False)
        for key, default in defaults.items():
            if getattr(self, key) != default:
                args.append(f'{key}={getattr(self, key)!r}')
        if self.norm is None:
            args.append('layer_norm=False')
        if self.kernel != 'exact':
            args += [f'kernel={self.kernel!r}', f'landmarks={self.landmarks}']
        return f'{self.__class__.__name__}({", ".join(args)})'


def _combine(value: Tensor, x_neg: Tensor, s: Union[float, Tensor],
             identity: bool) -> Tensor:
    r""":math:`(1 + s) \, \mathbf{V} - s \, \mathbf{X}_{\text{neg}}` (as
    :math:`\mathbf{V} + s (\mathbf{V} - \mathbf{X}_{\text{neg}})`), or
    :math:`\mathbf{V} - s \, \mathbf{X}_{\text{neg}}` without
    :obj:`identity`, for a number or a tensor :obj:`s`."""
    if not torch.is_tensor(s):
        return torch.add(value, value - x_neg, alpha=s) if identity else \
            torch.sub(value, x_neg, alpha=s)
    return value + s * (value - x_neg) if identity else value - s * x_neg


def contrasts(scale) -> bool:
    r"""Whether :obj:`scale` leaves the contrastive term on: any number but
    :obj:`0`, and the per-run scales that :class:`gnorm.nn.Stacked` hands
    over as a tensor (a run of scale :obj:`0` then gets
    :math:`(1 + 0)\mathbf{X} - 0 \cdot \mathbf{X}_{\text{neg}} =
    \mathbf{X}` exactly)."""
    return torch.is_tensor(scale) or scale > 0


def check_args(name: str, in_channels: int, scale: float,
                temperature: float):
    r"""Raises a :class:`ValueError` naming :obj:`name` for bad arguments
    shared by the contrastive norms."""
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"{name}: in_channels must be a positive int, "
                         f"got {in_channels!r}")
    if not scale >= 0:
        raise ValueError(f"{name}: scale must be >= 0, got {scale}; "
                         f"pass e.g. scale=1.0 (0 gives LayerNorm)")
    if not temperature > 0:
        raise ValueError(f"{name}: temperature must be > 0, got "
                         f"{temperature}; pass e.g. temperature=1.0")


def check_input(module: torch.nn.Module, x: Tensor, batch: OptTensor,
                 batch_size: Optional[int] = None,
                 edge_index: OptTensor = None):
    r"""Raises a :class:`ValueError` naming :obj:`module` for inputs of the
    wrong shape or type, and of the wrong values under
    :class:`~gnorm.nn.validate_inputs` (graph ids in range, in any order;
    edges inside one graph)."""
    channels = getattr(module, 'in_channels', None)
    if x.dim() not in (2, 3) or (channels is not None
                                 and x.size(-1) != channels):
        raise ValueError(
            f"{module}: expected x of shape [num_nodes, {channels}] (or "
            f"[runs, num_nodes, {channels}]), got {list(x.shape)}; pass "
            f"node features with {channels} columns "
            f"(in_channels={channels})")
    check_batch(module, batch, x.size(-2), batch_size)
    if not isinstance(edge_index, MaskedPairs):  # else checked when built
        check_edge_index(module, edge_index, x.size(-2), batch)
