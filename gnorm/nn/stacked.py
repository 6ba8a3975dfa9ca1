import contextlib
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import functional_call, vmap

# torch.func.vmap runs ops without a batching rule (e.g. CPU flash
# attention) once per run and warns each time; the results are the same.
_NO_BATCH_RULE = 'There is a performance drop because we have not yet'
# Attributes every module has, never compared across runs.
_MODULE_STATE = {'_parameters', '_buffers', '_modules', 'training',
                 '_non_persistent_buffers_set'}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def run_values(modules: Sequence[torch.nn.Module],
                ) -> Dict[Tuple[str, str], List[float]]:
    r"""The numeric attributes that differ between :obj:`modules` (e.g.
    each run's :obj:`scale`), as :obj:`{(submodule, name): [one per run]}`.
    Raises :class:`ValueError` if they differ in anything else."""
    first = modules[0]
    values = {}
    for other in modules[1:]:
        if type(other) is not type(first):
            raise ValueError(f"Stacked needs modules of one class, got "
                             f"{first} and {other}")
    subs = [dict(m.named_modules()) for m in modules]
    for path, sub in subs[0].items():
        names = {k for k in vars(sub) if k not in _MODULE_STATE
                 and not k.startswith('_') and not callable(vars(sub)[k])}
        for name in sorted(names):
            per_run = [getattr(s[path], name, None) for s in subs]
            if all(v == per_run[0] for v in per_run):
                continue
            if not all(_is_number(v) for v in per_run):
                raise ValueError(f"Stacked: the modules differ in "
                                 f"{path + '.' if path else ''}{name} "
                                 f"({per_run[0]!r} vs {per_run[1]!r}); only "
                                 f"numbers may differ between runs")
            values[(path, name)] = [float(v) for v in per_run]
    return values


def layer_norm(x: Tensor, module: torch.nn.LayerNorm) -> Tensor:
    r""":obj:`module(x)`, also when :class:`Stacked` hands :obj:`module`
    the affine weights of :obj:`R` runs (:obj:`[runs, *normalized_shape]`)
    and :obj:`x` holds the inputs of those runs (:obj:`[runs, ...]`)."""
    shape = tuple(module.normalized_shape)
    if module.weight is None or module.weight.dim() == len(shape):
        return module(x)
    out = F.layer_norm(x, shape, eps=module.eps)
    lead = (module.weight.size(0), ) + (1, ) * (x.dim() - 1 - len(shape))
    out = out * module.weight.view(*lead, *shape)
    if module.bias is not None:
        out = out + module.bias.view(*lead, *shape)
    return out


def _unbind(tensors: Dict[str, Tensor],
            runs: int) -> List[Dict[str, Tensor]]:
    r"""For each of :obj:`runs` runs (dim 0), views of :obj:`tensors`; one
    :meth:`unbind` per tensor, whose backward is one stack (R indexings
    would each zero-fill a gradient of all runs)."""
    slices = {name: t.unbind(0) for name, t in tensors.items()}
    return [{name: s[r] for name, s in slices.items()} for r in range(runs)]


@contextlib.contextmanager
def _attributes(module: torch.nn.Module,
                values: Dict[Tuple[str, str], Tensor]) -> Iterator[None]:
    r"""Sets the attributes :obj:`values` of :obj:`module`'s submodules for
    the duration of the block."""
    saved = []
    for (path, name), value in values.items():
        sub = module.get_submodule(path)
        saved.append((sub, name, getattr(sub, name)))
        object.__setattr__(sub, name, value)
    try:
        yield
    finally:
        for sub, name, value in saved:
            object.__setattr__(sub, name, value)


