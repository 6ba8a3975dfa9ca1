r"""Node classification on one graph: full-batch training of a deep GCN
stack (the task of ``dataset=cora|citeseer|chameleon|squirrel|csbm``).

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in.
"""
import json
import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gnorm.data.nodes import SPLITS, load_dataset
from gnorm.errors import ConfigError
from gnorm.metrics import (
    dirichlet_energy,
    effective_rank,
    feature_cosine_similarity,
    feature_variance,
)
from gnorm.run_keys import drop_keys
from gnorm.train.progress import Progress
from gnorm.train.common import (free_memory, is_int, one_line, option,
                                 result_config)

log = logging.getLogger(__name__)

# Dataset config keys that are not arguments of gnorm.data.load_dataset.
_DATASET_META = ('name', 'default_split', 'task')
# Config keys in which runs that train as one model may differ.
BATCHED_KEYS = ('seed', 'split_index', 'norm.scale', 'tag')
CURVE = ('epoch', 'loss', 'train_acc', 'val_acc', 'val_loss', 'test_acc')


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
                          f"and takes model=gcn, got "
                          f"{option('model', cfg.model)}")
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
        raise ConfigError(f"cannot build the model: {one_line(e)}") from None


def batch_key(cfg: DictConfig) -> Optional[str]:
    r"""Runs with the same key can train as one model (they differ only in
    seed, split and norm scale); :obj:`None` for a run that trains alone."""
    if cfg.model.get('fusion') is not None:
        return None
    config = result_config(OmegaConf.to_container(cfg, resolve=True))
    return json.dumps(drop_keys(config, BATCHED_KEYS), sort_keys=True)


def memory_per_run(cfg: DictConfig, num_nodes: int, num_entries: int,
                   num_edges: int = 0) -> int:
    r"""A generous estimate of the bytes one run of :obj:`cfg` needs while
    it trains: every hidden layer keeps ~12 tensors of
    :obj:`[nodes, hidden]` floats for the backward pass (ContraNorm a few
    more; with non-neighbour negatives also a weight and two indices per
    edge, and a few :obj:`[edges, hidden]` tensors in passing), the input
    layer its kept entries."""
    hidden = cfg.model.hidden_channels + 1
    per_layer = 12 + (8 if 'Contra' in str(cfg.norm._target_) else 0)
    floats = (per_layer * num_nodes * hidden * cfg.layers
              + 3 * num_entries * hidden)
    if cfg.norm.get('negatives') == 'non_neighbors':
        edges = num_edges + num_nodes  # self-loops included
        floats += 6 * edges * cfg.layers + 3 * edges * hidden
    return 4 * floats


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


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, hidden: bool = False,
             ) -> Dict[str, Any]:
    r"""Per run: accuracies (fractions) and validation loss of
    :obj:`model` in evaluation mode (lists, one entry per run; the masks of
    :obj:`data` are :obj:`[runs, nodes]`); with :obj:`hidden`, also the
    output of every layer."""
    model.eval()
    out = model(data.x, data.edge_index, return_hidden=hidden)
    out, layers = out if hidden else (out, None)
    out = out.view(-1, *out.shape[-2:])  # [runs, nodes, classes]
    correct = (out.argmax(dim=-1) == data.y).float()  # [runs, nodes]
    metrics = {}
    for split in ('train', 'val', 'test'):
        mask = data[f'{split}_mask'].float()
        metrics[f'{split}_acc'] = (correct * mask).sum(-1) / mask.sum(-1)
    metrics['val_loss'] = masked_cross_entropy(out, data.y, data.val_mask)
    result = {k: v.tolist() for k, v in metrics.items()}
    if hidden:
        result['layers'] = [h.view(-1, *h.shape[-2:]) for h in layers]
    return result


def masked_cross_entropy(out: torch.Tensor, y: torch.Tensor,
                         mask: torch.Tensor) -> torch.Tensor:
    r"""Per run, the mean cross-entropy of :obj:`out` (:obj:`[runs,
    nodes, classes]`) over the nodes of :obj:`mask` (:obj:`[runs,
    nodes]`), computed for those nodes only."""
    run, node = mask.nonzero(as_tuple=True)  # sorted by run
    loss = F.cross_entropy(out[run, node], y[node], reduction='none')
    total = loss.new_zeros(out.size(0)).index_add(0, run, loss)
    return total / torch.bincount(run, minlength=out.size(0))  # [runs]


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


def _better(metrics: Dict[str, float], best: Optional[Dict[str, float]],
            ) -> bool:
    r"""Highest validation accuracy, then lowest validation loss."""
    return best is None or (metrics['val_acc'], -metrics['val_loss']) > (
        best['val_acc'], -best['val_loss'])


