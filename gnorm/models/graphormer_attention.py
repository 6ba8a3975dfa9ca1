r"""What the layers of a :class:`~gnorm.models.Graphormer` read besides the
tokens: the groups of graphs their attention runs in, each group's
additive bias, the dropout masks, gathered once per batch in a
:class:`LayerContext`.

The tokens of :math:`R` runs (:math:`R = 1` for one model) are packed
:obj:`[R, M, C]` (see :mod:`gnorm.models.token_layout`); the attention of a
group of :math:`B_g` graphs is that of :math:`R B_g` graphs, each run's
with its own bias and, with one generator per run, its own dropout masks.
"""
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

# Graphs per attention group on the CPU (sorted by size; see
# attention_groups).
ATTENTION_CHUNK = 16
# Tokens per graph with the fused kernels: a multiple of this, so that every
# stride of the attention bias is a multiple of the memory-efficient
# kernel's alignment (8 elements) for any batch, also as a symbolic size in
# a compiled graph (see attention_groups).
BIAS_ALIGNMENT = 8


def keep_scale(x: Tensor, p: float,
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


def dropout(x: Tensor, p: float, training: bool, fused: bool,
            generators: Optional[Sequence[torch.Generator]] = None,
            ) -> Tensor:
    r"""Dropout: :func:`torch.nn.functional.dropout` with the :obj:`fused`
    kernels and in a compiled graph (which fuses it with its neighbours),
    else with the cheaper random masks of :func:`keep_scale`. With
    :obj:`generators` (one per run), :obj:`x` holds the runs one after the
    other along its first dimension and each run's mask comes from its own
    generator, in the same order and shape as when the run is alone (in a
    compiled graph too: torch's generator)."""
    if not training or p == 0.0:
        return x
    if torch.compiler.is_compiling() or (fused and generators is None):
        return F.dropout(x, p, True)
    return x * keep_scale(x, p, generators)


class AttentionGroups(NamedTuple):
    r"""The groups of graphs of a batch the attention runs in
    (:func:`attention_groups`)."""
    shapes: List[Tuple[int, int]]  # (B_g, T_g) of each group
    masks: List[Tensor]  # each [B_g, T_g]: the valid tokens
    size: int  # rows of the token buffer, sum_g B_g T_g
    pos: Tensor  # [M]: the row of each packed token in it
    pair_size: int  # rows of the pair buffer, sum_g B_g T_g^2
    pair_pos: Tensor  # [P]: the row of each node pair in it


def attention_groups(layout: Dict[str, Tensor], single: bool,
                     multiple: int = 1) -> AttentionGroups:
    r"""The groups of graphs the layers' attention runs in, each dense
    :obj:`[B_g, T_g]` with its own padding: one token buffer for them all,
    group after group, and one pair buffer. One group (:obj:`single`, or in
    a compiled graph: one kernel, no value of the batch read), its
    :math:`T` rounded up to a :obj:`multiple` (:obj:`BIAS_ALIGNMENT` with
    the fused kernels: the extra tokens are padding, masked as keys and
    never read as queries); else the graphs sorted by size in chunks of
    :obj:`ATTENTION_CHUNK`, each padded to its own largest graph only (the
    same attention per graph, far fewer padded scores)."""
    mask = layout['mask']
    B, T = mask.shape
    if single or B <= ATTENTION_CHUNK or torch.compiler.is_compiling():
        return _one_group(layout, multiple)
    sizes, graphs = torch.sort(mask.sum(1), stable=True)  # tokens per graph
    # Per graph: its first token row, its first pair row, its group's T_g.
    first_token, first_pair = torch.empty_like(graphs), \
        torch.empty_like(graphs)
    width = torch.empty_like(graphs)
    shapes, masks, size, pair_size = [], [], 0, 0
    for idx, part in zip(graphs.split(ATTENTION_CHUNK),
                         sizes.split(ATTENTION_CHUNK)):
        Bg, Tg = idx.numel(), int(part[-1])
        slot = torch.arange(Bg, device=idx.device)
        first_token[idx] = size + slot * Tg
        first_pair[idx] = pair_size + slot * Tg * Tg
        width[idx] = Tg
        shapes.append((Bg, Tg))
        masks.append(mask[idx, :Tg])
        size += Bg * Tg
        pair_size += Bg * Tg * Tg
    # A token's and a pair's graph and place in the dense [B, T] layout.
    graph, index = layout['pos'].div(T, rounding_mode='floor'), \
        layout['pos'] % T
    pos = first_token[graph] + index
    graph, cell = layout['pair_pos'].div(T * T, rounding_mode='floor'), \
        layout['pair_pos'] % (T * T)
    row, column = cell.div(T, rounding_mode='floor'), cell % T
    pair_pos = first_pair[graph] + row * width[graph] + column
    return AttentionGroups(shapes, masks, size, pos, pair_size, pair_pos)


def _one_group(layout: Dict[str, Tensor], multiple: int) -> AttentionGroups:
    r"""All graphs of :obj:`layout` as one group of :math:`T_p` tokens,
    :math:`T` rounded up to a :obj:`multiple`. :math:`T_p` is computed from
    :math:`T` as :math:`\mathit{multiple} \lceil T / \mathit{multiple}
    \rceil` without a branch on its value, so that in a compiled graph it is
    a multiple for every batch (no guard, no recompilation)."""
    mask = layout['mask']
    B, T = mask.shape
    if multiple == 1:
        return AttentionGroups([(B, T)], [mask], B * T, layout['pos'],
                               B * T * T, layout['pair_pos'])
    Tp = (T + multiple - 1) // multiple * multiple
    mask = torch.cat([mask, mask.new_zeros(B, Tp - T)], 1)  # [B, T_p]
    graph, index = layout['pos'].div(T, rounding_mode='floor'), \
        layout['pos'] % T
    pos = graph * Tp + index
    graph, cell = layout['pair_pos'].div(T * T, rounding_mode='floor'), \
        layout['pair_pos'] % (T * T)
    row, column = cell.div(T, rounding_mode='floor'), cell % T
    pair_pos = (graph * Tp + row) * Tp + column
    return AttentionGroups([(B, Tp)], [mask], B * Tp, pos, B * Tp * Tp,
                           pair_pos)


def group_biases(pairs: Tensor, groups: AttentionGroups,
                 virtual: Tensor) -> List[Tensor]:
    r"""The additive attention bias of each group of :obj:`groups`,
    :obj:`[R, B_g, heads, T_g, T_g]` contiguous, for :obj:`R` runs: every
    node pair's bias :obj:`pairs` :obj:`[P, R heads]` (runs one after the
    other within a pair) at its position, the virtual distance
    :obj:`virtual` :obj:`[R, heads]` on the graph token's row and column
    (its diagonal entry included), :math:`-\infty` at padded keys. No dense
    bias of the whole batch is built: each pair goes straight to its
    group."""
    R, H = virtual.shape
    rows = [Bg * Tg * Tg for Bg, Tg in groups.shapes]
    buffer = pairs.new_zeros(groups.pair_size, R * H).index_copy(
        0, groups.pair_pos, pairs)
    out = []
    for part, (Bg, Tg), mask in zip(buffer.split(rows), groups.shapes,
                                    groups.masks):
        bias = part.view(Bg, Tg, Tg, R, H).permute(3, 0, 4, 1, 2)
        first = torch.arange(Tg, device=pairs.device) == 0  # [T_g]
        border = first.view(-1, 1) | first.view(1, -1)  # [T_g, T_g]
        bias = bias + border * virtual.view(R, 1, H, 1, 1)
        out.append(bias.masked_fill(~mask.view(1, Bg, 1, 1, Tg),
                                    float('-inf')).contiguous())
    return out


def _run_positions(groups: AttentionGroups, runs: int) -> Tensor:
    r"""The row of every run's packed tokens in one buffer of the runs'
    attention groups, group after group and within a group run after run
    (so each group's part is :obj:`[R B_g, T_g]` tokens without a copy):
    :obj:`[R M]`, run after run."""
    if runs == 1:
        return groups.pos
    sizes = [Bg * Tg for Bg, Tg in groups.shapes]
    starts = groups.pos.new_tensor([0] + sizes).cumsum(0)  # [groups + 1]
    group = torch.bucketize(groups.pos, starts[1:-1], right=True)  # [M]
    start, size = starts[group], starts[group + 1] - starts[group]
    run = torch.arange(runs, device=groups.pos.device).view(-1, 1)
    return (start * runs + run * size + (groups.pos - start)).view(-1)


class LayerContext(NamedTuple):
    r"""What every layer reads besides the tokens (:func:`layer_context`)."""
    layout: Dict[str, Tensor]  # the batch's token layout
    groups: AttentionGroups
    bias: List[Tensor]  # per group, [R B_g, heads, T_g, T_g]
    pos: Tensor  # [R M]: each run's packed token in the runs' groups
    fused: bool  # the fused attention and dropout kernels
    generators: Optional[List[torch.Generator]]  # one per run, or torch's


def layer_context(layout: Dict[str, Tensor], pairs: Tensor, virtual: Tensor,
                  fused: bool,
                  generators: Optional[Sequence[torch.Generator]],
                  ) -> LayerContext:
    r"""The :class:`LayerContext` of a batch for :obj:`R` runs: its
    :obj:`layout`, the attention groups (one group with the :obj:`fused`
    kernels, its tokens a multiple of :obj:`BIAS_ALIGNMENT`) with their biases (:func:`group_biases` of :obj:`pairs`
    :obj:`[P, R heads]` and :obj:`virtual` :obj:`[R, heads]`, viewed
    :obj:`[R B_g, heads, T_g, T_g]`), the row of each run's token in their
    buffer, and the dropout generators (one per run, or :obj:`None` for
    torch's)."""
    R = virtual.size(0)
    groups = attention_groups(layout, single=fused,
                              multiple=BIAS_ALIGNMENT if fused else 1)
    bias = [b.view(-1, *b.shape[2:])
            for b in group_biases(pairs, groups, virtual)]
    return LayerContext(layout, groups, bias, _run_positions(groups, R),
                        fused, None if generators is None
                        else list(generators))
