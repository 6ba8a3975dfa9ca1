r"""Per-layer gradient norms of the backward passes a training loop
chooses: the norm of the gradient reaching each hooked layer's output
and of the gradient of the parameters that layer adds (:class:`Gradients`).

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
#: gradient of the loss with respect to the layer's output, and of the
#: gradient of the layer's parameters (:func:`layer_parameters`).
GRADIENT_METRICS = ('output_grad_norm', 'param_grad_norm')


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
    summed, so each run's slice of a gradient is its own."""
    def __init__(self, model: torch.nn.Module, layers: Sequence[str],
                 runs: Optional[int] = None):
        modules = dict(model.named_modules())
        missing = [n for n in layers if n not in modules]
        if missing or not layers:
            raise ValueError(f"Gradients: no layer {missing[0]!r} in the "
                             f"model" if missing else
                             "Gradients: pass at least one layer")
        self.model, self.layers, self.runs = model, list(layers), runs
        self.params = layer_parameters(model, self.layers)
        self.steps: List[Any] = []  # (step, output [L, R], param [L, R])
        self._outputs: Dict[int, Tensor] = {}

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
        output = torch.stack([zero if o is None else o.to(zero)
                              for o in outputs]).sqrt()
        self.steps.append((step, output, torch.stack(params).sqrt()))

    def records(self, step: Optional[int] = None) -> List[Dict[str, Any]]:
        r"""The records of every recorded step (or of :obj:`step`), read
        to the host once: :obj:`step`, (:obj:`run` for stacked runs),
        :obj:`layer`, :obj:`metric` (:data:`GRADIENT_METRICS`) and
        :obj:`value`."""
        steps = self.steps if step is None else \
            [s for s in self.steps if s[0] == step][-1:]
        out = []
        for at, output, param in steps:
            values = torch.stack([output, param]).tolist()  # [2, L, R]
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
            'epoch': [s for s, _, _ in self.steps],
            'layer': list(range(1, len(self.layers) + 1))}
        for k, metric in enumerate(GRADIENT_METRICS):
            field[metric] = [
                [v if math.isfinite(v) else None
                 for v in norms[k][:, r].tolist()]
                for _, *norms in self.steps]
        return field


class _GradientContext:
    r"""The context of :meth:`Gradients.record`: its hooks exist inside
    it only, and are removed however it ends."""
    def __init__(self, gradients: Gradients, step: int):
        self.gradients, self.step = gradients, step

    def __enter__(self) -> Gradients:
        g = self.gradients
        g._outputs = {}
        self.handles = g._hooks()
        return g

    def __exit__(self, exc_type, exc, tb) -> None:
        for handle in self.handles:
            handle.remove()
        if exc_type is None:
            self.gradients._read(self.step)
        return None
