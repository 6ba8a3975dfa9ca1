r"""Graph-level training: mini-batches of molecules through a Graphormer
(the task of ``dataset=molhiv|zinc``).

AdamW with linear warmup then linear (or polynomial) decay, gradient
clipping, bf16 autocast with ``train.precision=bf16`` (on every device, so
that a CPU run tests the arithmetic of a GPU run), evaluation every
``train.eval_every`` epochs, the test metric at the best-validation epoch.
Every
``train.checkpoint_every`` epochs ``checkpoint.pt`` is written into the run
folder; with ``resume=true`` an interrupted run continues from it and gives
the curve the uninterrupted run would have given
(:mod:`gnorm.train.checkpoints`). The config checks and the model are in
:mod:`gnorm.train.graph_config`. Each epoch appends a row
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

With ``train.data_seed`` every seed of a sweep sees the same batches and
draws its dropout masks from a generator of its own, and the seeds train as
one :class:`~gnorm.models.StackedGraphormer` (:func:`batch_key`); each
run's curve, checkpoint and ``results.json`` are those it gives alone.

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in.
"""
import contextlib
import copy
import importlib
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from gnorm.data.molecules import (GRAPH_DATASETS, import_ogb,
                                   load_graph_dataset)
from gnorm.errors import TrainingError
from gnorm.models import StackedGraphormer
from gnorm.models.stacked_graphormer import STACKED_NORMS
from gnorm.models.token_layout import layout_of
from gnorm.results.keys import batch_key as runs_key, world_size
from gnorm.train.checkpoints import (CHECKPOINT, load_checkpoints, restore,
                                     save_checkpoints)
from gnorm.train.common import run_name
from gnorm.train.graph_config import (  # noqa: F401 (check_config: the task's)
    build_model, check_config, min_batch_graphs)
import gnorm.train.collapse as collapse
from gnorm.train.epoch_log import CURVE, EpochLog
from gnorm.train.graph_batches import LayoutCollater, Loaders, build_loaders
from gnorm.train.progress import Progress, on_one_line, in_reading

log = logging.getLogger(__name__)

_DATASET_META = ('name', 'default_split', 'task')
# The keys each run of a StackedGraphormer has its own value of (batch_key).
STACKED_KEYS = ('seed', 'tag')
# The SeedSequence key of the dropout generators (train.data_seed).
_DROPOUT_KEY = 1
# collapse_metrics=true: the per-layer metrics of the selected weights on
# the first this many validation graphs (in the dataset's order), one batch.
COLLAPSE_GRAPHS = 256


