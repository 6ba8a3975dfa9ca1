r"""Node classification on one graph: full-batch training of a deep GCN
stack (the task of ``dataset=cora|citeseer|chameleon|squirrel|csbm``).

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in.
"""
import copy
import logging
import math
from pathlib import Path
from typing import Any, Dict, List

import torch
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gnorm.data.nodes import SPLITS, load_dataset
from gnorm.errors import ConfigError, TrainingError
from gnorm.metrics import (
    dirichlet_energy,
    effective_rank,
    feature_cosine_similarity,
    feature_variance,
)
from gnorm.train.progress import Progress
from gnorm.train.run import is_int, one_line

log = logging.getLogger(__name__)

# Dataset config keys that are not arguments of gnorm.data.load_dataset.
_DATASET_META = ('name', 'default_split', 'task')


def check_config(cfg: DictConfig) -> None:
    r"""Raises :class:`ConfigError` with a one-line fix for bad values of
    the node-level keys."""
    if not is_int(cfg.layers) or cfg.layers < 1:
        raise ConfigError(f"layers must be an integer >= 1, got "
                          f"{cfg.layers!r}; pass e.g. layers=2")
    if cfg.split not in SPLITS:
        raise ConfigError(f"unknown split={cfg.split!r}; pass one of "
                          f"{', '.join(SPLITS)}")
    if not is_int(cfg.split_index):
        raise ConfigError(f"split_index must be an integer, got "
                          f"{cfg.split_index!r}")
    if cfg.model._target_ != 'gnorm.models.DeepGCN':
        raise ConfigError(f"dataset={cfg.dataset.name} is a node-level task "
                          f"and takes model=gcn, got {cfg.model._target_}")
    if cfg.norm._target_ == 'gnorm.nn.SepNorm':
        raise ConfigError("norm=sepnorm normalises a graph token apart from "
                          "the others and needs model=graphormer on a "
                          "graph-level dataset (molhiv, zinc); pass another "
                          "norm for node classification")


def load_data(cfg: DictConfig):
    r"""The graph of :obj:`cfg.dataset` with the split :obj:`cfg` asks for,
    its raw files copied from :obj:`cfg.data.mirror` or downloaded."""
    options = {k: v for k, v in OmegaConf.to_container(
        cfg.dataset, resolve=True).items() if k not in _DATASET_META}
    return load_dataset(cfg.dataset.name, cfg.data.root, cfg.data.mirror,
                        split=cfg.split, split_index=cfg.split_index,
                        seed=cfg.seed, test_set=cfg.test_set, **options)


def build_model(cfg: DictConfig, in_channels: int,
                out_channels: int) -> torch.nn.Module:
    r"""Instantiates :obj:`cfg.model` with the norm of :obj:`cfg.norm`
    (instantiated partially, the model passes the width)."""
    try:
        norm = instantiate(cfg.norm, _partial_=True)
        return instantiate(cfg.model, in_channels=in_channels,
                           out_channels=out_channels, norm=norm)
    except (InstantiationException, ValueError, TypeError) as e:
        raise ConfigError(f"cannot build the model: {one_line(e)}") from None


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, hidden: bool = False,
             ) -> Dict[str, Any]:
    r"""Accuracies (fractions) and validation loss of :obj:`model` in
    evaluation mode; with :obj:`hidden`, also the output of every layer."""
    model.eval()
    out = model(data.x, data.edge_index, return_hidden=hidden)
    out, layers = out if hidden else (out, None)
    pred = out.argmax(dim=-1)
    result = {}
    for split in ('train', 'val', 'test'):
        mask = data[f'{split}_mask']
        result[f'{split}_acc'] = float((pred[mask] == data.y[mask]).float()
                                       .mean())
    result['val_loss'] = float(F.cross_entropy(out[data.val_mask],
                                               data.y[data.val_mask]))
    if hidden:
        result['layers'] = layers
    return result


@torch.no_grad()
def collapse_metrics(layers: List[torch.Tensor],
                     edge_index: torch.Tensor) -> Dict[str, List[float]]:
    r"""Per-layer collapse metrics of the full graph: effective rank, mean
    pairwise cosine similarity, variance (mean squared distance of a node's
    features to the mean node) and Dirichlet energy."""
    rows = {'layer': [], 'effective_rank': [], 'cosine_similarity': [],
            'variance': [], 'dirichlet_energy': []}
    for i, h in enumerate(layers, start=1):
        h = h.double()
        rows['layer'].append(i)
        rows['effective_rank'].append(float(effective_rank(h)))
        rows['cosine_similarity'].append(float(feature_cosine_similarity(h)))
        rows['variance'].append(float(feature_variance(h, reduce='mean')))
        rows['dirichlet_energy'].append(float(dirichlet_energy(h,
                                                               edge_index)))
    return rows


