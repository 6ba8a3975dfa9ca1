r"""The training loop of node runs: one :class:`Step` an epoch on the
device (every run's loss, its gradient and its metrics, nothing read back
to the host), the optimizer, the selection of each run's best epoch by
validation (:class:`Loop`), checkpoints a stopped run resumes from
(:class:`Resume`), the gradients recorded at chosen epochs, and each
epoch's records and progress (:func:`fit`).
"""
import contextlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from omegaconf import DictConfig

from gnorm.monitor import find_layers
from gnorm.monitor.gradients import Gradients
from gnorm.train.checkpoints import restore_node_loop, save_node_checkpoints
from gnorm.train.epoch_log import EpochLog
from gnorm.train.graphed import GraphedStep
from gnorm.train.node_eval import mask_index, masked_cross_entropy, run_metrics
from gnorm.train.node_setup import METRICS, metric_names
from gnorm.train.progress import Progress

log = logging.getLogger(__name__)


class Step:
    r"""One epoch of full-batch training, on the device: the training loss
    of every run (the sum of the runs' losses gets the gradient) and then
    the :obj:`METRICS` of every run in evaluation mode, with no value read
    back to the host. The model's :class:`~gnorm.models.deep_gcn.Graph` and
    the mask indices are derived once. With :obj:`compile`, the two model
    passes run through :func:`torch.compile` (:obj:`fullgraph`, inductor's
    default mode on every device: its CUDA-graph mode failed on an H200,
    see docs/gpu.rst); dropout masks then
    come from the compiled graph's generator, not :obj:`generators`.
    :obj:`precision` ``bf16`` runs them under bfloat16 autocast. The
    score is :obj:`metric` (:data:`~gnorm.train.scores.SCORES`). With
    :obj:`static` (a step to be captured:
    :class:`~gnorm.train.graphed.GraphedStep`), as with :obj:`compile`, the
    graph's edges are not a sparse CSR matrix but index lists."""
    def __init__(self, model: torch.nn.Module, data,
                 generators: Sequence[torch.Generator],
                 precision: str = 'fp32', compile: bool = False,
                 metric: str = 'acc', static: bool = False):
        self.model, self.data, self.metric = model, data, metric
        self.generators = None if compile else generators
        self.graph = model.prepare(data.x, data.edge_index,
                                   csr=not (compile or static))
        self.train_index = mask_index(data.train_mask)
        self.val_index = mask_index(data.val_mask)
        # a step to be captured runs autocast without its cache of casts
        # (PyTorch's rule for autocast inside CUDA graphs)
        self.autocast = torch.autocast(data.x.device.type,
                                       dtype=torch.bfloat16,
                                       enabled=precision == 'bf16',
                                       cache_enabled=not static)
        self.losses, self.metrics = self._losses, self._metrics
        if compile:
            self.losses = torch.compile(self._losses, fullgraph=True)
            self.metrics = torch.compile(self._metrics, fullgraph=True)

    def _losses(self, x: torch.Tensor) -> torch.Tensor:
        with self.autocast:
            out = self.model(x, self.graph, generators=self.generators)
        return masked_cross_entropy(out.view(-1, *out.shape[-2:]).float(),
                                    self.data.y, self.train_index)

    def _metrics(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), self.autocast:
            return run_metrics(self.model(x, self.graph), self.data,
                            self.val_index, self.metric)

    def train(self, optimizer: torch.optim.Optimizer,
              alive: torch.Tensor, record=None) -> torch.Tensor:
        r"""The update of one epoch; returns the losses :obj:`[runs]`
        (a run not :obj:`alive` gets no gradient). With :obj:`record` (a
        :meth:`gnorm.monitor.gradients.Gradients.record` context), its
        forward and backward pass run eagerly inside it."""
        self.model.train()
        optimizer.zero_grad()
        with record if record is not None else contextlib.nullcontext():
            losses = (self.losses if record is None else
                      self._losses)(self.data.x)
            torch.where(torch.isfinite(losses) & alive, losses,
                        0.0).sum().backward()
        optimizer.step()
        return losses

    def evaluate(self) -> torch.Tensor:
        r"""The metrics :obj:`[runs, 4]` in evaluation mode."""
        self.model.eval()
        return self.metrics(self.data.x)

    @staticmethod
    def skipped(losses: torch.Tensor) -> torch.Tensor:
        r"""The metrics of an epoch without evaluation: NaN."""
        return losses.new_full((losses.numel(), len(METRICS)), math.nan)

    def __call__(self, optimizer: torch.optim.Optimizer,
                 alive: torch.Tensor, evaluate: bool = True, record=None):
        r"""Trains one epoch; returns the losses :obj:`[runs]` and the
        metrics :obj:`[runs, 4]` after the update (with :obj:`evaluate`,
        else NaN: no evaluation pass); :obj:`record`: as :meth:`train`."""
        losses = self.train(optimizer, alive, record)
        if not evaluate:
            self.model.eval()
            return losses, self.skipped(losses)
        return losses, self.evaluate()


