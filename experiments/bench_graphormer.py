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

``--baseline REV`` also times the model of ``gnorm/models/graphormer.py``
at git revision REV (same weights, same batches, steps alternated with the
current model's, so a loaded machine slows both alike): rows ``before``
(REV) and ``after`` (the working tree). ``--bucket K`` draws batches of
similar-size graphs (``train.bucket_chunk=K``, less padding) instead of a
uniform shuffle. ``--profile`` writes the ``torch.profiler`` operator table
of one step (each version) to ``<out>/bench_graphormer_<device>_profile.md``.

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
    python experiments/bench_graphormer.py --baseline da3a799 --bucket 0 50
    python experiments/bench_graphormer.py --baseline da3a799 --profile \
        --datasets zinc --batch-sizes 128 --norms layernorm
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
sys.path.insert(0, str(ROOT))  # this checkout's gnorm, not an installed one
MAX_DIST = {'zinc': 20, 'molhiv': 5}
NORMS = ('layernorm', 'sepnorm')
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*')


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _graphs(name: str, mirror: str, root: str):
    from gnorm.data.molecules import load_molhiv, zinc_fixture
    if name == 'zinc':
        return zinc_fixture(mirror, 'val') + zinc_fixture(mirror, 'test')
    dataset, split = load_molhiv(root, mirror)
    return dataset[split['train']]


def _baseline_module(rev: str):
    r"""``gnorm/models/graphormer.py`` as of git revision :obj:`rev`, as a
    module."""
    import importlib.util
    source = subprocess.run(['git', 'show', f'{rev}:gnorm/models/graphormer.py'],
                            cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    path = Path(os.environ.get('TMPDIR', '/tmp')) / f'graphormer_{rev}.py'
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f'graphormer_{rev}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(name: str, norm: str, module=None):
    import functools
    from gnorm.models import Graphormer
    from gnorm.nn import SepNorm
    if module is not None:
        Graphormer = module.Graphormer
    features = 'zinc' if name == 'zinc' else 'ogb'
    factory = functools.partial(SepNorm) if norm == 'sepnorm' else None
    return Graphormer(1, features=features, num_layers=12,
                      hidden_channels=80, num_heads=8, ffn_channels=80,
                      max_dist=MAX_DIST[name], norm=factory)


def measure(args, name: str, batch_size: int, dtype: str, norm: str,
            bucket: int = 0) -> list:
    r"""One measurement, in this process: a row per model version."""
    from torch_geometric.loader import DataLoader
    from gnorm.data.molecules import graph_sizes
    from gnorm.train.graph import _loss, forward
    from gnorm.train.graph_batches import SizeBuckets
    device = torch.device(args.device)
    metric = 'mae' if name == 'zinc' else 'rocauc'
    graphs = _graphs(name, args.mirror, args.root)
    if bucket:
        loader = DataLoader(graphs, batch_sampler=SizeBuckets(
            graph_sizes(graphs), batch_size, bucket))
    else:
        loader = DataLoader(graphs, batch_size, shuffle=True,
                            drop_last=True)
    versions = {'after': None}
    if args.baseline:
        versions = {'before': _baseline_module(args.baseline), **versions}
    models, optimizers = {}, {}
    for version, module in versions.items():
        torch.manual_seed(0)
        models[version] = _model(name, norm, module).to(device)
        optimizers[version] = torch.optim.AdamW(
            models[version].parameters(), lr=1e-4)
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
    def step(version, batch):
        with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            loss = _loss(forward(models[version], batch), batch.y, metric)
        optimizers[version].zero_grad(set_to_none=True)
        loss.backward()
        optimizers[version].step()

    model_times = {v: [] for v in versions}
    for batch in batches:  # the versions alternate on every batch
        for version in versions:
            sync()
            start = time.perf_counter()
            step(version, batch)
            sync()
            model_times[version].append(time.perf_counter() - start)
    # Peak memory: CPU, both versions together (one process).
    peak = (torch.cuda.max_memory_allocated() - mem0) / 2**30 \
        if device.type == 'cuda' else _rss_gib() - rss0
    if args.profile:
        _profile(args, versions, step, batches[-1],
                 (name, batch_size, dtype, norm, bucket))
    data = statistics.median(data_times[1:])
    nodes = statistics.mean(b.num_nodes / b.num_graphs for b in batches)
    max_nodes = statistics.mean(
        int(torch.bincount(b.batch).max()) for b in batches)
    sizes = [b.num_graphs for b in batches]
    graphs_per_step = statistics.mean(sizes)
    rows = []
    for version in versions:
        step_s = statistics.median(model_times[version][1:])
        rows.append({
            'dataset': name, 'batch_size': batch_size, 'dtype': dtype,
            'norm': norm, 'bucket': bucket, 'version': version,
            'rev': args.baseline if version == 'before' else 'working tree',
            'device': args.device, 'data_s': data, 'model_s': step_s,
            'step_s': data + step_s,
            'collation_share': data / (data + step_s),
            'graphs_per_s': graphs_per_step / (data + step_s),
            'model_graphs_per_s': graphs_per_step / step_s,
            'peak_gib': peak, 'mean_nodes': nodes,
            'mean_max_nodes': max_nodes,
            'threads': torch.get_num_threads(),
            'load_avg': os.getloadavg()[0]})
    return rows


def _profile(args, versions, step, batch, key) -> None:
    r"""Appends the ``torch.profiler`` operator table of one step of each
    version (self CPU time; CUDA time on CUDA) to the profile report."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if args.device == 'cuda' else [])
    sort = 'self_cuda_time_total' if args.device == 'cuda' else \
        'self_cpu_time_total'
    path = Path(args.out) / f'bench_graphormer_{args.device}_profile.md'
    lines = []
    for version in versions:
        with profile(activities=activities) as prof:
            step(version, batch)
            if args.device == 'cuda':
                torch.cuda.synchronize()
        label = args.baseline if version == 'before' else 'working tree'
        lines += ['', f'## {" ".join(map(str, key))}: {version} ({label})',
                  '', '```', prof.key_averages().table(
                      sort_by=sort, row_limit=args.profile_rows), '```']
    with open(path, 'a') as f:
        f.write('\n'.join(lines) + '\n')


def _key(row: dict) -> tuple:
    return (row['dataset'], row['batch_size'], row['dtype'], row['norm'],
            row.get('bucket', 0), row.get('version', 'after'))


def _setting(r: dict) -> tuple:
    return (r['dataset'], r['dtype'], r['norm'], r.get('bucket', 0),
            r['batch_size'])


def report(path: Path, device: str) -> None:
    r"""Writes the markdown table and the plot of the rows of
    :obj:`path`."""
    rows = [json.loads(line) for line in path.read_text().splitlines()
            if line.strip()]
    rows.sort(key=lambda r: (*_setting(r), r.get('version', 'after')))
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
             'the growth of max RSS during the steps (both versions in one '
             'process when a baseline is timed); CUDA, peak allocated '
             'above the start. zinc = exact ZINC-subset graphs (fixture), '
             'molhiv = ogbg-molhiv training graphs. batching: shuffle = '
             'uniform, bucket K = similar-size graphs (`train.bucket_chunk='
             'K`). version: before = the model at the git revision shown, '
             'after = the working tree, timed alternately on the same '
             'batches. load = the machine\'s 1-minute load average at the end '
             'of the measurement (on a shared machine, times grow with it; '
             'only the before/after pairs share their conditions).', '',
             '| dataset | dtype | norm | batching | batch | version | '
             'nodes/graph | max nodes | data ms | model ms | '
             'collation share | graphs/s | model-only graphs/s | peak GiB | '
             'load |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        bucket = r.get('bucket', 0)
        version = r.get('version', 'after')
        if version == 'before':
            version = f"before ({r['rev']})"
        lines.append(
            f"| {r['dataset']} | {r['dtype']} | {r['norm']} | "
            f"{'bucket ' + str(bucket) if bucket else 'shuffle'} | "
            f"{r['batch_size']} | {version} | {r['mean_nodes']:.1f} | "
            f"{r['mean_max_nodes']:.0f} | {1e3 * r['data_s']:.1f} | "
            f"{1e3 * r['model_s']:.1f} | {100 * r['collation_share']:.1f}% | "
            f"{r['graphs_per_s']:,.0f} | {r['model_graphs_per_s']:,.0f} | "
            f"{r['peak_gib']:.2f} | {r.get('load_avg', float('nan')):.1f} |")
    pairs = {}
    for r in rows:
        pairs.setdefault(_setting(r), {})[r.get('version', 'after')] = r
    pairs = {k: v for k, v in pairs.items() if len(v) == 2}
    if pairs:
        lines += ['', '## Model time, before vs after (same batches)', '',
                  '| dataset | dtype | norm | batching | batch | model ms '
                  'before | model ms after | speedup |',
                  '|---|---|---|---|---|---|---|---|']
        for (name, dtype, norm, bucket, batch), v in pairs.items():
            before, after = v['before']['model_s'], v['after']['model_s']
            lines.append(
                f"| {name} | {dtype} | {norm} | "
                f"{'bucket ' + str(bucket) if bucket else 'shuffle'} | "
                f"{batch} | {1e3 * before:.1f} | {1e3 * after:.1f} | "
                f"{before / after:.2f}x |")
    path.with_suffix('.md').write_text('\n'.join(lines) + '\n')

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import (FixedLocator, FuncFormatter, LogLocator,
                                   NullFormatter, NullLocator)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = sorted({(*_setting(r)[:4], r.get('version', 'after'))
                     for r in rows})
    settings = list(dict.fromkeys(key[:4] for key in curves))
    for key in curves:
        part = [r for r in rows if (*_setting(r)[:4],
                                    r.get('version', 'after')) == key]
        name, dtype, norm, bucket, version = key
        k = settings.index(key[:4])  # a color and marker per setting
        before = version == 'before'
        dodge = 2 ** (0.03 * (k - (len(settings) - 1) / 2))  # no overlap
        ax.plot([r['batch_size'] * dodge for r in part],
                [r['graphs_per_s'] for r in part], color=f'C{k}',
                marker=MARKERS[k % len(MARKERS)], ms=7 if before else 5,
                mfc='none' if before else f'C{k}', ls='--' if before else '-',
                label=f"{name} {dtype} {norm} "
                      f"{'bucket' if bucket else 'shuffle'} {version}")
    ax.set_xscale('log', base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted({r['batch_size']
                                                    for r in rows})))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale('log')
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 2.5, 3.0,
                                                5.0, 7.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
    ax.set_xlabel('batch size (graphs)')
    ax.set_ylabel('training graphs/s (median of steps)')
    ax.set_title(f'Graphormer-slim training throughput ({device})')
    ax.legend(fontsize=7, loc='center left', bbox_to_anchor=(1.02, 0.5),
              frameon=False, title='open marker, dashed: before;\nfilled, '
              'solid: after; each setting\nshifted a little sideways so '
              'none hides', title_fontsize=7)
    fig.savefig(path.with_suffix('.png'), dpi=120, bbox_inches='tight',
                metadata={'Software': None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--datasets', nargs='+', default=['zinc', 'molhiv'])
    parser.add_argument('--batch-sizes', nargs='+', type=int,
                        default=[32, 64, 128, 256])
    parser.add_argument('--dtypes', nargs='+', default=['float32'])
    parser.add_argument('--norms', nargs='+', default=list(NORMS))
    parser.add_argument('--bucket', nargs='+', type=int, default=[0],
                        help='batching: 0 shuffle, K similar-size graphs')
    parser.add_argument('--baseline', help='git revision of the model to '
                        'time beside the working tree')
    parser.add_argument('--profile', action='store_true')
    parser.add_argument('--profile-rows', type=int, default=20)
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
        name, batch, dtype, norm, bucket = args.one.split(',')
        rows = measure(args, name, int(batch), dtype, norm, int(bucket))
        print(json.dumps(rows))
        return

    path = Path(args.out) / f'bench_graphormer_{args.device}.jsonl'
    path.parent.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done = set()
        if path.exists():
            done = {_key(json.loads(line)) for line in
                    path.read_text().splitlines() if line.strip()}
        versions = ('before', 'after') if args.baseline else ('after', )
        for name in args.datasets:
            for dtype in args.dtypes:
                for norm in args.norms:
                    for bucket in args.bucket:
                        for batch in args.batch_sizes:
                            key = (name, batch, dtype, norm, bucket)
                            if all((*key, v) in done for v in versions):
                                continue
                            if args.device == 'cpu':
                                cmd = [sys.executable, __file__, '--one',
                                       ','.join(map(str, key)), '--steps',
                                       str(args.steps), '--mirror',
                                       args.mirror, '--root', args.root,
                                       '--out', args.out,
                                       '--profile-rows',
                                       str(args.profile_rows)]
                                cmd += ['--baseline', args.baseline] \
                                    if args.baseline else []
                                cmd += ['--profile'] if args.profile else []
                                out = subprocess.run(
                                    cmd, capture_output=True, text=True,
                                    check=True)
                                rows = json.loads(out.stdout.strip()
                                                  .splitlines()[-1])
                            else:
                                rows = measure(args, *key)
                            for row in rows:
                                row.update(host=machine(args.device),
                                           steps=args.steps)
                                print(json.dumps(row), flush=True)
                                with open(path, 'a') as f:
                                    f.write(json.dumps(row) + '\n')
    report(path, args.device)


if __name__ == '__main__':
    main()
