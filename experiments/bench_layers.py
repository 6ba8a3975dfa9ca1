"""Time and peak memory of gnorm's layers beside a reference, side by side.

For each node count n and width d, every layer runs forward+backward on one
graph (median of ``--repeats`` runs after one warm-up) next to a reference
measured in the same run:

* ContraNorm (``negatives='all'``, ``'non_neighbors'`` on a random graph with
  10 in-edges per node on average, ``symmetric=True``) beside the dense
  formulation of the same math, which builds the n x n similarity;
* ContraNorm-D beside one ``GCNConv(d, d)`` on the same random graph (the
  layer it normally follows);
* PairNorm beside ``torch_geometric.nn.norm.PairNorm``;
* LayerNorm (``torch.nn.LayerNorm``) as the cheapest norm, no reference.

On CPU every measurement runs in its own subprocess so that its peak memory
(max RSS above the process's state before the measurement) is its own; a
dense reference whose n x n matrices would not fit in ``--memory-gib`` is
reported as out of memory without running. On CUDA peak memory is
``torch.cuda.max_memory_allocated``, and out-of-memory is caught.
``--models`` adds the time per training epoch of a 32-layer GCN on Cora and
Squirrel with each norm.

Results go to ``<out>/bench_<device>.jsonl`` (one line per measurement, so an
interrupted run resumes where it stopped), ``<out>/bench_<device>.md`` (the
generated table) and ``<out>/bench_<device>.png`` (time vs n, log-log).

    python experiments/bench_layers.py                       # CPU, fp32
    python experiments/bench_layers.py --device cuda --dtypes float32 bfloat16
    python experiments/bench_layers.py --report-only          # table and plot
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
DEGREE = 10
LAYERS = ('contranorm', 'contranorm_nn', 'contranorm_sym', 'contranorm_d',
          'pairnorm', 'layernorm')
REFERENCE = {
    'contranorm': 'dense n x n',
    'contranorm_nn': 'dense n x n',
    'contranorm_sym': 'dense n x n',
    'contranorm_d': 'GCNConv(d, d)',
    'pairnorm': 'PyG PairNorm',
    'layernorm': None,
}
QUADRATIC = ('contranorm', 'contranorm_nn', 'contranorm_sym')
MODEL_NORMS = ('none', 'layernorm', 'pairnorm', 'contranorm', 'contranorm_d')


# ----------------------------------------------------------------- the math
def dense_contranorm(x, edge_index, negatives, symmetric, scale=1.0):
    """ContraNorm the way the authors compute it: an explicit n x n matrix."""
    xn = F.normalize(x, dim=-1)
    sim = xn @ xn.t()  # [n, n]
    if negatives == 'non_neighbors':
        masked = torch.zeros_like(sim, dtype=torch.bool)
        masked[edge_index[1], edge_index[0]] = True
        masked.fill_diagonal_(True)
        sim = sim.masked_fill(masked, float('-inf'))
    neg = sim.softmax(dim=1) @ x
    if symmetric:
        neg = neg + sim.softmax(dim=0) @ x
    return F.layer_norm((1 + scale) * x - scale * neg, (x.size(1), ))


def build(layer, reference, n, d, device, dtype, seed=0):
    """Returns (inputs, fn) where fn() gives the output to backpropagate."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.norm import PairNorm as PyGPairNorm

    from gnorm.nn import ContraNorm, DualContraNorm, PairNorm

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(device, dtype).requires_grad_()
    edge_index = torch.randint(0, n, (2, n * DEGREE), generator=gen).to(device)
    options = {
        'contranorm': dict(negatives='all', symmetric=False),
        'contranorm_nn': dict(negatives='non_neighbors', symmetric=False),
        'contranorm_sym': dict(negatives='all', symmetric=True),
    }
    if layer in QUADRATIC:
        opts = options[layer]
        if reference:
            return x, lambda: dense_contranorm(x, edge_index, **opts)
        module = ContraNorm(d, **opts).to(device, dtype)
        return x, lambda: module(x, edge_index=edge_index)
    if layer == 'contranorm_d':
        module = (GCNConv(d, d) if reference else DualContraNorm(d))
        module = module.to(device, dtype)
        if reference:
            return x, lambda: module(x, edge_index)
        return x, lambda: module(x)
    if layer == 'pairnorm':
        module = PyGPairNorm() if reference else PairNorm()
        return x, lambda: module(x)
    if layer == 'layernorm':
        module = torch.nn.LayerNorm(d).to(device, dtype)
        return x, lambda: module(x)
    raise ValueError(f'bench_layers: unknown layer {layer!r}')


