r"""A Graphormer training step, the cases of ``experiments/bench/graphormer*.py``
and of the GPU check's Graphormer step.

Graphormer-slim (:func:`model`: 12 layers, hidden 80, 8 heads; multi-hop
max distance :data:`MAX_DIST`) on the graphs of :func:`graphs`, batched
by :func:`loader` as ``gnorm.train.graph`` batches them; :func:`measure`
times one AdamW step apart from its data. Every function imports gnorm's
modules when it runs, so that a child process that switched to another
revision's code (:func:`gnorm.bench.use_code`) measures that revision."""
import functools
import os
import statistics
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from gnorm.bench import PeakMemory, alternate, timed, wall_and_cpu

MAX_DIST = {'zinc': 20, 'molhiv': 5}
# The training loss of each: an MAE, the BCE behind a ROC-AUC.
METRIC = {'zinc': 'mae', 'molhiv': 'rocauc'}
# (dataset, batch size, dtype, norm, bucket): one measured setting.
Key = Tuple[str, int, str, str, int]


def graphs(name: str, mirror: str, root: str):
    r"""``zinc``: the ZINC-subset fixture's 2,000 validation and test
    graphs; ``molhiv``: ogbg-molhiv's training graphs (processed into
    :obj:`root` from :obj:`mirror`)."""
    from gnorm.data.molecules import load_molhiv, zinc_fixture
    if name == 'zinc':
        return zinc_fixture(mirror, 'val') + zinc_fixture(mirror, 'test')
    dataset, split = load_molhiv(root, mirror)
    return dataset[split['train']]


def loader(graphs, max_dist: int, **batching):
    r"""The training loader of :mod:`gnorm.train.graph_batches` (each batch
    with its token layout, collated as training collates it), or PyG's
    plain :class:`~torch_geometric.loader.DataLoader` in a version that
    has no layout."""
    try:
        from gnorm.train.graph_batches import LayoutCollater
    except ImportError:  # a version before the token layout
        from torch_geometric.loader import DataLoader
        return DataLoader(graphs, **batching)
    return torch.utils.data.DataLoader(
        graphs, collate_fn=LayoutCollater(graphs, max_dist), **batching)


def model(name: str, norm: str, dropout: float = 0.1) -> torch.nn.Module:
    r"""Graphormer-slim for dataset :obj:`name` with :obj:`norm`
    (``layernorm`` or ``sepnorm``), the same :obj:`dropout` on the tokens
    and the attention weights."""
    from gnorm.models import Graphormer
    from gnorm.nn import SepNorm
    features = 'zinc' if name == 'zinc' else 'ogb'
    factory = functools.partial(SepNorm) if norm == 'sepnorm' else None
    return Graphormer(1, features=features, num_layers=12,
                      hidden_channels=80, num_heads=8, ffn_channels=80,
                      dropout=dropout, input_dropout=dropout,
                      attention_dropout=dropout, max_dist=MAX_DIST[name],
                      norm=factory)


def loss_function() -> Callable:
    r"""``gnorm.train.graph``'s loss of one batch in the code this process
    imports: ``batch_loss``, named ``_loss`` in the revisions before it
    (a baseline of ``experiments/bench/graphormer.py``)."""
    import gnorm.train.graph as graph
    return getattr(graph, 'batch_loss', None) or getattr(graph, '_loss')


def measure(name: str, batch_size: int, dtype: str, norm: str, *,
            device: str, mirror: str, root: str, steps: int,
            bucket: int = 0, model_fn: Optional[Callable] = None,
            profile: Optional[Callable] = None) -> Dict[str, Any]:
    r"""One measurement of the gnorm this process imports: per-step data
    and model times over :obj:`steps` steps after a warm-up, peak memory,
    batch statistics. :obj:`bucket` > 0 draws size-bucketed batches
    (``train.bucket_chunk``); :obj:`model_fn` (``(name, norm) ->
    module``, default :func:`model`) builds another model, a smaller or
    a compiled one; :obj:`profile` is called with the step and a batch."""
    from gnorm.data.molecules import graph_sizes
    from gnorm.train.graph import forward
    loss = loss_function()
    device = torch.device(device)
    metric = METRIC[name]
    found = graphs(name, mirror, root)
    torch.manual_seed(0)  # the same batches and weights in every version
    if bucket:
        from gnorm.train.graph_batches import SizeBuckets
        batching = dict(batch_sampler=SizeBuckets(graph_sizes(found),
                                                  batch_size, bucket))
    else:
        batching = dict(batch_size=batch_size, shuffle=True, drop_last=True)
    batches_of = loader(found, MAX_DIST[name], **batching)
    net = (model_fn or model)(name, norm).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    # The loader epoch after epoch; each batch fetched, collated and moved.
    stream = (batch for _ in range(steps + 1) for batch in batches_of)
    data_times, batches = zip(*(timed(lambda: next(stream).to(device),
                                      device=device)
                                for _ in range(steps + 1)))
    net.eval()
    with torch.no_grad():
        check = float(loss(forward(net, batches[0]), batches[0].y, metric))
    net.train()

    def step(batch):
        with torch.autocast(device.type, torch.bfloat16,
                            enabled=dtype == 'bfloat16'):
            value = loss(forward(net, batch), batch.y, metric)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
    with PeakMemory(device) as peak:  # wall and CPU time of each step
        times = alternate({'step': step}, steps, inputs=batches,
                          device=device, clock=wall_and_cpu)['step']
    if profile:
        profile(step, batches[-1])
    return {'data_times': list(data_times[1:]),
            'model_times': [wall for wall, _ in times],
            'cpu_times': [cpu for _, cpu in times],
            'peak_gib': peak.gib, 'check_loss': check,
            'mean_nodes': statistics.mean(b.num_nodes / b.num_graphs
                                          for b in batches),
            'mean_max_nodes': statistics.mean(
                int(torch.bincount(b.batch).max()) for b in batches),
            'graphs_per_step': statistics.mean(b.num_graphs
                                               for b in batches)}


def row(key: Key, runs: List[Dict[str, Any]], version: str = 'after',
        rev: str = 'working tree', device: str = 'cpu') -> Dict[str, Any]:
    r"""The table row of one version (``before``: git revision
    :obj:`rev`; ``after``: the working tree) from its measurements
    :obj:`runs` (:func:`measure`; medians over all their steps)."""
    name, batch_size, dtype, norm, bucket = key
    data = statistics.median(t for r in runs for t in r['data_times'])
    step_s = statistics.median(t for r in runs for t in r['model_times'])
    graphs_per_step = runs[0]['graphs_per_step']
    return {
        'dataset': name, 'batch_size': batch_size, 'dtype': dtype,
        'norm': norm, 'bucket': bucket, 'version': version, 'rev': rev,
        'device': device, 'data_s': data, 'model_s': step_s,
        'model_cpu_s': statistics.median(t for r in runs
                                         for t in r['cpu_times']),
        'step_s': data + step_s, 'collation_share': data / (data + step_s),
        'graphs_per_s': graphs_per_step / (data + step_s),
        'model_graphs_per_s': graphs_per_step / step_s,
        'peak_gib': max(r['peak_gib'] for r in runs),
        'check_loss': runs[0]['check_loss'],
        'mean_nodes': runs[0]['mean_nodes'],
        'mean_max_nodes': runs[0]['mean_max_nodes'],
        'rounds': len(runs), 'threads': torch.get_num_threads(),
        'load_avg': os.getloadavg()[0]}