def no_decay(model: torch.nn.Module, param: torch.Tensor) -> bool:
    r"""Whether :obj:`param` of :obj:`model` is a bias or a norm's weight:
    at most one dimension per run (its leading run dimension, if
    :obj:`model.runs`, not counted), as biases, the affine weights of a
    norm and a learnable scale have."""
    lead = 1 if getattr(model, 'runs', None) is not None else 0
    return param.dim() - lead <= 1


def make_optimizer(model: torch.nn.Module, name: str, lr: float,
                   weight_decay: float) -> torch.optim.Optimizer:
    r"""The optimizer ``train.optimizer`` names (:data:`OPTIMIZERS`):
    ``adam``, :class:`torch.optim.Adam` with L2 decay :obj:`weight_decay`
    on every parameter; ``adamw``, :class:`torch.optim.AdamW` with
    decoupled decay :obj:`weight_decay` on the weight matrices and none on
    biases and norms (:func:`no_decay`), as Platonov et al.'s parameter
    groups."""
    # capturable: the step counts stay on the GPU (no read per parameter;
    # CUDA graphs need it); on the CPU a read of them costs no sync.
    cuda = next(model.parameters()).device.type == 'cuda'
    if name == 'adam':
        return torch.optim.Adam(model.parameters(), lr=lr,
                                weight_decay=weight_decay, capturable=cuda)
    params = list(model.parameters())
    groups = [{'params': [p for p in params if not no_decay(model, p)]},
              {'params': [p for p in params if no_decay(model, p)],
               'weight_decay': 0.0}]
    # fused on the CPU: one kernel per tensor, ~5x faster than the loop
    # (an element's update is the same, as a run's is alone or batched).
    return torch.optim.AdamW([g for g in groups if g['params']], lr=lr,
                             weight_decay=weight_decay, capturable=cuda,
                             fused=True if not cuda else None)


