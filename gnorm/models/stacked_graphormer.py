r"""Several runs of one :class:`~gnorm.models.Graphormer` configuration (e.g.
the seeds of a sweep) trained as one model on the same batches."""
import copy
import functools
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from gnorm.models.graphormer import (CategoricalEncoder, Graphormer,
                                     GraphormerLayer, _dropout,
                                     layer_context, layout_and_degrees)
from gnorm.nn import SepNorm
from gnorm.nn.stacked import layer_norm, run_values


# The norms a stack runs at the norm sites.
STACKED_NORMS = (torch.nn.LayerNorm, SepNorm, torch.nn.Identity)


def _check_norm(norm: torch.nn.Module) -> None:
    r"""Refuses a norm site the run dimension does not reach."""
    if not isinstance(norm, STACKED_NORMS):
        parts = [norm]
    elif isinstance(norm, SepNorm):
        parts = [norm.norm_virtual, norm.norm_token]
    else:
        parts = []
    for part in parts:
        if isinstance(part, torch.nn.BatchNorm1d):
            if part.momentum is None or not part.track_running_stats:
                raise ValueError("StackedGraphormer needs SepNorm's batch "
                                 "norms with a momentum and running "
                                 "statistics")
        elif not isinstance(part, (torch.nn.LayerNorm, torch.nn.Identity)):
            raise ValueError(f"StackedGraphormer runs LayerNorm, SepNorm "
                             f"and Identity at the norm sites, got {norm}; "
                             f"train the runs one by one")


def _linear(x: Tensor, linear: torch.nn.Linear) -> Tensor:
    r""":obj:`linear` of each run on its inputs: :obj:`[R, M, in]` to
    :obj:`[R, M, out]`, its weight :obj:`[R, out, in]`."""
    return torch.baddbmm(linear.bias.unsqueeze(1), x,
                         linear.weight.transpose(1, 2))


def _embed(weight: Tensor, index: Tensor) -> Tensor:
    r"""Rows :obj:`index` (any shape) of each run's table :obj:`weight`
    :obj:`[R, rows, C]`, run after run within a row: :obj:`[*index.shape,
    R, C]` (one look-up in the table laid out :obj:`[rows, R C]`, whose
    backward adds along the first dimension, as a single model's)."""
    R, rows, C = weight.shape
    table = weight.transpose(0, 1).reshape(rows, R * C)
    return F.embedding(index, table).view(*index.shape, R, C)


def _encode(encoder: CategoricalEncoder, x: Tensor) -> Tensor:
    r""":class:`~gnorm.models.graphormer.CategoricalEncoder` of each run:
    :obj:`[num_rows, R, C]`."""
    x = x.view(x.size(0), encoder.offsets.numel())  # [rows, columns]
    out = _embed(encoder.embedding.weight, x + encoder.offsets)
    return out.sum(1) if encoder.reduce == 'sum' else out.mean(1)


def _stacked_positions(groups: Dict[str, object], runs: int) -> Tensor:
    r"""The row of every run's packed tokens in one buffer of the runs'
    attention groups, group after group and within a group run after run
    (so each group's part is :obj:`[R B_g, T_g]` tokens without a copy):
    :obj:`[R M]`, run after run."""
    pos = groups['pos']  # [M], the row in one run's buffer
    sizes = [Bg * Tg for Bg, Tg in groups['shapes']]
    starts = pos.new_tensor([0] + sizes).cumsum(0)  # [groups + 1]
    group = torch.bucketize(pos, starts[1:-1], right=True)  # [M]
    start, size = starts[group], starts[group + 1] - starts[group]
    run = torch.arange(runs, device=pos.device).view(-1, 1)
    return (start * runs + run * size + (pos - start)).view(-1)


def _batch_norm(x: Tensor, norm: torch.nn.BatchNorm1d) -> Tensor:
    r""":class:`torch.nn.BatchNorm1d` of each run over its rows :obj:`[R, n,
    C]`: one batch norm over :obj:`R C` channels, whose running statistics
    are the runs' (stacked :obj:`[R, C]`, updated in place)."""
    R, n, C = x.shape
    if norm.training:
        norm.num_batches_tracked.add_(1)
    out = F.batch_norm(x.transpose(0, 1).reshape(n, R * C),
                       norm.running_mean.view(-1), norm.running_var.view(-1),
                       norm.weight.view(-1), norm.bias.view(-1),
                       norm.training, norm.momentum, norm.eps)
    return out.view(n, R, C).transpose(0, 1)


def _simple_norm(norm: torch.nn.Module, x: Tensor) -> Tensor:
    if isinstance(norm, torch.nn.BatchNorm1d):
        return _batch_norm(x, norm)
    if isinstance(norm, torch.nn.LayerNorm):
        return layer_norm(x, norm)
    return x  # Identity


