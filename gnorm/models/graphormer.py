import functools
import inspect
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.typing import OptTensor

from gnorm.data.molecules import import_ogb
from gnorm.models.deep_gcn import _forward_inputs, _make_norm
from gnorm.models.token_layout import token_layout
from gnorm.nn import IsoBN, PairNorm


FEATURES = ('ogb', 'zinc')
# Graphs per attention group on the CPU (sorted by size; see
# attention_groups).
ATTENTION_CHUNK = 16


def feature_dims(features: str) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    r"""Vocabulary sizes of the atom and bond feature columns of a feature
    scheme: OGB's 9 atom and 3 bond columns, or ZINC's atom type (28) and
    bond type (1, 2, 3; 0 unused)."""
    if features == 'zinc':
        return (28, ), (4, )
    ogb = import_ogb('ogb.utils.features')
    return (tuple(ogb.get_atom_feature_dims()),
            tuple(ogb.get_bond_feature_dims()))


# Norms that are not a per-token normaliser: they cannot replace LayerNorm.
_NOT_TOKEN_NORMS = (PairNorm, IsoBN)


class CategoricalEncoder(torch.nn.Module):
    r"""Embeds :obj:`[num_rows, len(dims)]` categorical columns (one table
    with an offset per column) and sums or averages over the columns."""
    def __init__(self, dims: Sequence[int], channels: int,
                 reduce: str = 'sum'):
        super().__init__()
        offsets = torch.tensor([0] + list(dims[:-1])).cumsum(0)
        self.register_buffer('offsets', offsets, persistent=False)
        self.embedding = torch.nn.Embedding(sum(dims), channels)
        self.reduce = reduce

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(x.size(0), self.offsets.numel())  # [num_rows, columns]
        out = self.embedding(x + self.offsets)  # [num_rows, columns, channels]
        return out.sum(1) if self.reduce == 'sum' else out.mean(1)


def _norm_kind(norm: torch.nn.Module) -> Union[str, Tuple[str, ...]]:
    r"""How a norm reads the packed tokens: ``split`` (the graph tokens
    first, :class:`~gnorm.nn.SepNorm`'s :obj:`num_graph_tokens`), ``mask``
    (dense with a validity mask), ``dense`` (each token on its own), or the
    inputs it takes besides the tokens of each graph in order
    (:obj:`batch`, ...)."""
    if isinstance(norm, _NOT_TOKEN_NORMS):
        raise ValueError(f"Graphormer cannot use {norm} at its norm sites "
                         f"(not a per-token normaliser); pass LayerNorm, "
                         f"SepNorm, ContraNorm, DualContraNorm or Identity")
    params = inspect.signature(norm.forward).parameters
    if 'num_graph_tokens' in params:
        return 'split'
    if 'mask' in params:
        return 'mask'
    inputs = _forward_inputs(norm)
    return inputs if 'batch' in inputs else 'dense'


def _dense(x: Tensor, ctx: Dict[str, Tensor]) -> Tensor:
    r"""The packed tokens :obj:`x` :obj:`[M, d]` of a batch as dense
    :obj:`[B, T, d]` tokens, zeros at padded positions."""
    B, T = ctx['mask'].shape
    out = x.new_zeros(B * T, x.size(-1)).index_copy(0, ctx['pos'], x)
    return out.view(B, T, -1)  # [B, T, d]


def _pack(x: Tensor, ctx: Dict[str, Tensor]) -> Tensor:
    r"""The valid tokens of the dense :obj:`x` :obj:`[B, T, d]`, packed
    :obj:`[M, d]` (graph tokens first, then the nodes)."""
    return x.reshape(-1, x.size(-1)).index_select(0, ctx['pos'])


_NORM_CONTEXT = {'batch': 'token_batch', 'edge_index': 'token_edge_index'}


def _run_norm(norm: torch.nn.Module, kind: Union[str, Tuple[str, ...]],
              x: Tensor, ctx: Dict[str, Tensor]) -> Tensor:
    r"""Applies :obj:`norm` to the packed tokens :obj:`x` :obj:`[M, d]` of a
    batch (no padded token exists, so none enters a statistic)."""
    B = ctx['mask'].size(0)
    if kind == 'split':
        return norm(x, num_graph_tokens=B)
    if kind == 'mask':
        return _pack(norm(_dense(x, ctx), mask=ctx['mask']), ctx)
    if kind == 'dense':
        return norm(x)  # each token on its own
    # Graph after graph, graph token first, and back.
    inputs = {k: B if k == 'batch_size' else ctx[_NORM_CONTEXT.get(k, k)]
              for k in kind}
    out = norm(x.index_select(0, ctx['order']), **inputs)
    return torch.empty_like(out).index_copy(0, ctx['order'], out)