def lr_factor(step: int, warmup: int, total: int, end: float,
              power: float) -> float:
    r"""Learning rate of update :obj:`step` (0-based) over the peak: linear
    warmup over :obj:`warmup` updates, then a polynomial decay of power
    :obj:`power` (1: linear) to :obj:`end` at update :obj:`total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return end + (1.0 - end) * (1.0 - progress) ** power


def batch_loss(out: torch.Tensor, y: torch.Tensor,
               metric: str) -> torch.Tensor:
    r"""The training loss of one model's predictions :obj:`out`
    :obj:`[B, o]` on a batch: the mean absolute error (``mae``), or the
    binary cross-entropy over the labelled entries of :obj:`y`."""
    out, y = out.float(), y.view(out.shape).float()
    if metric == 'mae':
        return F.l1_loss(out, y)
    # OGB marks missing labels with NaN: the mean over the labelled ones,
    # by weights rather than by indexing (no read of the mask by the host).
    labelled = y == y
    losses = F.binary_cross_entropy_with_logits(
        out, torch.where(labelled, y, 0.0), reduction='none')
    return torch.where(labelled, losses, 0.0).sum() / labelled.sum()


def run_losses(out: torch.Tensor, y: torch.Tensor,
               metric: str) -> torch.Tensor:
    r"""The loss of each run, :obj:`[R]`, from the predictions :obj:`out`
    of one model :obj:`[B, o]` (:obj:`R = 1`) or of the runs of a
    :class:`~gnorm.models.StackedGraphormer` :obj:`[R, B, o]`."""
    if out.dim() == 2:
        return batch_loss(out, y, metric).unsqueeze(0)
    return torch.stack([batch_loss(run, y, metric) for run in out])


def forward(model: torch.nn.Module, batch) -> torch.Tensor:
    r"""Predictions of :obj:`model` for a PyG mini-batch (with the token
    layout the loaders add to it, when it has one)."""
    return model(batch.x, batch.edge_index, batch.edge_attr, batch.spd,
                 batch.path_edge, batch.batch, batch.num_graphs,
                 layout=layout_of(batch))


def _score(pred: torch.Tensor, y: torch.Tensor,
           metric: str) -> Tuple[float, float]:
    r"""The metric and the mean loss of the predictions :obj:`pred`."""
    loss = float(batch_loss(pred, y, metric))
    if metric == 'mae':
        return float((pred - y).abs().mean()), loss
    evaluator = import_ogb('ogb.graphproppred').Evaluator
    score = evaluator('ogbg-molhiv').eval({'y_true': y.cpu().numpy(),
                                           'y_pred': pred.cpu().numpy()})
    return float(score['rocauc']), loss


@torch.no_grad()
def evaluate_runs(model: torch.nn.Module, loader, metric: str,
                  device: torch.device,
                  autocast: bool) -> List[Tuple[float, float]]:
    r"""For each run of :obj:`model` (one, or those of a
    :class:`~gnorm.models.StackedGraphormer`), the metric (``rocauc`` from
    :class:`ogb.graphproppred.Evaluator`, or ``mae``) and the mean loss on
    :obj:`loader`, in evaluation mode."""
    model.eval()
    preds, ys = [], []
    for batch in loader:
        batch = batch.to(device)
        with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            out = forward(model, batch).float()
        preds.append(out if out.dim() == 3 else out.unsqueeze(0))
        ys.append(batch.y.view(preds[-1].shape[1:]).float())
    pred, y = torch.cat(preds, 1), torch.cat(ys)  # [R, graphs, o]
    return [_score(run, y, metric) for run in pred]


def evaluate(model: torch.nn.Module, loader, metric: str,
             device: torch.device, autocast: bool) -> Tuple[float, float]:
    r"""The metric and the mean loss of one model on :obj:`loader` (see
    :func:`evaluate_runs`)."""
    (score, ) = evaluate_runs(model, loader, metric, device, autocast)
    return score


@contextlib.contextmanager
def _process_group(device: torch.device):
    r"""Rank, world size and device of this process: under ``torchrun``
    (``WORLD_SIZE`` > 1) joins the process group for the duration (one
    the caller made stays), one GPU per process."""
    world = world_size()
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


def summary(results: Dict[str, Any], cfg: DictConfig) -> str:
    r"""The one line printed at the end of a run."""
    norm = results.get('names', {}).get('norm') or run_name(
        'norm', results.get('choices', {}).get('norm'), cfg.norm)
    metric = results['metric']
    return ' | '.join([
        f"{cfg.dataset.name} graphormer L={cfg.model.num_layers} {norm} "
        f"seed={cfg.seed}",
        f"epoch {results['selected_epoch']} ({cfg.select})",
        f"{metric} val {in_reading(metric, results['val_metric'])} test "
        f"{in_reading(metric, results['test_metric'])}",
        f"{results['runtime_s']:.1f}s {results['device']}",
        str(results['path'])])


def data_seed(cfg: DictConfig) -> int:
    r"""The seed of the order of the batches: ``train.data_seed``, else the
    run's seed."""
    seed = cfg.train.get('data_seed')
    return cfg.seed if seed is None else seed


def _stacks(target: Optional[str]) -> bool:
    r"""Whether the norm class :obj:`target` runs in a
    :class:`~gnorm.models.StackedGraphormer`."""
    module, _, name = (target or '').rpartition('.')
    try:
        norm = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False  # instantiating the norm then says what is wrong
    return isinstance(norm, type) and issubclass(norm, STACKED_NORMS)


