r"""Node classification on one graph: full-batch training of a deep GCN
stack (the task of ``dataset=cora|citeseer|chameleon|squirrel|csbm`` and
of Platonov et al.'s ``chameleon_filtered|squirrel_filtered|minesweeper|
tolokers``). A dataset is scored by accuracy, or by ROC-AUC where its
config says ``metric: rocauc`` (:mod:`gnorm.train.scores`).

:func:`run` is called by :func:`gnorm.train.train` with the shared fields
of ``results.json`` already filled in. It trains a batch of runs as one
model from the parts of the task, each a module: the set-up
(:mod:`gnorm.train.node_setup`: config, graph, model, runs per model),
the evaluation (:mod:`gnorm.train.node_eval`) and the loop
(:mod:`gnorm.train.node_loop`); this module holds the run and its records
(the summary line, the curves, the leakage between splits).
"""
import logging
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from omegaconf import DictConfig

from gnorm.data.leakage import leakage, report, split_label
from gnorm.data.nodes import split_fingerprint
from gnorm.errors import ConfigError
from gnorm.train.checkpoints import (CHECKPOINT, load_node_checkpoints,
                                     restore_node_results, resume_groups)
import gnorm.train.collapse as collapse
from gnorm.train.common import run_name
from gnorm.train.epoch_log import NODE_CURVE, EpochLog
from gnorm.train.node_eval import constant_predictor, evaluate
from gnorm.train.node_loop import Resume, csv_row, fit
from gnorm.train.node_setup import (METRICS, SCORE_NAMES, batch_key,
                                    build_model, check_config, cuda_graph,
                                    dataset_metric, load_data,
                                    matmul_precision, max_runs, metric_names,
                                    optimizer_name)
from gnorm.train.progress import on_one_line

# The task's functions (gnorm.train.run; gnorm.train.graph has the same).
__all__ = ['check_config', 'batch_key', 'max_runs', 'run', 'summary']

log = logging.getLogger(__name__)


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