def _keep_scale(x: Tensor, p: float,
                generators: Optional[Sequence[torch.Generator]] = None,
                ) -> Tensor:
    r"""A dropout multiplier shaped like :obj:`x`: :math:`1 / (1 - p)` with
    probability :math:`1 - p`, else :obj:`0`; from 16 random bits per entry
    (:math:`p` rounded to a multiple of :math:`2^{-16}`), a quarter of the
    random numbers of :func:`torch.bernoulli`, drawn from torch's
    generator, or with :obj:`generators` (one per run, :obj:`x` holding the
    runs one after the other along its first dimension) each run's part
    from its own generator."""
    runs = 1 if generators is None else len(generators)
    n = x.numel() // runs
    threshold = round(p * 65536) - 32768
    keep = torch.empty(runs, n, dtype=torch.bool, device=x.device)
    for run, generator in enumerate(generators or [None]):
        bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
        bits = bits.random_(-2**63, 2**63 - 1, generator=generator)
        torch.ge(bits.view(torch.int16)[:n], threshold, out=keep[run])
    return keep.view(x.shape).to(x.dtype).mul_(1.0 / (1.0 - p))


def _dropout(x: Tensor, p: float, training: bool, fused: bool,
             generators: Optional[Sequence[torch.Generator]] = None,
             ) -> Tensor:
    r"""Dropout: :func:`torch.nn.functional.dropout` with the :obj:`fused`
    kernels and in a compiled graph (which fuses it with its neighbours),
    else with the cheaper random masks of :func:`_keep_scale`. With
    :obj:`generators` (one per run), :obj:`x` holds the runs one after the
    other along its first dimension and each run's mask comes from its own
    generator, in the same order and shape as when the run is alone (in a
    compiled graph too: torch's generator)."""
    if not training or p == 0.0:
        return x
    if torch.compiler.is_compiling() or (fused and generators is None):
        return F.dropout(x, p, True)
    return x * _keep_scale(x, p, generators)


def layout_and_degrees(x: Tensor, edge_index: Tensor, spd: Tensor,
                       path_edge: Tensor, batch: OptTensor,
                       batch_size: Optional[int], max_dist: int,
                       layout: Optional[Dict[str, Tensor]],
                       ) -> Tuple[Dict[str, Tensor], Tensor]:
    r"""The batch's token :obj:`layout` (computed here when :obj:`None`;
    :obj:`batch` :obj:`None` means one graph) and every node's in-degree."""
    if layout is None:
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        layout = token_layout(edge_index, spd, path_edge, batch, batch_size,
                              max_dist)
    deg = x.new_zeros(x.size(0), dtype=torch.long).index_add_(
        0, edge_index[1], torch.ones_like(edge_index[1]))
    return layout, deg


