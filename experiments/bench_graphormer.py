"""Training throughput and peak memory of gnorm's Graphormer per batch size.

For each dataset, batch size, dtype and norm, one training step (forward,
backward, AdamW, as in ``gnorm.train.graph``) of Graphormer-slim (12 layers,
hidden 80, 8 heads; multi-hop max distance 20 on ZINC, 5 on molhiv) is
timed apart from the data pipeline, median over ``--steps`` steps after one
warm-up step:

* data: fetching the graphs from the dataset and collating them into a PyG
  batch as training does (``DataLoader``, shuffled, ``num_workers=0``;
  with the batch's token layout, :class:`gnorm.train.graph_batches.
  LayoutCollater`, in versions that have one) and moving it to the device;
* model: the step itself, on already collated batches.

``--baseline REV`` also times the code of git revision REV (its whole
``gnorm`` package, dataset processing included, exported with ``git
archive`` into a temporary folder): every measurement then runs in
subprocesses, ``--rounds`` times alternately REV and the working tree (so a
loaded machine slows both alike), each on the same batches (same seed, same
uniform shuffle) and the same initial weights; rows ``before`` (REV) and
``after`` (the working tree), the ratio printed and in the report, and
``check_loss`` (the loss of the first batch in evaluation mode, equal up to
rounding when both versions compute the same function). Results of a
baseline run go to ``<out>/bench_graphormer_<device>_vs_<REV>.jsonl``.
``--bucket K`` draws batches of
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
    python experiments/bench_graphormer.py --baseline b2b073a \
        --datasets zinc --batch-sizes 128 --norms layernorm --rounds 3
    python experiments/bench_graphormer.py --baseline b2b073a --profile \
        --datasets zinc --batch-sizes 128 --norms layernorm
"""
import argparse
import itertools
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


def _baseline_code(rev: str) -> Path:
    r"""A folder holding the files of git revision :obj:`rev` (``git
    archive``), for a subprocess to import its ``gnorm``."""
    commit = subprocess.run(['git', 'rev-parse', '--short', rev], cwd=ROOT,
                            capture_output=True, text=True,
                            check=True).stdout.strip()
    folder = Path(os.environ.get('TMPDIR', '/tmp')) / f'gnorm_{commit}'
    if not (folder / 'gnorm').is_dir():
        tmp = folder.with_name(folder.name + '.tmp')
        tmp.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(['git', 'archive', commit], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(['tar', '-x', '-C', str(tmp)], input=archive,
                       check=True)
        os.replace(tmp, folder)
    return folder


def _loader(graphs, max_dist: int, **batching):
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


def _model(name: str, norm: str, dropout: float = 0.1):
    r"""Graphormer-slim for dataset :obj:`name` with :obj:`norm`, the
    same :obj:`dropout` on the tokens and the attention weights."""
    import functools
    from gnorm.models import Graphormer
    from gnorm.nn import SepNorm
    features = 'zinc' if name == 'zinc' else 'ogb'
    factory = functools.partial(SepNorm) if norm == 'sepnorm' else None
    return Graphormer(1, features=features, num_layers=12,
                      hidden_channels=80, num_heads=8, ffn_channels=80,
                      dropout=dropout, input_dropout=dropout,
                      attention_dropout=dropout, max_dist=MAX_DIST[name],
                      norm=factory)


def measure(args, name: str, batch_size: int, dtype: str, norm: str,
            bucket: int = 0, model_fn=None) -> dict:
    r"""One measurement of the ``gnorm`` this process imports: per-step
    data and model times, peak memory, batch statistics. :obj:`model_fn`
    (``(name, norm) -> module``, default Graphormer-slim) builds another
    model: a smaller or a compiled one."""
    from gnorm.data.molecules import graph_sizes
    from gnorm.train.graph import _loss, forward
    device = torch.device(args.device)
    metric = 'mae' if name == 'zinc' else 'rocauc'
    graphs = _graphs(name, args.mirror, args.root)
    torch.manual_seed(0)  # the same batches and weights in every version
    if bucket:
        from gnorm.train.graph_batches import SizeBuckets
        batching = dict(batch_sampler=SizeBuckets(graph_sizes(graphs),
                                                  batch_size, bucket))
    else:
        batching = dict(batch_size=batch_size, shuffle=True, drop_last=True)
    loader = _loader(graphs, MAX_DIST[name], **batching)
    model = (model_fn or _model)(name, norm).to(device)
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
    model.eval()
    with torch.no_grad():
        check = float(_loss(forward(model, batches[0]), batches[0].y, metric))
    model.train()
    rss0 = _rss_gib()
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats()
        mem0 = torch.cuda.memory_allocated()

    def step(batch):
        with torch.autocast(device.type, torch.bfloat16, enabled=autocast):
            loss = _loss(forward(model, batch), batch.y, metric)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    model_times, cpu_times = [], []
    for batch in batches:
        sync()
        start, cpu = time.perf_counter(), time.process_time()
        step(batch)
        sync()
        model_times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
    peak = (torch.cuda.max_memory_allocated() - mem0) / 2**30 \
        if device.type == 'cuda' else _rss_gib() - rss0
    if args.profile:
        _profile(args, step, batches[-1],
                 (name, batch_size, dtype, norm, bucket))
    return {'data_times': data_times[1:], 'model_times': model_times[1:],
            'cpu_times': cpu_times[1:],
            'peak_gib': peak, 'check_loss': check,
            'mean_nodes': statistics.mean(b.num_nodes / b.num_graphs
                                          for b in batches),
            'mean_max_nodes': statistics.mean(
                int(torch.bincount(b.batch).max()) for b in batches),
            'graphs_per_step': statistics.mean(b.num_graphs
                                               for b in batches)}


def _row(args, key: tuple, version: str, runs: list) -> dict:
    r"""The table row of one version from its measurements :obj:`runs`
    (medians over all their steps)."""
    name, batch_size, dtype, norm, bucket = key
    data = statistics.median(t for r in runs for t in r['data_times'])
    step_s = statistics.median(t for r in runs for t in r['model_times'])
    graphs = runs[0]['graphs_per_step']
    return {
        'dataset': name, 'batch_size': batch_size, 'dtype': dtype,
        'norm': norm, 'bucket': bucket, 'version': version,
        'rev': args.baseline if version == 'before' else 'working tree',
        'device': args.device, 'data_s': data, 'model_s': step_s,
        'model_cpu_s': statistics.median(t for r in runs
                                         for t in r['cpu_times']),
        'step_s': data + step_s, 'collation_share': data / (data + step_s),
        'graphs_per_s': graphs / (data + step_s),
        'model_graphs_per_s': graphs / step_s,
        'peak_gib': max(r['peak_gib'] for r in runs),
        'check_loss': runs[0]['check_loss'],
        'mean_nodes': runs[0]['mean_nodes'],
        'mean_max_nodes': runs[0]['mean_max_nodes'],
        'rounds': len(runs), 'threads': torch.get_num_threads(),
        'load_avg': os.getloadavg()[0]}


def _run_one(args, key: tuple, version: str, code: Path) -> dict:
    r"""One measurement in a subprocess that imports the ``gnorm`` of
    :obj:`code`."""
    cmd = [sys.executable, __file__, '--one', ','.join(map(str, key)),
           '--code', str(code), '--version', version, '--device',
           args.device, '--steps', str(args.steps), '--mirror', args.mirror,
           '--root', args.root, '--out', args.out, '--profile-rows',
           str(args.profile_rows)]
    cmd += ['--baseline', args.baseline] if args.baseline else []
    cmd += ['--profile'] if args.profile else []
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f'{version} measurement {key} failed:\n{out.stderr}')
    return json.loads(out.stdout.strip().splitlines()[-1])