def batch_key(cfg: DictConfig) -> Optional[str]:
    r"""Runs with the same key train as one model
    (:class:`~gnorm.models.StackedGraphormer`): with ``train.data_seed``
    set (every run sees the same batches), runs that differ only in seed,
    with LayerNorm, SepNorm or no norm at the norm sites, neither compiled
    nor under ``torchrun``. :obj:`None` for a run that trains alone."""
    t = cfg.train
    if t.get('data_seed') is None or t.get('compile', False) or \
            world_size() > 1 or not _stacks(cfg.norm.get('_target_')):
        return None
    return runs_key(OmegaConf.to_container(cfg, resolve=True), STACKED_KEYS)


def max_runs(cfgs, device: torch.device) -> int:
    r"""How many runs of :obj:`cfgs` train as one model: ``batch_runs``
    (``auto``: all of them)."""
    runs = cfgs[0].batch_runs
    return len(cfgs) if runs == 'auto' else runs


def run(cfgs, device: torch.device, results: List[Dict[str, Any]],
        paths: List[Path]) -> List[Dict[str, Any]]:
    r"""Loads the dataset, trains the runs :obj:`cfgs` (one, or several
    that :func:`batch_key` groups, as one
    :class:`~gnorm.models.StackedGraphormer`) on it and returns each run's
    :obj:`results` completed with the val/test metric of its selected epoch
    and its per-epoch curve (and, with ``collapse_metrics``, the per-layer
    collapse metrics of :func:`record_collapse`). Run :math:`r`'s weights come from its seed
    and, with ``train.data_seed``, its dropout masks from a generator of
    its own: its results do not depend on the runs it trains with. Raises
    :class:`TrainingError` if a run's loss stops being finite
    (:func:`gnorm.train.train` records the failure of every run of the
    model)."""
    cfg = cfgs[0]
    with _process_group(device) as (rank, world, device):
        checkpoints = [p.parent / CHECKPOINT for p in paths]
        states = load_checkpoints(cfgs, checkpoints, device, world)
        splits = load_splits(cfg)
        models = [init_model(c).to(device) for c in cfgs]
        for res, c, model in zip(results, cfgs, models):
            describe(res, c, splits, model, world)
        model = one_model(models, cfgs, device)
        loaders = build_loaders(splits, cfg.train, data_seed(cfg), rank,
                                world, device, cfg.model.max_dist,
                                min_batch_graphs(models[0]))
        training = build_training(cfg, model, device, rank, world,
                                  len(loaders.train),
                                  tuple(c.seed for c in cfgs))
        for res in results:
            res.update(curve={k: [] for k in CURVE}, best_epoch=0,
                       best=None)
        best_states, start = [None] * len(cfgs), 1
        if states is not None:
            best_states, start = restore(states, training, results)
            log.info('resumed from %s at epoch %d',
                     ', '.join(map(str, checkpoints)), states[0]['epoch'])
        best_states = fit(cfgs, training, loaders, results, best_states,
                          start, checkpoints)
        select(cfgs, training, loaders, results, best_states)
        if cfg.collapse_metrics and rank == 0:
            record_collapse(cfgs, training, splits['valid'], results,
                            [p.parent for p in paths])
        return results


@torch.no_grad()
def record_collapse(cfgs, training: 'Training', graphs,
                    results: List[Dict[str, Any]],
                    folders: List[Path]) -> None:
    r"""The per-layer collapse metrics of each run's selected weights
    (:class:`~gnorm.monitor.CollapseMonitor` on every Graphormer layer's
    tokens, per graph, in float64; also the uniformity of each graph's
    node tokens) on the first :data:`COLLAPSE_GRAPHS`
    of :obj:`graphs` (the validation set), one forward pass in evaluation
    mode (bf16 autocast as evaluation runs): ``collapse`` in each run's
    :obj:`results` (the values averaged over the graphs, their count in
    ``graphs``) and ``collapse.csv`` in its folder. Training is done: the
    runs' results and random streams do not change."""
    count = min(COLLAPSE_GRAPHS, len(graphs))
    collate = LayoutCollater(graphs, cfgs[0].model.max_dist)
    batch = collate([graphs[i] for i in range(count)]).to(training.device)
    for run, (c, res, folder) in enumerate(zip(cfgs, results, folders)):
        model = training.model
        if isinstance(model, StackedGraphormer):  # run by run
            with torch.random.fork_rng(devices=[]):
                model = build_model(c).to(training.device)
            model.load_state_dict(training.run_state(run))
        model.eval()
        monitor = collapse.monitor(model, collapse.GRAPH_METRICS)
        with torch.autocast(training.device.type, torch.bfloat16,
                            enabled=training.autocast), \
                monitor.record(res['selected_epoch']):
            forward(model, batch)
        monitor.remove()
        res['collapse'] = collapse.collapse_field(monitor.records,
                                                  graphs=True)
        collapse.write_csv(folder, monitor.records)


