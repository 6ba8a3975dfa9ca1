r"""The checkpoints of graph-level runs (``checkpoint.pt`` in a run's
folder): what :func:`save_checkpoints` writes every
``train.checkpoint_every`` epochs, and what :func:`load_checkpoints` and
:func:`restore` read back with ``resume=true``, so that an interrupted
run continues with the curve the uninterrupted run would have given. A
run's checkpoint is the same whether it trained alone or in a
:class:`~gnorm.models.StackedGraphormer`; one saved by a run of another
identity (another config, another number of processes) is refused
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
from gnorm.results.keys import check_resume
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
    torch.set_rng_state(state['cpu'])
    if state['cuda'] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])


def _generators(model: torch.nn.Module) -> List[Optional[torch.Generator]]:
    r"""The dropout generator of each run of :obj:`model` (:obj:`None`:
    torch's)."""
    if isinstance(model, StackedGraphormer):
        return list(model.generators or [None] * model.runs)
    return [model.dropout_generator]


def load_checkpoints(cfgs, checkpoints: List[Path], device: torch.device,
                     world: int = 1) -> Optional[List[Dict[str, Any]]]:
    r"""The states saved in :obj:`checkpoints` (one per run) when the runs
    ask to resume and every run has one, from one epoch (:obj:`None` when
    none has one); refuses the checkpoint of another config, and runs that
    stopped at different epochs."""
    if not cfgs[0].get('resume', False):
        return None
    states = []
    for cfg, checkpoint in zip(cfgs, checkpoints):
        if not checkpoint.is_file():
            states.append(None)
            continue
        state = torch.load(checkpoint, map_location=device,
                           weights_only=False)
        config = OmegaConf.to_container(cfg, resolve=True)
        check_resume(state, config, world, checkpoint)
        changed = changed_user_code(state, config)
        if changed:  # the user's code changed: from the start
            print(retraining(state, changed, checkpoint), flush=True)
            state = None
        states.append(state)
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
