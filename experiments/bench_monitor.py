"""Overhead of gnorm.monitor.CollapseMonitor beside training, side by side.

On Cora (public split), one CPU thread: a 32-layer ``DeepGCN`` (hidden 32,
dropout 0.2, full batch, monitor on its 32 layer outputs) and PyG's
``GAT`` (2 layers, hidden 64, 4 heads) on neighbour-sampled batches (128
seeds, 10 neighbours a hop, :class:`gnorm.data.TorchNeighborSampler`),
monitor on its 2 ``GATConv`` layers recording one fixed batch. In
rotating rounds after a warm-up (medians): a training epoch
without a monitor and with its hooks idle, the monitored evaluation
forward (all 7 metrics) and the same forward without, and each metric
alone. Report: ``results/bench_monitor_cpu.{md,jsonl}`` and the table of
docs/monitor.rst (docs/benchmarks.rst).

    python experiments/bench_monitor.py  # results/bench_monitor_cpu.{md,jsonl}
"""
import argparse
import functools
import inspect
import json
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.loader import NodeLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.bench import (alternate, machine, markdown_table,  # noqa: E402
                         medians, read_jsonl, timed, write_jsonl)
from gnorm.data import TorchNeighborSampler  # noqa: E402
from gnorm.monitor import METRICS, CollapseMonitor  # noqa: E402

OUT = ROOT / 'experiments' / 'results' / 'bench_monitor_cpu.md'
# The cheap subset measured beside all metrics.
TWO_METRICS = ['effective_rank', 'dirichlet_energy']
DEFAULT_SAMPLES = inspect.signature(CollapseMonitor).parameters[
    'max_samples'].default


def neighbor_loader(data, num_neighbors, batch_size, shuffle=True, seed=0):
    r"""PyG's :class:`~torch_geometric.loader.NodeLoader` of
    :class:`gnorm.data.TorchNeighborSampler` batches: what
    :obj:`NeighborLoader(data, num_neighbors, batch_size=...)` gives."""
    return NodeLoader(data, node_sampler=TorchNeighborSampler(
        data, num_neighbors, seed=seed), batch_size=batch_size,
        shuffle=shuffle)


def load_cora(root):
    from gnorm.data import load_dataset
    mirror = os.environ.get('GNORM_DATA_MIRROR') or None
    return load_dataset('cora', root=root, mirror=mirror, split='public')


def bench(name, setup, record_args, repeats, metrics=None, device='cpu'):
    r"""Median seconds of the measurements, in rotating order on
    :obj:`device` (:func:`gnorm.bench.alternate`). :obj:`setup`
    makes one (train_epoch, forward, model) triple; two are made with the
    same seed: one never monitored, one with a monitor attached for the
    whole run (its hooks idle during training, its prepared inputs kept
    from one record to the next, as in a training loop)."""
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


def deep_gcn(data, layers=32):
    r"""The benchmark's DeepGCN (32 layers unless :obj:`layers` says
    otherwise) on :obj:`data`, seed 0, on :obj:`data`'s device."""
    from gnorm.models import DeepGCN
    torch.manual_seed(0)
    return DeepGCN(data.num_features, int(data.y.max()) + 1,
                   num_layers=layers, hidden_channels=32,
                   dropout=0.2).to(data.x.device)


def deep_gcn_case(data, repeats, metrics=None, layers=32):
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
    return bench(name, setup, dict(step=0, edge_index=data.edge_index),
                 repeats, metrics, data.x.device)


def metric_costs(data, repeats):
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


def gat_case(data, repeats):
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

    return bench('GAT, 2 layers, neighbour-sampled batches', setup,
                 dict(step=0, edge_index=fixed.edge_index,
                      num_seed_nodes=fixed.batch_size), repeats)


def report(rows, command):
    head = (f'# CollapseMonitor overhead (cpu)\n\n'
            f'Generated by `{command}` on {rows[0]["date"]}: '
            f'{rows[0]["machine"]}. Cora, public split; all 7 metrics '
            f'unless the model says otherwise, max_samples='
            f'{rows[0]["max_samples"]} (the default). Medians of '
            f'{rows[0]["repeats"]} rounds of the four measurements in '
            f'rotating order after a warm-up round. Two copies of each '
            f'model (same seed) train side by side, one never monitored, '
            f'one with a monitor attached throughout.\n\n'
            f'* training step: one epoch of training (every batch), no '
            f'monitor; hooked: the same with the monitor attached, not '
            f'recording;\n'
            f'* evaluation: the forward pass of an evaluation in eval mode '
            f'under `torch.no_grad()`, no monitor; record: the same inside '
            f'`with monitor.record(...)` (the forward and the metrics); '
            f'first record: the first one, which also prepares the inputs '
            f'(graph count, drawn nodes, their hop distances);\n'
            f'* recording the evaluation, every k-th epoch: a loop that '
            f'evaluates every epoch (`python -m gnorm.train`, PyG\'s '
            f'examples) and records that forward pass every k-th epoch: '
            f'(record - evaluation) / (k x (training step + evaluation));\n'
            f'* a forward pass of its own, every k-th epoch: a loop of '
            f'training steps only, with a monitored forward pass added '
            f'every k-th epoch: record / (k x training step).')
    table = markdown_table(
        ['model', 'layers hooked', 'training step', 'hooked', 'evaluation',
         'record', 'first record', 'recording the evaluation, every epoch',
         'every 10th', 'a forward of its own, every epoch', 'every 10th'],
        ([r['model'], r['layers'],
          *(f'{1e3 * r[k]:.1f} ms' for k in (
              'train_s', 'train_hooked_s', 'forward_s', 'record_s',
              'first_record_s')),
          *(f'{100 * r[k]:.1f} %' for k in (
              'eval_every_1', 'eval_every_10', 'every_1', 'every_10'))]
         for r in rows))
    return '\n'.join([head, '', *table]) + '\n' + metric_table(rows[0])