def attention_groups(layout: Dict[str, Tensor],
                     single: bool) -> Dict[str, object]:
    r"""The groups of graphs the layers' attention runs in, each dense
    :obj:`[B_g, T_g]` with its own padding: ``shapes`` (the :obj:`(B_g,
    T_g)`), ``masks`` (each :obj:`[B_g, T_g]`), one token buffer for them
    all, group after group (``size`` rows; ``pos``: the row of each packed
    token), and one pair buffer (``pair_size`` rows; ``pair_pos``: the row
    of each node pair of the :obj:`layout`). One group (:obj:`single`, or in
    a compiled graph: one kernel, no value of the batch read); else the
    graphs sorted by size in chunks of :obj:`ATTENTION_CHUNK`, each padded
    to its own largest graph only (the same attention per graph, far fewer
    padded scores)."""
    mask = layout['mask']
    B, T = mask.shape
    if single or B <= ATTENTION_CHUNK or torch.compiler.is_compiling():
        return {'shapes': [(B, T)], 'masks': [mask], 'size': B * T,
                'pos': layout['pos'], 'pair_size': B * T * T,
                'pair_pos': layout['pair_pos']}
    sizes, graphs = torch.sort(mask.sum(1), stable=True)  # tokens per graph
    # Per graph: its first token row, its first pair row, its group's T_g.
    first_token, first_pair = torch.empty_like(graphs), \
        torch.empty_like(graphs)
    width = torch.empty_like(graphs)
    out = {'shapes': [], 'masks': [], 'size': 0, 'pair_size': 0}
    for idx, part in zip(graphs.split(ATTENTION_CHUNK),
                         sizes.split(ATTENTION_CHUNK)):
        Bg, Tg = idx.numel(), int(part[-1])
        slot = torch.arange(Bg, device=idx.device)
        first_token[idx] = out['size'] + slot * Tg
        first_pair[idx] = out['pair_size'] + slot * Tg * Tg
        width[idx] = Tg
        out['shapes'].append((Bg, Tg))
        out['masks'].append(mask[idx, :Tg])
        out['size'] += Bg * Tg
        out['pair_size'] += Bg * Tg * Tg
    # A token's and a pair's graph and place in the dense [B, T] layout.
    graph, index = layout['pos'].div(T, rounding_mode='floor'), \
        layout['pos'] % T
    out['pos'] = first_token[graph] + index
    graph, cell = layout['pair_pos'].div(T * T, rounding_mode='floor'), \
        layout['pair_pos'] % (T * T)
    row, column = cell.div(T, rounding_mode='floor'), cell % T
    out['pair_pos'] = first_pair[graph] + row * width[graph] + column
    return out


def group_biases(pairs: Tensor, groups: Dict[str, object],
                 virtual: Tensor) -> List[Tensor]:
    r"""The additive attention bias of each group of :obj:`groups`
    (:func:`attention_groups`), :obj:`[R, B_g, heads, T_g, T_g]`
    contiguous, for :obj:`R` runs: every node pair's bias :obj:`pairs`
    :obj:`[P, R heads]` (runs one after the other within a pair) at its
    position, the virtual distance :obj:`virtual` :obj:`[R, heads]` on the
    graph token's row and column (its diagonal entry included),
    :math:`-\infty` at padded keys. No dense bias of the whole batch is
    built: each pair goes straight to its group."""
    R, H = virtual.shape
    rows = [Bg * Tg * Tg for Bg, Tg in groups['shapes']]
    buffer = pairs.new_zeros(groups['pair_size'], R * H).index_copy(
        0, groups['pair_pos'], pairs)
    out = []
    for part, (Bg, Tg), mask in zip(buffer.split(rows), groups['shapes'],
                                    groups['masks']):
        bias = part.view(Bg, Tg, Tg, R, H).permute(3, 0, 4, 1, 2)
        first = torch.arange(Tg, device=pairs.device) == 0  # [T_g]
        border = first.view(-1, 1) | first.view(1, -1)  # [T_g, T_g]
        bias = bias + border * virtual.view(R, 1, H, 1, 1)
        out.append(bias.masked_fill(~mask.view(1, Bg, 1, 1, Tg),
                                    float('-inf')).contiguous())
    return out


def layer_context(layout: Dict[str, Tensor], pairs: Tensor, virtual: Tensor,
                  fused: bool,
                  generators: Optional[Sequence[torch.Generator]],
                  ) -> Dict[str, object]:
    r"""What every layer reads besides the tokens, for :obj:`R` runs: the
    :obj:`layout`, the attention kernels (``fused``), the attention groups
    (``groups``, :func:`attention_groups`, one group with the fused
    kernels) with their biases (``groups['bias']``, :func:`group_biases` of
    :obj:`pairs` :obj:`[P, R heads]` and :obj:`virtual` :obj:`[R, heads]`)
    and the dropout generators (``generators``: one per run, or
    :obj:`None` for torch's)."""
    ctx = dict(layout)
    ctx['fused'] = fused
    ctx['groups'] = attention_groups(layout, single=fused)
    ctx['groups']['bias'] = group_biases(pairs, ctx['groups'], virtual)
    ctx['generators'] = generators
    return ctx


KERNELS = ('auto', 'fused', 'explicit')