def _norm(norm: torch.nn.Module, x: Tensor, num_graphs: int) -> Tensor:
    r"""A norm site on the packed tokens :obj:`[R, M, C]` of every run, the
    :obj:`num_graphs` graph tokens first."""
    if not isinstance(norm, SepNorm):
        return _simple_norm(norm, x)
    norm._check_batch_statistics(num_graphs, x.size(1) - num_graphs)
    virtual = _simple_norm(norm.norm_virtual, x[:, :num_graphs])
    tokens = x[:, num_graphs:]
    if tokens.size(1) > 0:
        tokens = _simple_norm(norm.norm_token, tokens)
    return torch.cat([virtual, tokens], 1)


def _layer(layer: GraphormerLayer, x: Tensor, ctx: Dict[str, object],
           ) -> Tensor:
    r""":meth:`GraphormerLayer.forward` of every run on the tokens
    :obj:`[R, M, C]`; the attention of a group of :obj:`B_g` graphs is that
    of :obj:`R B_g` graphs, each run's with its own bias."""
    R, M, C = x.shape
    num_graphs = ctx['mask'].size(0)
    qkv = _linear(_norm(layer.norm1, x, num_graphs), layer.qkv)
    groups, pos = ctx['groups'], ctx['stacked_pos']
    dense = qkv.new_zeros(R * groups['size'], 3 * C).index_copy(
        0, pos, qkv.view(R * M, 3 * C))  # group after group, run after run
    outs = []
    parts = dense.split([R * Bg * Tg for Bg, Tg in groups['shapes']])
    for part, (Bg, Tg), bias in zip(parts, groups['shapes'],
                                    groups['bias']):
        out = layer._attend(part.view(R * Bg, Tg, 3 * C),
                            bias.view(R * Bg, *bias.shape[2:]),
                            pad=ctx['fused'], fused=ctx['fused'],
                            generators=ctx['generators'])
        outs.append(out.reshape(R * Bg * Tg, C))
    h = torch.cat(outs).index_select(0, pos).view(R, M, C)
    drop = functools.partial(_dropout, p=layer.dropout,
                             training=layer.training, fused=ctx['fused'],
                             generators=ctx['generators'])
    x = x + drop(_linear(h, layer.out))
    h = _norm(layer.norm2, x, num_graphs)
    h = drop(F.gelu(_linear(h, layer.ffn1)))
    return x + drop(_linear(h, layer.ffn2))


