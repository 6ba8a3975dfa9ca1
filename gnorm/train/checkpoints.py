r"""The checkpoints of runs (``checkpoint.pt`` in a run's folder), read
back with ``resume=true`` so that an interrupted run continues with the
curve the uninterrupted run would have given.

Graph-level runs: what :func:`save_checkpoints` writes every
``train.checkpoint_every`` epochs, and what :func:`load_checkpoints` and
:func:`restore` read back. A run's checkpoint is the same whether it
trained alone or in a :class:`~gnorm.models.StackedGraphormer`.

Node-level runs (with ``resume=true``, every ``train.checkpoint_every``
epochs): :func:`save_node_checkpoints`, :func:`load_node_checkpoints`,
:func:`restore_node_results` and :func:`restore_node_loop`. A run's
checkpoint holds its weights as the model of that run alone names them
(a :class:`~gnorm.nn.stacked.Stacked` norm's stacked tensors under its
module's names), its best-validation weights and epoch, its optimizer
state, its curve, its dropout generator and gradient records, so it
resumes alone or among any other runs stopped at the same epoch.

Either kind: a checkpoint saved by a run of another identity (another
config, another number of processes) is refused
(:func:`gnorm.results.keys.check_resume`), and one saved before a file of
the user's code that the config names changed is left: the run trains
from the start (:func:`gnorm.results.user_code.changed_user_code`).
"""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from omegaconf import OmegaConf

from gnorm.errors import ConfigError
from gnorm.models import StackedGraphormer
from gnorm.models.stacked_graphormer import runs_of
from gnorm.results.keys import check_resume, world_size
from gnorm.results.user_code import changed_user_code, retraining

# ``training`` below: the :class:`gnorm.train.graph.Training` of the loop
# (its model, optimizer, schedule and number of processes).
CHECKPOINT = 'checkpoint.pt'


def _save(path: Path, state: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'.{path.name}.tmp')
    torch.save(state, tmp)
    os.replace(tmp, path)


def _rng_state() -> Dict[str, Any]:
    return {'cpu': torch.get_rng_state(),
            'cuda': (torch.cuda.get_rng_state_all()
                     if torch.cuda.is_available() else [])}


def _set_rng_state(state: Dict[str, Any]) -> None:
    # byte tensors on the CPU, wherever the checkpoint was mapped
    torch.set_rng_state(state['cpu'].cpu())
    if state['cuda'] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state['cuda']])


def _generators(model: torch.nn.Module) -> List[Optional[torch.Generator]]:
    r"""The dropout generator of each run of :obj:`model` (:obj:`None`:
    torch's)."""
    if isinstance(model, StackedGraphormer):
        return list(model.generators or [None] * model.runs)
    return [model.dropout_generator]


def read_checkpoint(cfg, checkpoint: Path, device: torch.device,
                    world: int = 1) -> Optional[Dict[str, Any]]:
    r"""The state saved in :obj:`checkpoint` for the run of :obj:`cfg`
    (:obj:`None`: no file, or a file of the user's code changed since,
    said in a line); refuses the checkpoint of another identity
    (:class:`~gnorm.errors.ConfigError`)."""
    if not checkpoint.is_file():
        return None
    state = torch.load(checkpoint, map_location=device, weights_only=False)
    config = OmegaConf.to_container(cfg, resolve=True)
    check_resume(state, config, world, checkpoint)
    changed = changed_user_code(state, config)
    if changed:  # the user's code changed: from the start
        print(retraining(state, changed, checkpoint), flush=True)
        return None
    return state


def load_checkpoints(cfgs, checkpoints: List[Path], device: torch.device,
                     world: int = 1) -> Optional[List[Dict[str, Any]]]:
    r"""The states saved in :obj:`checkpoints` (one per run) when the runs
    ask to resume and every run has one, from one epoch (:obj:`None` when
    none has one); refuses the checkpoint of another config, and runs that
    stopped at different epochs."""
    if not cfgs[0].get('resume', False):
        return None
    states = [read_checkpoint(cfg, checkpoint, device, world)
              for cfg, checkpoint in zip(cfgs, checkpoints)]
    if all(state is None for state in states):
        return None
    epochs = {None if state is None else state['epoch'] for state in states}
    if len(epochs) > 1:
        raise ConfigError(f"the runs {', '.join(map(str, checkpoints))} "
                          f"stopped at different epochs "
                          f"({', '.join(map(str, epochs))}); pass "
                          f"batch_runs=1 to resume each alone")
    return states


def _run_optimizer_state(state: Dict[str, Any], run: int,
                         runs: Optional[int]) -> Dict[str, Any]:
    r"""Run :obj:`run`'s part of the optimizer :obj:`state` of a model of
    :obj:`runs` runs (all of it for one model): its slice of every
    per-parameter tensor with a run dimension."""
    if runs is None:
        return state
    return {'param_groups': state['param_groups'], 'state': {
        i: {k: v[run].clone() if torch.is_tensor(v) and v.dim() > 0 else v
            for k, v in per_param.items()}
        for i, per_param in state['state'].items()}}