@dataclass
class Loop:
    r"""What the epochs of :func:`fit` carry from one to the next, per run
    (the leading dimension), on the device: the weights of its
    best-validation epoch so far (``best_state``, as the model's state
    dict), that epoch's :data:`METRICS` (``best``, :obj:`[runs, 4]`) and
    number (``best_epoch``, 0 before any), and whether its loss stayed
    finite (``alive``)."""
    best_state: Dict[str, torch.Tensor]
    best: torch.Tensor
    best_epoch: torch.Tensor
    alive: torch.Tensor

    @classmethod
    def start(cls, model: torch.nn.Module, runs: int,
              device: torch.device) -> 'Loop':
        r"""The loop of :obj:`runs` runs of :obj:`model` before epoch 1."""
        best = torch.full((runs, len(METRICS)), math.nan, device=device)
        best[:, 1] = -math.inf  # the validation score
        return cls({k: v.clone() for k, v in model.state_dict().items()},
                   best, torch.zeros(runs, dtype=torch.long, device=device),
                   torch.ones(runs, dtype=torch.bool, device=device))

    @torch.no_grad()
    def update(self, model: torch.nn.Module, epoch: int,
               losses: torch.Tensor, metrics: torch.Tensor) -> None:
        r"""After :obj:`epoch` (its :obj:`losses` :obj:`[runs]` and
        :obj:`metrics` :obj:`[runs, 4]`): a run whose loss is not finite is
        no longer alive, and one alive whose validation score rose (or
        held with a lower loss) keeps :obj:`model`'s weights as its
        best."""
        self.alive = self.alive & torch.isfinite(losses)
        acc, loss = metrics[:, 1], metrics[:, 2]
        improved = self.alive & ((acc > self.best[:, 1]) | (
            (acc == self.best[:, 1]) & (loss < self.best[:, 2])))
        for key, value in model.state_dict().items():
            keep = improved if model.runs is not None else improved[0]
            keep = keep.view(keep.shape + (1, ) * (value.dim() - keep.dim()))
            self.best_state[key].copy_(torch.where(keep, value,
                                                   self.best_state[key]))
        self.best = torch.where(improved.unsqueeze(-1), metrics, self.best)
        self.best_epoch = torch.where(improved, epoch, self.best_epoch)


@dataclass
class Resume:
    r"""The checkpoints of the runs :obj:`cfgs` of :func:`fit`
    (``checkpoints``: one ``checkpoint.pt`` per run, written every
    ``every`` epochs before the last; 0: never) and the ``states`` the
    runs continue from (:obj:`None`: from the start;
    :mod:`gnorm.train.checkpoints`)."""
    checkpoints: List[Path]
    cfgs: Sequence[DictConfig]
    every: int
    states: Optional[List[Dict[str, Any]]] = None

    def due(self, epoch: int, epochs: int) -> bool:
        r"""Whether a checkpoint is written after :obj:`epoch` of
        :obj:`epochs`."""
        return self.every > 0 and epoch % self.every == 0 and epoch < epochs


