"""Training throughput and peak memory of gnorm's Graphormer per batch size.

Graphormer-slim's AdamW step, timed apart from its data
(:mod:`experiments.cases.graphormer`), median of ``--steps`` steps after a
warm-up, per dataset (``zinc``, ``molhiv``), batch size, dtype and norm;
on the CPU each in its own process. ``--baseline REV`` times git revision REV's whole package beside
the working tree, alternating child processes ``--rounds`` times on the
same batches and initial weights (rows ``before`` and ``after``, and
``check_loss``, the first batch's evaluation loss, equal where both compute
the same function); ``--bucket K`` draws size-bucketed batches
(``train.bucket_chunk=K``); ``--profile`` appends one step's
``torch.profiler`` operator table to ``bench_graphormer_<device>_profile.md``.
Report: ``<out>/bench_graphormer_<device>[_vs_<REV>].{jsonl,md,png}``
(docs/benchmarks.rst).

    python experiments/bench/graphormer.py               # CPU, fp32
    python experiments/bench/graphormer.py --device cuda \
        --dtypes float32 bfloat16 --batch-sizes 64 128 256 512
    python experiments/bench/graphormer.py --report-only  # table and plot
    python experiments/bench/graphormer.py --baseline b2b073a \
        --datasets zinc --batch-sizes 128 --norms layernorm --rounds 3
    python experiments/bench/graphormer.py --baseline b2b073a --profile \
        --datasets zinc --batch-sizes 128 --norms layernorm
"""
import argparse
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm, not an installed one

from gnorm import bench  # noqa: E402
from gnorm.bench import (ChildFailed, Records, code_at,  # noqa: E402
                         line_plot, markdown_table, profiled,
                         read_jsonl, rotation, run_child, use_code,
                         write_report)
from gnorm.machine import machine_words, this_machine  # noqa: E402
from experiments.cases import graphormer as cases  # noqa: E402

NORMS = ('layernorm', 'sepnorm')
MARKERS = ('o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*')


def measure(args, key: cases.Key) -> dict:
    r""":func:`experiments.cases.graphormer.measure` of the setting :obj:`key`
    with the script's arguments (``--profile``: each step's operator
    table appended to the profile report)."""
    return cases.measure(
        *key[:4], bucket=key[4], device=args.device, mirror=args.mirror,
        root=args.root, steps=args.steps, profile=args.profile and (
            lambda step, batch: _profile(args, step, batch, key)))


def _run_one(args, key: tuple, version: str, code: Path) -> dict:
    r"""One measurement in a child process that imports the ``gnorm`` of
    :obj:`code`."""
    cmd = [__file__, '--one', ','.join(map(str, key)), '--code', code,
           '--version', version, '--device', args.device, '--steps',
           args.steps, '--mirror', args.mirror, '--root', args.root, '--out',
           args.out, '--profile-rows', args.profile_rows]
    cmd += ['--baseline', args.baseline] if args.baseline else []
    try:
        return run_child(cmd + ['--profile'] * args.profile)
    except ChildFailed as e:
        sys.exit(f'{version} measurement {key} failed:\n{e}')


def _profile(args, step, batch, key) -> None:
    r"""Appends the ``torch.profiler`` operator table of one step to the
    profile report."""
    sort = 'self_cuda_time_total' if args.device == 'cuda' else \
        'self_cpu_time_total'
    path = Path(args.out) / f'bench_graphormer_{args.device}_profile.md'
    table = profiled(step, batch, device=args.device).table(
        sort_by=sort, row_limit=args.profile_rows)
    label = args.baseline if args.version == 'before' else 'working tree'
    lines = ['', f'## {" ".join(map(str, key))}: {args.version} ({label})',
             '', '```', table, '```']
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


def _batching(r: dict) -> str:
    return f"bucket {r['bucket']}" if r.get('bucket', 0) else 'shuffle'


