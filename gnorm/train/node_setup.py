r"""What a node run trains on and with, before its first epoch: its
config checked (:func:`check_config`), its graph loaded once for the runs
that share it (:func:`load_data`), its model built with its norm
(:func:`build_model`), and how many runs of a multirun train as one model
in the device's memory (:func:`max_runs`).
"""
import contextlib
import copy
import json
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gnorm.data.nodes import check_split, load_dataset
from gnorm.errors import ConfigError
from gnorm.results.keys import batch_key as runs_key
from gnorm.train.common import (free_memory, is_int, one_line, option,
                                unknown_norm_keys)
from gnorm.train.scores import SCORES


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
