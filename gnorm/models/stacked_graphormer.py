r"""Several runs of one :class:`~gnorm.models.Graphormer` configuration (e.g.
the seeds of a sweep) trained as one model on the same batches."""
import copy
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor

from gnorm.models.graphormer import Graphormer
from gnorm.nn import SepNorm
from gnorm.nn.stacked import run_values


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


class StackedGraphormer(torch.nn.Module):
    r""":obj:`R` :class:`~gnorm.models.Graphormer` models of one
    configuration (:obj:`R` runs that differ only in their weights, e.g.
    their seeds) as one model on the same batches: one
    :class:`~gnorm.models.Graphormer` (:obj:`model`) whose every parameter
    and running statistic gets a leading run dimension, so that its code
    (:meth:`Graphormer.forward_runs`) runs the linear layers as batched
    products over the runs, and each attention group of :obj:`B_g` graphs
    attends as :obj:`R B_g` graphs, each run's with its own bias. The runs
    share the batch, its token layout and its attention groups.

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
        run after run within a pair: :obj:`[P, R heads]`."""
        return self.model.pair_bias(spd, edge_attr, layout)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                spd: Tensor, path_edge: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None,
                layout: Optional[Dict[str, Tensor]] = None) -> Tensor:
        r""":meth:`Graphormer.forward` of every run on one batch (the same
        arguments): predictions :obj:`[R, B, out_channels]`
        (:meth:`Graphormer.forward_runs` of the stacked model)."""
        out, _, _ = self.model.forward_runs(
            x, edge_index, edge_attr, spd, path_edge, batch, batch_size,
            layout, self.generators)
        return out

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