def init_model(cfg: DictConfig) -> torch.nn.Module:
    r""":func:`build_model` with its weights drawn right after
    :func:`torch.manual_seed` of the run's seed (so they do not depend on
    the runs built before it)."""
    torch.manual_seed(cfg.seed)
    return build_model(cfg)


def dropout_seed(seed: int) -> int:
    r"""The seed of the dropout generator of the run of seed :obj:`seed`:
    derived from it by :class:`numpy.random.SeedSequence` with a key of
    its own, so that on the CPU its masks do not reuse the numbers that
    drew the run's initial weights (:func:`torch.manual_seed` of
    :obj:`seed`: the same generator and seed would give the same
    numbers), nor another seed's."""
    return int(np.random.SeedSequence(seed, spawn_key=(_DROPOUT_KEY, ))
               .generate_state(1, np.uint64)[0])


def one_model(models: List[torch.nn.Module], cfgs,
              device: torch.device) -> torch.nn.Module:
    r"""The model the updates train: the run's model, or with several runs
    their :class:`~gnorm.models.StackedGraphormer`. With
    ``train.data_seed`` each run's dropout masks come from a generator of
    its own, seeded with :func:`dropout_seed` of its seed."""
    if cfgs[0].train.get('data_seed') is None:
        (model, ) = models  # batch_key: runs without it train alone
        return model
    generators = [torch.Generator(device).manual_seed(dropout_seed(c.seed))
                  for c in cfgs]
    if len(models) == 1:
        models[0].dropout_generator = generators[0]
        return models[0]
    return StackedGraphormer(models, generators)


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
             '/'.join(str(len(s)) for s in splits.values()),
             on_one_line(model), next(model.parameters()).device)
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
    evaluated; one model or a :class:`~gnorm.models.StackedGraphormer` of
    several runs), the module :obj:`trained` the updates call (the model,
    or its :class:`~torch.nn.parallel.DistributedDataParallel` wrapper;
    with ``train.compile`` that module through :func:`torch.compile` with
    ``fullgraph=True`` and symbolic sizes, so batches of other sizes reuse
    the compiled graph), the optimizer and learning-rate schedule, the
    device, whether updates run under bf16 :obj:`autocast`, the
    :obj:`metric` (which picks the loss), the gradient clipping norm
    (:obj:`0`: none; each run's gradients on their own), this process's
    :obj:`rank` of the :obj:`world` data-parallel processes, and the seed
    of each run (for messages)."""
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
    seeds: Tuple[int, ...] = (0, )

    def step(self, batch) -> torch.Tensor:
        r"""One update on :obj:`batch` (on the device); returns each run's
        loss :obj:`[R]`. The runs' losses are summed, so each run's weights
        get its own loss's gradient."""
        with torch.autocast(self.device.type, torch.bfloat16,
                            enabled=self.autocast):
            losses = run_losses(forward(self.trained, batch), batch.y,
                                self.metric)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        if self.grad_clip > 0:
            if isinstance(self.model, StackedGraphormer):
                self.model.clip_grad_norm_(self.grad_clip)
            else:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                               self.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return losses.detach()

    def lr(self) -> float:
        r"""The learning rate of the next update."""
        return self.optimizer.param_groups[0]['lr']

    def run_state(self, run: int) -> Dict[str, torch.Tensor]:
        r"""A copy of the :class:`~gnorm.models.Graphormer` weights of run
        :obj:`run`."""
        if isinstance(self.model, StackedGraphormer):
            return self.model.run_state_dict(run)
        return copy.deepcopy(self.model.state_dict())

    def load_run_state(self, run: int, state: Dict[str, torch.Tensor]):
        r"""Loads :class:`~gnorm.models.Graphormer` weights into run
        :obj:`run`."""
        if isinstance(self.model, StackedGraphormer):
            self.model.load_run_state_dict(run, state)
        else:
            self.model.load_state_dict(state)


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
                   steps: int, seeds: Optional[Tuple[int, ...]] = None,
                   ) -> Training:
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
                    t.grad_clip, rank, world, seeds or (cfg.seed, ))