def measure(layer, reference, n, d, device, dtype, repeats):
    """Median forward+backward seconds and peak memory (GiB) of one cell."""
    device = torch.device(device)
    dtype = getattr(torch, dtype)
    cuda = device.type == 'cuda'

    def sync():
        if cuda:
            torch.cuda.synchronize()

    x, fn = build(layer, reference, n, d, device, dtype)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times, out = [], None
    for i in range(repeats + 1):
        x.grad = None
        sync()
        start = time.perf_counter()
        out = fn()
        out.float().square().sum().backward()
        sync()
        if i > 0:  # the first run is the warm-up
            times.append(time.perf_counter() - start)
    if cuda:
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return dict(seconds=statistics.median(times), peak_gib=peak / 2**30,
                finite=bool(torch.isfinite(out).all()), out=out.detach())


def max_abs_difference(layer, n, d, device, dtype):
    """Largest |gnorm - dense| over the outputs, for the quadratic layers."""
    torch.manual_seed(0)
    outs = []
    for reference in (False, True):
        x, fn = build(layer, reference, n, d, torch.device(device),
                      getattr(torch, dtype))
        with torch.no_grad():
            outs.append(fn().float())
    return float((outs[0] - outs[1]).abs().max())


def dense_gib(n, dtype):
    """Memory the dense formulation's n x n tensors need in forward+backward
    (similarity, softmax, masks and their gradients: about six)."""
    return 6 * n * n * torch.finfo(getattr(torch, dtype)).bits / 8 / 2**30


# ------------------------------------------------------------ model epochs
def model_epoch_seconds(dataset, norm, device, repeats):
    """Seconds per full-batch training epoch of a 32-layer GCN."""
    from hydra import compose, initialize_config_dir

    from gnorm.train import build_model, load_data

    with initialize_config_dir(str(ROOT / 'conf'), version_base=None):
        cfg = compose('train', overrides=[f'dataset={dataset}',
                                          f'norm={norm}', 'layers=32'])
    data = load_data(cfg).to(device)
    model = build_model(cfg, data.num_features, int(data.y.max()) + 1)
    model = model.to(device)
    optim = torch.optim.Adam(model.parameters(), lr=0.005)
    model.train()
    times = []
    for i in range(repeats + 1):
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        start = time.perf_counter()
        optim.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out, data.y).backward()
        optim.step()
        if device.startswith('cuda'):
            torch.cuda.synchronize()
        if i > 0:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---------------------------------------------------------------- driver
def machine(device):
    if device.startswith('cuda'):
        return f'{torch.cuda.get_device_name()} (torch {torch.__version__})'
    cpu = platform.processor() or platform.machine()
    try:
        for line in open('/proc/cpuinfo'):
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return (f'{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} '
            f'threads (torch {torch.__version__})')


def child(args):
    """Runs one cell in this process and prints its JSON line."""
    res = measure(args.layer, args.reference, args.n, args.d, args.device,
                  args.dtype, args.repeats)
    res.pop('out')
    print(json.dumps(res))


def run_cell(args, layer, reference, n, d, dtype):
    if args.device == 'cpu':
        cmd = [sys.executable, __file__, '--child', '--layer', layer,
               '--n', str(n), '--d', str(d), '--dtype', dtype,
               '--repeats', str(args.repeats)]
        if reference:
            cmd.append('--reference')
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ['killed'])[-1]
            return dict(status='error', error=tail[:200])
        return dict(status='ok', **json.loads(proc.stdout))
    try:
        res = measure(layer, reference, n, d, args.device, dtype,
                      args.repeats)
        res.pop('out')
        return dict(status='ok', **res)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return dict(status='oom')


def load(path):
    rows = {}
    if path.exists():
        for line in path.read_text().splitlines():
            row = json.loads(line)
            rows[row['key']] = row
    return rows


