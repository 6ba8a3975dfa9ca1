"""What flushing denormals to zero saves a CPU step, side by side in one run.

x86 CPUs compute on float32 numbers below the normal range (denormals,
under 1.18e-38) many times slower. ContraNorm-D's d x d softmax has rows
near one-hot where channel energies are uneven (docs/layers.rst), and its
off-diagonal entries and their gradients underflow into that range.
``python -m gnorm.train`` flushes them to zero on the CPU
(``gnorm.train.run.flushed_denormals``); this script times the same work
without and with it, in rotating rounds after a warm-up round, on one
thread, and compares the outputs and input gradients bit for bit:

* one ``DualContraNorm(64)`` layer, forward+backward on 10,000 nodes,
  channels of even scale (Gaussian) and of uneven scale (channel j scaled
  by 10^(-1 + 2.5 j / 63), as the norm's inputs in Luo et al.'s block are
  at initialisation); ``BatchNorm1d`` as a case with no softmax;
* :data:`EPOCHS` training epochs of tuned_depth's 12-layer block on
  Minesweeper (``experiment=luo``) with ContraNorm-D and with BatchNorm.

Report: ``<out>/bench_denormals_cpu.md`` (rows: ``.jsonl``).

    python experiments/bench/denormals.py           # ~5 minutes
    python experiments/bench/denormals.py --report-only
"""
import argparse
import sys
import tempfile
from datetime import date
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm

from gnorm.bench import (alternate, arguments, markdown_table,  # noqa: E402
                         medians, parse, read_jsonl, measure_into,
                         write_report)
from gnorm.machine import machine_words, this_machine  # noqa: E402
from gnorm.nn import DualContraNorm  # noqa: E402
from gnorm.train.run import flushed_denormals  # noqa: E402
from experiments.bench.gradients import block, setup  # noqa: E402

NODES, CHANNELS = 10_000, 64
EPOCHS = 5
CPU = torch.device('cpu')
MODELS = {
    'Minesweeper, 12 layers, ContraNorm-D': 'contranorm_d',
    'Minesweeper, 12 layers, BatchNorm': 'batchnorm',
}


def layer_inputs(scales: str, seed: int = 0):
    r"""Node features :obj:`[NODES, CHANNELS]` of even or uneven channel
    scales, and an output gradient."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(NODES, CHANNELS, generator=gen)
    if scales == 'uneven':
        x = x * torch.logspace(-1, 1.5, CHANNELS)
    return x, torch.randn(NODES, CHANNELS, generator=gen)


def layer_step(layer, x, grad, out: dict):
    r"""Forward+backward of :obj:`layer` as a callable that keeps its
    output and input gradient in :obj:`out`."""
    def step():
        x_ = x.detach().requires_grad_()
        y = layer(x_)
        y.backward(grad)
        out['y'], out['grad'] = y.detach(), x_.grad
    return step


def flushed(step):
    r""":obj:`step` with denormals flushed, as a CPU training run has it."""
    def run():
        with flushed_denormals(CPU):
            step()
    return run


def compare(step_without, step_with, rounds: int, outputs=None) -> dict:
    r"""Median seconds of the two steps in rotating rounds, their ratio and
    whether the outputs each kept are bitwise equal."""
    times = medians(alternate({'without': step_without,
                               'with': flushed(step_with)}, rounds))
    row = dict(without_s=times['without'], with_s=times['with'],
               speedup=times['without'] / times['with'])
    if outputs is not None:
        a, b = outputs
        row['bitwise_equal'] = all(torch.equal(a[k], b[k]) for k in a)
    return row


def layer_rows(rounds: int):
    layers = {'ContraNorm-D': lambda: DualContraNorm(CHANNELS),
              'BatchNorm': lambda: torch.nn.BatchNorm1d(CHANNELS)}
    for name, make in layers.items():
        for scales in ('even', 'uneven'):
            x, grad = layer_inputs(scales)
            layer, a, b = make(), {}, {}
            row = compare(layer_step(layer, x, grad, a),
                          layer_step(layer, x, grad, b), rounds, (a, b))
            yield dict(case=f'{name} layer, {NODES:,} x {CHANNELS}, '
                       f'{scales} channels', **row)


def model_rows(rounds: int):
    with tempfile.TemporaryDirectory() as tmp:
        for name, norm in MODELS.items():
            run = setup(['experiment=luo', 'dataset=minesweeper',
                         'layers=12', f'norm={norm}'], tmp)
            step = block(*run, 0, epochs=EPOCHS)
            # Epochs continue training the one model: no outputs to compare.
            yield dict(case=f'{name}, {EPOCHS} epochs', **compare(
                step, step, rounds))


def rows_of(args):
    for rows in (layer_rows(args.rounds), model_rows(args.rounds)):
        for row in rows:
            row.update(machine=machine_words(this_machine('cpu')),
                       date=str(date.today()), rounds=args.rounds)
            print(f"{row['case']}: {row['speedup']:.2f}x "
                  f"({1e3 * row['without_s']:.1f} ms -> "
                  f"{1e3 * row['with_s']:.1f} ms)", flush=True)
            yield row


def report(rows, command):
    return [
        '# Denormals flushed to zero: the CPU step with and without', '',
        f'Generated by `{command}` on {rows[0]["date"]}: '
        f'{rows[0]["machine"]}. Median of {rows[0]["rounds"]} rounds in '
        f'rotating order after a warm-up round; speed-up = time without / '
        f'time with; bitwise: the outputs and input gradients of the two '
        f'(layers only: the epochs go on training one model).', '',
        *markdown_table(
            ['case', 'without', 'flushed', 'speed-up', 'bitwise equal'],
            ([r['case'], f"{1e3 * r['without_s']:.1f} ms",
              f"{1e3 * r['with_s']:.1f} ms", f"{r['speedup']:.2f}x",
              {True: 'yes', False: 'no'}.get(r.get('bitwise_equal'), '-')]
             for r in rows))]


def main(argv=None):
    parser = arguments(argparse.ArgumentParser(
        description=__doc__.splitlines()[0]),
        ROOT / 'experiments' / 'results', threads=1)
    parser.add_argument('--rounds', type=int, default=3)
    args = parse(parser, argv)
    out = Path(args.out) / 'bench_denormals_cpu.md'
    measure_into(args, out.with_suffix('.jsonl'), rows_of(args),
                 key=lambda r: r['case'])
    rows = read_jsonl(out.with_suffix('.jsonl'))
    write_report(out, report(rows, 'python experiments/bench/denormals.py'))
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
