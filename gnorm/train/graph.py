r"""Graph-level training: mini-batches of molecules through a Graphormer
(the task of ``dataset=molhiv|zinc``).

AdamW with linear warmup then linear (or polynomial) decay, gradient
clipping, bf16 autocast with ``train.precision=bf16`` (on every device, so
that a CPU run tests the arithmetic of a GPU run), evaluation every
``train.eval_every`` epochs, the test metric at the best-validation epoch.
Every
``train.checkpoint_every`` epochs ``checkpoint.pt`` is written into the run
folder; with ``resume=true`` an interrupted run continues from it and gives
the curve the uninterrupted run would have given. Each epoch appends a row
(loss, learning rate, metrics, time) to ``metrics.csv`` in the run folder,
and, with ``train.tensorboard=true``, to TensorBoard event files in its
``tensorboard/`` folder. A log line every ``train.log_steps`` updates shows
that a long epoch moves, wherever the output goes. The training losses add
up on the device: the host reads them (one synchronisation) only for those
lines and at the end of each epoch, and checks them there: a NaN or
infinite loss stops the run (:class:`~gnorm.errors.TrainingError`) at the
end of the log interval in which it occurred, not at its update.

Multi-GPU data parallel runs under ``torchrun`` (one process per GPU,
:class:`~torch.nn.parallel.DistributedDataParallel`, ``train.batch_size``
graphs per process)::

    torchrun --standalone --nproc_per_node=4 -m gnorm.train \
        experiment=zinc_graphormer_slim hydra.run.dir=outputs/zinc_slim_ddp

Every process takes the same number of batches per epoch (the samplers
repeat a few graphs, or with ``train.bucket_chunk`` a few batches, to fill
the last round), so that they step together. The training loss is summed
over the processes when the host reads it, and every process checks that
sum: a NaN on one process stops all of them with the same error.

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in.
"""
import contextlib
import copy
import inspect
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gnorm.data.molecules import (GRAPH_DATASETS, import_ogb,
                                   load_graph_dataset)
from gnorm.errors import ConfigError, TrainingError
from gnorm.models import DeepGCN, Graphormer
from gnorm.models.token_layout import layout_of
from gnorm.train.common import is_int, one_line, option, result_config
from gnorm.train.epoch_log import CURVE, EpochLog
from gnorm.train.graph_batches import Loaders, build_loaders
from gnorm.train.progress import Progress, shown

log = logging.getLogger(__name__)

PRECISIONS = ('bf16', 'fp32')
CHECKPOINT = 'checkpoint.pt'
_DATASET_META = ('name', 'default_split', 'task')
_REFUSED_NORMS = ('gnorm.nn.PairNorm', 'gnorm.nn.IsoBN')
# Norms that read a value of the batch on the host (no fullgraph compile).
_HOST_NORMS = ('gnorm.nn.ContraNorm', 'gnorm.nn.DualContraNorm')