class GraphormerLayer(torch.nn.Module):
    r"""One pre-LN encoder layer: :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{Attn}(\mathrm{Norm}_1(\mathbf{H}), \mathbf{B})`, then
    :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{FFN}(\mathrm{Norm}_2(\mathbf{H}))`, on the packed valid tokens
    :obj:`[M, C]` of a batch: the linear layers and norms never see a
    padded token, only the attention scores are dense per graph.

    With the fused kernels each head's channels are zero-padded to a
    multiple of :obj:`head_multiple` (the fused memory-efficient GPU kernel
    needs a multiple of 8); the zeros add nothing to the scores and the
    softmax scale stays :math:`1 / \sqrt{\text{head dim}}`, so the result
    is exact. With the fused kernels (:obj:`ctx['fused']`, the default on
    CUDA) the attention is :func:`scaled_dot_product_attention`; with the
    explicit ones (the default on the CPU) it is written out (scores,
    softmax, dropout, weighted sum), which skips the fallback kernel's
    checks for fully masked rows (every row here sees the graph token),
    and dropout uses the cheaper masks of :func:`_keep_scale`. Both compute
    the same attention (tested on the CPU).
    """
    def __init__(self, channels: int, heads: int, ffn_channels: int,
                 dropout: float, attention_dropout: float,
                 norm: Callable[..., torch.nn.Module], head_multiple: int = 8):
        super().__init__()
        self.heads = heads
        self.head_dim = channels // heads
        self.padded_dim = head_multiple * math.ceil(self.head_dim /
                                                    head_multiple)
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.norm1 = _make_norm(norm, channels)
        self.norm2 = _make_norm(norm, channels)
        self.kinds = (_norm_kind(self.norm1), _norm_kind(self.norm2))
        self.qkv = torch.nn.Linear(channels, 3 * channels)
        self.out = torch.nn.Linear(channels, channels)
        self.ffn1 = torch.nn.Linear(channels, ffn_channels)
        self.ffn2 = torch.nn.Linear(ffn_channels, channels)

    def attention(self, x: Tensor, bias: Tensor,
                  pad: Optional[bool] = None,
                  fused: Optional[bool] = None) -> Tensor:
        r"""Multi-head attention of the dense tokens :obj:`x` :obj:`[B, T,
        C]` with the additive :obj:`bias` :obj:`[B, heads, T, T]`;
        :obj:`pad` (default: :obj:`True`) zero-pads the heads to
        :obj:`padded_dim`; :obj:`fused` (default: on CUDA) picks
        :func:`scaled_dot_product_attention`."""
        return self.out(self._attend(self.qkv(x), bias, pad, fused))

    def _attend(self, qkv: Tensor, bias: Tensor,
                pad: Optional[bool] = None,
                fused: Optional[bool] = None,
                generators: Optional[Sequence[torch.Generator]] = None,
                ) -> Tensor:
        r"""The attention of :meth:`attention` from the projected dense
        tokens :obj:`qkv` :obj:`[B, T, 3 C]`, before the output projection:
        :obj:`[B, T, C]`. With :obj:`generators` (see :func:`_dropout`) the
        attention weights' dropout masks come from them, so the fused kernel
        (whose dropout draws from torch's generator) is not used for it."""
        B, T, C = qkv.size(0), qkv.size(1), qkv.size(2) // 3
        H, D = self.heads, self.head_dim
        p = self.attention_dropout if self.training else 0.0
        fused = qkv.is_cuda if fused is None else fused
        fused = fused and (generators is None or p == 0.0)
        qkv = qkv.view(B, T, 3, H, D)  # [B, T, 3, heads, head_dim]
        if not fused and not pad:
            # One copy into [3, B * heads, T, head_dim], then products.
            q, k, v = qkv.permute(2, 0, 3, 1, 4).reshape(3, B * H, T, D)
            scores = torch.baddbmm(
                bias.to(q.dtype).reshape(B * H, T, T), q, k.transpose(1, 2),
                alpha=1.0 / math.sqrt(D))  # [B * heads, T, T]
            weights = _dropout(scores.softmax(-1), p, True, False,
                               generators)
            out = torch.bmm(weights, v).view(B, H, T, D)
            return out.transpose(1, 2).reshape(B, T, C)  # [B, T, C]
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, heads, T, head_dim]
        if (True if pad is None else pad) and self.padded_dim != D:
            zeros = (0, self.padded_dim - D)
            q, k, v = F.pad(q, zeros), F.pad(k, zeros), F.pad(v, zeros)
        P = q.size(-1)  # padded_dim or head_dim
        if fused:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias.to(q.dtype),
                scale=1.0 / math.sqrt(D), dropout_p=p,
            )  # [B, heads, T, P]
        else:
            scores = torch.baddbmm(
                bias.to(q.dtype).reshape(B * H, T, T), q.reshape(B * H, T, P),
                k.reshape(B * H, T, P).transpose(1, 2),
                alpha=1.0 / math.sqrt(D))  # [B * heads, T, T]
            weights = _dropout(scores.softmax(-1), p, True, False,
                               generators)
            out = torch.bmm(weights, v.reshape(B * H, T, P)).view(B, H, T, P)
        out = out[..., :D]  # [B, heads, T, head_dim]
        return out.transpose(1, 2).reshape(B, T, C)  # [B, T, C]

    def forward(self, x: Tensor, ctx: Dict[str, object]) -> Tensor:
        r"""Updates the packed tokens :obj:`x` :obj:`[M, C]`; the attention
        runs per group of :obj:`ctx['groups']` (see
        :meth:`Graphormer.forward`)."""
        qkv = self.qkv(_run_norm(self.norm1, self.kinds[0], x, ctx))
        groups = ctx['groups']
        # All groups' dense tokens in one buffer, group after group.
        dense = qkv.new_zeros(groups['size'], qkv.size(1)).index_copy(
            0, groups['pos'], qkv)  # [sum_g B_g T_g, 3 C]
        outs = []
        # split, not slicing: its backward concatenates the groups'
        # gradients instead of zero-filling the whole buffer per group.
        parts = dense.split([Bg * Tg for Bg, Tg in groups['shapes']])
        for part, (Bg, Tg), bias in zip(parts, groups['shapes'],
                                        groups['bias']):
            part = part.view(Bg, Tg, -1)
            outs.append(self._attend(part, bias, pad=ctx['fused'],
                                     fused=ctx['fused'],
                                     generators=ctx['generators'])
                        .reshape(Bg * Tg, -1))
        h = torch.cat(outs).index_select(0, groups['pos'])  # [M, C]
        drop = functools.partial(_dropout, p=self.dropout,
                                 training=self.training, fused=ctx['fused'],
                                 generators=ctx['generators'])
        x = x + drop(self.out(h))
        h = _run_norm(self.norm2, self.kinds[1], x, ctx)
        h = drop(F.gelu(self.ffn1(h)))
        return x + drop(self.ffn2(h))


