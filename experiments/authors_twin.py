r"""Trains the authors' DeepGCN and gnorm's side by side on the same random
numbers (:mod:`experiments.authors.twin`), recording every ``--every``
epochs their training losses, test accuracies and the largest difference
of their weights, into one JSON record (docs/table3.rst).

    python experiments/authors_twin.py --code ContraNorm/gnn --dataset cora \
        --layers 16 --scale 0.5 --seed 0 \
        --out experiments/results/authors_twin/cora_L16_s0.5_seed0.json
"""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.errors import one_line_errors  # noqa: E402
from gnorm.train.run import source  # noqa: E402
from experiments import authors_gcn  # noqa: E402
from experiments.authors import code as ag  # noqa: E402
from experiments.authors.twin import (check_same_data,  # noqa: E402
                                      gnorm_config, twin)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    authors_gcn.cell_arguments(parser, scale=0.5)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--dtype', default='float32',
                        choices=['float32', 'float64'])
    parser.add_argument('--every', type=int, default=10,
                        help='record every this many epochs')
    args = authors_gcn.parse_cell_arguments(parser, argv)
    from gnorm.train import node_setup

    code = Path(args.code)
    targv = ag.their_argv(args.dataset, args.layers, args.scale, args.epochs)
    targs = ag.their_parser(code).parse_args(targv)
    cfg = gnorm_config(args.dataset, args.layers, args.scale, args.mirror)
    data = node_setup.load_data(cfg)
    with ag.their_code(code, args.dataset, args.mirror) as their:
        tdata = ag.load_their_data(their, targs)
        check_same_data(tdata, data)
        result = twin(their, targs, tdata, cfg, data, args.seed, args.dtype,
                      args.every)
    ag.write_record(args.out, dict(
        config=dict(dataset=args.dataset, layers=args.layers,
                    scale=args.scale, seed=args.seed, epochs=args.epochs,
                    dtype=args.dtype, their_argv=targv),
        twin=result,
        authors=dict(repo=ag.REPO, commit=ag.authors_commit(code)),
        script=dict(path='experiments/authors_twin.py', gnorm=source(),
                    argv=sys.argv[1:] if argv is None else list(argv)),
        machine=ag.machine_record('cpu')))
    print(f'-> {args.out}')


if __name__ == '__main__':
    with one_line_errors():
        main()