def _loss_sums(training: Training, total: torch.Tensor,
               count: int) -> Tuple[List[float], int]:
    r"""The loss sums :obj:`total` :obj:`[R]` (on the device) and graph
    count :obj:`count` of this process, summed over every process: one read
    by the host. A non-finite loss on any process makes the sum non-finite
    on every process."""
    if training.world == 1:
        return total.tolist(), count
    both = torch.cat([total, total.new_tensor([count])])
    dist.all_reduce(both)
    *total, count = both.tolist()
    return total, int(count)


def train_epoch(training: Training, batches, epoch: int,
                t: DictConfig) -> List[float]:
    r"""One epoch of updates on :obj:`batches`; returns each run's mean
    training loss per graph (over every process). The losses add up on the
    device: the host reads their sums (and checks that they are finite)
    only every ``train.log_steps`` updates, when rank 0 logs a line, and at
    the end of the epoch. Raises :class:`TrainingError` on every process at
    the first such read where a loss is not finite."""
    training.trained.train()
    begin = time.perf_counter()
    steps = len(batches)
    total = torch.zeros(len(training.seeds), dtype=torch.float64,
                        device=training.device)
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
               begin: float) -> List[float]:
    r"""Each run's mean loss per graph of the epoch so far (:obj:`where`:
    epoch, update, updates in the epoch), read by the host; checked on
    every process, logged by rank 0 every ``train.log_steps`` updates."""
    epoch, step, steps = where
    losses, graphs = _loss_sums(training, total, count)
    means = [loss / graphs for loss in losses]
    bad = [(seed, mean) for seed, mean in zip(training.seeds, means)
           if not math.isfinite(mean)]
    if bad:
        which = '' if len(means) == 1 else \
            f" of the run seed={bad[0][0]} (of {len(means)} trained as one " \
            f"model)"
        raise TrainingError(f"the training loss{which} became {bad[0][1]} "
                            f"at epoch {epoch} (seen at update "
                            f"{step}/{steps}); lower train.lr or change the "
                            f"norm")
    if training.rank == 0 and t.log_steps and step % t.log_steps == 0:
        log.info('train epoch %d/%d step %d/%d | loss %s | lr %.3g | %.0f '
                 'graphs/s', epoch, t.epochs, step, steps,
                 ' '.join(f'{mean:.4f}' for mean in means), training.lr(),
                 graphs / (time.perf_counter() - begin))
    return means


def evaluate_splits(training: Training,
                    loaders: Loaders) -> List[Dict[str, float]]:
    r"""For each run, the validation metric and loss and the test metric and
    loss of the model's current weights."""
    args = (training.metric, training.device, training.autocast)
    valid = evaluate_runs(training.model, loaders.valid, *args)
    test = evaluate_runs(training.model, loaders.test, *args)
    return [{'val_metric': val_metric, 'val_loss': val_loss,
             'test_metric': test_metric, 'test_loss': test_loss}
            for (val_metric, val_loss), (test_metric, test_loss)
            in zip(valid, test)]


def _improves(row: Dict[str, float], best: Optional[Dict[str, float]],
              higher_better: bool) -> bool:
    sign = 1.0 if higher_better else -1.0
    return best is None or sign * row['val_metric'] > \
        sign * best['val_metric']


