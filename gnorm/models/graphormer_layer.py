r"""One pre-LN encoder layer of a :class:`~gnorm.models.Graphormer` and its
norm sites, on the packed tokens :obj:`[R, M, C]` of :math:`R` runs
(:math:`R = 1` for one model; see :mod:`gnorm.models.runs`)."""
import functools
import inspect
import math
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gnorm.models.deep_gcn import forward_inputs, make_norm
from gnorm.models.graphormer_attention import LayerContext, dropout
from gnorm.models.runs import each_run
from gnorm.nn import IsoBN, PairNorm

# Norms that are not a per-token normaliser: they cannot replace LayerNorm.
_NOT_TOKEN_NORMS = (PairNorm, IsoBN)


class NormKind(NamedTuple):
    r"""How a norm site reads the packed tokens (:func:`norm_kind`):
    ``split`` (the graph tokens first, :class:`~gnorm.nn.SepNorm`'s
    :obj:`num_graph_tokens`), ``mask`` (dense with a validity mask),
    ``tokens`` (each token on its own) or ``graphs`` (the tokens of each
    graph in order, with the :obj:`inputs` its forward takes besides them:
    :obj:`batch`, ...)."""
    reads: str
    inputs: Tuple[str, ...] = ()


def norm_kind(norm: torch.nn.Module) -> NormKind:
    r"""The :class:`NormKind` of :obj:`norm`, from its forward's
    signature; refuses the norms that are not per-token normalisers."""
    if isinstance(norm, _NOT_TOKEN_NORMS):
        raise ValueError(f"Graphormer cannot use {norm} at its norm sites "
                         f"(not a per-token normaliser); pass LayerNorm, "
                         f"SepNorm, ContraNorm, DualContraNorm or Identity")
    params = inspect.signature(norm.forward).parameters
    if 'num_graph_tokens' in params:
        return NormKind('split')
    if 'mask' in params:
        return NormKind('mask')
    inputs = forward_inputs(norm)
    return NormKind('graphs', inputs) if 'batch' in inputs \
        else NormKind('tokens')


def dense_tokens(x: Tensor, ctx: LayerContext) -> Tensor:
    r"""The packed tokens :obj:`x` :obj:`[M, d]` of a batch as dense
    :obj:`[B, T, d]` tokens, zeros at padded positions."""
    B, T = ctx.layout['mask'].shape
    out = x.new_zeros(B * T, x.size(-1)).index_copy(0, ctx.layout['pos'], x)
    return out.view(B, T, -1)  # [B, T, d]


def _pack(x: Tensor, ctx: LayerContext) -> Tensor:
    r"""The valid tokens of the dense :obj:`x` :obj:`[B, T, d]`, packed
    :obj:`[M, d]` (graph tokens first, then the nodes)."""
    return x.reshape(-1, x.size(-1)).index_select(0, ctx.layout['pos'])


_NORM_CONTEXT = {'batch': 'token_batch', 'edge_index': 'token_edge_index'}


def norm_site(norm: torch.nn.Module, kind: NormKind, x: Tensor,
              ctx: LayerContext) -> Tensor:
    r"""Applies :obj:`norm` to the packed tokens :obj:`x` :obj:`[R, M, d]`
    of a batch (no padded token exists, so none enters a statistic).
    :class:`~gnorm.nn.SepNorm` and per-token norms run for :math:`R`
    stacked runs (:func:`~gnorm.models.runs.each_run`); the others for one
    run."""
    B = ctx.layout['mask'].size(0)
    if kind.reads == 'split':  # SepNorm: the graph tokens, then the nodes
        norm._check_batch_statistics(B, x.size(1) - B)
        virtual, tokens = x[:, :B], x[:, B:]
        virtual = each_run(norm.norm_virtual, virtual)
        if tokens.size(1) > 0:
            tokens = each_run(norm.norm_token, tokens)
        return torch.cat([virtual, tokens], 1)
    if kind.reads == 'tokens':
        return each_run(norm, x)
    h = x[0]  # one run: [M, d]
    if kind.reads == 'mask':
        out = _pack(norm(dense_tokens(h, ctx), mask=ctx.layout['mask']), ctx)
    else:  # graph after graph, graph token first, and back
        order = ctx.layout['order']
        inputs = {k: B if k == 'batch_size'
                  else ctx.layout[_NORM_CONTEXT.get(k, k)]
                  for k in kind.inputs}
        out = norm(h.index_select(0, order), **inputs)
        out = torch.empty_like(out).index_copy(0, order, out)
    return out.unsqueeze(0)


