r"""Per-layer gradient norms of the backward passes a training loop
chooses: the norm of the gradient reaching each hooked layer's output,
of the gradient of the parameters that layer adds and of those
parameters themselves (:class:`Gradients`); with :obj:`trace`, also the
effective rank and mean pairwise cosine of each layer's output in the
same forward pass, so that a run knows when its representations
collapsed as well as when its gradients vanished.

.. code-block:: python

    gradients = Gradients(model, find_layers(model))
    with gradients.record(step=epoch):
        loss = criterion(model(data.x, data.edge_index), data.y)
        loss.backward()  # inside the with block
    optimizer.step()
    gradients.records()  # [{'step', 'layer', 'metric', 'value'}, ...]

Hooks exist only inside :meth:`Gradients.record`: outside it the model
runs as it would without the recorder. The norms stay on the device until
:meth:`Gradients.records` reads them, once."""
import math
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import Tensor

#: The gradient metrics, per hooked layer: the Frobenius norm of the
#: gradient of the loss with respect to the layer's output, of the
#: gradient of the layer's parameters (:func:`layer_parameters`) and of
#: the parameters themselves (their product with the gradient's norm is
#: what the loss gains per relative change of the layer's weights, the
#: same whatever scale a norm after the layer removes:
#: :func:`gnorm.monitor.diagnosis.trainability`).
GRADIENT_METRICS = ('output_grad_norm', 'param_grad_norm', 'param_norm')
#: What :obj:`trace` adds, per hooked layer: the effective rank
#: (:func:`gnorm.metrics.effective_rank`), the mean pairwise cosine
#: similarity (:func:`gnorm.metrics.feature_cosine_similarity`) and the
#: mean squared row norm :math:`\frac{1}{N}\sum_i \|x_i\|^2` (the scale
#: a Dirichlet energy is read against) of the layer's output in the
#: recorded forward pass (training mode: dropout on), in float64.
TRACE_METRICS = ('effective_rank', 'cosine_similarity', 'squared_norm')


def _trace(output: Tensor) -> Tensor:
    r"""The :data:`TRACE_METRICS` of a layer's :obj:`output`
    :obj:`[(runs,) nodes, d]`: :obj:`[3, runs or 1]`, on the device."""
    from gnorm.metrics.pointwise import dense_effective_rank
    x = output.detach().double()
    x = x if x.dim() == 3 else x.unsqueeze(0)  # [runs, nodes, d]
    rank = dense_effective_rank(x.unsqueeze(1)).squeeze(1)  # [runs]
    n = x.size(1)
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    u = torch.where(x.norm(dim=-1, keepdim=True) > 0, u, 0.0)
    total = u.sum(1).square().sum(-1) - u.square().sum((1, 2))
    cosine = total / (n * (n - 1)) if n > 1 else total * math.nan
    return torch.stack([rank, cosine, squared_norm(x)])


def squared_norm(x: Tensor) -> Tensor:
    r"""The mean squared row norm of :obj:`x` :obj:`[runs, nodes, d]`,
    :obj:`[runs]`."""
    return x.square().sum(-1).mean(-1)


def _squared(grad: Optional[Tensor], runs: Optional[int]) -> Tensor:
    r"""The squared norm of :obj:`grad` per run :obj:`[runs]` (a leading
    run dimension of :obj:`runs`; a tensor the runs share counts for
    each), :obj:`[1]` for a model of one run."""
    if grad is None:  # a parameter the pass did not reach
        return torch.zeros(runs or 1)
    grad = grad.detach()
    if grad.dtype in (torch.float16, torch.bfloat16):
        grad = grad.float()
    if runs is not None and grad.dim() > 0 and grad.size(0) == runs:
        return grad.reshape(runs, -1).square().sum(1)
    return grad.square().sum().expand(runs or 1)


def layer_parameters(model: torch.nn.Module, layers: Sequence[str]
                     ) -> List[List[torch.nn.Parameter]]:
    r"""The parameters of each of :obj:`layers`: a layer's own (a PyG
    convolution's), or, for a layer without any that is entry :obj:`i` of
    a :class:`~torch.nn.ModuleList` (:class:`~gnorm.models.DeepGCN`'s and
    :class:`~gnorm.models.ResGNN`'s ``outputs.i``, which mark a block's
    output), those of entry :obj:`i` of every other module list of the
    same parent (``convs.i``, ``norms.i``, ``ffs.i``, ``skips.i``)."""
    modules = dict(model.named_modules())
    found = []
    for name in layers:
        own = list(modules[name].parameters())
        listed, _, index = name.rpartition('.')
        if not own and index.isdigit() and \
                isinstance(modules.get(listed), torch.nn.ModuleList):
            parent = modules[listed.rpartition('.')[0]]
            for child in parent.children():
                if isinstance(child, torch.nn.ModuleList) and \
                        child is not modules[listed] and int(index) < len(child):
                    own += list(child[int(index)].parameters())
        found.append(own)
    return found