def fit(model: torch.nn.Module, data, results: List[Dict[str, Any]],
        epochs: int, lr: float, weight_decay: float,
        generators: Sequence[torch.Generator], progress: bool = True,
        log_every: int = 10) -> Dict[str, torch.Tensor]:
    r"""Full-batch Adam of the runs of :obj:`model` (one per entry of
    :obj:`results`), each on its own training nodes (the masks of
    :obj:`data` are :obj:`[runs, nodes]`) with its own dropout masks
    (:obj:`generators`). The loss is the sum of the runs' losses, so each
    run gets its own gradient, and Adam acts element-wise: a run trains as
    it would alone. Keeps each run's progress in its :obj:`results` as it
    goes, so that an interrupted or failed run can be recorded: ``curve``
    (per epoch ``epoch``, ``loss``, ``train_acc``, ``val_acc``,
    ``val_loss``, ``test_acc``), ``best_epoch`` and ``best`` (the metrics
    of the best-validation epoch so far: highest accuracy, then lowest
    loss). Returns the weights of every run's best epoch. A run whose loss
    stops being finite gets ``status: failed`` and stops counting."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr,
                                 weight_decay=weight_decay)
    runs = len(results)
    for r in results:
        r.update(curve={k: [] for k in CURVE}, best_epoch=0, best=None)
    best_state = {k: v.clone() for k, v in model.state_dict().items()}
    alive = torch.ones(runs, dtype=torch.bool, device=data.y.device)
    desc = 'train' if runs == 1 else f'train (mean of {runs} runs)'
    with Progress(epochs, every=log_every, desc=desc, bar=progress) as bar:
        for epoch in range(1, epochs + 1):
            model.train()
            optimizer.zero_grad()
            out = model(data.x, data.edge_index, generators=generators)
            losses = masked_cross_entropy(out.view(-1, *out.shape[-2:]),
                                          data.y, data.train_mask)
            finite = torch.isfinite(losses)
            torch.where(finite & alive, losses, 0.0).sum().backward()
            optimizer.step()

            metrics = evaluate(model, data)
            values = losses.tolist()
            for r, res in enumerate(results):
                if res.get('status') == 'failed':
                    continue
                if not math.isfinite(values[r]):
                    res.update(status='failed', error=(
                        f"the training loss became {values[r]} at epoch "
                        f"{epoch}; lower train.lr, change the norm or its "
                        f"scale"))
                    alive[r] = False
                    continue
                row = {'epoch': epoch, 'loss': values[r],
                       **{k: v[r] for k, v in metrics.items()}}
                for key, column in res['curve'].items():
                    column.append(row[key])
                if _better(row, res['best']):
                    for key, value in model.state_dict().items():
                        if model.runs is None:
                            best_state[key].copy_(value)
                        else:
                            best_state[key][r].copy_(value[r])  # [runs, ...]
                    res.update(best_epoch=epoch, best={k: row[k] for k in (
                        'train_acc', 'val_acc', 'val_loss', 'test_acc')})
            shown = [r for r in range(runs) if results[r].get('status')
                     != 'failed'] or [0]
            bar.update(epoch, **{k: sum(v[r] for r in shown) / len(shown)
                                 for k, v in (('loss', values),
                                              ('val_acc', metrics['val_acc']),
                                              ('test_acc',
                                               metrics['test_acc']))})
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


def load_runs(cfgs: Sequence[DictConfig]):
    r"""The graph of the runs :obj:`cfgs` (which differ at most in seed,
    split index and norm), with each run's split: masks :obj:`[runs,
    nodes]`. Raises :class:`ConfigError` if the runs do not share their
    graph."""
    loaded: Dict[tuple, Any] = {}
    datas = []
    for c in cfgs:  # runs of one split share its loading
        key = (c.split, c.split_index, c.seed if c.split == 'random' else 0)
        if key not in loaded:
            loaded[key] = load_data(c)
        datas.append(loaded[key])
    data = datas[0]
    for other in datas[1:]:
        if other is not data and not all(torch.equal(data[k], other[k])
                   for k in ('x', 'edge_index', 'y')):
            raise ConfigError("the runs of one batch must share their graph "
                              "and features; pass batch_runs=1")
    for split in ('train', 'val', 'test'):
        data[f'{split}_mask'] = torch.stack([d[f'{split}_mask']
                                             for d in datas])
    return data


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
    collapse metrics. A run whose loss stops being finite is marked
    ``status: failed`` (:func:`gnorm.train.run.train_runs` records it)."""
    cfg = cfgs[0]
    data = load_runs(cfgs)
    num_classes = int(data.y.max()) + 1
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
    log.info('model: %s on %s', model, device)
    for r, (c, res) in enumerate(zip(cfgs, results)):
        with torch.device('meta'):  # the run as a model of its own
            alone = build_model(c, data.num_features, num_classes)
        res.update({
            'dataset': {'name': c.dataset.name, 'num_nodes': data.num_nodes,
                        'num_edges': data.num_edges,
                        'num_features': data.num_features,
                        'num_classes': num_classes, 'split': c.split,
                        'split_sizes': [int(data[f'{s}_mask'][r].sum())
                                        for s in ('train', 'val', 'test')]},
            'model': str(alone),
            'num_parameters': sum(p.numel() for p in alone.parameters()),
        })
    best_state = fit(model, data, results, cfg.train.epochs, cfg.train.lr,
                     cfg.train.weight_decay, generators, cfg.train.progress,
                     cfg.train.log_every)
    if cfg.select == 'best_val':
        model.load_state_dict(best_state)
    final = evaluate(model, data, hidden=cfg.collapse_metrics)
    for r, res in enumerate(results):
        if res.get('status') == 'failed':
            continue
        res.update(
            status='ok',
            select=cfg.select,
            selected_epoch=(res['best_epoch'] if cfg.select == 'best_val'
                            else cfg.train.epochs),
            **{k: final[k][r] for k in ('train_acc', 'val_acc', 'test_acc',
                                        'val_loss')},
        )
        if cfg.collapse_metrics:
            res['collapse'] = collapse_metrics(
                [h[r] for h in final['layers']], data.edge_index)
    return results