class GraphormerLayer(torch.nn.Module):
    r"""One pre-LN encoder layer: :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{Attn}(\mathrm{Norm}_1(\mathbf{H}), \mathbf{B})`, then
    :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{FFN}(\mathrm{Norm}_2(\mathbf{H}))`, on the packed valid tokens
    :obj:`[R, M, C]` of a batch: the linear layers and norms never see a
    padded token, only the attention scores are dense per graph. Its
    parameters hold one run, or :math:`R` runs stacked.

    With the fused kernels each head's channels are zero-padded to a
    multiple of :obj:`head_multiple` (the fused memory-efficient GPU kernel
    needs a multiple of 8); the zeros add nothing to the scores and the
    softmax scale stays :math:`1 / \sqrt{\text{head dim}}`, so the result
    is exact. With the fused kernels (:obj:`ctx.fused`, the default on
    CUDA) the attention is :func:`scaled_dot_product_attention`; with the
    explicit ones (the default on the CPU) it is written out (scores,
    softmax, dropout, weighted sum), which skips the fallback kernel's
    checks for fully masked rows (every row here sees the graph token),
    and dropout uses the cheaper masks of
    :func:`~gnorm.models.graphormer_attention.keep_scale`. Both compute the
    same attention (tested on the CPU).
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
        self.norm1 = make_norm(norm, channels)
        self.norm2 = make_norm(norm, channels)
        self.kinds = (norm_kind(self.norm1), norm_kind(self.norm2))
        self.qkv = torch.nn.Linear(channels, 3 * channels)
        self.out = torch.nn.Linear(channels, channels)
        self.ffn1 = torch.nn.Linear(channels, ffn_channels)
        self.ffn2 = torch.nn.Linear(ffn_channels, channels)

    def attention(self, x: Tensor, bias: Tensor,
                  pad: Optional[bool] = None,
                  fused: Optional[bool] = None) -> Tensor:
        r"""Multi-head attention of one run's dense tokens :obj:`x` :obj:`[B,
        T, C]` with the additive :obj:`bias` :obj:`[B, heads, T, T]`;
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
        :obj:`[B, T, C]`. With :obj:`generators` (see
        :func:`~gnorm.models.graphormer_attention.dropout`) the attention
        weights' dropout masks come from them, so the fused kernel (whose
        dropout draws from torch's generator) is not used for it."""
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
            weights = dropout(scores.softmax(-1), p, True, False, generators)
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
            weights = dropout(scores.softmax(-1), p, True, False, generators)
            out = torch.bmm(weights, v.reshape(B * H, T, P)).view(B, H, T, P)
        out = out[..., :D]  # [B, heads, T, head_dim]
        return out.transpose(1, 2).reshape(B, T, C)  # [B, T, C]

    def forward(self, x: Tensor, ctx: LayerContext) -> Tensor:
        r"""Updates the packed tokens :obj:`x` :obj:`[R, M, C]` of every
        run; the attention of a group of :obj:`B_g` graphs of
        :obj:`ctx.groups` is that of :obj:`R B_g` graphs, each run's with its
        own bias."""
        R, M, C = x.shape
        qkv = each_run(self.qkv, norm_site(self.norm1, self.kinds[0], x, ctx))
        groups = ctx.groups
        # All groups' dense tokens in one buffer, group after group and run
        # after run within a group.
        dense = qkv.new_zeros(R * groups.size, 3 * C).index_copy(
            0, ctx.pos, qkv.view(R * M, 3 * C))  # [R sum_g B_g T_g, 3 C]
        outs = []
        # split, not slicing: its backward concatenates the groups'
        # gradients instead of zero-filling the whole buffer per group.
        parts = dense.split([R * Bg * Tg for Bg, Tg in groups.shapes])
        for part, (Bg, Tg), bias in zip(parts, groups.shapes, ctx.bias):
            out = self._attend(part.view(R * Bg, Tg, 3 * C), bias,
                               pad=ctx.fused, fused=ctx.fused,
                               generators=ctx.generators)
            outs.append(out.reshape(R * Bg * Tg, C))
        h = torch.cat(outs).index_select(0, ctx.pos).view(R, M, C)
        drop = functools.partial(dropout, p=self.dropout,
                                 training=self.training, fused=ctx.fused,
                                 generators=ctx.generators)
        x = x + drop(each_run(self.out, h))
        h = norm_site(self.norm2, self.kinds[1], x, ctx)
        h = drop(F.gelu(each_run(self.ffn1, h)))
        return x + drop(each_run(self.ffn2, h))