def _evaluates(epoch: int, t: DictConfig) -> bool:
    return epoch % t.eval_every == 0 or epoch == t.epochs


def _epoch_rows(training: Training, loaders: Loaders, epoch: int,
                t: DictConfig) -> List[Dict[str, float]]:
    r"""Each run's row of epoch :obj:`epoch`: trains, and evaluates every
    ``train.eval_every`` epochs."""
    begin = time.perf_counter()
    loaders.sampler.set_epoch(epoch)
    rows = [{'epoch': epoch, 'loss': loss, 'val_metric': math.nan,
             'val_loss': math.nan, 'test_metric': math.nan}
            for loss in train_epoch(training, loaders.train, epoch, t)]
    lr = training.lr()
    if _evaluates(epoch, t):
        for row, metrics in zip(rows, evaluate_splits(training, loaders)):
            row.update(metrics)
    for row in rows:
        row.update(lr=lr, time_s=time.perf_counter() - begin)
    return rows


def fit(cfgs, training: Training, loaders: Loaders,
        results: List[Dict[str, Any]], best_states: List[Any], start: int,
        checkpoints: List[Path]) -> List[Any]:
    r"""Epochs :obj:`start` to ``train.epochs``: trains, evaluates every
    ``train.eval_every`` epochs (keeping each run's best-validation weights,
    which it returns, and epoch in its :obj:`results`), records each run's
    row of each epoch in its curve, ``metrics.csv`` and the progress (with
    several runs, the mean over the runs), and writes the checkpoints."""
    t = cfgs[0].train
    higher_better = GRAPH_DATASETS[cfgs[0].dataset.name][3]
    rank, runs = training.rank, len(cfgs)
    epoch_logs = [EpochLog(c.parent, res['curve'], training.metric,
                           t.tensorboard)
                  for c, res in zip(checkpoints, results)] if rank == 0 \
        else []
    desc = 'train' if runs == 1 else f'train (mean of {runs} runs)'
    with Progress(t.epochs, every=t.log_every, desc=desc,
                  bar=t.progress and rank == 0) as progress:
        if start > 1:
            progress.update(start - 1)
        for epoch in range(start, t.epochs + 1):
            rows = _epoch_rows(training, loaders, epoch, t)
            for run, (row, res) in enumerate(zip(rows, results)):
                if _evaluates(epoch, t) and _improves(row, res['best'],
                                                      higher_better):
                    best_states[run] = training.run_state(run)
                    res.update(best_epoch=epoch, best={
                        k: row[k] for k in ('val_metric', 'val_loss',
                                            'test_metric')})
                for key, column in res['curve'].items():
                    column.append(row[key])
            for epoch_log, row in zip(epoch_logs, rows):
                epoch_log.add(row)
            if rank == 0 and (epoch % t.checkpoint_every == 0
                              or epoch == t.epochs):
                save_checkpoints(checkpoints, cfgs, training, results,
                                 best_states, epoch)
            progress.update(epoch, **{
                name: sum(row[key] for row in rows) / runs
                for name, key in (('loss', 'loss'),
                                  (f'val_{training.metric}', 'val_metric'),
                                  (f'test_{training.metric}', 'test_metric'))})
    for epoch_log in epoch_logs:
        epoch_log.close()
    return best_states


def select(cfgs, training: Training, loaders: Loaders,
           results: List[Dict[str, Any]], best_states: List[Any]) -> None:
    r"""Evaluates each run's weights ``select`` asks for (the
    best-validation ones, or the last) and records their metrics in its
    :obj:`results`."""
    cfg = cfgs[0]
    if cfg.select == 'best_val':
        for run, state in enumerate(best_states):
            training.load_run_state(run, state)
    for res, metrics in zip(results, evaluate_splits(training, loaders)):
        selected = res['best_epoch'] if cfg.select == 'best_val' \
            else cfg.train.epochs
        res.update(status='ok', select=cfg.select, selected_epoch=selected,
                   **metrics)
