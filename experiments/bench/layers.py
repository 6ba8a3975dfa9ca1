"""Time and peak memory of gnorm's layers beside a reference, side by side.

For n nodes and d channels, the cases of :mod:`experiments.cases.layers`
(forward+backward of one layer beside its reference on one random graph),
median of ``--repeats`` after a warm-up; ``--models`` adds a 32-layer
GCN's training epoch on Cora and Squirrel per norm. On the CPU each cell
runs in its own process (its peak RSS its own), and a dense reference
needing over ``--memory-gib`` is reported out of memory unrun.
Report: ``<out>/bench_<device>.{jsonl,md,png}`` (docs/benchmarks.rst).

    python experiments/bench/layers.py                       # CPU, fp32
    python experiments/bench/layers.py --device cuda --dtypes float32 bfloat16
    python experiments/bench/layers.py --report-only          # table and plot
"""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm

from gnorm.bench import (ChildFailed, Records, arguments,  # noqa: E402
                         line_plot, markdown_table, parse, ratio,
                         run_child, write_report)
from gnorm.machine import machine_words, this_machine  # noqa: E402
from experiments.cases.layers import (LAYERS, QUADRATIC, REFERENCE,  # noqa: E402
                                      dense_gib, max_abs_difference, measure,
                                      model_epoch_seconds)

MODEL_NORMS = ('none', 'layernorm', 'pairnorm', 'contranorm', 'contranorm_d')


# ---------------------------------------------------------------- driver
def run_cell(args, layer, reference, n, d, dtype):
    """One cell: in its own process on the CPU, else here."""
    if args.device == 'cpu':
        try:
            return dict(status='ok', **run_child(
                [__file__, '--child', '--layer', layer, '--n', n, '--d', d,
                 '--dtype', dtype, '--repeats', args.repeats]
                + ['--reference'] * reference))
        except ChildFailed as e:
            return dict(status='error', error=e.tail[:200])
    try:
        return dict(status='ok', **measure(layer, reference, n, d,
                                           args.device, dtype, args.repeats))
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return dict(status='oom')


def sweep(args, records):
    """Measures every cell that :obj:`records` lacks, appending each."""
    from tqdm import tqdm
    done_before = len(records)
    cells = [(dtype, d, n, layer, ref)
             for dtype in args.dtypes for d in args.channels
             for layer in args.layers for n in args.nodes
             for ref in ((False, True) if REFERENCE[layer] else (False, ))]
    last_time = {}
    for dtype, d, n, layer, ref in tqdm(cells, desc='bench', unit='cell'):
        key = f'{args.device}|{dtype}|{layer}|{"ref" if ref else "gnorm"}|{n}|{d}'
        row = records.get(key)
        if row is None:
            row = dict(key=key, device=args.device, dtype=dtype, layer=layer,
                       impl='reference' if ref else 'gnorm', n=n, d=d,
                       machine=machine_words(this_machine(args.device)))
            quadratic = layer in QUADRATIC
            prev = last_time.get((dtype, d, layer, ref))
            estimate = prev[1] * (n / prev[0])**(2 if quadratic else 1) * \
                (args.repeats + 1) if prev else 0.0
            if ref and quadratic and args.device == 'cpu' and \
                    dense_gib(n, dtype) > args.memory_gib:
                row.update(status='oom',
                           note=f'needs ~{dense_gib(n, dtype):.0f} GiB')
            elif estimate > args.max_seconds:
                row.update(status='skipped', note=f'est. {estimate:.0f} s')
            else:
                row.update(run_cell(args, layer, ref, n, d, dtype))
                if row['status'] == 'ok' and ref and quadratic:
                    row['max_abs_diff'] = max_abs_difference(
                        layer, min(n, 4096), d, args.device, dtype) \
                        if args.device == 'cpu' or n <= 20_000 else None
            records.add(row)
        if row['status'] == 'ok':
            last_time[(dtype, d, layer, ref)] = (n, row['seconds'])
    print(f'{len(records) - done_before} new measurements, {done_before} '
          f'reused from {records.path}')
    for dataset in ('cora', 'squirrel') if args.models else ():
        for norm in MODEL_NORMS:
            key = f'{args.device}|model|{dataset}|{norm}'
            if key not in records:
                sec = model_epoch_seconds(dataset, norm, args.device,
                                          args.repeats)
                records.add(dict(key=key, device=args.device, kind='model',
                                 dataset=dataset, norm=norm, seconds=sec,
                                 status='ok',
                                 machine=machine_words(
                                     this_machine(args.device))))


def cell_text(row):
    if row is None:
        return '-'
    if row['status'] == 'ok':
        return f'{row["seconds"] * 1e3:.1f} ms / {row["peak_gib"]:.2f} GiB'
    return f'{row["status"].upper()} ({row.get("note", row.get("error", ""))})'


