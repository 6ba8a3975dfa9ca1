r"""The checks and the model of graph-level runs: :func:`check_config`
refuses, before any data is read, every setting of the graph-level keys
that would fail or compute something else than asked, with a one-line
fix; :func:`build_model` instantiates the Graphormer and its norm.
"""
import inspect

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from gnorm.data.molecules import GRAPH_DATASETS, import_ogb
from gnorm.errors import ConfigError
from gnorm.models import DeepGCN, Graphormer
from gnorm.nn import SepNorm
from gnorm.train.common import is_int, one_line, option, unknown_norm_keys

PRECISIONS = ('bf16', 'fp32')
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
    if t.get('cuda_graph', False):
        raise ConfigError("train.cuda_graph replays the full-batch node step "
                          "(one shape); a graph task's batches change shape, "
                          "so pass train.cuda_graph=false (train.compile "
                          "serves graph tasks)")
    if t.get('compile', False) and cfg.norm.get('_target_') in _HOST_NORMS:
        raise ConfigError(f"train.compile=true compiles the Graphormer in one "
                          f"graph, which {option('norm', cfg.norm)} cannot "
                          f"join (it reads the largest graph's size on the "
                          f"host); pass train.compile=false or norm=layernorm"
                          f" or sepnorm")
    model = build_model(cfg)  # bad model or norm options, before the data
    if t.batch_size < min_batch_graphs(model):
        raise ConfigError(f"train.batch_size={t.batch_size} trains on one "
                          f"graph per batch, and {option('norm', cfg.norm)} "
                          f"normalises the graph token over the graphs of a "
                          f"batch; pass train.batch_size >= 2 or "
                          f"norm.virtual_norm=layer")


def min_batch_graphs(model: torch.nn.Module) -> int:
    r"""The fewest graphs a training batch of :obj:`model` may hold: 2
    when a norm takes batch statistics over the graphs of a batch
    (:class:`~gnorm.nn.SepNorm` with :obj:`virtual_norm="batch"`: the
    graph tokens' BatchNorm), else 1."""
    return 2 if any(isinstance(m, SepNorm) and m.virtual_norm == 'batch'
                    for m in model.modules()) else 1


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
        raise ConfigError(f"cannot build the model: "
                          f"{unknown_norm_keys(cfg.norm) or one_line(e)}"
                          ) from None
