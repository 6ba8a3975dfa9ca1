"""Many runs as one model: sequential vs batched training of R runs.

For each case, the same R runs (seeds 0..R-1) of ``python -m gnorm.train``
are trained twice in this process, side by side: one by one
(``batch_runs=1``, R models in turn) and as one model (``batch_runs=R``,
``gnorm.models.DeepGCN(runs=R)``). Both go through
``gnorm.train.run.train_runs``, data loading, evaluation every epoch,
model selection, collapse metrics and results files included. The script
prints both wall times, their ratio (sequential / batched: the speed-up),
and compares every run's results between the two ways (largest difference
of test accuracy and of the loss curve) with the float-level floor of such
differences: the runs trained one by one again with another number of CPU
threads.

Cases (Cora, public split):

* ``gcn2``: the 2-layer GCN of ``python -m gnorm.train`` (no norm), 200
  epochs;
* ``contranorm32``: a 32-layer GCN with ContraNorm (the default
  ``norm=contranorm``, scale 1), ``--deep-epochs`` epochs.

Each case appends one line to ``<out>/bench_batched_<device>.jsonl``; the
table ``bench_batched_<device>.md`` is generated from that file.

    python experiments/bench_batched.py                     # CPU
    python experiments/bench_batched.py --device cuda --deep-epochs 20
    python experiments/bench_batched.py --report-only
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_layers import machine  # noqa: E402

CASES = {
    'gcn2': ['layers=2', 'norm=none'],
    'contranorm32': ['layers=32', 'norm=contranorm'],
}


def configs(case: str, runs: int, epochs: int, device: str, batch: int):
    from hydra import compose, initialize_config_dir
    from gnorm.train.run import CONF_DIR
    with initialize_config_dir(str(CONF_DIR), version_base='1.3'):
        return [compose('train', overrides=[
            'dataset=cora', *CASES[case], f'seed={seed}',
            f'train.epochs={epochs}', f'device={device}',
            f'batch_runs={batch}', 'train.progress=false',
            'train.log_every=0']) for seed in range(runs)]


def timed(case, runs, epochs, device, batch, folder):
    from gnorm.train.run import train_runs
    cfgs = configs(case, runs, epochs, device, batch)  # not timed
    dirs = [str(Path(folder) / f'{batch}-{seed}') for seed in range(runs)]
    if device.startswith('cuda'):
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = train_runs(cfgs, dirs)
    if device.startswith('cuda'):
        torch.cuda.synchronize()
    return time.perf_counter() - start, results


def _differences(first, second):
    r"""Largest differences of test accuracy and of the loss curves between
    the same runs trained two ways."""
    acc = max(abs(a['test_acc'] - b['test_acc'])
              for a, b in zip(first, second))
    loss = max(abs(x - y) for a, b in zip(first, second)
               for x, y in zip(a['curve']['loss'], b['curve']['loss']))
    return acc, loss


def measure(case, runs, epochs, device, repeats=1):
    sequential, batched = [], []
    with tempfile.TemporaryDirectory() as folder:
        timed(case, 1, 1, device, 1, folder)  # warm-up: data, caches
        for _ in range(repeats):  # alternately, so that drifts hit both
            seconds, one_by_one = timed(case, runs, epochs, device, 1,
                                        folder)
            sequential.append(seconds)
            seconds, together = timed(case, runs, epochs, device, runs,
                                      folder)
            batched.append(seconds)
        # The floor of such differences: the runs again, one by one, with
        # another number of CPU threads (other float summation orders).
        threads = torch.get_num_threads()
        torch.set_num_threads(1 if threads > 1 else 2)
        _, again = timed(case, runs, epochs, device, 1,
                         Path(folder) / 'threads')
        torch.set_num_threads(threads)
    acc, loss = _differences(one_by_one, together)
    floor_acc, floor_loss = _differences(one_by_one, again)
    return {'case': case, 'runs': runs, 'epochs': epochs, 'device': device,
            'machine': machine(device), 'repeats': repeats,
            'sequential_s': statistics.median(sequential),
            'batched_s': statistics.median(batched),
            'speedup': statistics.median(sequential) /
            statistics.median(batched),
            'sequential_all_s': sequential, 'batched_all_s': batched,
            'max_test_acc_diff': acc, 'max_loss_diff': loss,
            'threads_test_acc_diff': floor_acc,
            'threads_loss_diff': floor_loss,
            'batch_runs': together[0]['batch_runs']}


def report(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines()
            if line.strip()]
    latest = {r['case']: r for r in rows}
    lines = [
        f'# Batched vs sequential training ({path.stem.split("_")[-1]})',
        '',
        f'Generated by `python experiments/bench_batched.py` from '
        f'`{path.name}`. Each case trains the same runs (seeds 0..R-1, Cora) '
        f'one by one (`batch_runs=1`) and as one model (`batch_runs=R`) '
        f'in one process, side by side, the two ways alternately '
        f'"repeats" times; the times are the medians (all of them are in '
        f'the `.jsonl`), speed-up = sequential / batched median wall time. '
        f'"batched vs one by one": the largest difference of '
        f'test accuracy and of the per-epoch training loss between the two '
        f'ways, over all runs. "1 vs 2 threads": the same for the runs '
        f'trained one by one again with another number of CPU threads, '
        f'the floor of float-level differences (summation order) that a '
        f'deep network amplifies while it trains.',
        '',
        '| case | runs | epochs | repeats | sequential (s) | batched (s) '
        '| speed-up | batched vs one by one: test acc / loss | 1 vs 2 '
        'threads: test acc / loss | machine |',
        '|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in latest.values():
        lines.append(
            f"| {r['case']} | {r['runs']} | {r['epochs']} | "
            f"{r.get('repeats', 1)} | "
            f"{r['sequential_s']:.1f} | {r['batched_s']:.1f} | "
            f"**{r['speedup']:.2f}x** | {r['max_test_acc_diff']:.2g} / "
            f"{r['max_loss_diff']:.2g} | {r['threads_test_acc_diff']:.2g} / "
            f"{r['threads_loss_diff']:.2g} | {r['machine']} |")
    return '\n'.join(lines) + '\n'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='auto')
    parser.add_argument('--runs', type=int, default=20)
    parser.add_argument('--cases', nargs='+', default=list(CASES),
                        choices=list(CASES))
    parser.add_argument('--epochs', type=int, default=200,
                        help='epochs of gcn2')
    parser.add_argument('--deep-epochs', type=int, default=3,
                        help='epochs of contranorm32')
    parser.add_argument('--repeats', type=int, default=3,
                        help='sequential/batched pairs per case (medians)')
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--out', default=str(ROOT / 'experiments' /
                                             'results'))
    parser.add_argument('--report-only', action='store_true')
    args = parser.parse_args()
    device = args.device
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault('GNORM_DATA_MIRROR',
                          str(ROOT.parent / 'shared' / 'data'))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f'bench_batched_{device.split(":")[0]}.jsonl'
    if not args.report_only:
        for case in args.cases:
            epochs = args.deep_epochs if case == 'contranorm32' \
                else args.epochs
            row = measure(case, args.runs, epochs, device, args.repeats)
            print(f"{case}: {args.runs} runs x {epochs} epochs on {device}: "
                  f"sequential {row['sequential_s']:.1f}s, batched "
                  f"{row['batched_s']:.1f}s, batched/sequential speed-up "
                  f"{row['speedup']:.2f}x (max test acc diff "
                  f"{row['max_test_acc_diff']:.2g})", flush=True)
            with open(path, 'a') as f:
                f.write(json.dumps(row) + '\n')
    if path.is_file():
        md = report(path)
        path.with_suffix('.md').write_text(md)
        print(md)


if __name__ == '__main__':
    main()