def sweep(args, path):
    rows = load(path)
    done_before = len(rows)

    def save(row):
        rows[row['key']] = row
        with path.open('a') as f:
            f.write(json.dumps(row) + '\n')

    cells = [(dtype, d, n, layer, ref)
             for dtype in args.dtypes for d in args.channels
             for layer in args.layers
             for n in args.nodes
             for ref in ((False, True) if REFERENCE[layer] else (False, ))]
    last_time = {}
    try:
        from tqdm import tqdm
        cells_iter = tqdm(cells, desc='bench', unit='cell')
    except ImportError:  # tqdm ships with gnorm, but the script runs alone
        cells_iter = cells
    for dtype, d, n, layer, ref in cells_iter:
        key = f'{args.device}|{dtype}|{layer}|{"ref" if ref else "gnorm"}|{n}|{d}'
        if key in rows:
            if rows[key]['status'] == 'ok':
                last_time[(dtype, d, layer, ref)] = (n, rows[key]['seconds'])
            continue
        row = dict(key=key, device=args.device, dtype=dtype, layer=layer,
                   impl='reference' if ref else 'gnorm', n=n, d=d,
                   machine=machine(args.device))
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
            if row['status'] == 'ok':
                last_time[(dtype, d, layer, ref)] = (n, row['seconds'])
            if row['status'] == 'ok' and ref and quadratic:
                row['max_abs_diff'] = max_abs_difference(
                    layer, min(n, 4096), d, args.device, dtype) \
                    if args.device == 'cpu' or n <= 20_000 else None
        save(row)
    print(f'{len(rows) - done_before} new measurements, {done_before} '
          f'reused from {path}')

    if args.models:
        for dataset in ('cora', 'squirrel'):
            for norm in MODEL_NORMS:
                key = f'{args.device}|model|{dataset}|{norm}'
                if key in rows:
                    continue
                sec = model_epoch_seconds(dataset, norm, args.device,
                                          args.repeats)
                save(dict(key=key, device=args.device, kind='model',
                          dataset=dataset, norm=norm, seconds=sec,
                          status='ok', machine=machine(args.device)))
    return rows


def cell_text(row):
    if row is None:
        return '-'
    if row['status'] == 'ok':
        return f'{row["seconds"] * 1e3:.1f} ms / {row["peak_gib"]:.2f} GiB'
    return f'{row["status"].upper()} ({row.get("note", row.get("error", ""))})'


def report(rows, path_md, path_png, device):
    layer_rows = [r for r in rows.values() if r.get('layer')]
    model_rows = [r for r in rows.values() if r.get('kind') == 'model']
    machines = sorted({r['machine'] for r in rows.values()})
    lines = [f'# gnorm layer benchmark ({device})', '',
             'Generated by `python experiments/bench_layers.py'
             f'{" --device cuda" if device != "cpu" else ""}` on: '
             + '; '.join(machines) + '.', '',
             'Forward+backward of one layer on one graph, median of repeats '
             'after a warm-up. Memory: on CPU the growth of the process\'s '
             'peak RSS over its peak before the measurement (imports '
             'included, so layers needing less than that read 0.00 GiB); on '
             'CUDA the peak allocated above what was allocated before. ratio = gnorm time / reference time '
             '(< 1: gnorm faster). Random graph: 10 in-edges per node.', '']
    by_key = {(r['dtype'], r['layer'], r['impl'], r['n'], r['d']): r
              for r in layer_rows}
    for dtype in sorted({r['dtype'] for r in layer_rows}):
        lines += [f'## {dtype}', '',
                  '| layer | reference | n | d | gnorm | reference | ratio '
                  '| max abs diff |', '|---|---|---|---|---|---|---|---|']
        keys = sorted({(r['layer'], r['d'], r['n']) for r in layer_rows
                       if r['dtype'] == dtype},
                      key=lambda k: (LAYERS.index(k[0]), k[1], k[2]))
        for layer, d, n in keys:
            g = by_key.get((dtype, layer, 'gnorm', n, d))
            r = by_key.get((dtype, layer, 'reference', n, d))
            ratio = '-'
            if g and r and g['status'] == r['status'] == 'ok':
                ratio = f'{g["seconds"] / r["seconds"]:.2f}'
            diff = r.get('max_abs_diff') if r else None
            lines.append(
                f'| {layer} | {REFERENCE[layer] or "-"} | {n:,} | {d} | '
                f'{cell_text(g)} | {cell_text(r) if REFERENCE[layer] else "-"}'
                f' | {ratio} | {"-" if diff is None else f"{diff:.1e}"} |')
        lines.append('')
    if model_rows:
        lines += ['## 32-layer GCN, time per training epoch', '',
                  '| dataset | ' + ' | '.join(MODEL_NORMS) + ' |',
                  '|---|' + '---|' * len(MODEL_NORMS)]
        for dataset in ('cora', 'squirrel'):
            cells = []
            for norm in MODEL_NORMS:
                row = rows.get(f'{device}|model|{dataset}|{norm}')
                cells.append(f'{row["seconds"] * 1e3:.0f} ms' if row else '-')
            lines.append(f'| {dataset} | ' + ' | '.join(cells) + ' |')
        lines.append('')
    path_md.write_text('\n'.join(lines))

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    combos = sorted({(r['dtype'], r['d']) for r in layer_rows})
    fig, axes = plt.subplots(1, len(combos), figsize=(6 * len(combos), 4.5),
                             squeeze=False)
    handles = {}
    for ax, (dtype, d) in zip(axes[0], combos):
        for i, layer in enumerate(LAYERS):
            color = f'C{i}'
            for impl, style in (('gnorm', '-o'), ('reference', '--x')):
                pts = sorted((r['n'], r['seconds']) for r in layer_rows
                             if r['layer'] == layer and r['impl'] == impl
                             and r['dtype'] == dtype and r['d'] == d
                             and r['status'] == 'ok')
                if pts:
                    label = layer if impl == 'gnorm' else \
                        f'{layer} ref ({REFERENCE[layer]})'
                    line, = ax.plot(*zip(*pts), style, color=color,
                                    label=label)
                    handles.setdefault(label, line)
        ax.set(xscale='log', yscale='log', xlabel='nodes n',
               ylabel='forward+backward seconds', title=f'{device}, {dtype}, d={d}')
        ax.grid(True, which='both', alpha=0.3)
        missing = not_measured([r for r in layer_rows if r['dtype'] == dtype
                                and r['d'] == d])
        if missing:
            ax.text(0.0, -0.16, 'not measured, so not drawn:\n'
                    + '\n'.join(missing), transform=ax.transAxes,
                    fontsize=7, va='top', color='0.25')
    fig.legend(handles=list(handles.values()), loc='center left',
               bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False,
               title='solid o: gnorm; dashed x: reference\n(median of '
               'repeats)', title_fontsize=8)
    fig.suptitle(machines[0] if machines else device, fontsize=8)
    fig.tight_layout()
    fig.savefig(path_png, dpi=120, bbox_inches='tight',
                metadata={'Software': None})


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