def fit(model: torch.nn.Module, data, results: Dict[str, Any], epochs: int,
        lr: float, weight_decay: float, progress: bool = True,
        log_every: int = 10) -> Dict[str, Any]:
    r"""Full-batch Adam on the training nodes. Keeps its progress in
    :obj:`results` as it goes, so that an interrupted or failed run can be
    recorded: ``curve`` (per epoch ``epoch``, ``loss``, ``train_acc``,
    ``val_acc``, ``val_loss``, ``test_acc``), ``best_epoch`` and ``best``
    (the metrics of the best-validation epoch so far: highest accuracy,
    then lowest loss). Returns the weights of the best epoch. Raises
    :class:`TrainingError` if the loss stops being finite."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr,
                                 weight_decay=weight_decay)
    curve = {k: [] for k in ('epoch', 'loss', 'train_acc', 'val_acc',
                             'val_loss', 'test_acc')}
    results.update(curve=curve, best_epoch=0, best=None)
    best_state = None
    with Progress(epochs, every=log_every, bar=progress) as bar:
        for epoch in range(1, epochs + 1):
            model.train()
            optimizer.zero_grad()
            out = model(data.x, data.edge_index)
            loss = F.cross_entropy(out[data.train_mask],
                                   data.y[data.train_mask])
            value = loss.item()
            if not math.isfinite(value):
                raise TrainingError(f"the training loss became {value} at "
                                    f"epoch {epoch}; lower train.lr, change "
                                    f"the norm or its scale")
            loss.backward()
            optimizer.step()

            metrics = {'epoch': epoch, 'loss': value,
                       **evaluate(model, data)}
            for key, column in curve.items():
                column.append(metrics[key])
            best = results['best']
            if best is None or (metrics['val_acc'], -metrics['val_loss']) > (
                    best['val_acc'], -best['val_loss']):
                best_state = copy.deepcopy(model.state_dict())
                results.update(best_epoch=epoch, best={
                    k: metrics[k] for k in ('train_acc', 'val_acc',
                                            'val_loss', 'test_acc')})
            bar.update(epoch, loss=value, val_acc=metrics['val_acc'],
                       test_acc=metrics['test_acc'])
    return best_state


def summary(results: Dict[str, Any], cfg: DictConfig) -> str:
    r"""The one line printed at the end of a run."""
    norm = results.get('choices', {}).get(
        'norm', str(cfg.norm._target_).rsplit('.', 1)[-1])
    parts = [f"{cfg.dataset.name} L={cfg.layers} {norm} seed={cfg.seed}",
             f"epoch {results['selected_epoch']} ({cfg.select})",
             'acc ' + ' '.join(f"{split} {100 * results[f'{split}_acc']:.2f}"
                               for split in ('train', 'val', 'test'))]
    if 'collapse' in results:
        erank = results['collapse']['effective_rank']
        parts.append(f'erank last {erank[-1]:.2f}' + (
            f' hidden {erank[-2]:.2f}' if len(erank) > 1 else ''))
    parts += [f"{results['runtime_s']:.1f}s {results['device']}",
              str(results['path'])]
    return ' | '.join(parts)


def run(cfg: DictConfig, device: torch.device, results: Dict[str, Any],
        path: Path) -> Dict[str, Any]:
    r"""Loads the graph, trains :obj:`cfg.model` on it and returns
    :obj:`results` completed with the metrics of the selected epoch, the
    per-epoch curve and (with :obj:`cfg.collapse_metrics`) per-layer
    collapse metrics. Raises :class:`TrainingError` if the loss stops being
    finite (:func:`gnorm.train.train` records the failure)."""
    data = load_data(cfg)
    num_classes = int(data.y.max()) + 1
    model = build_model(cfg, data.num_features, num_classes)
    data, model = data.to(device), model.to(device)
    log.info('%s: %d nodes, %d edges, %d features, %d classes, split %s '
             '(%d/%d/%d)', cfg.dataset.name, data.num_nodes, data.num_edges,
             data.num_features, num_classes, cfg.split,
             int(data.train_mask.sum()), int(data.val_mask.sum()),
             int(data.test_mask.sum()))
    log.info('model: %s on %s', model, device)
    results.update({
        'dataset': {'name': cfg.dataset.name, 'num_nodes': data.num_nodes,
                    'num_edges': data.num_edges,
                    'num_features': data.num_features,
                    'num_classes': num_classes, 'split': cfg.split,
                    'split_sizes': [int(data[f'{s}_mask'].sum())
                                    for s in ('train', 'val', 'test')]},
        'model': str(model),
        'num_parameters': sum(p.numel() for p in model.parameters()),
    })
    best_state = fit(model, data, results, cfg.train.epochs, cfg.train.lr,
                     cfg.train.weight_decay, cfg.train.progress,
                     cfg.train.log_every)
    if cfg.select == 'best_val':
        model.load_state_dict(best_state)
        selected = results['best_epoch']
    else:
        selected = cfg.train.epochs
    final = evaluate(model, data, hidden=cfg.collapse_metrics)
    results.update(
        status='ok',
        select=cfg.select,
        selected_epoch=selected,
        train_acc=final['train_acc'],
        val_acc=final['val_acc'],
        test_acc=final['test_acc'],
        val_loss=final['val_loss'],
    )
    if cfg.collapse_metrics:
        results['collapse'] = collapse_metrics(final['layers'],
                                               data.edge_index)
    return results