def report(rows, path_md, path_png, device):
    layer_rows = [r for r in rows.values() if r.get('layer')]
    machines = sorted({r['machine'] for r in rows.values()})
    lines = [f'# gnorm layer benchmark ({device})', '',
             'Generated by `python experiments/bench/layers.py'
             f'{" --device cuda" if device != "cpu" else ""}` on: '
             + '; '.join(machines) + '.', '',
             'Forward+backward of one layer on one graph, median of repeats '
             'after a warm-up. Memory: on CPU the growth of the process\'s '
             'peak RSS over its peak before the measurement (imports '
             'included, so layers needing less than that read 0.00 GiB); on '
             'CUDA the peak allocated above what was allocated before. ratio = gnorm time / reference time '
             '(< 1: gnorm faster). Random graph: 10 in-edges per node.']
    by_key = {(r['dtype'], r['layer'], r['impl'], r['n'], r['d']): r
              for r in layer_rows}
    for dtype in sorted({r['dtype'] for r in layer_rows}):
        table = []
        for layer, d, n in sorted({(r['layer'], r['d'], r['n'])
                                   for r in layer_rows if r['dtype'] == dtype},
                                  key=lambda k: (LAYERS.index(k[0]), *k[1:])):
            g = by_key.get((dtype, layer, 'gnorm', n, d))
            r = by_key.get((dtype, layer, 'reference', n, d))
            ok = g and r and g['status'] == r['status'] == 'ok'
            diff = r.get('max_abs_diff') if r else None
            table.append([
                layer, REFERENCE[layer] or '-', f'{n:,}', d, cell_text(g),
                cell_text(r) if REFERENCE[layer] else '-',
                f'{ratio(g["seconds"], r["seconds"]):.2f}' if ok else '-',
                '-' if diff is None else f'{diff:.1e}'])
        lines += ['', f'## {dtype}', '', *markdown_table(
            ['layer', 'reference', 'n', 'd', 'gnorm', 'reference', 'ratio',
             'max abs diff'], table)]
    if any(r.get('kind') == 'model' for r in rows.values()):
        lines += ['', '## 32-layer GCN, time per training epoch', '',
                  *markdown_table(['dataset', *MODEL_NORMS], (
                      [dataset] + [f'{row["seconds"] * 1e3:.0f} ms' if row
                                   else '-' for row in (
                          rows.get(f'{device}|model|{dataset}|{norm}')
                          for norm in MODEL_NORMS)]
                      for dataset in ('cora', 'squirrel')))]
    write_report(path_md, lines)
    panels = []
    for dtype, d in sorted({(r['dtype'], r['d']) for r in layer_rows}):
        part = [r for r in layer_rows if r['dtype'] == dtype and r['d'] == d]
        lines = []
        for i, layer in enumerate(LAYERS):
            for impl, style in (('gnorm', ('-', 'o')),
                                ('reference', ('--', 'x'))):
                pts = sorted((r['n'], r['seconds']) for r in part
                             if r['layer'] == layer and r['impl'] == impl
                             and r['status'] == 'ok')
                if pts:
                    xs, ys = zip(*pts)
                    lines.append(dict(
                        x=xs, y=ys, ls=style[0], marker=style[1],
                        color=f'C{i}', label=layer if impl == 'gnorm' else
                        f'{layer} ref ({REFERENCE[layer]})'))
        missing = not_measured(part)
        panels.append(dict(title=f'{device}, {dtype}, d={d}', lines=lines,
                           note='not measured, so not drawn:\n'
                           + '\n'.join(missing) if missing else ''))
    return line_plot(path_png, panels, xlabel='nodes n',
                     ylabel='forward+backward seconds',
                     legend_title='solid o: gnorm; dashed x: reference\n'
                     '(median of repeats)',
                     title=machines[0] if machines else device)


# Why a measurement has no time, in words.
NOT_RUN = {'oom': 'out of memory', 'skipped': 'skipped, estimated time over '
           '--max-seconds', 'error': 'failed'}


def not_measured(rows):
    r"""One line per (n, reason) of the :obj:`rows` without a time: which
    layers (``ref``: their reference) and why."""
    missing = {}
    for r in sorted(rows, key=lambda r: (r['n'], LAYERS.index(r['layer']),
                                         r['impl'])):
        if r['status'] == 'ok':
            continue
        reason = NOT_RUN.get(r['status'], r['status'])
        if r['status'] == 'oom' and r.get('note'):
            reason += f" ({r['note']})"
        name = r['layer'] + (' ref' if r['impl'] == 'reference' else '')
        missing.setdefault((r['n'], reason), []).append(name)
    return [f'n={n:,}, {reason}: {", ".join(names)}'
            for (n, reason), names in missing.items()]


def main():
    parser = arguments(argparse.ArgumentParser(
        description=__doc__.splitlines()[0]), ROOT / 'experiments' /
        'results', device='cpu')
    parser.add_argument('--dtypes', nargs='+', default=['float32'])
    parser.add_argument('--nodes', nargs='+', type=int,
                        default=[1_000, 2_708, 10_000, 50_000, 169_000])
    parser.add_argument('--channels', nargs='+', type=int, default=[32, 128])
    parser.add_argument('--layers', nargs='+', default=list(LAYERS),
                        choices=LAYERS)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--max-seconds', type=float, default=300.0,
                        help='skip a cell whose estimated time (from the '
                        'previous n) exceeds this')
    parser.add_argument('--memory-gib', type=float, default=16.0,
                        help='CPU: report a dense reference as out of memory '
                        'when its n x n tensors need more than this')
    parser.add_argument('--models', action='store_true',
                        help='also time a 32-layer GCN epoch on Cora/Squirrel')
    # one measurement in a subprocess (CPU)
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--layer', help=argparse.SUPPRESS)
    parser.add_argument('--reference', action='store_true',
                        help=argparse.SUPPRESS)
    parser.add_argument('--n', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--d', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--dtype', help=argparse.SUPPRESS)
    args = parse(parser)
    if args.child:  # one cell, its JSON line on stdout
        return print(json.dumps(measure(
            args.layer, args.reference, args.n, args.d, args.device,
            args.dtype, args.repeats)))
    device, out = args.device, Path(args.out)
    records = Records(out / f'bench_{device}.jsonl')
    if not args.report_only:
        sweep(args, records)
    report(records.rows, out / f'bench_{device}.md',
           out / f'bench_{device}.png', device)
    print(f'wrote {out / f"bench_{device}.md"} and {out / f"bench_{device}.png"}')


if __name__ == '__main__':
    main()