class Graphormer(torch.nn.Module):
    r"""The Graphormer from the `"Do Transformers Really Perform Bad for
    Graph Representation?" <https://arxiv.org/abs/2106.05234>`_ paper, in
    plain PyTorch and PyG, with a configurable norm at every norm site for
    the `"On Separate Normalization in Self-supervised Transformers"
    <https://arxiv.org/abs/2309.12931>`_ paper (SepNorm).

    Every graph becomes the token sequence (graph token, its nodes) after
    :func:`~torch_geometric.utils.to_dense_batch`, the graph token at index
    :obj:`0`. A node token is the sum of its atom-feature embeddings and its
    in-degree embedding. Each of the :obj:`num_layers` pre-LN layers
    (:class:`GraphormerLayer`) attends with the per-head additive bias

    .. math::
        B_{ij} = b_{\phi(i, j)} + \frac{1}{\min(\max(\phi(i, j), 1), K)}
        \sum_{k=1}^{\min(\phi(i, j), K)} \mathbf{e}_{k}^{\top}
        \mathbf{W}_k, \qquad B_{0j} = B_{i0} = t

    for nodes :math:`i, j`: :math:`\phi` is the shortest-path distance
    (:math:`b` has one entry per distance up to :obj:`max_spd`, larger
    distances share the last one, and unreachable pairs have their own entry
    and no edge term), :math:`\mathbf{e}_k` the edge embedding (mean of the
    bond-feature embeddings, one value per head) of hop :math:`k` of one
    shortest path (at every node the smallest-id edge that stays on a
    shortest path, see :func:`gnorm.data.molecules.path_edges`),
    :math:`\mathbf{W}_k` a learned :obj:`[heads, heads]` matrix per hop,
    :math:`K` = :obj:`max_dist`; :math:`t` is the learned virtual distance of
    the graph token's row and column (its diagonal entry included). Padded
    keys get :math:`-\infty`; every query row keeps the graph token, so no
    softmax is empty. A final norm follows the last layer, and a linear
    readout of the graph token gives the prediction.

    Args:
        out_channels (int): Number of outputs per graph.
        features (str, optional): Feature scheme, :obj:`"ogb"` (9 atom and
            3 bond columns, :func:`ogb.utils.features.get_atom_feature_dims`)
            or :obj:`"zinc"` (one atom type, one bond type).
            (default: :obj:`"ogb"`)
        num_layers (int, optional): Number of encoder layers.
            (default: :obj:`12`)
        hidden_channels (int, optional): Token width. (default: :obj:`80`)
        num_heads (int, optional): Attention heads; must divide
            :obj:`hidden_channels`. (default: :obj:`8`)
        ffn_channels (int, optional): Hidden width of the feed-forward
            block. (default: :obj:`80`)
        dropout (float, optional): Dropout after attention and in the
            feed-forward block. (default: :obj:`0.1`)
        input_dropout (float, optional): Dropout of the input tokens.
            (default: :obj:`0.1`)
        attention_dropout (float, optional): Dropout of the attention
            weights. (default: :obj:`0.1`)
        max_dist (int, optional): Number :math:`K \geq 1` of hops of the
            multi-hop edge encoding. (default: :obj:`20`)
        max_spd (int, optional): Distances :math:`\geq` :obj:`max_spd` share
            one embedding. (default: :obj:`128`)
        max_degree (int, optional): In-degrees :math:`\geq` :obj:`max_degree`
            share one embedding. (default: :obj:`64`)
        norm (callable, optional): Makes the norm of every norm site (two per
            layer and the final one), called with the width as
            :obj:`in_channels` (or :obj:`normalized_shape`). A norm whose
            forward takes :obj:`mask` (:class:`~gnorm.nn.SepNorm`) gets the
            dense tokens with their mask; one that takes :obj:`batch`
            (:class:`~gnorm.nn.ContraNorm`) gets the valid tokens of each
            graph (graph token first) with :obj:`batch`, :obj:`batch_size`
            and :obj:`edge_index`; others get the valid tokens
            :obj:`[num_tokens, channels]` (each on its own, no padding).
            :class:`~gnorm.nn.PairNorm` and :class:`~gnorm.nn.IsoBN` are
            refused. :obj:`None` means :class:`torch.nn.LayerNorm`.
            (default: :obj:`None`)
        head_multiple (int, optional): With the fused kernels, zero-pad
            each head's channels to a multiple of this in the attention
            products (:obj:`1`: no padding). (default: :obj:`8`)
        kernels (str, optional): :obj:`"fused"`: the attention of all
            graphs of a batch in one
            :func:`~torch.nn.functional.scaled_dot_product_attention` call
            and :func:`~torch.nn.functional.dropout`; :obj:`"explicit"`:
            attention written out per group of similar-size graphs, with
            cheaper dropout masks (faster on the CPU); :obj:`"auto"`: fused
            on CUDA, explicit elsewhere. Both give the same function (the
            tests run both on the CPU); their dropout masks differ.
            (default: :obj:`"auto"`)

    Set the attribute :obj:`dropout_generator` (a :class:`torch.Generator`
    on the model's device) to draw every dropout mask from it rather than
    from torch's generator (outside a compiled graph): the model's random
    stream is then its own, as in
    :class:`~gnorm.models.StackedGraphormer`, where each run has one.
    """
    def __init__(
        self,
        out_channels: int,
        features: str = 'ogb',
        num_layers: int = 12,
        hidden_channels: int = 80,
        num_heads: int = 8,
        ffn_channels: int = 80,
        dropout: float = 0.1,
        input_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        max_dist: int = 20,
        max_spd: int = 128,
        max_degree: int = 64,
        norm: Optional[Callable[..., torch.nn.Module]] = None,
        head_multiple: int = 8,
        kernels: str = 'auto',
    ):
        super().__init__()
        if kernels not in KERNELS:
            raise ValueError(f"Graphormer got kernels={kernels!r}; pass one "
                             f"of {', '.join(KERNELS)}")
        self.kernels = kernels
        if features not in FEATURES:
            raise ValueError(f"Graphormer got features={features!r}; pass one "
                             f"of {', '.join(FEATURES)}")
        for name, value in (('num_layers', num_layers), ('max_dist', max_dist),
                            ('max_spd', max_spd), ('max_degree', max_degree),
                            ('num_heads', num_heads),
                            ('head_multiple', head_multiple)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Graphormer needs {name} >= 1, got "
                                 f"{value!r}")
        if hidden_channels % num_heads != 0:
            raise ValueError(f"Graphormer: num_heads={num_heads} must divide "
                             f"hidden_channels={hidden_channels}")
        for name, p in (('dropout', dropout), ('input_dropout', input_dropout),
                        ('attention_dropout', attention_dropout)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"Graphormer got {name}={p}; pass a "
                                 f"probability in [0, 1)")
        norm = norm or torch.nn.LayerNorm
        self.out_channels = out_channels
        self.features = features
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.num_heads = num_heads
        self.input_dropout = input_dropout
        self.max_dist = max_dist
        self.max_spd = max_spd
        self.max_degree = max_degree

        atom_dims, bond_dims = feature_dims(features)
        self.atom_encoder = CategoricalEncoder(atom_dims, hidden_channels)
        self.degree_encoder = torch.nn.Embedding(max_degree + 1,
                                                 hidden_channels)
        self.graph_token = torch.nn.Parameter(torch.empty(hidden_channels))
        self.bond_encoder = CategoricalEncoder(bond_dims, num_heads, 'mean')
        self.spd_encoder = torch.nn.Embedding(max_spd + 2, num_heads)
        self.hop_weight = torch.nn.Parameter(
            torch.empty(max_dist, num_heads, num_heads))
        self.virtual_distance = torch.nn.Parameter(torch.empty(num_heads))
        self.layers = torch.nn.ModuleList([
            GraphormerLayer(hidden_channels, num_heads, ffn_channels, dropout,
                            attention_dropout, norm, head_multiple)
            for _ in range(num_layers)
        ])
        self.final_norm = _make_norm(norm, hidden_channels)
        self.final_kind = _norm_kind(self.final_norm)
        self.head = torch.nn.Linear(hidden_channels, out_channels)
        self.dropout_generator: Optional[torch.Generator] = None
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters: normal(0, 0.02) for embeddings
        and linear weights, zero biases, norms reset."""
        for module in self.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(module.weight, std=0.02)
                if getattr(module, 'bias', None) is not None:
                    torch.nn.init.zeros_(module.bias)
            elif module is not self and hasattr(module, 'reset_parameters'):
                module.reset_parameters()  # norms
        for p in (self.graph_token, self.hop_weight, self.virtual_distance):
            torch.nn.init.normal_(p, std=0.02)

    def pair_bias(self, spd: Tensor, edge_attr: Tensor,
                  layout: Dict[str, Tensor]) -> Tensor:
        r"""Every node pair's part of the class docstring's bias,
        :obj:`[P, heads]` (the spatial and the multi-hop edge encodings), from
        the flat distances :obj:`spd` :obj:`[P]` of
        :class:`~gnorm.data.molecules.ShortestPaths`, the bond features and
        the batch's :func:`~gnorm.models.token_layout.token_layout`:
        embedding look-ups and index sums whose shapes are the layout's."""
        K, E, H = self.max_dist, edge_attr.size(0), self.num_heads
        dist = spd.long()  # [P], the pairs of every graph, row-major
        spd_row = torch.where(dist < 0, self.max_spd + 1,
                              dist.clamp(max=self.max_spd))  # [P]
        bias = self.spd_encoder(spd_row)  # [P, heads]

        # Multi-hop edge encoding: hop k of pair p's path adds row
        # k E + edge of the [K E + 1, heads] table (the zero row K E for
        # hops >= K), and the sum is divided by the clamped length.
        hop, pair = layout['path_hop'], layout['path_pair']  # [L]
        entry = torch.where(hop < K, hop * E + layout['path_edge'], K * E)
        edge = self.bond_encoder(edge_attr)  # [E, heads]
        hops = torch.einsum('eh,khg->keg', edge, self.hop_weight)
        hops = torch.cat([hops.reshape(K * E, H),
                          hops.new_zeros(1, H)])  # [K * E + 1, heads]
        multi_hop = bias.new_zeros(dist.size(0), H).index_add_(
            0, pair, hops.index_select(0, entry).to(bias.dtype))  # [P, heads]
        scale = 1.0 / dist.clamp(min=1, max=K).unsqueeze(-1)  # [P, 1]
        return bias + multi_hop * scale.to(bias.dtype)  # [P, heads]

    def attention_bias(self, spd: Tensor, edge_attr: Tensor,
                       layout: Dict[str, Tensor]) -> Tensor:
        r"""The additive bias :obj:`[B, heads, T, T]` of the class
        docstring, :math:`-\infty` at padded keys (:meth:`pair_bias` at
        every pair's position, the virtual distance on the graph token's
        row and column), dense for all graphs of the batch (the layers build
        it per attention group, :func:`group_biases`)."""
        groups = attention_groups(layout, single=True)
        (bias, ) = group_biases(self.pair_bias(spd, edge_attr, layout),
                                groups, self.virtual_distance.view(1, -1))
        return bias[0]

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                spd: Tensor, path_edge: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, return_tokens: bool = False,
                layout: Optional[Dict[str, Tensor]] = None,
                ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Atom features :obj:`[num_nodes, columns]`
                (or :obj:`[num_nodes]`), int64.
            edge_index (torch.Tensor): Edges :obj:`[2, num_edges]`, the edges
                of each graph contiguous and in the order of its
                :obj:`path_edge` ids (as PyG batches them).
            edge_attr (torch.Tensor): Bond features :obj:`[num_edges, columns]`
                (or :obj:`[num_edges]`), int64.
            spd (torch.Tensor): Flat shortest-path distances of every graph,
                :obj:`[sum_g n_g^2]`.
            path_edge (torch.Tensor): Flat local edge ids along every
                pair's path, :obj:`[sum_g sum_{i,j} max(d_g(i, j), 0)]`.
            batch (torch.Tensor, optional): Sorted graph of each node;
                :obj:`None` means one graph. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs. (default:
                :obj:`None`)
            return_tokens (bool, optional): Also return the final tokens
                :obj:`[B, 1 + N, hidden_channels]` (after the final norm) and
                their mask :obj:`[B, 1 + N]`. (default: :obj:`False`)
            layout (dict, optional): The batch's
                :func:`~gnorm.models.token_layout.token_layout`, computed
                ahead (e.g. in the data loader, see
                :func:`~gnorm.models.token_layout.add_token_layout`); then
                :obj:`batch`, :obj:`batch_size` and :obj:`path_edge` are not
                read, and the forward pass reads no value of the batch on
                the host (it compiles with ``fullgraph=True``).
                (default: :obj:`None`: computed here)

        Returns:
            torch.Tensor: Predictions :obj:`[B, out_channels]`.
        """
        layout, deg = layout_and_degrees(x, edge_index, spd, path_edge,
                                         batch, batch_size, self.max_dist,
                                         layout)
        B = layout['mask'].size(0)
        h = self.atom_encoder(x) + self.degree_encoder(
            deg.clamp(max=self.max_degree))  # [num_nodes, d]
        pairs = self.pair_bias(spd, edge_attr, layout)  # [P, heads]
        # The packed tokens: the graph tokens, then the nodes.
        h = torch.cat([self.graph_token.view(1, -1).expand(B, -1), h])
        ctx = self.layer_context(pairs, layout)
        h = _dropout(h, self.input_dropout, self.training, ctx['fused'],
                     ctx['generators'])
        for layer in self.layers:
            h = layer(h, ctx)
        h = _run_norm(self.final_norm, self.final_kind, h, ctx)
        out = self.head(h[:B])  # [B, out], the graph tokens
        return (out, _dense(h, ctx), layout['mask']) if return_tokens \
            else out

    def layer_context(self, pairs: Tensor,
                      layout: Dict[str, Tensor]) -> Dict[str, object]:
        r"""What every layer reads besides the tokens (see
        :func:`layer_context`), from the pairs' bias :obj:`pairs`
        (:meth:`pair_bias`) and the batch's :obj:`layout`."""
        fused = self.kernels == 'fused' or (self.kernels == 'auto'
                                            and pairs.is_cuda)
        generators = None if self.dropout_generator is None \
            else [self.dropout_generator]
        ctx = layer_context(layout, pairs, self.virtual_distance.view(1, -1),
                            fused, generators)
        ctx['groups']['bias'] = [bias[0] for bias in ctx['groups']['bias']]
        return ctx

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.out_channels}, '
                f'features={self.features!r}, num_layers={self.num_layers}, '
                f'hidden_channels={self.hidden_channels}, '
                f'num_heads={self.num_heads}, max_dist={self.max_dist}, '
                f'norm={self.final_norm})')
