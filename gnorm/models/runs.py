r"""Modules applied to the inputs of :math:`R` runs at once.

A :class:`~gnorm.models.Graphormer` holds one run (its parameters as
:mod:`torch.nn` makes them) or, inside a
:class:`~gnorm.models.StackedGraphormer`, :math:`R` runs (every parameter
and running statistic with a leading run dimension). Its code is written
once for both: the tokens carry a leading run dimension :obj:`[R, ...]`
(:obj:`R = 1` for one model), and the helpers here apply a module of one
run or of :math:`R` stacked runs to them.
"""
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from gnorm.nn.stacked import layer_norm


def embed(weight: Tensor, index: Tensor) -> Tensor:
    r"""Rows :obj:`index` (any shape) of the table :obj:`weight`: one run's
    :obj:`[rows, C]` gives :obj:`[*index.shape, C]`; :math:`R` runs'
    :obj:`[R, rows, C]` give :obj:`[*index.shape, R, C]` (one look-up in the
    table laid out :obj:`[rows, R C]`, whose backward adds along the first
    dimension, as one run's)."""
    if weight.dim() == 2:
        return F.embedding(index, weight)
    R, rows, C = weight.shape
    table = weight.transpose(0, 1).reshape(rows, R * C)
    return F.embedding(index, table).view(*index.shape, R, C)


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


def _stacked(module: torch.nn.Module) -> bool:
    r"""Whether :obj:`module` holds stacked runs (a leading run dimension on
    its weight or its running statistics)."""
    if isinstance(module, torch.nn.Linear):
        return module.weight.dim() == 3
    if isinstance(module, torch.nn.LayerNorm):
        return module.weight is not None and \
            module.weight.dim() > len(module.normalized_shape)
    if isinstance(module, torch.nn.BatchNorm1d):
        return module.running_mean is not None and \
            module.running_mean.dim() == 2
    return False


def each_run(module: torch.nn.Module, x: Tensor) -> Tensor:
    r""":obj:`module` of each run on that run's inputs :obj:`x` :obj:`[R,
    n, C]`, :obj:`[R, n, C']` out. A module of one run (:obj:`R = 1`) runs
    its own :meth:`forward` on :obj:`x[0]`; a module of stacked runs, a
    batched form: :class:`torch.nn.Linear` (weight :obj:`[R, out, in]`) as
    a batched product, :class:`torch.nn.LayerNorm` and
    :class:`torch.nn.BatchNorm1d` with their affine weights and running
    statistics :obj:`[R, C]`; :class:`torch.nn.Identity` passes :obj:`x`
    on."""
    if isinstance(module, torch.nn.Identity):
        return x
    if _stacked(module):
        if isinstance(module, torch.nn.Linear):
            return torch.baddbmm(module.bias.unsqueeze(1), x,
                                 module.weight.transpose(1, 2))
        if isinstance(module, torch.nn.LayerNorm):
            return layer_norm(x, module)
        return _batch_norm(x, module)
    if x.size(0) != 1:
        raise ValueError(f"each_run: {module} holds one run, got the inputs "
                         f"of {x.size(0)} runs")
    return module(x[0]).unsqueeze(0)


def run_shape(x: Tensor, shape: Tuple[int, ...]) -> Tensor:
    r"""The parameter :obj:`x` of one run (:obj:`shape`) or of stacked runs
    (:obj:`[R, *shape]`) as :obj:`[R, *shape]`."""
    return x.view(-1, *shape)