class Gradients:
    r"""Records, for each backward pass run inside :meth:`record`, the
    :data:`GRADIENT_METRICS` of the :obj:`layers` (qualified module names,
    as :func:`~gnorm.monitor.find_layers` gives them) of :obj:`model`. For
    a model of stacked runs (:obj:`runs`, outputs and parameters with a
    leading run dimension) the values are per run: the runs' losses are
    summed, so each run's slice of a gradient is its own. With
    :obj:`trace`, each recorded forward pass also gives the
    :data:`TRACE_METRICS` of every layer's output."""
    def __init__(self, model: torch.nn.Module, layers: Sequence[str],
                 runs: Optional[int] = None, trace: bool = False):
        modules = dict(model.named_modules())
        missing = [n for n in layers if n not in modules]
        if missing or not layers:
            raise ValueError(f"Gradients: no layer {missing[0]!r} in the "
                             f"model" if missing else
                             "Gradients: pass at least one layer")
        self.model, self.layers, self.runs = model, list(layers), runs
        self.params = layer_parameters(model, self.layers)
        self.trace = trace
        # (step, [metrics, L, R]): GRADIENT_METRICS (+ TRACE_METRICS)
        self.steps: List[Any] = []
        self._outputs: Dict[int, Tensor] = {}
        self._traced: Dict[int, Tensor] = {}

    @property
    def metrics(self) -> tuple:
        r"""The metrics recorded per layer and step."""
        return GRADIENT_METRICS + (TRACE_METRICS if self.trace else ())

    def record(self, step: int) -> '_GradientContext':
        r"""A context manager in which one forward and one backward pass
        of the model are recorded as :obj:`step`."""
        return _GradientContext(self, step)

    # ------------------------------------------------------------ the hooks
    def _hooks(self) -> List[Any]:
        modules = dict(self.model.named_modules())
        return [modules[name].register_forward_hook(self._output_hook(i))
                for i, name in enumerate(self.layers)]

    def _output_hook(self, index: int):
        def hook(module, args, output):
            if isinstance(output, (tuple, list)):
                output = next((o for o in output if isinstance(o, Tensor)),
                              None)
            if isinstance(output, Tensor) and self.trace and \
                    output.dim() >= 2:
                self._traced[index] = _trace(output)
            if isinstance(output, Tensor) and output.requires_grad:
                output.register_hook(
                    lambda grad: self._outputs.__setitem__(
                        index, _squared(grad, self.runs)) and None)
            return None
        return hook

    def _read(self, step: int) -> None:
        r"""The step's norms, on the device: the output gradients the
        hooks kept and the parameters' gradients of each layer."""
        outputs = [self._outputs.get(i) for i in range(len(self.layers))]
        if all(o is None for o in outputs):
            raise ValueError("Gradients.record: no gradient reached the "
                             "hooked layers; call loss.backward() inside the "
                             "with block")
        some = next(o for o in outputs if o is not None)
        zero = torch.zeros_like(some)
        params = [sum((_squared(p.grad, self.runs).to(zero) for p in ps),
                      zero) for ps in self.params]
        weights = [sum((_squared(p, self.runs).to(zero) for p in ps), zero)
                   for ps in self.params]
        output = torch.stack([zero if o is None else o.to(zero)
                              for o in outputs]).sqrt()
        found = [output, torch.stack(params).sqrt(),
                 torch.stack(weights).sqrt()]  # each [L, R]
        if self.trace:
            nan = torch.full((len(TRACE_METRICS), zero.numel()),
                             math.nan).to(zero)
            traced = torch.stack([self._traced.get(i, nan).to(zero)
                                  for i in range(len(self.layers))])
            found += list(traced.transpose(0, 1))  # [L, 3, R] -> 3 x [L, R]
        self.steps.append((step, torch.stack(found)))

    def records(self, step: Optional[int] = None) -> List[Dict[str, Any]]:
        r"""The records of every recorded step (or of :obj:`step`), read
        to the host once: :obj:`step`, (:obj:`run` for stacked runs),
        :obj:`layer`, :obj:`metric` (:data:`GRADIENT_METRICS`; the trace
        is in :meth:`field` only, beside a monitor's own metrics of the
        same names) and :obj:`value`."""
        steps = self.steps if step is None else \
            [s for s in self.steps if s[0] == step][-1:]
        out = []
        for at, found in steps:
            values = found.tolist()  # [metrics, L, R]
            for i, layer in enumerate(self.layers):
                for run in range(self.runs or 1):
                    for metric, table in zip(GRADIENT_METRICS, values):
                        out.append({'step': at,
                                    **({} if self.runs is None
                                       else {'run': run}),
                                    'layer': layer, 'metric': metric,
                                    'value': table[i][run]})
        return out

    def field(self, run: Optional[int] = None) -> Dict[str, list]:
        r"""``results.json``'s ``gradients`` field of run :obj:`run`
        (:obj:`None`: a model of one run): ``epoch`` (the recorded steps),
        ``layer`` (1 ... L) and per metric a list per step of a value per
        layer (:obj:`None` where not finite)."""
        r = 0 if run is None else run
        field: Dict[str, list] = {
            'epoch': [s for s, _ in self.steps],
            'layer': list(range(1, len(self.layers) + 1))}
        for k, metric in enumerate(self.metrics):
            field[metric] = [
                [v if math.isfinite(v) else None
                 for v in found[k][:, r].tolist()]
                for _, found in self.steps]
        return field


class _GradientContext:
    r"""The context of :meth:`Gradients.record`: its hooks exist inside
    it only, and are removed however it ends."""
    def __init__(self, gradients: Gradients, step: int):
        self.gradients, self.step = gradients, step

    def __enter__(self) -> Gradients:
        g = self.gradients
        g._outputs, g._traced = {}, {}
        self.handles = g._hooks()
        return g

    def __exit__(self, exc_type, exc, tb) -> None:
        for handle in self.handles:
            handle.remove()
        if exc_type is None:
            self.gradients._read(self.step)
        return None