def report(path: Path, device: str):
    r"""Writes the markdown table and the plot of the rows of
    :obj:`path`; returns the plot's figure."""
    rows = read_jsonl(path)
    rows.sort(key=lambda r: (*_setting(r), r.get('version', 'after')))
    lines = [f'# Graphormer training benchmark ({device})', '',
             f'Generated by `python experiments/bench/graphormer.py` on: '
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
             'only the before/after pairs share their conditions).']
    table = []
    for r in rows:
        version = r.get('version', 'after')
        table.append([
            r['dataset'], r['dtype'], r['norm'], _batching(r),
            r['batch_size'], f"before ({r['rev']})" if version == 'before'
            else version, f"{r['mean_nodes']:.1f}",
            f"{r['mean_max_nodes']:.0f}", f"{1e3 * r['data_s']:.1f}",
            f"{1e3 * r['model_s']:.1f}",
            f"{100 * r['collation_share']:.1f}%",
            f"{r['graphs_per_s']:,.0f}", f"{r['model_graphs_per_s']:,.0f}",
            f"{r['peak_gib']:.2f}", f"{r.get('load_avg', float('nan')):.1f}"])
    lines += ['', *markdown_table(
        ['dataset', 'dtype', 'norm', 'batching', 'batch', 'version',
         'nodes/graph', 'max nodes', 'data ms', 'model ms',
         'collation share', 'graphs/s', 'model-only graphs/s', 'peak GiB',
         'load'], table)]
    pairs = {}
    for r in rows:
        pairs.setdefault(_setting(r), {})[r.get('version', 'after')] = r
    pairs = {k: v for k, v in pairs.items() if len(v) == 2}
    if pairs:
        lines += ['', '## Model time, before vs after (same batches)', '',
                  *markdown_table(
                      ['dataset', 'dtype', 'norm', 'batching', 'batch',
                       'model ms before', 'model ms after', 'speedup',
                       'CPU ms before', 'CPU ms after', 'CPU-time speedup'],
                      ([name, dtype, norm, _batching(v['after']), batch,
                        f"{1e3 * v['before']['model_s']:.1f}",
                        f"{1e3 * v['after']['model_s']:.1f}",
                        f"{v['before']['model_s'] / v['after']['model_s']:.2f}x",
                        _cpu_ms(v['before']), _cpu_ms(v['after']),
                        _cpu_ratio(v)]
                       for (name, dtype, norm, _, batch), v in pairs.items()))]
    write_report(path.with_suffix('.md'), lines)
    curves = sorted({(*_setting(r)[:4], r.get('version', 'after'))
                     for r in rows})
    settings = list(dict.fromkeys(key[:4] for key in curves))
    plotted = []
    for key in curves:
        part = [r for r in rows if (*_setting(r)[:4],
                                    r.get('version', 'after')) == key]
        name, dtype, norm, bucket, version = key
        k = settings.index(key[:4])  # a color and marker per setting
        before = version == 'before'
        dodge = 2 ** (0.03 * (k - (len(settings) - 1) / 2))  # no overlap
        plotted.append(dict(
            x=[r['batch_size'] * dodge for r in part],
            y=[r['graphs_per_s'] for r in part], color=f'C{k}',
            marker=MARKERS[k % len(MARKERS)], ms=7 if before else 5,
            mfc='none' if before else f'C{k}', ls='--' if before else '-',
            label=f"{name} {dtype} {norm} "
                  f"{'bucket' if bucket else 'shuffle'} {version}"))
    return line_plot(
        path.with_suffix('.png'),
        [dict(title=f'Graphormer-slim training throughput ({device})',
              lines=plotted)], xlabel='batch size (graphs)',
        ylabel='training graphs/s (median of steps)', panel_size=(7, 4.5),
        xticks=sorted({r['batch_size'] for r in rows}), fontsize=7,
        legend_title='open marker, dashed: before;\nfilled, solid: after; '
        'each setting\nshifted a little sideways so none hides')


def main() -> None:
    parser = bench.arguments(argparse.ArgumentParser(
        description=__doc__.split('\n')[0]), ROOT / 'experiments' / 'results',
        device='cpu', checkout=ROOT)
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
    parser.add_argument('--rounds', type=int, default=1,
                        help='with --baseline: measurements per version, '
                        'alternated')
    parser.add_argument('--one', help=argparse.SUPPRESS)
    parser.add_argument('--code', help=argparse.SUPPRESS)
    parser.add_argument('--version', default='after', help=argparse.SUPPRESS)
    args = bench.parse(parser)

    if args.one:  # a single measurement, in a child process
        use_code(args.code)  # the gnorm of this version
        name, batch, dtype, norm, bucket = args.one.split(',')
        print(json.dumps(measure(args, (name, int(batch), dtype, norm,
                                        int(bucket)))))
        return

    suffix = f'_vs_{args.baseline}' if args.baseline else ''
    path = Path(args.out) / f'bench_graphormer_{args.device}{suffix}.jsonl'
    path.parent.mkdir(parents=True, exist_ok=True)  # a profile goes there
    records = Records(path, key=_key)
    codes = {'after': ROOT}
    if args.baseline:
        codes = {'before': code_at(args.baseline, ROOT), **codes}
    for key in itertools.product(args.datasets, args.batch_sizes,
                                 args.dtypes, args.norms, args.bucket):
        if args.report_only or all((*key, v) in records for v in codes):
            continue
        runs = {v: [] for v in codes}
        for _, version in rotation(list(codes), args.rounds
                                   if args.baseline else 1):
            runs[version].append(
                _run_one(args, key, version, codes[version])
                if args.device == 'cpu' or args.baseline
                else measure(args, key))
        rows = [records.add(dict(cases.row(
            key, runs[v], v, args.baseline if v == 'before' else
            'working tree', args.device),
            host=machine_words(this_machine(args.device)),
            steps=args.steps)) for v in codes]
        for row in rows:
            print(json.dumps(row), flush=True)
        if args.baseline:
            before, after = rows
            print(f"{' '.join(map(str, key))}: model step "
                  f"{before['model_s']:.3f} s ({args.baseline}) / "
                  f"{after['model_s']:.3f} s (working tree) = "
                  f"{before['model_s'] / after['model_s']:.2f}x; process "
                  f"CPU time {before['model_cpu_s']:.3f} s / "
                  f"{after['model_cpu_s']:.3f} s = "
                  f"{before['model_cpu_s'] / after['model_cpu_s']:.2f}x",
                  flush=True)
    report(path, args.device)


if __name__ == '__main__':
    main()