def fit(model: torch.nn.Module, data, results: List[Dict[str, Any]],
        epochs: int, lr: float, weight_decay: float,
        generators: Sequence[torch.Generator], progress: bool = True,
        log_every: int = 10, precision: str = 'fp32',
        compile: bool = False, eval_every: int = 1,
        logs: Optional[Sequence[EpochLog]] = None, metric: str = 'acc',
        optimizer: str = 'adam',
        cuda_graph: bool = False,
        grad_every: int = 0,
        resume: Optional[Resume] = None) -> Dict[str, torch.Tensor]:
    r"""Full-batch Adam (or :obj:`optimizer`, :func:`make_optimizer`) of
    the runs of :obj:`model` (one per entry of
    :obj:`results`), each on its own training nodes (the masks of
    :obj:`data` are :obj:`[runs, nodes]`) with its own dropout masks
    (:obj:`generators`). The loss is the sum of the runs' losses, so each
    run gets its own gradient, and Adam acts element-wise: a run trains as
    it would alone. An epoch stays on the device (:class:`Step`; the
    best-validation weights are kept per run by :func:`torch.where`); the
    values reach the host every :obj:`log_every` epochs and at the last,
    and the runs are evaluated every :obj:`eval_every` epochs and at the
    last (the other epochs' metrics are NaN and none of them is best),
    and then fill each run's :obj:`results`, so that an interrupted or
    failed run can be recorded: ``curve`` (per epoch ``epoch``, ``loss``,
    ``train_acc``, ``val_acc``, ``val_loss``, ``test_acc``, or the names
    :func:`metric_names` gives :obj:`metric`), ``best_epoch`` and ``best``
    (the metrics of the best-validation epoch so far: highest score
    :obj:`metric`, then lowest loss), and with :obj:`logs`
    (one :class:`~gnorm.train.epoch_log.EpochLog` per run) each run's
    ``metrics.csv`` rows as they reach the host. Returns the weights of
    every run's best epoch. A run whose loss stops being finite gets
    ``status: failed`` and stops counting. With :obj:`cuda_graph`, the
    step is replayed as CUDA graphs after its warm-up epochs
    (:class:`~gnorm.train.graphed.GraphedStep`). With :obj:`grad_every`,
    each run's ``gradients`` (:func:`gradient_recorder`) at the epochs
    :func:`gradient_epoch` names, those the step runs eagerly. With
    :obj:`resume` (:class:`Resume`), each run's checkpoint is written
    every ``every`` epochs (its epochs reach the host and its
    :obj:`results` first), and runs with ``states`` continue from them:
    their weights, optimizer, best epoch, curve (restored into
    :obj:`results` by the caller), dropout generators and gradient records
    are those of the uninterrupted run at that epoch."""
    runs, device = len(results), data.y.device
    optimizer = make_optimizer(model, optimizer, lr, weight_decay)
    names = metric_names(metric)
    loop = Loop.start(model, runs, device)
    gradients = gradient_recorder(model, grad_every)
    start = 1
    if resume is not None and resume.states:
        start = restore_node_loop(resume.states, model, optimizer, loop,
                                  list(generators), gradients)
    else:
        for r in results:
            r.update(curve={k: [] for k in ('epoch', 'loss', *names)},
                     best_epoch=0, best=None)
    step = Step(model, data, generators, precision, compile, metric,
                static=cuda_graph)
    if cuda_graph:
        step = GraphedStep(step)
    pending = []  # per epoch [runs, 2 + len(METRICS)]: alive, loss, metrics
    desc = 'train' if runs == 1 else f'train (mean of {runs} runs)'
    with Progress(epochs, every=log_every, desc=desc, bar=progress) as bar:
        if start > 1:
            bar.update(start - 1)
        for epoch in range(start, epochs + 1):
            losses, metrics = step(optimizer, loop.alive, evaluate=(
                epoch % eval_every == 0 or epoch == epochs), record=(
                gradients.record(epoch) if gradients is not None and
                gradient_epoch(epoch, grad_every) else None))
            loop.update(model, epoch, losses, metrics)
            pending.append(torch.cat([
                loop.alive.unsqueeze(-1).to(metrics.dtype),
                losses.detach().unsqueeze(-1).float(), metrics], dim=-1))
            saving = resume is not None and resume.due(epoch, epochs)
            if epoch == epochs or saving or (log_every > 0 and
                                             epoch % log_every == 0):
                _record(results, epoch - len(pending) + 1,
                        torch.stack(pending).tolist(), loop.best.tolist(),
                        loop.best_epoch.tolist(), logs, lr, names)
                pending = []
                _show(bar, results, epoch, metric)
            if saving:
                save_node_checkpoints(resume.checkpoints, resume.cfgs, epoch,
                                      model, optimizer, loop, results,
                                      list(generators), gradients)
    if gradients is not None:
        for r, res in enumerate(results):
            res['gradients'] = gradients.field(
                None if model.runs is None else r)
    return loop.best_state


# The first epochs a run records each one of: where a failure begins (a
# representation collapsed by the first Adam step, gradients that vanish
# by the second), which a record every grad_every epochs would miss.
EARLY_EPOCHS = 5


def gradient_epoch(epoch: int, every: int) -> bool:
    r"""Whether :obj:`epoch` records gradients (and the layers' trace) at
    the interval :obj:`every`: each of the first :data:`EARLY_EPOCHS`
    epochs, then every :obj:`every`-th."""
    return bool(every) and (epoch <= EARLY_EPOCHS or epoch % every == 0)


