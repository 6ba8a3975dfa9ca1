r"""Runs the ContraNorm authors' published GCN code (GitHub PKU-ML/ContraNorm,
folder ``gnn/``; :mod:`experiments.authors.code`) on one cell of the
paper's Table 3 and writes its results to a JSON record, so that the
report can cite their code's numbers: one run of their ``main.py`` loop
body per seed of ``--seeds`` with their recipe (``run_baselines.sh``);
the record is rewritten after every seed, and a rerun skips the seeds
already in it. ``--code`` names their ``gnn/`` folder (measured with
commit c9bed6a6: ``git archive HEAD gnn | tar -x -C DIR``; their commit
goes into the record). docs/table3.rst says how and why.

    python experiments/authors_gcn.py --code /work/authors/ContraNorm/gnn \
        --dataset cora --layers 16 --scale 0.2 --seeds 0 1 2 \
        --out experiments/results/authors_gcn/cora_L16_s0.2.json
    # smoke run
    python experiments/authors_gcn.py --code ... --layers 2 --epochs 3 \
        --seeds 0 --out /tmp/smoke.json
"""
import argparse
import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnorm.errors import one_line_errors  # noqa: E402
from experiments.authors.code import (  # noqa: E402
    DATASETS, REPO, STAND_IN_CALLS, THEIR_MODULES, authors_commit,
    load_their_data, machine_record, run_seeds, their_argv, their_code,
    their_parser, train_seed)


def cell_arguments(parser: argparse.ArgumentParser, scale: float) -> None:
    r"""The arguments of a script that runs their code at one cell: their
    ``--code``, the cell, epochs, threads, the output and the data mirror
    (parsed by :func:`parse_cell_arguments`)."""
    parser.add_argument('--code', required=True,
                        help="their gnn/ folder (PKU-ML/ContraNorm)")
    parser.add_argument('--dataset', default='cora', choices=sorted(DATASETS))
    parser.add_argument('--layers', type=int, default=16)
    parser.add_argument('--scale', type=float, default=scale,
                        help='their --norm_scale (ContraNorm s)')
    parser.add_argument('--epochs', type=int, default=200)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--out', required=True, help='the JSON file')
    parser.add_argument('--mirror',
                        default=os.environ.get('GNORM_DATA_MIRROR'),
                        help='the data mirror (default: $GNORM_DATA_MIRROR)')


def parse_cell_arguments(parser: argparse.ArgumentParser, argv=None):
    r"""Parses :obj:`argv` (:func:`cell_arguments`): an error without a
    data mirror; the paths made absolute (their code runs in a temporary
    working folder, where a relative ``--out`` would be written and lost);
    sets torch's threads (and OpenMP's, MKL's)."""
    args = parser.parse_args(argv)
    if not args.mirror:
        parser.error('no data mirror: set GNORM_DATA_MIRROR or --mirror')
    for name in ('code', 'out', 'mirror'):
        setattr(args, name, str(Path(getattr(args, name)).resolve()))
    for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ[var] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    return args


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_arguments(parser, scale=0.2)
    parser.add_argument('--norm-mode', default='CN',
                        help="their --norm_mode (None, PN, PN-SI, PN-SCS, CN)")
    parser.add_argument('--no-layer-norm', action='store_true',
                        help='leave out their --use_layer_norm')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--device', default='cpu', choices=['cpu', 'cuda'])
    parser.add_argument('--log-every', type=int, default=25,
                        help='print progress every this many epochs')
    args = parse_cell_arguments(parser, argv)

    import torch

    from gnorm.train.run import source
    code = Path(args.code)
    targv = their_argv(args.dataset, args.layers, args.scale, args.epochs,
                       args.norm_mode, layer_norm=not args.no_layer_norm)
    targs = their_parser(code).parse_args(targv)
    config = dict(dataset=args.dataset, layers=args.layers, scale=args.scale,
                  norm_mode=args.norm_mode, epochs=args.epochs,
                  their_argv=targv, their_args=vars(targs),
                  threads=args.threads, device=args.device)
    meta = dict(
        authors=dict(repo=REPO, commit=authors_commit(code), code=str(code),
                     sha256={f: hashlib.sha256(Path(code, f).read_bytes())
                             .hexdigest()[:16] for f in
                             sorted(f'{m}.py' for m in (*THEIR_MODULES,
                                                        'main'))}),
        script=dict(path='experiments/authors_gcn.py', gnorm=source(),
                    argv=sys.argv[1:] if argv is None else list(argv)),
        protocol=('their run_baselines.sh recipe; one run of main.py\'s loop '
                  'body per seed after torch.manual_seed(seed); accuracy = '
                  'test accuracy after the last epoch; test set = nodes '
                  'outside train and validation'),
        data=dict(mirror=str(args.mirror), raw=DATASETS[args.dataset][0]),
        machine=machine_record(args.device))
    print(f'their code {code} ({meta["authors"]["commit"]}): '
          f'main.py {" ".join(targv)}; seeds {args.seeds}', flush=True)
    with their_code(code, args.dataset, args.mirror) as their:
        data = load_their_data(their, targs, args.device)
        meta['data'].update({k: int(getattr(data, f'{k}_mask').sum())
                             for k in ('train', 'val', 'test')},
                            nodes=data.num_nodes)
        meta['stand_ins'] = their.stand_ins

        trained = []

        def train(seed):
            from gnorm.train.run import peak_memory, reset_peak_memory
            device = torch.device(args.device)
            reset_peak_memory(device)
            result = train_seed(their, targs, data, seed, args.device,
                                args.log_every)
            # host_rss_mib: the process's peak so far (the runs before this
            # one in the same process included: run one seed a process to
            # measure a run alone).
            result['peak_memory'] = dict(peak_memory(device),
                                         runs_before_in_process=len(trained))
            trained.append(seed)
            meta['stand_in_calls'] = dict(STAND_IN_CALLS)
            # The record's meta is the last invocation's; a record extended
            # with more seeds keeps, per run, what made that run.
            result['made_by'] = dict(gnorm=meta['script']['gnorm'],
                                     machine=meta['machine'])
            return result
        record = run_seeds(args.out, config, args.seeds, train, meta)
    s = record['summary']
    if s:
        last, best = s['test_acc_last_pct'], s['test_acc_best_val_pct']
        print(f'{s["n"]} runs: last-epoch test acc {last["mean"]:.2f} +- '
              f'{last["std"]:.2f}; best-val test acc {best["mean"]:.2f} +- '
              f'{best["std"]:.2f}')


if __name__ == '__main__':
    with one_line_errors():
        main()