def metric_table(row):
    r"""The time each metric alone adds to a record of :obj:`row`'s model,
    and its share of the loop recording its evaluation every 10th epoch."""
    loop = 10 * (row['train_s'] + row['forward_s'])
    lines = ['', f'Each metric alone ({row["model"]}; one monitor per metric, '
             f'the same rounds): the time it adds to a record, and its '
             f'share of a loop that records its evaluation every 10th '
             f'epoch. Together they add less than the sum: the sum counts '
             f'the stacking of the outputs and the finite check once per '
             f'metric, and the two Dirichlet energies are computed '
             f'together, as are MAD and MADGap (from the distances of the '
             f'same drawn nodes).', '']
    return '\n'.join(lines + markdown_table(
        ['metric', 'added to a record', 'every 10th'],
        ([m, f'{1e3 * t:.1f} ms', f'{100 * t / loop:.1f} %']
         for m, t in row['metric_s'].items()))) + '\n'


def guide_table(rows):
    r"""The rst table of docs/monitor.rst, from the committed rows."""
    lines = ['.. list-table::', '   :header-rows: 1', '',
             '   * - model', '     - training step',
             '     - evaluation', '     - record (forward + metrics)',
             '     - recording the evaluation every 10th epoch',
             '     - a forward of its own every 10th epoch']
    for r in rows:
        lines += [f'   * - {r["model"]}',
                  f'     - {1e3 * r["train_s"]:.1f} ms',
                  f'     - {1e3 * r["forward_s"]:.1f} ms',
                  f'     - {1e3 * r["record_s"]:.1f} ms',
                  f'     - {100 * r["eval_every_10"]:.1f} %',
                  f'     - {100 * r["every_10"]:.1f} %']
    return '\n'.join(lines) + '\n'


GUIDE = ROOT / 'docs' / 'monitor.rst'
GUIDE_MARKS = ('.. bench-monitor-numbers\n\n', '\n.. /bench-monitor-numbers')


def with_guide_table(page, rows):
    r"""The guide's text :obj:`page` with the table between its marks
    made from :obj:`rows`."""
    start, end = GUIDE_MARKS
    head, rest = page.split(start, 1)
    return head + start + guide_table(rows) + end + rest.split(end, 1)[1]


def load_rows(path=OUT.with_suffix('.jsonl')):
    return read_jsonl(path)


def overheads(row):
    r"""The time recording adds to a loop, as a fraction of the loop's:
    recording its evaluation (the metrics alone: the forward pass is the
    evaluation's) or adding a forward pass of its own, every epoch and
    every 10th."""
    train, forward, record = row['train_s'], row['forward_s'], \
        row['record_s']
    for k in (1, 10):
        row[f'eval_every_{k}'] = (record - forward) / (k * (train + forward))
        row[f'every_{k}'] = record / (k * train)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=25)
    parser.add_argument('--data-root', default=None,
                        help='folder for the dataset (default: a temporary '
                             'one, raw files copied from $GNORM_DATA_MIRROR)')
    parser.add_argument('--out', default=str(OUT))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = load_cora(args.data_root or tmp)
    rows = []
    cases = (deep_gcn_case, gat_case,
             lambda d, r: deep_gcn_case(d, r, TWO_METRICS))
    for case in cases:
        row = overheads(case(data, args.repeats))
        row.update(machine=machine('cpu'), date=str(date.today()),
                   max_samples=DEFAULT_SAMPLES)
        rows.append(row)
        print(json.dumps(row), flush=True)
    rows[0]['metric_s'] = metric_costs(data, args.repeats)
    out = Path(args.out)
    command = 'python experiments/bench_monitor.py' + (
        f' --repeats {args.repeats}' if args.repeats != 25 else '')
    out.write_text(report(rows, command))
    write_jsonl(out.with_suffix('.jsonl'), rows)
    if out == OUT:  # the committed results: the guide quotes them
        GUIDE.write_text(with_guide_table(GUIDE.read_text(), rows))
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
