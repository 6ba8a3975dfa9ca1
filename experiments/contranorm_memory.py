"""Peak memory of ContraNorm forward+backward on one large graph (CPU).

Each configuration runs in a fresh child process so that its peak resident
set size (which includes the Python interpreter and torch itself) is its
own. An n x n float32 similarity matrix alone would need n^2 * 4 bytes.

    python experiments/contranorm_memory.py                 # n=50,000, d=32
    python experiments/contranorm_memory.py --nodes 10000 --channels 64
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnorm.bench import ChildFailed, peak_rss_gib, run_child  # noqa: E402

CONFIGS = {
    'all': dict(negatives='all'),
    'non_neighbors': dict(negatives='non_neighbors'),
    'non_neighbors+symmetric': dict(negatives='non_neighbors',
                                    symmetric=True),
}


def run_one(name: str, nodes: int, channels: int, degree: int) -> dict:
    import torch

    from gnorm.bench import timed
    from gnorm.nn import ContraNorm

    torch.manual_seed(0)
    x = torch.randn(nodes, channels, requires_grad=True)
    # Random directed graph with `degree` in-edges per node on average.
    edge_index = torch.randint(0, nodes, (2, nodes * degree))
    norm = ContraNorm(channels, **CONFIGS[name])
    base = peak_rss_gib()
    seconds, _ = timed(lambda: norm(x, edge_index=edge_index).square().sum()
                       .backward())
    return dict(config=name, nodes=nodes, channels=channels,
                seconds=round(seconds, 2), peak_gib=round(peak_rss_gib(), 3),
                peak_before_gib=round(base, 3),
                grad_finite=bool(torch.isfinite(x.grad).all()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=50_000)
    parser.add_argument('--channels', type=int, default=32)
    parser.add_argument('--degree', type=int, default=10)
    parser.add_argument('--limit-gib', type=float, default=2.0)
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(run_one(args.child, args.nodes, args.channels,
                                 args.degree)))
        return

    dense_gib = args.nodes**2 * 4 / 2**30
    print(f'n={args.nodes:,} d={args.channels}: one n x n float32 matrix '
          f'would take {dense_gib:.1f} GiB')
    print(f'{"config":<26}{"fwd+bwd s":>10}{"peak GiB":>10}  ok')
    failed = False
    for name in CONFIGS:
        try:
            res = run_child([__file__, '--child', name, '--nodes',
                             args.nodes, '--channels', args.channels,
                             '--degree', args.degree])
        except ChildFailed as e:
            print(f'{name:<26} failed: {e.tail}')
            failed = True
            continue
        ok = res['peak_gib'] < args.limit_gib and res['grad_finite']
        failed |= not ok
        print(f'{name:<26}{res["seconds"]:>10.2f}{res["peak_gib"]:>10.3f}  '
              f'{"yes" if ok else "NO"}')
    print(f'peak = whole-process max RSS (interpreter and torch included); '
          f'limit {args.limit_gib} GiB')
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