class StackedGraphormer(torch.nn.Module):
    r""":obj:`R` :class:`~gnorm.models.Graphormer` models of one
    configuration (:obj:`R` runs that differ only in their weights, e.g.
    their seeds) as one model on the same batches: every parameter and
    running statistic gets a leading run dimension, the linear layers are
    batched products over the runs, and each attention group of :obj:`B_g`
    graphs attends as :obj:`R B_g` graphs, each run's with its own bias.
    The runs share the batch, its token layout and its attention groups.

    .. math::
        \mathbf{y}_r = f_{\theta_r}(\mathcal{G}), \quad r = 1, \ldots, R

    Run :math:`r` gets the output its model alone gives; its gradients are
    its own loss's (sum the runs' losses). With :obj:`generators` (one per
    run, on the model's device) run :math:`r`'s dropout masks come from its
    generator in the order and shapes of the run alone with that generator
    as :obj:`dropout_generator`, so a run trains the same alone and among
    others. Its norm sites may be :class:`torch.nn.LayerNorm`,
    :class:`~gnorm.nn.SepNorm` or :class:`torch.nn.Identity`.

    Args:
        models (sequence of Graphormer): One model per run, all of one
            configuration; their weights are copied.
        generators (sequence of torch.Generator, optional): One dropout
            generator per run. (default: :obj:`None`: torch's, so the runs'
            masks depend on each other)
    """
    def __init__(self, models: Sequence[Graphormer],
                 generators: Optional[Sequence[torch.Generator]] = None):
        super().__init__()
        models = list(models)
        if not models or not all(isinstance(m, Graphormer) for m in models):
            raise ValueError("StackedGraphormer needs one Graphormer per "
                             "run, at least one")
        try:
            differ = bool(run_values(models))
        except ValueError:
            differ = True
        if differ or len({repr(m) for m in models}) > 1:
            raise ValueError("StackedGraphormer needs models of one "
                             "configuration; only their weights may differ")
        if generators is not None and len(generators) != len(models):
            raise ValueError(f"StackedGraphormer got {len(generators)} "
                             f"generators for {len(models)} runs; pass one "
                             f"per run")
        for norm in [m for layer in models[0].layers
                     for m in (layer.norm1, layer.norm2)] + \
                [models[0].final_norm]:
            _check_norm(norm)
        self.runs = len(models)
        self.generators = None if generators is None else list(generators)
        model = copy.deepcopy(models[0])
        model.dropout_generator = None
        persistent = set(models[0].state_dict())
        for name, _ in models[0].named_parameters():
            path, _, leaf = name.rpartition('.')
            setattr(model.get_submodule(path), leaf, torch.nn.Parameter(
                torch.stack([m.get_parameter(name).detach()
                             for m in models])))
        for name, _ in models[0].named_buffers():
            if name in persistent:  # running statistics
                path, _, leaf = name.rpartition('.')
                setattr(model.get_submodule(path), leaf,
                        torch.stack([m.get_buffer(name) for m in models]))
        self.model = model

    def run_state_dict(self, run: int) -> Dict[str, Tensor]:
        r"""The :class:`~gnorm.models.Graphormer` state dict of run
        :obj:`run` (copies)."""
        return {name: value[run].clone()
                for name, value in self.model.state_dict().items()}

    def load_run_state_dict(self, run: int,
                            state: Dict[str, Tensor]) -> None:
        r"""Loads a :class:`~gnorm.models.Graphormer` state dict into run
        :obj:`run`."""
        own = self.model.state_dict()
        if set(state) != set(own):
            raise ValueError("StackedGraphormer.load_run_state_dict got the "
                             "state of another model")
        with torch.no_grad():
            for name, value in state.items():
                own[name][run].copy_(value)

    def pair_bias(self, spd: Tensor, edge_attr: Tensor,
                  layout: Dict[str, Tensor]) -> Tensor:
        r""":meth:`Graphormer.pair_bias` of every run, pair after pair and
        run after run within a pair: :obj:`[P, R heads]` (so that every
        index runs along the first dimension, as a single model's)."""
        g, R = self.model, self.runs
        K, E, H = g.max_dist, edge_attr.size(0), g.num_heads
        dist = spd.long()  # [P]
        spd_row = torch.where(dist < 0, g.max_spd + 1,
                              dist.clamp(max=g.max_spd))
        bias = _embed(g.spd_encoder.weight, spd_row).view(-1, R * H)
        hop, pair = layout['path_hop'], layout['path_pair']
        entry = torch.where(hop < K, hop * E + layout['path_edge'], K * E)
        edge = _encode(g.bond_encoder, edge_attr)  # [E, R, heads]
        hops = torch.einsum('erh,rkhg->kerg', edge, g.hop_weight)
        hops = torch.cat([hops.reshape(K * E, R * H),
                          hops.new_zeros(1, R * H)])  # [K E + 1, R heads]
        multi_hop = bias.new_zeros(dist.size(0), R * H).index_add_(
            0, pair, hops.index_select(0, entry).to(bias.dtype))
        scale = 1.0 / dist.clamp(min=1, max=K).unsqueeze(-1)  # [P, 1]
        return bias + multi_hop * scale.to(bias.dtype)  # [P, R heads]

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                spd: Tensor, path_edge: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None,
                layout: Optional[Dict[str, Tensor]] = None) -> Tensor:
        r""":meth:`Graphormer.forward` of every run on one batch (the same
        arguments): predictions :obj:`[R, B, out_channels]`."""
        g = self.model
        layout, deg = layout_and_degrees(x, edge_index, spd, path_edge,
                                         batch, batch_size, g.max_dist,
                                         layout)
        B = layout['mask'].size(0)
        h = _encode(g.atom_encoder, x) + _embed(
            g.degree_encoder.weight, deg.clamp(max=g.max_degree))
        pairs = self.pair_bias(spd, edge_attr, layout)  # [P, R heads]
        tokens = g.graph_token.unsqueeze(1).expand(-1, B, -1)  # [R, B, C]
        h = torch.cat([tokens, h.transpose(0, 1)], 1)  # [R, M, C]
        fused = g.kernels == 'fused' or (g.kernels == 'auto' and h.is_cuda)
        ctx = layer_context(layout, pairs, g.virtual_distance, fused,
                            self.generators)
        ctx['stacked_pos'] = _stacked_positions(ctx['groups'], self.runs)
        h = _dropout(h, g.input_dropout, self.training, ctx['fused'],
                     ctx['generators'])
        for layer in g.layers:
            h = _layer(layer, h, ctx)
        h = _norm(g.final_norm, h, B)
        return _linear(h[:, :B], g.head)  # [R, B, out]

    def clip_grad_norm_(self, max_norm: float) -> Tensor:
        r""":func:`torch.nn.utils.clip_grad_norm_` of each run on its own
        gradients; returns the runs' norms :obj:`[R]`."""
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        norms = torch.stack([torch.linalg.vector_norm(
            g.reshape(self.runs, -1), dim=1) for g in grads])  # [P, R]
        total = torch.linalg.vector_norm(norms, dim=0)  # [R]
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)).to(g.dtype))
        return total

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(runs={self.runs}, {self.model})'


def runs_of(model: torch.nn.Module) -> Optional[int]:
    r"""The number of runs of a :class:`StackedGraphormer` (:obj:`None` for
    one model)."""
    return model.runs if isinstance(model, StackedGraphormer) else None


__all__: List[str] = ['StackedGraphormer', 'runs_of']