def check_config(cfg: DictConfig) -> None:
    r"""Raises :class:`ConfigError` with a one-line fix for bad values of
    the graph-level keys."""
    name = cfg.dataset.name
    if name not in GRAPH_DATASETS:
        raise ConfigError(f"unknown graph dataset {name!r}; pass dataset= "
                          f"one of {', '.join(GRAPH_DATASETS)}")
    target = cfg.model.get('_target_')
    if target != 'gnorm.models.Graphormer':
        raise ConfigError(f"dataset={name} is a graph-level task; pass "
                          f"model=graphormer (got "
                          f"{option('model', cfg.model)})")
    allowed = set(inspect.signature(Graphormer).parameters) | {'_target_'}
    gcn_only = set(inspect.signature(DeepGCN).parameters) - allowed
    for key in cfg.model:
        if key not in allowed:
            hint = ' (an option of model=gcn)' if key in gcn_only else ''
            raise ConfigError(f"model=graphormer takes no option "
                              f"model.{key}{hint}; remove it")
    if cfg.norm.get('_target_') in _REFUSED_NORMS:
        raise ConfigError(f"model=graphormer cannot use "
                          f"{option('norm', cfg.norm)} (not a per-token "
                          f"normaliser); pass norm=none, layernorm, sepnorm, "
                          f"contranorm or contranorm_d")
    if not is_int(cfg.model.max_dist) or cfg.model.max_dist < 1:
        raise ConfigError(f"model.max_dist must be an integer >= 1, got "
                          f"{cfg.model.max_dist!r}; pass e.g. "
                          f"model.max_dist=5")
    limit = cfg.dataset.get('limit')
    if limit is not None and (not is_int(limit) or limit < 1):
        raise ConfigError(f"dataset.limit must be an integer >= 1 or null, "
                          f"got {limit!r}; pass e.g. dataset.limit=64")
    if GRAPH_DATASETS[name][0] == 'ogb':
        import_ogb('ogb.graphproppred')  # names the [graph] extra if missing
    if cfg.split != cfg.dataset.default_split:
        raise ConfigError(f"dataset={name} has only its official split; "
                          f"pass split={cfg.dataset.default_split}")
    t = cfg.train
    for key in ('batch_size', 'eval_every', 'checkpoint_every'):
        if not is_int(t[key]) or t[key] < 1:
            raise ConfigError(f"train.{key} must be an integer >= 1, got "
                              f"{t[key]!r}")
    for key in ('warmup_steps', 'num_workers', 'log_steps', 'bucket_chunk'):
        if not is_int(t[key]) or t[key] < 0:
            raise ConfigError(f"train.{key} must be an integer >= 0, got "
                              f"{t[key]!r}")
    for key in ('end_lr', 'grad_clip', 'decay_power'):
        if not isinstance(t[key], (int, float)) or t[key] < 0:
            raise ConfigError(f"train.{key} must be a number >= 0, got "
                              f"{t[key]!r}")
    if not isinstance(t.tensorboard, bool):
        raise ConfigError(f"train.tensorboard must be true or false, got "
                          f"{t.tensorboard!r}")
    if t.precision not in PRECISIONS:
        raise ConfigError(f"unknown train.precision={t.precision!r}; pass "
                          f"bf16 or fp32")
    if not isinstance(t.get('compile', False), bool):
        raise ConfigError(f"train.compile must be true or false, got "
                          f"{t.compile!r}")
    if t.get('compile', False) and cfg.norm.get('_target_') in _HOST_NORMS:
        raise ConfigError(f"train.compile=true compiles the Graphormer in one "
                          f"graph, which {option('norm', cfg.norm)} cannot "
                          f"join (it reads the largest graph's size on the "
                          f"host); pass train.compile=false or norm=layernorm"
                          f" or sepnorm")
    build_model(cfg)  # bad model or norm options, before the data loads


def build_model(cfg: DictConfig) -> torch.nn.Module:
    r"""Instantiates :obj:`cfg.model` for :obj:`cfg.dataset` with the norm
    of :obj:`cfg.norm` (instantiated partially, the model passes the
    width)."""
    features, out_channels = GRAPH_DATASETS[cfg.dataset.name][:2]
    try:
        norm = instantiate(cfg.norm, _partial_=True)
        return instantiate(cfg.model, out_channels=out_channels,
                           features=features, norm=norm)
    except (InstantiationException, ValueError, TypeError, ImportError) as e:
        raise ConfigError(f"cannot build the model: {one_line(e)}") from None