def _stacked_optimizer_state(states: List[Dict[str, Any]]) -> Dict[str, Any]:
    r"""The optimizer state of the runs' states :obj:`states` as one (the
    inverse of :func:`_run_optimizer_state`)."""
    first = states[0]
    return {'param_groups': first['param_groups'], 'state': {
        i: {k: torch.stack([s['state'][i][k] for s in states])
            if torch.is_tensor(v) and v.dim() > 0 else v
            for k, v in per_param.items()}
        for i, per_param in first['state'].items()}}


def restore(states: List[Dict[str, Any]], training: Any,
            results: List[Dict[str, Any]]) -> Tuple[List[Any], int]:
    r"""Loads the runs' checkpoint :obj:`states` into :obj:`training` and
    :obj:`results` (curve, best epoch) and restores the random streams;
    returns each run's best weights so far and the epoch to start from."""
    for run, state in enumerate(states):
        training.load_run_state(run, state['model'])
    optimizer = [s['optimizer'] for s in states]
    training.optimizer.load_state_dict(
        optimizer[0] if runs_of(training.model) is None
        else _stacked_optimizer_state(optimizer))
    training.scheduler.load_state_dict(states[0]['scheduler'])
    for state, res, generator in zip(states, results,
                                     _generators(training.model)):
        res['curve'].update(state['curve'])
        res.update(best_epoch=state['best_epoch'], best=state['best'],
                   resumed_from_epoch=state['epoch'])
        if generator is not None:
            generator.set_state(state['dropout_generator'])
    _set_rng_state(states[0]['rng'])
    return [s['best_state'] for s in states], states[0]['epoch'] + 1


def save_checkpoints(checkpoints: List[Path], cfgs, training: Any,
                     results: List[Dict[str, Any]], best_states: List[Any],
                     epoch: int) -> None:
    r"""Writes into each run's checkpoint what :func:`restore` needs to
    continue it after :obj:`epoch` (a run's checkpoint is the same whether
    it trained alone or among others)."""
    runs = runs_of(training.model)
    optimizer = training.optimizer.state_dict()
    rng = _rng_state()
    for run, (checkpoint, cfg, res, best_state, generator) in enumerate(zip(
            checkpoints, cfgs, results, best_states,
            _generators(training.model))):
        _save(checkpoint, {
            'epoch': epoch, 'config': OmegaConf.to_container(cfg,
                                                             resolve=True),
            'source': res.get('source'),
            'world_size': training.world,
            'model': training.run_state(run),
            'optimizer': _run_optimizer_state(optimizer, run, runs),
            'scheduler': training.scheduler.state_dict(),
            'best_state': best_state, 'best_epoch': res['best_epoch'],
            'best': res['best'], 'curve': res['curve'], 'rng': rng,
            'dropout_generator': None if generator is None
            else generator.get_state()})


# ------------------------------------------------------------ node runs
# ``loop`` below: the :class:`gnorm.train.node_loop.Loop` of
# :func:`gnorm.train.node_loop.fit` (each run's best-validation weights, their
# metrics and epoch so far, and whether the run is alive).

# What a node run's checkpoint keeps of its results: the epochs so far.
NODE_RESULTS = ('curve', 'best_epoch', 'best', 'status', 'error')


def _alone_names(model: torch.nn.Module) -> Dict[str, str]:
    r"""The state keys of a node model of stacked runs that a model of one
    run names otherwise: each :class:`~gnorm.nn.stacked.Stacked` module's
    ``param0``, ``buffer0``... by its module's names."""
    from gnorm.nn.stacked import Stacked
    return {f'{path}.{stacked}': f'{path}.{alone}'
            for path, module in model.named_modules()
            if isinstance(module, Stacked)
            for stacked, alone in module.state_names().items()}


def node_run_state(model: torch.nn.Module, state: Dict[str, torch.Tensor],
                   run: int) -> Dict[str, torch.Tensor]:
    r"""Run :obj:`run`'s part of :obj:`state` (the state dict of the node
    model :obj:`model`, or a copy of it), copied to the CPU and named as
    the model of that run alone names it."""
    if model.runs is None:
        return {k: v.detach().to('cpu', copy=True) for k, v in state.items()}
    names = _alone_names(model)
    return {names.get(k, k): v[run].detach().to('cpu', copy=True)
            for k, v in state.items()}


@torch.no_grad()
def load_node_run_state(model: torch.nn.Module,
                        state: Dict[str, torch.Tensor], run: int,
                        saved: Dict[str, torch.Tensor]) -> None:
    r"""Copies :obj:`saved` (a :func:`node_run_state`, of a model of any
    number of runs) into run :obj:`run` of :obj:`state` (the state dict
    of :obj:`model`, or a copy of it)."""
    names = {} if model.runs is None else _alone_names(model)
    for key, value in state.items():
        (value if model.runs is None else value[run]).copy_(
            saved[names.get(key, key)])