def _profile(args, step, batch, key) -> None:
    r"""Appends the ``torch.profiler`` operator table of one step to the
    profile report."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if args.device == 'cuda' else [])
    sort = 'self_cuda_time_total' if args.device == 'cuda' else \
        'self_cpu_time_total'
    path = Path(args.out) / f'bench_graphormer_{args.device}_profile.md'
    with profile(activities=activities) as prof:
        step(batch)
        if args.device == 'cuda':
            torch.cuda.synchronize()
    label = args.baseline if args.version == 'before' else 'working tree'
    lines = ['', f'## {" ".join(map(str, key))}: {args.version} ({label})',
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


def _cpu_ms(row: dict) -> str:
    return f"{1e3 * row['model_cpu_s']:.1f}" if 'model_cpu_s' in row else '-'


def _cpu_ratio(pair: dict) -> str:
    if not all('model_cpu_s' in r for r in pair.values()):
        return '-'
    before, after = pair['before'], pair['after']
    return f"{before['model_cpu_s'] / after['model_cpu_s']:.2f}x"


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
             'dataset fetch + PyG collation (+ the token layout where the '
             'version has one) + copy to the device, one process '
             '(`num_workers=0`); model = forward + backward + optimizer '
             'step; collation share = data / (data + model). '
             'graphs/s counts both; model-only graphs/s is what loader '
             'workers (`train.num_workers`) can reach. Peak memory: CPU, '
             'the growth of max RSS during the steps (each measurement in '
             'its own process); CUDA, peak allocated '
             'above the start. zinc = exact ZINC-subset graphs (fixture), '
             'molhiv = ogbg-molhiv training graphs. batching: shuffle = '
             'uniform, bucket K = similar-size graphs (`train.bucket_chunk='
             'K`). version: before = the code (model and data processing) '
             'at the git revision shown, after = the working tree, timed '
             'in alternating subprocesses on the same batches; CPU ms = '
             'process CPU time of the model step (less sensitive than wall '
             'time to other jobs on a shared machine). load = the '
             'machine\'s 1-minute load average at the end '
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
                  'before | model ms after | speedup | CPU ms before | '
                  'CPU ms after | CPU-time speedup |',
                  '|---|---|---|---|---|---|---|---|---|---|---|']
        for (name, dtype, norm, bucket, batch), v in pairs.items():
            before, after = v['before']['model_s'], v['after']['model_s']
            lines.append(
                f"| {name} | {dtype} | {norm} | "
                f"{'bucket ' + str(bucket) if bucket else 'shuffle'} | "
                f"{batch} | {1e3 * before:.1f} | {1e3 * after:.1f} | "
                f"{before / after:.2f}x | {_cpu_ms(v['before'])} | "
                f"{_cpu_ms(v['after'])} | {_cpu_ratio(v)} |")
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


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    r"""The data mirror, the dataset root and the report folder."""
    parser.add_argument('--mirror', default=os.environ.get(
        'GNORM_DATA_MIRROR', str(ROOT.parent / 'shared' / 'data')))
    parser.add_argument('--root', default=str(ROOT / 'data'))
    parser.add_argument('--out', default=str(ROOT / 'experiments' /
                                             'results'))


def add_step_arguments(parser: argparse.ArgumentParser,
                       batch_size: int) -> None:
    r"""The batch size, steps, threads, data and ``--report-only``
    arguments of the CPU step benchmarks."""
    parser.add_argument('--batch-size', type=int, default=batch_size)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--threads', type=int, default=1)
    add_data_arguments(parser)
    parser.add_argument('--report-only', action='store_true')


def write_report(path: Path, lines) -> str:
    r"""Writes the report :obj:`lines` next to the jsonl :obj:`path` (as
    ``.md``) and returns its text."""
    text = '\n'.join(lines) + '\n'
    path.with_suffix('.md').write_text(text)
    return text


def measure_into(args, path: Path, rows) -> None:
    r"""Unless ``--report-only``: at ``--threads`` threads, appends each
    row of the iterable :obj:`rows` (measured as it is drawn) to the jsonl
    file :obj:`path`, which starts empty."""
    if args.report_only:
        return
    torch.set_num_threads(args.threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('')
    for row in rows:
        with open(path, 'a') as f:
            f.write(json.dumps(row) + '\n')


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
    add_data_arguments(parser)
    parser.add_argument('--rounds', type=int, default=1,
                        help='with --baseline: measurements per version, '
                        'alternated')
    parser.add_argument('--report-only', action='store_true')
    parser.add_argument('--one', help=argparse.SUPPRESS)
    parser.add_argument('--code', help=argparse.SUPPRESS)
    parser.add_argument('--version', default='after', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one:  # a single measurement, in a subprocess
        sys.path.insert(0, args.code)  # the gnorm of this version
        name, batch, dtype, norm, bucket = args.one.split(',')
        print(json.dumps(measure(args, name, int(batch), dtype, norm,
                                 int(bucket))))
        return

    suffix = f'_vs_{args.baseline}' if args.baseline else ''
    path = Path(args.out) / f'bench_graphormer_{args.device}{suffix}.jsonl'
    path.parent.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        done = set()
        if path.exists():
            done = {_key(json.loads(line)) for line in
                    path.read_text().splitlines() if line.strip()}
        codes = {'after': ROOT}
        if args.baseline:
            codes = {'before': _baseline_code(args.baseline), **codes}
        for key in itertools.product(args.datasets, args.batch_sizes,
                                     args.dtypes, args.norms, args.bucket):
            if all((*key, v) in done for v in codes):
                continue
            runs = {v: [] for v in codes}
            rounds = args.rounds if args.baseline else 1
            for _ in range(rounds):  # the versions alternate
                for version, code in codes.items():
                    if args.device == 'cpu' or args.baseline:
                        runs[version].append(_run_one(args, key, version,
                                                      code))
                    else:
                        runs[version].append(measure(args, *key))
            rows = [_row(args, key, v, runs[v]) for v in codes]
            for row in rows:
                row.update(host=machine(args.device), steps=args.steps)
                print(json.dumps(row), flush=True)
                with open(path, 'a') as f:
                    f.write(json.dumps(row) + '\n')
            if args.baseline:
                print(f"{' '.join(map(str, key))}: model step "
                      f"{rows[0]['model_s']:.3f} s ({args.baseline}) / "
                      f"{rows[1]['model_s']:.3f} s (working tree) = "
                      f"{rows[0]['model_s'] / rows[1]['model_s']:.2f}x; "
                      f"process CPU time "
                      f"{rows[0]['model_cpu_s']:.3f} s / "
                      f"{rows[1]['model_cpu_s']:.3f} s = "
                      f"{rows[0]['model_cpu_s'] / rows[1]['model_cpu_s']:.2f}"
                      f"x", flush=True)
    report(path, args.device)


if __name__ == '__main__':
    main()