def lr_factor(step: int, warmup: int, total: int, end: float,
              power: float) -> float:
    r"""Learning rate of update :obj:`step` (0-based) over the peak: linear
    warmup over :obj:`warmup` updates, then a polynomial decay of power
    :obj:`power` (1: linear) to :obj:`end` at update :obj:`total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return end + (1.0 - end) * (1.0 - progress) ** power


def _loss(out: torch.Tensor, y: torch.Tensor, metric: str) -> torch.Tensor:
    out, y = out.float(), y.view(out.shape).float()
    if metric == 'mae':
        return F.l1_loss(out, y)
    # OGB marks missing labels with NaN: the mean over the labelled ones,
    # by weights rather than by indexing (no read of the mask by the host).
    labelled = y == y
    losses = F.binary_cross_entropy_with_logits(
        out, torch.where(labelled, y, 0.0), reduction='none')
    return torch.where(labelled, losses, 0.0).sum() / labelled.sum()


def forward(model: torch.nn.Module, batch) -> torch.Tensor:
    r"""Predictions of :obj:`model` for a PyG mini-batch (with the token
    layout the loaders add to it, when it has one)."""
    return model(batch.x, batch.edge_index, batch.edge_attr, batch.spd,
                 batch.path_edge, batch.batch, batch.num_graphs,
                 layout=layout_of(batch))


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, metric: str,
             device: torch.device, autocast: bool) -> Tuple[float, float]:
    r"""The metric (``rocauc`` from :class:`ogb.graphproppred.Evaluator`,
    or ``mae``) and the mean loss of :obj:`model` on :obj:`loader`, in
    evaluation mode."""
    model.eval()
    preds, ys = [], []
    for batch in loader:
        batch = batch.to(device)
        with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            preds.append(forward(model, batch).float())
        ys.append(batch.y.view(preds[-1].shape).float())
    pred, y = torch.cat(preds), torch.cat(ys)
    loss = float(_loss(pred, y, metric))
    if metric == 'mae':
        return float((pred - y).abs().mean()), loss
    evaluator = import_ogb('ogb.graphproppred').Evaluator
    score = evaluator('ogbg-molhiv').eval({'y_true': y.cpu().numpy(),
                                           'y_pred': pred.cpu().numpy()})
    return float(score['rocauc']), loss


@contextlib.contextmanager
def _process_group(device: torch.device):
    r"""Rank, world size and device of this process: under ``torchrun``
    (``WORLD_SIZE`` > 1) joins the process group for the duration (one
    the caller made stays), one GPU per process."""
    world = int(os.environ.get('WORLD_SIZE', 1))
    if world == 1:
        yield 0, 1, device
        return
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group('nccl' if device.type == 'cuda' else 'gloo')
    try:
        if device.type == 'cuda':
            device = torch.device('cuda',
                                  int(os.environ.get('LOCAL_RANK', 0)))
            torch.cuda.set_device(device)
        yield dist.get_rank(), world, device
    finally:
        if joined:
            dist.destroy_process_group()


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


def summary(results: Dict[str, Any], cfg: DictConfig) -> str:
    r"""The one line printed at the end of a run."""
    norm = results.get('choices', {}).get(
        'norm', str(cfg.norm._target_).rsplit('.', 1)[-1])
    metric = results['metric']
    return ' | '.join([
        f"{cfg.dataset.name} graphormer L={cfg.model.num_layers} {norm} "
        f"seed={cfg.seed}",
        f"epoch {results['selected_epoch']} ({cfg.select})",
        f"{metric} val {shown(metric, results['val_metric'])} test "
        f"{shown(metric, results['test_metric'])}",
        f"{results['runtime_s']:.1f}s {results['device']}",
        str(results['path'])])


def batch_key(cfg: DictConfig) -> None:
    r"""Graph-level runs train one by one (:obj:`None`: no batch)."""
    return None


def max_runs(cfgs, device: torch.device) -> int:
    r"""Graph-level runs train one by one."""
    return 1


def run(cfgs, device: torch.device, results: List[Dict[str, Any]],
        paths: List[Path]) -> List[Dict[str, Any]]:
    r""":func:`run_one` for the one run of :obj:`cfgs`."""
    (cfg, ), (res, ), (path, ) = cfgs, results, paths
    return [run_one(cfg, device, res, path)]


def run_one(cfg: DictConfig, device: torch.device, results: Dict[str, Any],
            path: Path) -> Dict[str, Any]:
    r"""Loads the dataset, trains :obj:`cfg.model` on it and returns
    :obj:`results` completed with the val/test metric of the selected epoch
    and the per-epoch curve. Raises :class:`TrainingError` if the loss
    stops being finite (:func:`gnorm.train.train` records the failure)."""
    with _process_group(device) as (rank, world, device):
        checkpoint = path.parent / CHECKPOINT
        state = load_checkpoint(cfg, checkpoint, device)
        splits = load_splits(cfg)
        model = build_model(cfg).to(device)
        describe(results, cfg, splits, model, world)
        loaders = build_loaders(splits, cfg.train, cfg.seed, rank, world,
                                device, cfg.model.max_dist)
        training = build_training(cfg, model, device, rank, world,
                                  len(loaders.train))
        results.update(curve={k: [] for k in CURVE}, best_epoch=0,
                       best=None)
        best_state, start = None, 1
        if state is not None:
            best_state, start = restore(state, training, results)
            log.info('resumed from %s at epoch %d', checkpoint,
                     state['epoch'])
        best_state = fit(cfg, training, loaders, results, best_state, start,
                         checkpoint)
        select(cfg, training, loaders, results, best_state)
        return results


def load_checkpoint(cfg: DictConfig, checkpoint: Path,
                    device: torch.device) -> Optional[Dict[str, Any]]:
    r"""The state saved in :obj:`checkpoint` when :obj:`cfg` asks to resume
    and the file exists (:obj:`None` otherwise); refuses the checkpoint of
    another config."""
    if not cfg.get('resume', False) or not checkpoint.is_file():
        return None
    state = torch.load(checkpoint, map_location=device, weights_only=False)
    asked = result_config(OmegaConf.to_container(cfg, resolve=True))
    if result_config(state['config']) != asked:
        raise ConfigError(f"{checkpoint} belongs to another config; pass "
                          f"resume=false or another output folder")
    return state


def load_splits(cfg: DictConfig) -> Dict[str, Any]:
    r"""The ``train``, ``valid`` and ``test`` graphs of :obj:`cfg.dataset`."""
    options = {k: v for k, v in OmegaConf.to_container(
        cfg.dataset, resolve=True).items() if k not in _DATASET_META}
    return load_graph_dataset(cfg.dataset.name, cfg.data.root,
                              cfg.data.mirror, **options)


def describe(results: Dict[str, Any], cfg: DictConfig,
             splits: Dict[str, Any], model: torch.nn.Module,
             world: int) -> None:
    r"""Logs the data and the model and records them in :obj:`results`."""
    name = cfg.dataset.name
    if cfg.norm._target_.endswith('Identity'):
        log.warning('norm=none: the Graphormer runs without normalisation')
    log.info('%s: %s graphs; model %s on %s', name,
             '/'.join(str(len(s)) for s in splits.values()), model,
             next(model.parameters()).device)
    results.update({
        'dataset': {'name': name, 'split': cfg.split, 'split_sizes': [
            len(splits[k]) for k in ('train', 'valid', 'test')]},
        'model': str(model), 'metric': GRAPH_DATASETS[name][2],
        'world_size': world,
        'num_parameters': sum(p.numel() for p in model.parameters()),
    })


@dataclass
class Training:
    r"""What an update needs: the :obj:`model` (its weights are saved and
    evaluated), the module :obj:`trained` the updates call (the model, or
    its :class:`~torch.nn.parallel.DistributedDataParallel` wrapper; with
    ``train.compile`` that module through :func:`torch.compile` with
    ``fullgraph=True`` and symbolic sizes, so batches of other sizes reuse
    the compiled graph), the optimizer and learning-rate schedule, the
    device, whether updates run under bf16 :obj:`autocast`, the
    :obj:`metric` (which picks the loss), the gradient clipping norm
    (:obj:`0`: none), and this process's :obj:`rank` of the :obj:`world`
    data-parallel processes."""
    model: torch.nn.Module
    trained: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    device: torch.device
    autocast: bool
    metric: str
    grad_clip: float
    rank: int = 0
    world: int = 1

    def step(self, batch) -> torch.Tensor:
        r"""One update on :obj:`batch` (on the device); returns its loss."""
        with torch.autocast(self.device.type, torch.bfloat16,
                            enabled=self.autocast):
            loss = _loss(forward(self.trained, batch), batch.y, self.metric)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                           self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()

    def lr(self) -> float:
        r"""The learning rate of the next update."""
        return self.optimizer.param_groups[0]['lr']


def data_parallel(model: torch.nn.Module, device: torch.device,
                  world: int) -> torch.nn.Module:
    r""":obj:`model` wrapped for data-parallel training over :obj:`world`
    processes (itself when :obj:`world` is 1)."""
    if world == 1:
        return model
    if device.type == 'cuda':
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device] if device.type == 'cuda' else None)


def build_training(cfg: DictConfig, model: torch.nn.Module,
                   device: torch.device, rank: int, world: int,
                   steps: int) -> Training:
    r"""AdamW on :obj:`model` with the schedule of :func:`lr_factor` over
    ``train.epochs`` epochs of :obj:`steps` updates."""
    t = cfg.train
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.lr,
                                  weight_decay=t.weight_decay)
    total = t.epochs * steps
    end = t.end_lr / t.lr if t.lr else 0.0
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, t.warmup_steps, total, end,
                                          t.decay_power))
    trained = data_parallel(model, device, world)
    if t.get('compile', False):
        trained = torch.compile(trained, fullgraph=True, dynamic=True)
    return Training(model, trained, optimizer, scheduler, device,
                    t.precision == 'bf16', GRAPH_DATASETS[cfg.dataset.name][2],
                    t.grad_clip, rank, world)


def restore(state: Dict[str, Any], training: Training,
            results: Dict[str, Any]) -> Tuple[Any, int]:
    r"""Loads the checkpoint :obj:`state` into :obj:`training` and
    :obj:`results` (curve, best epoch) and restores the random streams;
    returns the best weights so far and the epoch to start from."""
    training.model.load_state_dict(state['model'])
    training.optimizer.load_state_dict(state['optimizer'])
    training.scheduler.load_state_dict(state['scheduler'])
    results['curve'].update(state['curve'])
    results.update(best_epoch=state['best_epoch'], best=state['best'],
                   resumed_from_epoch=state['epoch'])
    _set_rng_state(state['rng'])
    return state['best_state'], state['epoch'] + 1


def save_checkpoint(checkpoint: Path, cfg: DictConfig, training: Training,
                    results: Dict[str, Any], best_state: Any,
                    epoch: int) -> None:
    r"""Writes what :func:`restore` needs to continue after :obj:`epoch`."""
    _save(checkpoint, {
        'epoch': epoch, 'config': OmegaConf.to_container(cfg, resolve=True),
        'model': training.model.state_dict(),
        'optimizer': training.optimizer.state_dict(),
        'scheduler': training.scheduler.state_dict(),
        'best_state': best_state, 'best_epoch': results['best_epoch'],
        'best': results['best'], 'curve': results['curve'],
        'rng': _rng_state()})


def _loss_sum(training: Training, total: torch.Tensor,
              count: int) -> Tuple[float, int]:
    r"""The loss sum :obj:`total` (on the device) and graph count
    :obj:`count` of this process, summed over every process: one read by
    the host. A non-finite loss on any process makes the sum non-finite on
    every process."""
    if training.world == 1:
        return total.item(), count
    both = torch.stack([total, total.new_tensor(count)])
    dist.all_reduce(both)
    total, count = both.tolist()
    return total, int(count)


def train_epoch(training: Training, batches, epoch: int,
                t: DictConfig) -> float:
    r"""One epoch of updates on :obj:`batches`; returns the mean training
    loss per graph (over every process). The losses add up on the device:
    the host reads their sum (and checks that it is finite) only every
    ``train.log_steps`` updates, when rank 0 logs a line, and at the end of
    the epoch. Raises :class:`TrainingError` on every process at the first
    such read where the loss is not finite."""
    training.trained.train()
    begin = time.perf_counter()
    steps = len(batches)
    total = torch.zeros((), dtype=torch.float64, device=training.device)
    count = 0
    for step, batch in enumerate(batches, start=1):
        batch = batch.to(training.device,
                         non_blocking=training.device.type == 'cuda')
        total += training.step(batch).double() * batch.num_graphs
        count += batch.num_graphs
        if t.log_steps and step % t.log_steps == 0 and step < steps:
            _read_loss(training, total, count, (epoch, step, steps), t,
                       begin)
    return _read_loss(training, total, count, (epoch, steps, steps), t,
                      begin)


def _read_loss(training: Training, total: torch.Tensor, count: int,
               where: Tuple[int, int, int], t: DictConfig,
               begin: float) -> float:
    r"""The mean loss per graph of the epoch so far (:obj:`where`: epoch,
    update, updates in the epoch), read by the host; checked on every
    process, logged by rank 0 every ``train.log_steps`` updates."""
    epoch, step, steps = where
    loss, graphs = _loss_sum(training, total, count)
    mean = loss / graphs
    if not math.isfinite(mean):
        raise TrainingError(f"the training loss became {mean} at epoch "
                            f"{epoch} (seen at update {step}/{steps}); "
                            f"lower train.lr or change the norm")
    if training.rank == 0 and t.log_steps and step % t.log_steps == 0:
        log.info('train epoch %d/%d step %d/%d | loss %.4f | lr %.3g | %.0f '
                 'graphs/s', epoch, t.epochs, step, steps, mean,
                 training.lr(), graphs / (time.perf_counter() - begin))
    return mean


def evaluate_splits(training: Training,
                    loaders: Loaders) -> Dict[str, float]:
    r"""The validation metric and loss and the test metric (keys of
    :obj:`CURVE`)."""
    args = (training.metric, training.device, training.autocast)
    val_metric, val_loss = evaluate(training.model, loaders.valid, *args)
    test_metric, _ = evaluate(training.model, loaders.test, *args)
    return {'val_metric': val_metric, 'val_loss': val_loss,
            'test_metric': test_metric}


def _improves(row: Dict[str, float], best: Optional[Dict[str, float]],
              higher_better: bool) -> bool:
    sign = 1.0 if higher_better else -1.0
    return best is None or sign * row['val_metric'] > \
        sign * best['val_metric']


def fit(cfg: DictConfig, training: Training, loaders: Loaders,
        results: Dict[str, Any], best_state: Any, start: int,
        checkpoint: Path) -> Any:
    r"""Epochs :obj:`start` to ``train.epochs``: trains, evaluates every
    ``train.eval_every`` epochs (keeping the best-validation weights, which
    it returns, and epoch in :obj:`results`), records each epoch's row in
    the curve, ``metrics.csv`` and the progress, and writes the
    checkpoint."""
    t, curve = cfg.train, results['curve']
    higher_better = GRAPH_DATASETS[cfg.dataset.name][3]
    rank = training.rank
    epoch_log = EpochLog(checkpoint.parent, curve, training.metric,
                         t.tensorboard) if rank == 0 else None
    with Progress(t.epochs, every=t.log_every,
                  bar=t.progress and rank == 0) as progress:
        if start > 1:
            progress.update(start - 1)
        for epoch in range(start, t.epochs + 1):
            begin = time.perf_counter()
            loaders.sampler.set_epoch(epoch)
            row = {'epoch': epoch, 'loss': train_epoch(
                training, loaders.train, epoch, t),
                'val_metric': math.nan, 'val_loss': math.nan,
                'test_metric': math.nan, 'lr': training.lr()}
            if epoch % t.eval_every == 0 or epoch == t.epochs:
                row.update(evaluate_splits(training, loaders))
                if _improves(row, results['best'], higher_better):
                    best_state = copy.deepcopy(training.model.state_dict())
                    results.update(best_epoch=epoch, best={
                        k: row[k] for k in ('val_metric', 'val_loss',
                                            'test_metric')})
            row['time_s'] = time.perf_counter() - begin
            for key, column in curve.items():
                column.append(row[key])
            if epoch_log is not None:
                epoch_log.add(row)
            if rank == 0 and (epoch % t.checkpoint_every == 0
                              or epoch == t.epochs):
                save_checkpoint(checkpoint, cfg, training, results,
                                best_state, epoch)
            progress.update(epoch, loss=row['loss'], **{
                f'val_{training.metric}': row['val_metric'],
                f'test_{training.metric}': row['test_metric']})
    if epoch_log is not None:
        epoch_log.close()
    return best_state


def select(cfg: DictConfig, training: Training, loaders: Loaders,
           results: Dict[str, Any], best_state: Any) -> None:
    r"""Evaluates the weights ``select`` asks for (the best-validation
    ones, or the last) and records their metrics in :obj:`results`."""
    if cfg.select == 'best_val':
        training.model.load_state_dict(best_state)
        selected = results['best_epoch']
    else:
        selected = cfg.train.epochs
    args = (training.metric, training.device, training.autocast)
    val_metric, val_loss = evaluate(training.model, loaders.valid, *args)
    test_metric, test_loss = evaluate(training.model, loaders.test, *args)
    results.update(status='ok', select=cfg.select, selected_epoch=selected,
                   val_metric=val_metric, val_loss=val_loss,
                   test_metric=test_metric, test_loss=test_loss)
