r"""Node classification on one graph: full-batch training of a deep GCN
stack (the task of ``dataset=cora|citeseer|chameleon|squirrel|csbm`` and
of Platonov et al.'s ``chameleon_filtered|squirrel_filtered|minesweeper|
tolokers``). A dataset is scored by accuracy, or by ROC-AUC where its
config says ``metric: rocauc`` (:mod:`gnorm.train.scores`).

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in.
"""
import contextlib
import copy
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import (Any, Dict, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import torch
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gnorm.data.leakage import leakage, report, split_label
from gnorm.data.nodes import check_split, load_dataset, split_fingerprint
from gnorm.errors import ConfigError
from gnorm.monitor import CollapseMonitor, find_layers
from gnorm.monitor.gradients import Gradients
from gnorm.results.keys import batch_key as runs_key
import gnorm.train.collapse as collapse
from gnorm.train.checkpoints import (CHECKPOINT, load_node_checkpoints,
                                     restore_node_loop, restore_node_results,
                                     resume_groups, save_node_checkpoints)
from gnorm.train.common import (free_memory, is_int, one_line, option,
                                 run_name, unknown_norm_keys)
from gnorm.train.epoch_log import NODE_CURVE, EpochLog
from gnorm.train.graphed import GraphedStep
from gnorm.train.progress import Progress, on_one_line
from gnorm.train.scores import SCORES, accuracy, class_counts, roc_auc

log = logging.getLogger(__name__)

# Dataset config keys that are not arguments of gnorm.data.load_dataset.
_DATASET_META = ('name', 'default_split', 'task', 'metric')
# Config keys in which runs that train as one model may differ.
BATCHED_KEYS = ('seed', 'split_index', 'norm.scale', 'tag')
# train.precision of node training: fp32, TensorFloat-32 matrix products
# (CUDA), bfloat16 autocast.
PRECISIONS = ('fp32', 'tf32', 'bf16')
# Columns of the per-run metrics of an epoch (on the device), named for a
# dataset scored by accuracy (metric_names: by another score).
METRICS = ('train_acc', 'val_acc', 'val_loss', 'test_acc')
# What a run's summary line calls its score.
SCORE_NAMES = {'acc': 'acc', 'rocauc': 'ROC-AUC'}
# The models of node tasks (model=gcn, model=resgnn).
NODE_MODELS = ('gnorm.models.DeepGCN', 'gnorm.models.ResGNN')
# train.optimizer of node tasks: Adam (L2 weight decay on every parameter),
# AdamW (decoupled decay, none on biases and norms).
OPTIMIZERS = ('adam', 'adamw')


def dataset_metric(cfg: DictConfig) -> str:
    r"""How :obj:`cfg`'s dataset is scored (:data:`SCORES`): its config's
    ``metric``, accuracy (``acc``) where it names none."""
    return cfg.dataset.get('metric', 'acc')


def metric_names(metric: str) -> Tuple[str, ...]:
    r"""The names of the :obj:`METRICS` columns of a run scored by
    :obj:`metric` (in ``results.json``, its ``best`` and its ``curve``):
    ``train_acc``, ``val_acc``, ``val_loss``, ``test_acc`` for accuracy;
    else ``train_metric``, ``val_metric``, ``val_loss``, ``test_metric``,
    as graph-level runs name theirs, the run recording which ``metric``
    they hold."""
    if metric == 'acc':
        return METRICS
    return ('train_metric', 'val_metric', 'val_loss', 'test_metric')


def optimizer_name(cfg: DictConfig) -> str:
    r"""``train.optimizer`` (:data:`OPTIMIZERS`), ``adam`` where the
    config has none (conf/train.yaml does not declare it: runs made before
    it keep their identity)."""
    return cfg.train.get('optimizer', OPTIMIZERS[0])


def check_config(cfg: DictConfig) -> None:
    r"""Raises :class:`ConfigError` with a one-line fix for bad values of
    the node-level keys."""
    if not is_int(cfg.layers) or cfg.layers < 1:
        raise ConfigError(f"layers must be an integer >= 1, got "
                          f"{cfg.layers!r}; pass e.g. layers=2")
    if not is_int(cfg.split_index):
        raise ConfigError(f"split_index must be an integer, got "
                          f"{cfg.split_index!r}")
    check_split(cfg.dataset.name, cfg.split, cfg.split_index)
    if dataset_metric(cfg) not in SCORES:
        raise ConfigError(f"unknown dataset.metric="
                          f"{dataset_metric(cfg)!r}; pass one of "
                          f"{', '.join(SCORES)}")
    if cfg.model._target_ not in NODE_MODELS:
        raise ConfigError(f"dataset={cfg.dataset.name} is a node-level task "
                          f"and takes model=gcn or model=resgnn, got "
                          f"{option('model', cfg.model)}")
    if optimizer_name(cfg) not in OPTIMIZERS:
        raise ConfigError(f"unknown train.optimizer="
                          f"{optimizer_name(cfg)!r}; pass one of "
                          f"{', '.join(OPTIMIZERS)}")
    if cfg.train.precision not in PRECISIONS:
        raise ConfigError(f"unknown train.precision={cfg.train.precision!r}; "
                          f"pass one of {', '.join(PRECISIONS)}")
    if not isinstance(cfg.train.compile, bool):
        raise ConfigError(f"train.compile must be true or false, got "
                          f"{cfg.train.compile!r}")
    graphed = cfg.train.get('cuda_graph', False)
    if not isinstance(graphed, bool):
        raise ConfigError(f"train.cuda_graph must be true or false, got "
                          f"{graphed!r}")
    if graphed and cfg.train.compile:
        raise ConfigError("train.cuda_graph and train.compile are two ways "
                          "to run the step; pass one of them")
    eval_every = cfg.train.get('eval_every', 1)
    if not is_int(eval_every) or eval_every < 1:
        raise ConfigError(f"train.eval_every must be an integer >= 1, got "
                          f"{eval_every!r}; pass e.g. train.eval_every=10")
    every = cfg.train.get('checkpoint_every', 0)
    if not is_int(every) or every < 0:
        raise ConfigError(f"train.checkpoint_every must be an integer >= 0 "
                          f"(0: no checkpoint), got {every!r}; pass e.g. "
                          f"train.checkpoint_every=200")
    if cfg.norm._target_ == 'gnorm.nn.SepNorm':
        raise ConfigError("norm=sepnorm normalises a graph token apart from "
                          "the others and needs model=graphormer on a "
                          "graph-level dataset (molhiv, zinc); pass another "
                          "norm for node classification")


def cuda_graph(cfg: DictConfig, device: torch.device) -> bool:
    r"""Whether the step runs as CUDA graphs (``train.cuda_graph``); on a
    device other than CUDA, a :class:`ConfigError`."""
    graphed = cfg.train.get('cuda_graph', False)
    if graphed and device.type != 'cuda':
        raise ConfigError(f"train.cuda_graph=true needs a CUDA device, got "
                          f"device={device.type}; pass device=cuda or "
                          f"train.cuda_graph=false")
    return graphed


@contextlib.contextmanager
def matmul_precision(precision: str, device: torch.device):
    r"""TensorFloat-32 matrix products (and convolutions) for
    :obj:`precision` ``tf32``, on CUDA only, for the duration of the
    block."""
    if precision != 'tf32':
        yield
        return
    if device.type != 'cuda':
        raise ConfigError(f"train.precision=tf32 needs a CUDA device, got "
                          f"device={device.type}; pass train.precision=fp32 "
                          f"or bf16")
    saved = torch.get_float32_matmul_precision(), \
        torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision('high')
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


# Graphs loaded by this process: {(dataset, split, device): Data}, so that a
# process training many cells (experiments/table3.py) loads each once.
_DATA_CACHE: Dict[str, Any] = {}


def load_data(cfg: DictConfig, device: Optional[torch.device] = None):
    r"""The graph of :obj:`cfg.dataset` with the split :obj:`cfg` asks for,
    its raw files copied from :obj:`cfg.data.mirror` or downloaded, on
    :obj:`device` (default: the CPU). Loaded once per process for each
    dataset, split and device: later calls return a shallow copy of the
    cached graph (setting or moving its attributes leaves the cache as it
    is; its tensors are shared, so change none in place). The splits of a
    dataset share one copy of its features and edges."""
    options = {k: v for k, v in OmegaConf.to_container(
        cfg.dataset, resolve=True).items() if k not in _DATASET_META}
    device = torch.device(device or 'cpu')
    split_seed = cfg.seed if cfg.split == 'random' else 0
    graph_key = json.dumps([cfg.dataset.name, str(cfg.data.root),
                            str(cfg.data.mirror), options], sort_keys=True)
    key = json.dumps([graph_key, cfg.split, cfg.split_index, split_seed,
                      cfg.test_set, str(device)])
    if key not in _DATA_CACHE:
        data = load_dataset(cfg.dataset.name, cfg.data.root, cfg.data.mirror,
                            split=cfg.split, split_index=cfg.split_index,
                            seed=cfg.seed, test_set=cfg.test_set,
                            **options).to(device)
        shared = _DATA_CACHE.get(json.dumps([graph_key, str(device)]))
        for name in ('x', 'edge_index', 'y'):
            if shared is not None and torch.equal(shared[name], data[name]):
                data[name] = shared[name]  # one copy for all splits
        _DATA_CACHE.setdefault(json.dumps([graph_key, str(device)]), data)
        _DATA_CACHE[key] = data
    return copy.copy(_DATA_CACHE[key])


def clear_data_cache() -> None:
    r"""Forgets the graphs :func:`load_data` keeps."""
    _DATA_CACHE.clear()


def norm_factory(cfg: DictConfig):
    r""":obj:`cfg.norm`, instantiated partially (the model passes the
    width), or :obj:`None`."""
    return instantiate(cfg.norm, _partial_=True)


def build_model(cfg: DictConfig, in_channels: int, out_channels: int,
                runs: Optional[Sequence[DictConfig]] = None,
                ) -> torch.nn.Module:
    r"""Instantiates :obj:`cfg.model` with the norm of :obj:`cfg.norm`; with
    :obj:`runs` (their configs), one model of :obj:`len(runs)` runs, each
    with its own norm (e.g. its own ContraNorm scale)."""
    try:
        model = instantiate(cfg.model, _partial_=True)
        if runs is None:
            return model(in_channels=in_channels, out_channels=out_channels,
                         norm=norm_factory(cfg))
        return model(in_channels=in_channels, out_channels=out_channels,
                     runs=len(runs), norm=[norm_factory(c) for c in runs])
    except (InstantiationException, ValueError, TypeError) as e:
        raise ConfigError(f"cannot build the model: "
                          f"{unknown_norm_keys(cfg.norm) or one_line(e)}"
                          ) from None


def batch_key(cfg: DictConfig) -> Optional[str]:
    r"""Runs with the same key can train as one model (they differ only in
    seed, split and norm scale: :func:`gnorm.results.keys.batch_key`);
    :obj:`None` for a run that trains alone."""
    if cfg.model.get('fusion') is not None:
        return None
    return runs_key(OmegaConf.to_container(cfg, resolve=True), BATCHED_KEYS)


def memory_per_run(cfg: DictConfig, num_nodes: int, num_entries: int,
                   num_edges: int = 0) -> int:
    r"""A generous estimate of the bytes one run of :obj:`cfg` needs while
    it trains: every hidden layer keeps ~12 tensors of
    :obj:`[nodes, hidden]` floats for the backward pass (ContraNorm a few
    more; with non-neighbour negatives also a weight and two indices per
    edge, and a few :obj:`[edges, hidden]` tensors in passing; with
    ``kernel: nystrom`` a few :obj:`[nodes, landmarks]` tensors per layer
    and, with non-neighbour negatives, an :obj:`[edges, landmarks]` one in
    passing), the input layer its kept entries. A block of model=resgnn counts as a layer as
    wide as its feed-forward network (twice that with ``conv: sage``), its
    input layer as one more; with ``conv: gat`` it also keeps a few
    :obj:`[edges, hidden]` tensors."""
    hidden = cfg.model.hidden_channels + 1
    layers, conv = cfg.layers, cfg.model.get('conv')
    if cfg.model._target_ == 'gnorm.models.ResGNN':
        hidden *= max(1.0, cfg.model.ff_multiplier) * (
            2 if conv == 'sage' else 1)
        layers += 1
    per_layer = 12 + (8 if 'Contra' in str(cfg.norm._target_) else 0)
    floats = (per_layer * num_nodes * hidden * layers
              + 3 * num_entries * hidden)
    edges = num_edges + num_nodes  # self-loops included
    if cfg.norm.get('negatives') == 'non_neighbors':
        floats += 6 * edges * cfg.layers + 3 * edges * hidden
    if cfg.norm.get('kernel') == 'nystrom':
        k = cfg.norm.get('landmarks', 64)
        floats += 6 * num_nodes * k * cfg.layers + (
            3 * edges * k if cfg.norm.get('negatives') == 'non_neighbors'
            else 0)
    if cfg.model._target_ == 'gnorm.models.ResGNN' and conv == 'gat':
        floats += 3 * edges * hidden * cfg.layers
    return int(4 * floats)


def max_runs(cfgs: Sequence[DictConfig], device: torch.device) -> int:
    r"""How many runs of :obj:`cfgs` train as one model on :obj:`device`:
    ``batch_runs`` (an integer, or ``auto``: as many as half of the free
    memory holds, by :func:`memory_per_run`)."""
    cfg = cfgs[0]
    if cfg.batch_runs != 'auto':
        return cfg.batch_runs
    if len(cfgs) == 1:  # nothing to estimate (the estimate loads the data)
        return 1
    data = load_data(cfg)
    entries = int((data.x != 0).sum())
    need = memory_per_run(cfg, data.num_nodes, entries, data.num_edges)
    return max(1, min(len(cfgs), free_memory(device) // (2 * need)))


class MaskIndex(NamedTuple):
    r"""The nodes of a mask :obj:`[runs, nodes]` as (run, node) pairs,
    sorted by run, and their number per run: found once, so that a loss
    over them needs no data-dependent shape (no host round-trip)."""
    run: torch.Tensor
    node: torch.Tensor
    count: torch.Tensor


def mask_index(mask: torch.Tensor) -> MaskIndex:
    r"""The :class:`MaskIndex` of :obj:`mask` (:obj:`[runs, nodes]`)."""
    run, node = mask.nonzero(as_tuple=True)  # sorted by run
    return MaskIndex(run, node, torch.bincount(run, minlength=mask.size(0)))


def _metrics(out: torch.Tensor, data, val_index: MaskIndex,
             metric: str = 'acc') -> torch.Tensor:
    r"""Per run (rows), the columns of :obj:`METRICS` of the logits
    :obj:`out` (:obj:`[(runs,) nodes, classes]`), on the device: the
    score :obj:`metric` (accuracy, or the ROC-AUC of class 1 by its
    log-odds against class 0) of the training, validation and test nodes
    and the validation loss."""
    out = out.view(-1, *out.shape[-2:])  # [runs, nodes, classes]
    if metric == 'rocauc':
        odds = out[..., 1].float() - out[..., 0].float()  # [runs, nodes]
        columns = [roc_auc(odds, data.y, data[f'{split}_mask']).float()
                   for split in ('train', 'val', 'test')]
    else:
        pred = out.argmax(dim=-1)  # [runs, nodes]
        columns = [accuracy(pred, data.y, data[f'{split}_mask'])
                   for split in ('train', 'val', 'test')]
    columns.insert(2, masked_cross_entropy(out.float(), data.y, val_index))
    return torch.stack(columns, dim=-1)  # [runs, 4]


@torch.no_grad()
def evaluate(model: torch.nn.Module, data,
             monitor: Optional[CollapseMonitor] = None, step: int = 0,
             metric: str = 'acc') -> Dict[str, Any]:
    r"""Per run: scores :obj:`metric` (fractions) and validation loss of
    :obj:`model` in evaluation mode (lists, one entry per run, under
    :func:`metric_names`; the masks of :obj:`data` are :obj:`[runs,
    nodes]`); with :obj:`monitor`, its forward pass is recorded (as
    :obj:`step`) on the full graph."""
    model.eval()
    graph = model.prepare(data.x, data.edge_index)
    with contextlib.ExitStack() as stack:
        if monitor is not None:
            stack.enter_context(monitor.record(step,
                                               edge_index=data.edge_index))
        out = model(data.x, graph)
    values = _metrics(out, data, mask_index(data.val_mask),
                      metric).T.tolist()
    return {**dict(zip(metric_names(metric), values)),
            'test_predictions': predicted_on_test(out, data, metric)}


def predicted_on_test(out: torch.Tensor, data, metric: str = 'acc'
                     ) -> List[Dict[str, Any]]:
    r"""Per run, what the logits :obj:`out` predict on its test nodes: the
    number of test nodes predicted in each class (``class_counts``, by the
    largest logit), the number whose label is each class
    (``label_counts``), and for a dataset scored by ROC-AUC the share
    predicted positive (``positive_rate``). A chance screen reads them
    (:mod:`gnorm.study.findings.sanity`): a run that puts nearly every test node in
    one class has collapsed, whatever its accuracy."""
    out = out.view(-1, *out.shape[-2:])  # [runs, nodes, classes]
    num_classes = out.size(-1)
    mask = data.test_mask
    predicted = class_counts(out.argmax(dim=-1), mask, num_classes).tolist()
    labels = class_counts(data.y, mask, num_classes).tolist()
    found = []
    for r, (pred, true) in enumerate(zip(predicted, labels)):
        record = {'class_counts': pred, 'label_counts': true}
        if metric == 'rocauc':
            record['positive_rate'] = pred[1] / max(sum(pred), 1)
            record['scores'] = ranked_scores(out[r], data.y, mask[r])
        found.append(record)
    return found


# Significant digits of the stored test scores: enough that the ROC-AUC
# recomputed from them equals the run's to 1e-6 (ties that rounding could
# make are that rare).
SCORE_DIGITS = 7


def ranked_scores(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
                ) -> Dict[str, Any]:
    r"""What an outside reader needs to recompute a run's test ROC-AUC: the
    score of each test node (``log_odds``, class 1's logit less class 0's,
    :data:`SCORE_DIGITS` significant digits) and its label (``labels``, a
    string of ``0`` and ``1``), in the order of the nodes' indices."""
    nodes = mask.nonzero().view(-1)
    odds = (out[nodes, 1].double() - out[nodes, 0].double()).tolist()
    return {'log_odds': [float(f'{v:.{SCORE_DIGITS}g}') for v in odds],
            'labels': ''.join(str(int(v)) for v in y[nodes].tolist())}


def constant_predictor(data, run: int, metric: str) -> Dict[str, float]:
    r"""What a constant predictor reaches on run :obj:`run`'s nodes, the
    ground against which a diagnosis says a run learned nothing: the
    cross-entropy of the training nodes' class frequencies
    (``train_loss``, nats: the lowest loss a model that ignores its input
    reaches) and its validation score (``val_score``: the majority class's
    share of the validation nodes, or a constant ranking's 0.5 for
    ROC-AUC)."""
    def counts(split: str) -> torch.Tensor:
        return torch.bincount(data.y[data[f'{split}_mask'][run]],
                              minlength=int(data.y.max()) + 1).double()
    train = counts('train')
    p = train / train.sum().clamp_min(1)
    loss = float(-torch.special.xlogy(p, p).sum())
    val = counts('val')
    score = 0.5 if metric == 'rocauc' else float(val.max()
                                                 / val.sum().clamp_min(1))
    return {'train_loss': loss, 'val_score': score}


def masked_cross_entropy(out: torch.Tensor, y: torch.Tensor,
                         mask: Union[torch.Tensor, MaskIndex],
                         ) -> torch.Tensor:
    r"""Per run, the mean cross-entropy of :obj:`out` (:obj:`[runs,
    nodes, classes]`) over the nodes of :obj:`mask` (:obj:`[runs,
    nodes]`, or its :class:`MaskIndex`), computed for those nodes only."""
    run, node, count = mask if isinstance(mask, MaskIndex) else \
        mask_index(mask)
    loss = F.cross_entropy(out[run, node], y[node], reduction='none')
    total = loss.new_zeros(out.size(0)).index_add(0, run, loss)
    return total / count  # [runs]


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
            return _metrics(self.model(x, self.graph), self.data,
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


def summary(results: Dict[str, Any], cfg: DictConfig) -> str:
    r"""The one line printed at the end of a run; the time of runs trained
    as one model is the batch's, said as shared (``14.1s for 3 runs as one
    model``)."""
    norm = results.get('names', {}).get('norm') or run_name(
        'norm', results.get('choices', {}).get('norm'), cfg.norm)
    metric = results.get('metric', 'acc')
    train, val, _, test = metric_names(metric)
    parts = [f"{cfg.dataset.name} L={cfg.layers} {norm} seed={cfg.seed}",
             f"epoch {results['selected_epoch']} ({cfg.select})",
             f"{SCORE_NAMES[metric]} " + ' '.join(
                 f"{split} {100 * results[key]:.2f}%" for split, key in (
                     ('train', train), ('val', val), ('test', test)))]
    if 'collapse' in results:
        erank = results['collapse']['effective_rank']
        parts.append(f'erank last {erank[-1]:.2f}' + (
            f' hidden {erank[-2]:.2f}' if len(erank) > 1 else ''))
    runs = results.get('batch_runs') or 1
    shared = f' for {runs} runs as one model' if runs > 1 else ''
    parts += [f"{results['runtime_s']:.1f}s{shared} {results['device']}",
              str(results['path'])]
    return ' | '.join(parts)


def load_runs(cfgs: Sequence[DictConfig],
              device: Optional[torch.device] = None):
    r"""The graph of the runs :obj:`cfgs` (which differ at most in seed,
    split index and norm) on :obj:`device`, with each run's split: masks
    :obj:`[runs, nodes]` (on a copy: the graphs :func:`load_data` caches
    keep their own masks). Raises :class:`ConfigError` if the runs do not
    share their graph."""
    loaded: Dict[tuple, Any] = {}
    datas = []
    for c in cfgs:  # runs of one split share its loading
        key = (c.split, c.split_index, c.seed if c.split == 'random' else 0)
        if key not in loaded:
            loaded[key] = load_data(c, device)
        datas.append(loaded[key])
    data = datas[0]
    for other in datas[1:]:
        if other is not data and not all(data[k] is other[k] or
                                         torch.equal(data[k], other[k])
                   for k in ('x', 'edge_index', 'y')):
            raise ConfigError("the runs of one batch must share their graph "
                              "and features; pass batch_runs=1")
    for split in ('train', 'val', 'test'):
        data[f'{split}_mask'] = torch.stack([d[f'{split}_mask']
                                             for d in datas])
    return data


def split_leakage(data, cfgs: Sequence[DictConfig],
                  fingerprints: Sequence[str]) -> List[Dict[str, int]]:
    r"""Each run's :func:`gnorm.data.leakage` (test nodes with a twin
    among its training nodes) on the graph the runs train on,
    :obj:`data.edge_index` (the dataset's edges after
    ``dataset.to_undirected``), once per split (runs of one split share
    its :obj:`fingerprints`); said once per process for each dataset and
    split (:func:`gnorm.data.leakage.report`: a warning line for a split
    that leaks, an info line for fewer duplicates)."""
    found: Dict[str, Dict[str, int]] = {}
    out = []
    for r, (c, key) in enumerate(zip(cfgs, fingerprints)):
        if key not in found:
            found[key] = leakage(data, data.train_mask[r],
                                 data.test_mask[r])
            report(split_name(c), c.dataset.name, key, found[key])
        out.append(found[key])
    return out


def csv_curve(curve: Optional[Dict[str, list]], lr: float,
              names: Sequence[str] = METRICS) -> Dict[str, list]:
    r"""The columns of ``metrics.csv`` (:data:`NODE_CURVE`) that a run's
    :obj:`curve` (a restored one; :obj:`None`: none yet) fills, each
    epoch as :func:`csv_row` writes it."""
    rows = [csv_row(dict(zip(curve, values)), lr, names)
            for values in zip(*curve.values())] if curve else []
    return {k: [row[k] for row in rows] for k in NODE_CURVE}


def run_apart(groups: List[List[int]], cfgs: Sequence[DictConfig],
              device: torch.device, results: List[Dict[str, Any]],
              paths: Sequence[Path]) -> List[Dict[str, Any]]:
    r"""Trains each of the :obj:`groups` of runs (indices of :obj:`cfgs`:
    runs whose checkpoints are of one epoch,
    :func:`gnorm.train.checkpoints.resume_groups`) as a model of its own,
    torch's random streams seeded as for a batch of its own; returns
    every run's :obj:`results`."""
    for group in groups:
        def pick(found):
            return [found[i] for i in group]
        for i in group:
            results[i]['batch_runs'] = len(group)
        torch.manual_seed(cfgs[group[0]].seed)  # CPU and every CUDA device
        run(pick(cfgs), device, pick(results), pick(paths))
    return results


def split_name(cfg: DictConfig) -> str:
    r"""``chameleon, geom_gcn split 0`` (or ``random split of seed 3``)."""
    return (f'{cfg.dataset.name}, '
            f'{split_label(cfg.split, cfg.split_index, cfg.seed)}')


def run(cfgs: Sequence[DictConfig], device: torch.device,
        results: List[Dict[str, Any]], paths: Sequence[Path],
        ) -> List[Dict[str, Any]]:
    r"""Loads the graph, trains the runs :obj:`cfgs` on it as one model
    (:class:`gnorm.models.DeepGCN` with ``runs``, or without for one run;
    run :math:`r`'s weights
    and dropout masks come from a generator seeded with its seed, so its
    results do not depend on the other runs) and returns each run's
    :obj:`results` completed with the metrics of the selected epoch, the
    per-epoch curve and (with :obj:`cfg.collapse_metrics`) per-layer
    collapse metrics of the selected weights, measured by
    :class:`~gnorm.monitor.CollapseMonitor` in float64 (all runs in one
    pass). Each run folder gets ``metrics.csv`` (per epoch) and
    ``collapse.csv`` (per layer). A run whose loss stops being finite is marked
    ``status: failed`` (:func:`gnorm.train.run.train_runs` records it).

    With ``resume=true`` each run writes ``checkpoint.pt`` every
    ``train.checkpoint_every`` epochs, and a run whose folder holds one
    continues from it (:mod:`gnorm.train.checkpoints`: one of another
    config is refused) with the results it would have had uninterrupted;
    runs whose checkpoints are of different epochs train apart
    (:func:`run_apart`)."""
    cfg = cfgs[0]
    checkpoints = [p.parent / CHECKPOINT for p in paths]
    states = load_node_checkpoints(cfgs, checkpoints, device)
    groups = resume_groups(states)
    if len(groups) > 1:
        return run_apart(groups, cfgs, device, results, paths)
    data = load_runs(cfgs, device)
    num_classes = int(data.y.max()) + 1
    metric = dataset_metric(cfg)
    if metric == 'rocauc' and num_classes != 2:
        raise ConfigError(f"dataset.metric=rocauc scores binary labels, and "
                          f"dataset={cfg.dataset.name} has {num_classes} "
                          f"classes; pass dataset.metric=acc")
    generators = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    model = build_model(cfg, data.num_features, num_classes,
                        runs=cfgs if len(cfgs) > 1 else None)
    model.reset_parameters(generators)
    data, model = data.to(device), model.to(device)
    if device.type != 'cpu':  # dropout masks drawn on the device
        generators = [torch.Generator(device).manual_seed(c.seed)
                      for c in cfgs]
    log.info('%s: %d nodes, %d edges, %d features, %d classes, split %s',
             cfg.dataset.name, data.num_nodes, data.num_edges,
             data.num_features, num_classes, cfg.split)
    log.info('model: %s on %s', on_one_line(model), device)
    fingerprints = [split_fingerprint(*(data[f'{s}_mask'][r]
                                        for s in ('train', 'val', 'test')))
                    for r in range(len(cfgs))]
    leaked = split_leakage(data, cfgs, fingerprints)
    for r, (c, res) in enumerate(zip(cfgs, results)):
        with torch.device('meta'):  # the run as a model of its own
            alone = build_model(c, data.num_features, num_classes)
        res.update({
            'dataset': {'name': c.dataset.name, 'num_nodes': data.num_nodes,
                        'num_edges': data.num_edges,
                        'num_features': data.num_features,
                        'num_classes': num_classes, 'split': c.split,
                        'split_sizes': [int(data[f'{s}_mask'][r].sum())
                                        for s in ('train', 'val', 'test')],
                        'split_fingerprint': fingerprints[r],
                        'leakage': leaked[r],
                        'constant': constant_predictor(data, r, metric)},
            'model': str(alone),
            **({} if metric == 'acc' else {'metric': metric}),
            'num_parameters': sum(p.numel() for p in alone.parameters()),
        })
    restore_node_results(states, results)
    logs = [EpochLog(p.parent, csv_curve(res.get('curve'), cfg.train.lr,
                                         metric_names(metric)),
                     metric, columns=NODE_CURVE)
            for p, res in zip(paths, results)]
    resume = Resume(checkpoints, cfgs, cfg.train.get('checkpoint_every', 0)
                    if cfg.get('resume', False) else 0,
                    None if states[0] is None else states)
    start = time.perf_counter()
    with matmul_precision(cfg.train.precision, device):
        best_state = fit(model, data, results, cfg.train.epochs,
                         cfg.train.lr, cfg.train.weight_decay, generators,
                         cfg.train.progress, cfg.train.log_every,
                         cfg.train.precision, cfg.train.compile,
                         cfg.train.get('eval_every', 1), logs, metric,
                         optimizer_name(cfg), cuda_graph(cfg, device),
                         cfg.train.get('grad_every', 0), resume)
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    loop_s = time.perf_counter() - start  # the epochs alone (all runs)
    if cfg.select == 'best_val':
        model.load_state_dict(best_state)
    monitor = collapse.monitor(model) if cfg.collapse_metrics else None
    final = evaluate(model, data, monitor, metric=metric)
    train, val, val_loss, test = metric_names(metric)
    if monitor is not None:
        monitor.remove()
        norms = collapse.squared_norms(model, monitor.layers, lambda: model(
            data.x, model.prepare(data.x, data.edge_index)))
    for r, res in enumerate(results):
        if res.get('status') == 'failed':
            continue
        res.update(
            status='ok',
            select=cfg.select,
            loop_s=loop_s,
            selected_epoch=(res['best_epoch'] if cfg.select == 'best_val'
                            else cfg.train.epochs),
            **{k: final[k][r] for k in (train, val, test, val_loss)},
            test_predictions=final['test_predictions'][r],
        )
        if monitor is not None:
            records = collapse.run_records(
                monitor.records, None if model.runs is None else r,
                res['selected_epoch'])
            res['collapse'] = collapse.collapse_field(records)
            res['collapse']['squared_norm'] = norms[r]
            collapse.write_csv(paths[r].parent, records)
    return results