def check_goals(rows, device):
    """Prints the issue's goals next to what was measured."""
    def get(dtype, layer, impl, n, d):
        return rows.get(f'{device}|{dtype}|{layer}|{impl}|{n}|{d}')

    def ratio(layer, n, d, dtype='float32'):
        g, r = get(dtype, layer, 'gnorm', n, d), get(dtype, layer, 'ref', n, d)
        if g and r and g['status'] == r['status'] == 'ok':
            return g['seconds'] / r['seconds']
        return None

    print('goals:')
    if device == 'cpu':
        for n in (2_708, 10_000):
            for layer in QUADRATIC:
                q = ratio(layer, n, 32)
                print(f'  {layer} n={n:,} d=32: gnorm/dense = '
                      f'{"n/a" if q is None else f"{q:.2f}"} (goal <= 1.3)')
        g = get('float32', 'contranorm', 'gnorm', 50_000, 32)
        r = get('float32', 'contranorm', 'ref', 50_000, 32)
        print(f'  contranorm n=50,000 d=32: gnorm {cell_text(g)}, dense '
              f'{cell_text(r)}')
    else:
        q = ratio('contranorm', 20_000, 128)
        print(f'  contranorm n=20,000 d=128: dense/gnorm = '
              f'{"n/a" if q is None else f"{1 / q:.1f}"} (goal >= 3)')
        g = get('bfloat16', 'contranorm', 'gnorm', 169_000, 128)
        print(f'  contranorm n=169,000 d=128 bf16: {cell_text(g)} '
              f'(goal <= 250 ms)')
        g = get('bfloat16', 'contranorm', 'gnorm', 1_000_000, 64)
        print(f'  contranorm n=1,000,000 d=64 bf16: {cell_text(g)}')
    q = ratio('contranorm_d', 169_000, 128)
    print(f'  contranorm_d n=169,000 d=128: ContraNorm-D/GCNConv = '
          f'{"n/a" if q is None else f"{q:.2f}"} (goal <= 1.5)')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cpu')
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
    parser.add_argument('--out', default=str(ROOT / 'experiments' / 'results'))
    parser.add_argument('--report-only', action='store_true')
    # one measurement in a subprocess (CPU)
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--layer', help=argparse.SUPPRESS)
    parser.add_argument('--reference', action='store_true',
                        help=argparse.SUPPRESS)
    parser.add_argument('--n', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--d', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--dtype', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        return child(args)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        sys.exit('bench_layers: --device cuda needs a CUDA GPU; run on a GPU '
                 'machine or pass --device cpu')
    device = 'cpu' if args.device == 'cpu' else 'cuda'
    args.device = device
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f'bench_{device}.jsonl'
    rows = load(path) if args.report_only else sweep(args, path)
    report(rows, out / f'bench_{device}.md', out / f'bench_{device}.png',
           device)
    check_goals(rows, device)
    print(f'wrote {out / f"bench_{device}.md"} and {out / f"bench_{device}.png"}')


if __name__ == '__main__':
    main()