def save_node_checkpoints(checkpoints: List[Path], cfgs, epoch: int,
                          model: torch.nn.Module,
                          optimizer: torch.optim.Optimizer, loop: Any,
                          results: List[Dict[str, Any]],
                          generators: List[torch.Generator],
                          gradients: Any = None) -> None:
    r"""Writes into each run's checkpoint what
    :func:`restore_node_results` and :func:`restore_node_loop` need to
    continue it after :obj:`epoch` (its :obj:`results` hold every epoch up
    to it), and records the epoch in its results (``checkpoint_epoch``:
    where a run stopped later resumes)."""
    rng, world = _rng_state(), world_size()
    weights, moments = model.state_dict(), optimizer.state_dict()
    for run, (checkpoint, cfg, res, generator) in enumerate(zip(
            checkpoints, cfgs, results, generators)):
        _save(checkpoint, {
            'epoch': epoch, 'config': OmegaConf.to_container(cfg,
                                                             resolve=True),
            'source': res.get('source'), 'world_size': world,
            'model': node_run_state(model, weights, run),
            'optimizer': _run_optimizer_state(moments, run, model.runs),
            'best_state': node_run_state(model, loop.best_state, run),
            'best': loop.best[run].cpu(),
            'best_epoch': int(loop.best_epoch[run]),
            'alive': bool(loop.alive[run]),
            'results': {k: res[k] for k in NODE_RESULTS if k in res},
            'rng': rng, 'dropout_generator': generator.get_state(),
            'gradients': None if gradients is None else [
                (step, found[..., run].cpu())
                for step, found in gradients.steps]})
        res['checkpoint_epoch'] = epoch



def load_node_checkpoints(cfgs, checkpoints: List[Path],
                          device: torch.device
                          ) -> List[Optional[Dict[str, Any]]]:
    r"""Each node run's checkpoint (:func:`read_checkpoint`; :obj:`None`
    for every run when the runs do not ask to resume)."""
    if not cfgs[0].get('resume', False):
        return [None] * len(cfgs)
    return [read_checkpoint(cfg, checkpoint, device, world_size())
            for cfg, checkpoint in zip(cfgs, checkpoints)]


def resume_groups(states: List[Optional[Dict[str, Any]]]) -> List[List[int]]:
    r"""The runs (indices of :obj:`states`) that train together: those
    whose checkpoints are of one epoch (no checkpoint: epoch 0), in the
    order of their first run."""
    groups: Dict[int, List[int]] = {}
    for i, state in enumerate(states):
        groups.setdefault(0 if state is None else state['epoch'],
                          []).append(i)
    return list(groups.values())


def restore_node_results(states: List[Optional[Dict[str, Any]]],
                         results: List[Dict[str, Any]]) -> None:
    r"""Each run's :obj:`results` as its checkpoint left them (its curve,
    best epoch and metrics, a failure), and the epoch it resumes from
    (``resumed_from_epoch``)."""
    for state, res in zip(states, results):
        if state is not None:
            res.update(state['results'], resumed_from_epoch=state['epoch'],
                       checkpoint_epoch=state['epoch'])


def restore_node_loop(states: List[Dict[str, Any]], model: torch.nn.Module,
                      optimizer: torch.optim.Optimizer, loop: Any,
                      generators: List[torch.Generator],
                      gradients: Any = None) -> int:
    r"""Loads the runs' checkpoint :obj:`states` (one epoch) into
    :obj:`model`, :obj:`optimizer`, :obj:`loop`, the dropout
    :obj:`generators` and the gradient records, and restores torch's
    random streams; returns the epoch to start from."""
    weights = model.state_dict()
    for run, (state, generator) in enumerate(zip(states, generators)):
        load_node_run_state(model, weights, run, state['model'])
        load_node_run_state(model, loop.best_state, run, state['best_state'])
        loop.best[run] = state['best']
        loop.best_epoch[run] = state['best_epoch']
        loop.alive[run] = state['alive']
        generator.set_state(state['dropout_generator'].cpu())
    moments = [s['optimizer'] for s in states]
    saved = moments[0] if model.runs is None else \
        _stacked_optimizer_state(moments)
    optimizer.load_state_dict({  # the groups' options of this device
        'state': saved['state'],
        'param_groups': optimizer.state_dict()['param_groups']})
    if gradients is not None:
        device = loop.best.device
        gradients.steps = [
            (step, torch.stack([s['gradients'][k][1] for s in states],
                               dim=-1).to(device))
            for k, (step, _) in enumerate(states[0]['gradients'] or [])]
    _set_rng_state(states[0]['rng'])
    return states[0]['epoch'] + 1