class Stacked(torch.nn.Module):
    r"""Applies :obj:`R` modules of one class (the same layer of :obj:`R`
    independent runs) as one: their parameters and buffers are stacked along
    a leading run dimension and the first module's :meth:`forward` runs for
    all runs at once through :func:`torch.func.vmap`, so every kernel does
    the work of :obj:`R` runs.

    .. math::
        \mathbf{Y}_r = f_{\theta_r}(\mathbf{X}_r), \quad r = 1, \ldots, R

    The modules may differ in their tensors and in numeric attributes (e.g.
    each run's :obj:`scale`, handed to :meth:`forward` as a per-run 0-d
    tensor under :func:`~torch.func.vmap`); any other difference raises a
    :class:`ValueError`. Buffers updated in place in :meth:`forward`
    (running statistics) are updated per run. Run :math:`r` gets the output
    its module alone gives.

    A module whose class sets :obj:`takes_runs = True` (e.g.
    :class:`~gnorm.nn.ContraNorm`) takes the run dimension itself: its
    :meth:`forward` gets the inputs :obj:`[runs, ...]`, its tensors stacked
    :obj:`[runs, ...]` and each differing number as a tensor
    :obj:`[runs, 1, ..., 1]` that broadcasts against the inputs, and runs
    once, with batched kernels and no :func:`~torch.func.vmap`. For other
    modules on the CPU, where kernels are compute-bound and batched gathers
    and scatters are slower than :obj:`R` plain ones, the module's
    :meth:`forward` runs once per run (on the run's slice of the stacked
    parameters: the same code, the same result).

    Args:
        modules (sequence of torch.nn.Module): One module per run.
        at_once (bool, optional): Run all runs at once, through the
            module's own run dimension or :func:`torch.func.vmap`
            (:obj:`True`), or one after the other (:obj:`False`).
            (default: :obj:`None`: at once, except on the CPU for a module
            without :obj:`takes_runs`)
    """
    def __init__(self, modules: Sequence[torch.nn.Module],
                 at_once: Optional[bool] = None):
        super().__init__()
        modules = list(modules)
        if len(modules) == 0:
            raise ValueError("Stacked needs at least one module")
        self.runs = len(modules)
        self.at_once = at_once
        self._values = run_values(modules)
        # The module whose forward runs; its own tensors are never used
        # (kept out of the parameters: a plain list attribute).
        self._template = [modules[0]]
        self._param_names = [n for n, _ in modules[0].named_parameters()]
        self._buffer_names = [n for n, _ in modules[0].named_buffers()]
        for i, name in enumerate(self._param_names):
            stacked = torch.stack([m.get_parameter(name).detach()
                                   for m in modules])  # [runs, ...]
            self.register_parameter(f'param{i}',
                                    torch.nn.Parameter(stacked))
        persistent = {n for n, _ in modules[0].state_dict(
            keep_vars=True).items()}
        for i, name in enumerate(self._buffer_names):
            stacked = torch.stack([m.get_buffer(name) for m in modules])
            self.register_buffer(f'buffer{i}', stacked,
                                 persistent=name in persistent)
        self._value_cache: Dict[Any, Dict[Tuple[str, str], Tensor]] = {}

    @property
    def module(self) -> torch.nn.Module:
        r"""The module whose :meth:`forward` runs for every run."""
        return self._template[0]

    def state_names(self) -> Dict[str, str]:
        r"""The names of this module's stacked tensors (``param0``,
        ``buffer1``...) by the names the module of one run gives them
        (``weight``, ``running_std``...), so that a run's slice of a
        state can be saved as the module alone names it."""
        return {**{f'param{i}': name
                   for i, name in enumerate(self._param_names)},
                **{f'buffer{i}': name
                   for i, name in enumerate(self._buffer_names)}}

    def reset_parameters(self):
        r"""Resets the parameters and buffers of every run to the module's
        :meth:`reset_parameters` state."""
        module = self.module
        if hasattr(module, 'reset_parameters'):
            module.reset_parameters()
        with torch.no_grad():
            for i, name in enumerate(self._param_names):
                getattr(self, f'param{i}').copy_(module.get_parameter(name))
            for i, name in enumerate(self._buffer_names):
                getattr(self, f'buffer{i}').copy_(module.get_buffer(name))

    def _run_tensors(self, x: Tensor, native: bool,
                     ) -> Dict[Tuple[str, str], Tensor]:
        r"""The differing numbers, one per run: for :func:`vmap`, in
        float64 (the numbers as typed, 0-d for each run); for a module that
        takes the run dimension, in :obj:`x`'s type, shaped to broadcast
        against :obj:`x`."""
        key = (x.device, x.dtype, x.dim()) if native else (x.device, )
        if key not in self._value_cache:
            dtype = x.dtype if native else torch.float64
            shape = (-1, ) + (1, ) * (x.dim() - 1) if native else (-1, )
            self._value_cache[key] = {
                name: torch.tensor(v, dtype=dtype, device=x.device).view(shape)
                for name, v in self._values.items()}
        return self._value_cache[key]

    def forward(self, x: Tensor, *args, **kwargs) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Inputs of every run, :obj:`[runs, ...]`.
            \*args, \*\*kwargs: Inputs shared by all runs (e.g.
                :obj:`edge_index`), handed to every run's :meth:`forward`.

        Returns:
            torch.Tensor: Outputs of every run, :obj:`[runs, ...]`.
        """
        if x.size(0) != self.runs:
            raise ValueError(f"{self}: expected inputs of {self.runs} runs "
                             f"along dim 0, got shape {list(x.shape)}")
        params = {n: getattr(self, f'param{i}')
                  for i, n in enumerate(self._param_names)}
        buffers = {n: getattr(self, f'buffer{i}')
                   for i, n in enumerate(self._buffer_names)}
        module = self.module
        module.train(self.training)

        def call(params, buffers, values, x):  # one run, or all runs at once
            with _attributes(module, values):
                return functional_call(module, (params, buffers),
                                       (x, *args), kwargs)

        native = getattr(type(module), 'takes_runs', False)
        at_once = self.at_once if self.at_once is not None else (
            native or x.device.type != 'cpu')
        if at_once and native:
            return call(params, buffers, self._run_tensors(x, True), x)
        if not at_once:  # unbind, not x[r]: its backward is one stack
            params = _unbind(params, self.runs)
            buffers = _unbind(buffers, self.runs)  # views: updated in place
            return torch.stack([call(
                params[r], buffers[r],
                {k: v[r] for k, v in self._values.items()}, x_r)
                for r, x_r in enumerate(x.unbind(0))])
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message=_NO_BATCH_RULE)
            return vmap(call)(params, buffers, self._run_tensors(x, False),
                              x)

    def __repr__(self) -> str:
        args = [repr(self.module), f'runs={self.runs}']
        args += [f'{path + "." if path else ""}{name}={values}'
                 for (path, name), values in self._values.items()]
        return f'{self.__class__.__name__}({", ".join(args)})'
