r"""The collapse monitor's cost beside training, the cases of
``experiments/bench/monitor.py`` and of the GPU check's monitor step.

A case trains two copies of one model (the same seed) side by side, one
never monitored and one with a :class:`~gnorm.monitor.CollapseMonitor`
attached throughout, and times in rotating rounds after a warm-up
(:func:`gnorm.bench.alternate`): a training epoch of each, the
evaluation forward pass without a monitor and inside
``monitor.record(...)``. :func:`overheads` turns the times into the
share recording adds to a training loop."""
import functools
import inspect
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from gnorm.bench import alternate, medians, timed
from gnorm.monitor import METRICS, CollapseMonitor

# The cheap subset measured beside all metrics.
TWO_METRICS = ['effective_rank', 'dirichlet_energy']
DEFAULT_SAMPLES = inspect.signature(CollapseMonitor).parameters[
    'max_samples'].default
Setup = Callable[[], Tuple[Callable[[], None], Callable[[], None],
                           torch.nn.Module]]


def neighbor_loader(data, num_neighbors: List[int], batch_size: int,
                    shuffle: bool = True, seed: int = 0):
    r"""PyG's :class:`~torch_geometric.loader.NodeLoader` of
    :class:`gnorm.data.TorchNeighborSampler` batches: what
    :obj:`NeighborLoader(data, num_neighbors, batch_size=...)` gives."""
    from torch_geometric.loader import NodeLoader

    from gnorm.data import TorchNeighborSampler
    return NodeLoader(data, node_sampler=TorchNeighborSampler(
        data, num_neighbors, seed=seed), batch_size=batch_size,
        shuffle=shuffle)


def load_cora(root: str):
    r"""Cora with its public split, from ``$GNORM_DATA_MIRROR`` where
    set, into :obj:`root`."""
    from gnorm.data import load_dataset
    mirror = os.environ.get('GNORM_DATA_MIRROR') or None
    return load_dataset('cora', root=root, mirror=mirror, split='public')


def overhead(name: str, setup: Setup, record_args: Dict[str, Any],
             repeats: int, metrics: Optional[List[str]] = None,
             device='cpu') -> Dict[str, Any]:
    r"""Median seconds of the measurements, in rotating order on
    :obj:`device`. :obj:`setup` makes one (train_epoch, forward, model)
    triple; two are made with the same seed: one never monitored, one
    with a monitor attached for the whole run (its hooks idle during
    training, its prepared inputs kept from one record to the next, as in
    a training loop)."""
    train_plain, forward_plain, _ = setup()
    train_hooked, forward_hooked, hooked = setup()
    monitor = CollapseMonitor(hooked, **({'metrics': metrics}
                                         if metrics else {}))

    def bare_forward():
        with torch.no_grad():
            forward_plain()

    def recorded():
        with torch.no_grad(), monitor.record(**record_args):
            forward_hooked()

    # The first record prepares (graph count, drawn nodes, hop distances).
    first, _ = timed(recorded, device=device)
    cases = {'train': train_plain, 'train_hooked': train_hooked,
             'forward': bare_forward, 'record': recorded}
    med = medians(alternate(cases, repeats, device=device))
    med['first_record'] = first
    per_record = len(monitor.layers) * len(monitor.metrics)
    monitor.remove()
    return {'model': name, 'layers': len(monitor.layers), 'repeats': repeats,
            'metrics': list(monitor.metrics), 'records': per_record,
            **{f'{k}_s': v for k, v in med.items()}}


def deep_gcn(data, layers: int = 32):
    r"""The cases' DeepGCN (hidden 32, dropout 0.2) on :obj:`data`,
    seed 0, on :obj:`data`'s device."""
    from gnorm.models import DeepGCN
    torch.manual_seed(0)
    return DeepGCN(data.num_features, int(data.y.max()) + 1,
                   num_layers=layers, hidden_channels=32,
                   dropout=0.2).to(data.x.device)


def deep_gcn_case(data, repeats: int, metrics: Optional[List[str]] = None,
                  layers: int = 32) -> Dict[str, Any]:
    r""":func:`overhead` of a full-batch :func:`deep_gcn` (Adam, lr
    0.01), the monitor on its layer outputs."""
    train = data.train_mask.nonzero().flatten()

    def setup():
        model = deep_gcn(data, layers)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)

        def train_epoch():
            model.train()
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            F.cross_entropy(out[train], data.y[train]).backward()
            opt.step()

        def forward():
            model.eval()
            model(data.x, data.edge_index)
        return train_epoch, forward, model

    name = f'DeepGCN, {layers} layers, full batch'
    if metrics:
        name += f' ({", ".join(metrics)} only)'
    return overhead(name, setup, dict(step=0, edge_index=data.edge_index),
                    repeats, metrics, data.x.device)


def gat_case(data, repeats: int) -> Dict[str, Any]:
    r""":func:`overhead` of PyG's ``GAT`` (2 layers, hidden 64, 4 heads)
    trained on neighbour-sampled batches (128 seeds, 10 neighbours a hop),
    the monitor on its two ``GATConv`` layers recording one fixed
    batch."""
    from torch_geometric.nn.models import GAT
    fixed = next(iter(neighbor_loader(data, [10, 10], batch_size=128,
                                      shuffle=False, seed=1)))

    def setup():
        torch.manual_seed(0)
        model = GAT(data.num_features, 64, 2, int(data.y.max()) + 1,
                    heads=4)
        opt = torch.optim.Adam(model.parameters(), lr=0.005)
        loader = neighbor_loader(data, [10, 10], batch_size=128,
                                 shuffle=True)

        def train_epoch():
            model.train()
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
                opt.step()

        def forward():
            model.eval()
            model(fixed.x, fixed.edge_index)
        return train_epoch, forward, model

    return overhead('GAT, 2 layers, neighbour-sampled batches', setup,
                    dict(step=0, edge_index=fixed.edge_index,
                         num_seed_nodes=fixed.batch_size), repeats)


def metric_costs(data, repeats: int) -> Dict[str, float]:
    r"""Seconds each metric alone adds to a record of the 32-layer
    DeepGCN's evaluation: median record minus median forward, the
    measurements in rotating order (one monitor per metric; the others'
    hooks idle)."""
    model = deep_gcn(data).eval()
    monitors = {m: CollapseMonitor(model, metrics=[m]) for m in METRICS}

    def forward():
        with torch.no_grad():
            model(data.x, data.edge_index)

    def recorded(monitor):
        with torch.no_grad(), monitor.record(step=0,
                                             edge_index=data.edge_index):
            model(data.x, data.edge_index)

    cases = {'forward': forward, **{
        m: functools.partial(recorded, monitor)
        for m, monitor in monitors.items()}}
    for m in METRICS:  # the first record prepares the inputs
        cases[m]()
    times = medians(alternate(cases, repeats, device=data.x.device))
    for monitor in monitors.values():
        monitor.remove()
    return {m: times[m] - times['forward'] for m in METRICS}


def overheads(row: Dict[str, Any]) -> Dict[str, Any]:
    r"""Adds to a case's :obj:`row` the time recording adds to a loop,
    as a fraction of the loop's: recording its evaluation (the metrics
    alone: the forward pass is the evaluation's) or adding a forward pass
    of its own, every epoch and every 10th."""
    train, forward, record = row['train_s'], row['forward_s'], \
        row['record_s']
    for k in (1, 10):
        row[f'eval_every_{k}'] = (record - forward) / (k * (train + forward))
        row[f'every_{k}'] = record / (k * train)
    return row
