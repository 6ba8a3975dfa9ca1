import math
from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import LayerNorm, Parameter
from torch_geometric.typing import OptTensor
from torch_geometric.utils import scatter

from gnorm.nn._inputs import check_batch, check_edge_index
from gnorm.nn._sparse import edge_dot, edge_sum, edges
from gnorm.nn.stacked import layer_norm

NEGATIVES = ('all', 'non_neighbors')

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
    layer and every epoch."""
    src: Tensor
    dst: Tensor
    valid: Tensor
    col_valid: Tensor
    dst_order: Tensor  # sorts the pairs by dst, then src
    keep: OptTensor = None


def masked_pairs(edge_index: Tensor, num_nodes: int,
                 batch: OptTensor = None,
                 batch_size: Optional[int] = None,
                 compact: bool = True) -> MaskedPairs:
    r"""The :class:`MaskedPairs` of :obj:`edge_index` (not checked: check
    it first, e.g. with :func:`gnorm.nn._inputs.check_edge_index`), its
    repeated pairs dropped (:obj:`compact`: a host read, once per graph) or
    marked by :obj:`keep` (shapes that depend on the sizes only, for a
    forward pass without host reads)."""
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
    return MaskedPairs(src, dst, valid.unsqueeze(-1), col_valid.unsqueeze(-1),
                       torch.argsort(dst * num_nodes + src), keep)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, temperature: float,
          keys: OptTensor = None) -> Tensor:
    r""":func:`~torch.nn.functional.scaled_dot_product_attention` of one
    head, :obj:`[B, N, c]` each, with queries, keys and values zero-padded to
    a head dimension of a multiple of :obj:`_HEAD_MULTIPLE` (the same scores
    and outputs, and the fused kernels of every precision take it); only
    the keys where the boolean :obj:`keys` :obj:`[B, N]` is true, if
    given, take part (the others get weight zero at every temperature)."""
    c = v.size(-1)
    pad = [F.pad(t, (0, -t.size(-1) % _HEAD_MULTIPLE)).unsqueeze(1)
           for t in (q, k, v)]  # [B, 1, N, padded c]
    mask = None if keys is None else keys[:, None, None, :].expand(
        -1, 1, q.size(-2), -1)  # [B, 1, N, N]: a view, no memory
    out = F.scaled_dot_product_attention(*pad, attn_mask=mask,
                                         scale=1.0 / temperature)
    return out.squeeze(1)[..., :c]  # [B, N, c]


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


def _dense_keys(xn: Tensor, batch: OptTensor, batch_size: Optional[int],
                ) -> Tuple[Tensor, Tensor, Optional[Tuple[Tensor, Tensor]]]:
    r"""Queries and keys of the similarity attention of every graph.

    Both carry one extra coordinate. Queries end in :obj:`1`, keys in
    :obj:`0` (so a real logit is :math:`\hat{x}_i^\top \hat{x}_j`), and
    one *anchor* key
    :math:`(0, \ldots, 0, 1)` is appended to every graph. With softmax scale
    :math:`1/\tau` the anchor's logit is :math:`m = 1/\tau`, the largest
    logit a real pair can have, and its attention weight
    :math:`a_i = e^{m} / (e^{m} + \sum_j e^{S_{ij}})` reveals the row's
    normaliser, which scaled dot-product attention does not return.
    Padded keys are masked out in :func:`_attend` (after the scaling), so
    graphs of a dense batch never see each other at any :math:`\tau`.
    """
    if batch is None:  # [1 or runs, nodes, d]
        xn_d, layout = xn.reshape(-1, *xn.shape[-2:]), None
    else:
        layout = dense_index(batch, batch_size)
        xn_d = to_dense(xn, *layout)  # [B, M, d]
    B, N, d = xn_d.shape
    q = torch.cat([xn_d, xn_d.new_ones(B, N, 1)], dim=-1)  # [B, N, d + 1]
    tail = xn_d.new_zeros(B, N, 1)
    anchor = xn_d.new_zeros(B, 1, d + 1)
    anchor[..., -1] = 1.0
    k = torch.cat([torch.cat([xn_d, tail], dim=-1), anchor], dim=1)  # [B, N + 1, d + 1]
    return q, k, layout


def _attend(q: Tensor, k: Tensor,
            layout: Optional[Tuple[Tensor, Tensor]], v: Tensor,
            temperature: float) -> Tensor:
    r"""Returns, for every node :math:`i` (``[(runs,) num_nodes, d + 1]``),
    :math:`\big(\sum_j e^{S_{ij}} v_j,\; e^{m}\big) / (e^{m} + \sum_j e^{S_{ij}})`
    with :math:`j` over the nodes of :math:`i`'s graph, in :math:`O(n d)`
    memory through :func:`torch.nn.functional.scaled_dot_product_attention`.
    """
    B, N, _ = q.shape
    if layout is None:
        v_d = v.reshape(-1, *v.shape[-2:])  # [1 or runs, nodes, d]
    else:
        v_d = to_dense(v, *layout)  # [B, M, d]
    d = v_d.size(-1)
    v_d = torch.cat([v_d, v_d.new_zeros(B, N, 1)], dim=-1)  # [B, N, d + 1]
    anchor = v_d.new_zeros(B, 1, d + 1)
    anchor[..., -1] = 1.0
    v_d = torch.cat([v_d, anchor], dim=1)  # [B, N + 1, d + 1]
    keys = None if layout is None else F.pad(layout[1], (0, 1), value=True)
    out = _sdpa(q, k, v_d, temperature, keys)  # [B, N, d + 1]
    if layout is None:
        return out.view(*v.shape[:-1], d + 1)
    return out.reshape(-1, d + 1).index_select(0, layout[0])  # [nodes, d + 1]


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
        q, v = (t.reshape(-1, *t.shape[-2:]) for t in (xn, x))
        return _sdpa(q, q, v, temperature).view_as(x)  # [1 or runs, n, d]

    d = x.size(-1)
    q, k, layout = _dense_keys(xn, batch, batch_size)
    out = _attend(q, k, layout, x, temperature)
    # Scaled by e^{-m} with m = 1 / temperature:
    #   row_sum[i] = sum_j exp(S_ij - m) x_j = out[i, :d] / a[i],
    #   z[i]       = sum_j exp(S_ij - m)     = 1 / a[i] - 1.
    a = out[..., d:]
    num, den = out[..., :d], 1.0 - a  # both multiplied by a[i]
    col_den = 1.0 / a - 1.0
    valid = None

    if edge_index is not None:
        pairs = edge_index if isinstance(edge_index, MaskedPairs) else \
            masked_pairs(edge_index, x.size(-2), batch, batch_size,
                         compact=False)
        src, dst = pairs.src, pairs.dst  # `dst` does not contrast `src`
        valid, col_valid = pairs.valid, pairs.col_valid
        n = x.size(-2)
        ops = edges(src, dst, x, pairs.dst_order)
        # Memory O(edges) per layer: no [edges, d] tensor is kept.
        w = torch.exp((edge_dot(xn, ops) - 1.0) / temperature)
        if pairs.keep is not None:  # repeated pairs count once
            w = w * pairs.keep
        row_w = scatter(w, dst, -1, dim_size=n, reduce='sum').unsqueeze(-1)
        row_wx = edge_sum(w, x, ops)
        num = num - a * row_wx
        den = den - a * row_w
        col_den = col_den - scatter(w, src, -1, dim_size=n,
                                    reduce='sum').unsqueeze(-1)
        den = torch.where(valid, den, torch.ones_like(den))
        col_den = torch.where(col_valid, col_den, torch.ones_like(col_den))

    x_neg = num / den
    if symmetric:
        v = (x / col_den).to(x.dtype)  # the edge sums' type back to x's
        if edge_index is not None:
            v = torch.where(col_valid, v, torch.zeros_like(v))
        out = _attend(q, k, layout, v, temperature)
        col = out[..., :d] / out[..., d:]
        if edge_index is not None:
            col = col - edge_sum(w, v, ops)
        x_neg = x_neg + col
    if valid is not None:
        x_neg = torch.where(valid, x_neg, torch.zeros_like(x_neg))
    return x_neg.to(x.dtype)  # the edge sums run in sum_dtype (float32 at least)


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
    ):
        super().__init__()
        name = self.__class__.__name__
        check_args(name, in_channels, scale, temperature)
        if negatives not in NEGATIVES:
            raise ValueError(f"{name}: unknown negatives={negatives!r}; "
                             f"pass one of {NEGATIVES}")
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
            xn = F.normalize(x, dim=-1)
            value = xn if self.pre_norm else x
            x_neg = contrastive_negatives(
                value, xn, self.temperature, batch, batch_size,
                edge_index if self.negatives == 'non_neighbors' else None,
                self.symmetric)
            s = self.scale
            if self.scale_param is not None:
                s = self.scale_param.unsqueeze(-2)  # [(runs,) 1, channels]
                if self.positive_scale:
                    s = s.exp()
            x = (1 + s) * value - s * x_neg if self.identity else \
                value - s * x_neg

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
        return f'{self.__class__.__name__}({", ".join(args)})'


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