def gradient_recorder(model: torch.nn.Module, every: int
                      ) -> Optional[Gradients]:
    r"""The recorder of the per-layer gradient norms of :obj:`model`'s
    layers (:class:`~gnorm.monitor.gradients.Gradients` of the layers a
    :class:`~gnorm.monitor.CollapseMonitor` hooks), for a recording
    interval :obj:`every` (0: none). A run's ``gradients`` field then
    holds, per recorded epoch (:func:`gradient_epoch`) and layer, the
    norm of the gradient reaching the layer's output, of its parameters'
    gradient and of its parameters, and the effective rank and mean
    cosine of its output (the trace): what :func:`gnorm.monitor.diagnose`
    reads to tell an untrainable run, and which failure came first."""
    if not every:
        return None
    return Gradients(model, find_layers(model), model.runs, trace=True)


def _record(results: List[Dict[str, Any]], first: int,
            rows: List[List[List[float]]], best: List[List[float]],
            best_epoch: List[int], logs: Optional[Sequence[EpochLog]] = None,
            lr: float = math.nan, names: Sequence[str] = METRICS) -> None:
    r"""Appends the epochs :obj:`first, first + 1, ...` (:obj:`rows`, per
    epoch and run: alive, loss, the :obj:`METRICS` columns named
    :obj:`names`) to each run's curve (and :obj:`logs`, its
    ``metrics.csv``), marks a run whose loss stopped being finite as
    failed, and sets each run's best epoch."""
    for r, res in enumerate(results):
        for epoch, row in enumerate(rows, start=first):
            alive, loss, *values = row[r]
            if res.get('status') == 'failed':
                break
            if not alive:
                res.update(status='failed', error=(
                    f"the training loss became {loss} at epoch {epoch}; "
                    f"lower train.lr, change the norm or its scale"))
                break
            row = {'epoch': epoch, 'loss': loss, **dict(zip(names, values))}
            for key, column in res['curve'].items():
                column.append(row[key])
            if logs is not None:
                logs[r].add(csv_row(row, lr, names))
        if best_epoch[r] > 0:
            res.update(best_epoch=best_epoch[r],
                       best=dict(zip(names, best[r])))


def csv_row(row: Dict[str, float], lr: float,
            names: Sequence[str] = METRICS) -> Dict[str, float]:
    r"""An epoch of the curve (``epoch``, ``loss`` and the :obj:`METRICS`
    columns named :obj:`names`) as a row of ``metrics.csv``, named as
    graph-level runs name theirs (:obj:`gnorm.train.epoch_log.NODE_CURVE`):
    the scores are ``train_metric``, ``val_metric``, ``test_metric``,
    ``lr`` Adam's constant rate; ``time_s`` is empty (an epoch stays on
    the device, it is not timed alone)."""
    train, val, val_loss, test = names
    return {'epoch': row['epoch'], 'loss': row['loss'], 'lr': lr,
            'val_metric': row[val], 'val_loss': row[val_loss],
            'test_metric': row[test], 'time_s': math.nan,
            'train_metric': row[train]}


def _last(values: List[float]) -> float:
    r"""The last value of :obj:`values` that is not NaN (an epoch that was
    not evaluated), else NaN."""
    return next((v for v in reversed(values) if not math.isnan(v)),
                math.nan)


def _show(bar: Progress, results: List[Dict[str, Any]], epoch: int,
          metric: str = 'acc') -> None:
    r"""Shows the last recorded loss and the last evaluated scores
    :obj:`metric` (``val_acc``, ``val_rocauc``...), averaged over the runs
    that did not fail."""
    shown = [r for r in results if r.get('status') != 'failed'] or results
    shown = [r for r in shown if r['curve']['epoch']] or shown
    _, val, _, test = metric_names(metric)
    bar.update(epoch, **{name: sum(_last(r['curve'][k]) for r in shown) /
                         len(shown) for name, k in (
                             ('loss', 'loss'), (f'val_{metric}', val),
                             (f'test_{metric}', test))})
