"""Training throughput and peak memory of gnorm's Graphormer per batch size.

For each dataset, batch size, dtype and norm, one training step (forward,
backward, AdamW, as in ``gnorm.train.graph``) of Graphormer-slim (12 layers,
hidden 80, 8 heads; multi-hop max distance 20 on ZINC, 5 on molhiv) is
timed apart from the data pipeline, median over ``--steps`` steps after one
warm-up step:

* data: fetching the graphs from the dataset and collating them into a PyG
  batch (``DataLoader``, shuffled, ``num_workers=0``) and moving it to the
  device;
* model: the step itself, on already collated batches.

``step = data + model`` is what one process without loader workers spends
per batch; ``collation share = data / step``; throughput = batch size /
step (graphs/s), and the model-only throughput = batch size / model (what
a run reaches when ``train.num_workers`` hides the data pipeline).

Graphs: ``zinc`` = the exact ZINC-subset validation and test graphs (2,000
graphs, about 23 atoms) from the offline fixture; ``molhiv`` = the ogbg-molhiv
training graphs (about 26 atoms, up to 222).

On CPU each measurement runs in its own subprocess, so its peak memory
(max RSS above the process's state before the measurement) is its own; on
CUDA peak memory is ``torch.cuda.max_memory_allocated``. Results go to
``<out>/bench_graphormer_<device>.jsonl`` (one line per measurement; an
interrupted run resumes where it stopped), ``.md`` (the generated table)
and ``.png`` (throughput vs batch size).

    python experiments/bench_graphormer.py               # CPU, fp32
    python experiments/bench_graphormer.py --device cuda \
        --dtypes float32 bfloat16 --batch-sizes 64 128 256 512
    python experiments/bench_graphormer.py --report-only  # table and plot
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_layers import machine

ROOT = Path(__file__).resolve().parents[1]
MAX_DIST = {'zinc': 20, 'molhiv': 5}
NORMS = ('layernorm', 'sepnorm')


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _graphs(name: str, mirror: str, root: str):
    from gnorm.data.molecules import load_molhiv, zinc_fixture
    if name == 'zinc':
        return zinc_fixture(mirror, 'val') + zinc_fixture(mirror, 'test')
    dataset, split = load_molhiv(root, mirror)
    return dataset[split['train']]


def _model(name: str, norm: str):
    import functools
    from gnorm.models import Graphormer
    from gnorm.nn import SepNorm
    features = 'zinc' if name == 'zinc' else 'ogb'
    factory = functools.partial(SepNorm) if norm == 'sepnorm' else None
    return Graphormer(1, features=features, num_layers=12,
                      hidden_channels=80, num_heads=8, ffn_channels=80,
                      max_dist=MAX_DIST[name], norm=factory)


def measure(args, name: str, batch_size: int, dtype: str, norm: str) -> dict:
    r"""One measurement, in this process."""
    from torch_geometric.loader import DataLoader
    from gnorm.train.graph import _loss, forward
    device = torch.device(args.device)
    metric = 'mae' if name == 'zinc' else 'rocauc'
    graphs = _graphs(name, args.mirror, args.root)
    loader = DataLoader(graphs, batch_size, shuffle=True, drop_last=True)
    torch.manual_seed(0)
    model = _model(name, norm).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = dtype == 'bfloat16'

    def sync():
        if device.type == 'cuda':
            torch.cuda.synchronize()

    batches, data_times = [], []
    it = iter(loader)
    for _ in range(args.steps + 1):
        sync()
        start = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:  # a new epoch
            it = iter(loader)
            batch = next(it)
        batch = batch.to(device)
        sync()
        data_times.append(time.perf_counter() - start)
        batches.append(batch)
    rss0 = _rss_gib()
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats()
        mem0 = torch.cuda.memory_allocated()
    model_times = []
    for batch in batches:
        sync()
        start = time.perf_counter()
        with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            loss = _loss(forward(model, batch), batch.y, metric)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        sync()
        model_times.append(time.perf_counter() - start)
    data = statistics.median(data_times[1:])
    step = statistics.median(model_times[1:])
    peak = (torch.cuda.max_memory_allocated() - mem0) / 2**30 \
        if device.type == 'cuda' else _rss_gib() - rss0
    nodes = statistics.mean(b.num_nodes / b.num_graphs for b in batches)
    max_nodes = statistics.mean(
        int(torch.bincount(b.batch).max()) for b in batches)
    return {'dataset': name, 'batch_size': batch_size, 'dtype': dtype,
            'norm': norm, 'device': args.device, 'data_s': data,
            'model_s': step, 'step_s': data + step,
            'collation_share': data / (data + step),
            'graphs_per_s': batch_size / (data + step),
            'model_graphs_per_s': batch_size / step, 'peak_gib': peak,
            'mean_nodes': nodes, 'mean_max_nodes': max_nodes,
            'threads': torch.get_num_threads()}


def _key(row: dict) -> tuple:
    return (row['dataset'], row['batch_size'], row['dtype'], row['norm'])


def report(path: Path, device: str) -> None:
    r"""Writes the markdown table and the plot of the rows of
    :obj:`path`."""
    rows = [json.loads(line) for line in path.read_text().splitlines()
            if line.strip()]
    rows.sort(key=lambda r: (r['dataset'], r['dtype'], r['norm'],
                             r['batch_size']))
    lines = [f'# Graphormer training benchmark ({device})', '',
             f'Generated by `python experiments/bench_graphormer.py` on: '
             f'{rows[0].get("host", "?")}.', '',
             'Graphormer-slim (12 layers, hidden 80, 8 heads, ~0.5M '
             'parameters), one AdamW training step, median of '
             f'{rows[0].get("steps", "?")} steps after a warm-up. data = '
             'dataset fetch + PyG collation + copy to the device, one '
             'process (`num_workers=0`); model = forward + backward + '
             'optimizer step; collation share = data / (data + model). '
             'graphs/s counts both; model-only graphs/s is what loader '
             'workers (`train.num_workers`) can reach. Peak memory: CPU, '
             'the growth of max RSS during the steps; CUDA, peak allocated '
             'above the start. zinc = exact ZINC-subset graphs (fixture), '
             'molhiv = ogbg-molhiv training graphs.', '',
             '| dataset | dtype | norm | batch | nodes/graph | max nodes | '
             'data ms | model ms | collation share | graphs/s | '
             'model-only graphs/s | peak GiB |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['dtype']} | {r['norm']} | "
            f"{r['batch_size']} | {r['mean_nodes']:.1f} | "
            f"{r['mean_max_nodes']:.0f} | {1e3 * r['data_s']:.1f} | "
            f"{1e3 * r['model_s']:.1f} | {100 * r['collation_share']:.1f}% | "
            f"{r['graphs_per_s']:,.0f} | {r['model_graphs_per_s']:,.0f} | "
            f"{r['peak_gib']:.2f} |")
    path.with_suffix('.md').write_text('\n'.join(lines) + '\n')

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in sorted({(r['dataset'], r['dtype'], r['norm']) for r in rows}):
        part = [r for r in rows if (r['dataset'], r['dtype'], r['norm'])
                == key]
        ax.plot([r['batch_size'] for r in part],
                [r['graphs_per_s'] for r in part], marker='o',
                label=' '.join(key))
    ax.set_xscale('log', base=2)
    ax.set_xlabel('batch size (graphs)')
    ax.set_ylabel('training graphs/s')
    ax.set_title(f'Graphormer-slim training throughput ({device})')
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path.with_suffix('.png'), dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--datasets', nargs='+', default=['zinc', 'molhiv'])
    parser.add_argument('--batch-sizes', nargs='+', type=int,
                        default=[32, 64, 128, 256])
    parser.add_argument('--dtypes', nargs='+', default=['float32'])
    parser.add_argument('--norms', nargs='+', default=list(NORMS))
    parser.add_argument('--steps', type=int, default=3)
    parser.add_argument('--mirror', default=os.environ.get(
        'GNORM_DATA_MIRROR', str(ROOT.parent / 'shared' / 'data')))
    parser.add_argument('--root', default=str(ROOT / 'data'))
    parser.add_argument('--out', default=str(ROOT / 'experiments' /
                                             'results'))
    parser.add_argument('--report-only', action='store_true')
    parser.add_argument('--one', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:  # a single measurement, in a subprocess
        name, batch, dtype, norm = args.one.split(',')
        row = measure(args, name, int(batch), dtype, norm)
        print(json.dumps(row))
        return

    path = Path(args.out) / f'bench_graphormer_{args.device}.jsonl'
    path.parent.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done = set()
        if path.exists():
            done = {_key(json.loads(line)) for line in
                    path.read_text().splitlines() if line.strip()}
        for name in args.datasets:
            for dtype in args.dtypes:
                for norm in args.norms:
                    for batch in args.batch_sizes:
                        key = (name, batch, dtype, norm)
                        if key in done:
                            continue
                        if args.device == 'cpu':
                            cmd = [sys.executable, __file__, '--one',
                                   ','.join(map(str, key)), '--steps',
                                   str(args.steps), '--mirror', args.mirror,
                                   '--root', args.root]
                            out = subprocess.run(cmd, capture_output=True,
                                                 text=True, check=True)
                            row = json.loads(out.stdout.strip()
                                             .splitlines()[-1])
                        else:
                            row = measure(args, *key[:1], batch, dtype, norm)
                        row.update(host=machine(args.device),
                                   steps=args.steps)
                        print(json.dumps(row), flush=True)
                        with open(path, 'a') as f:
                            f.write(json.dumps(row) + '\n')
    report(path, args.device)


if __name__ == '__main__':
    main()
