r"""Runs the ContraNorm authors' published GCN code (GitHub PKU-ML/ContraNorm,
folder ``gnn/``) on one cell of the paper's Table 3 and writes its results
to a JSON record, so that the report can cite their code's numbers.

Their code is not copied here: ``--code`` names their ``gnn/`` folder,
imported at run time (measured with commit c9bed6a6: ``git archive HEAD gnn
| tar -x -C DIR``; their commit goes into the record), with stand-ins in
plain torch for the packages it imports and this machine lacks, and their
data read from a temporary copy of the offline mirror's raw files. One run
of their ``main.py`` loop body per seed of ``--seeds`` with their recipe
(``run_baselines.sh``); the record is rewritten after every seed, and a
rerun skips the seeds already in it. docs/table3.rst says how and why.

    python experiments/authors_gcn.py --code /work/authors/ContraNorm/gnn \
        --dataset cora --layers 16 --scale 0.2 --seeds 0 1 2 \
        --out experiments/results/authors_gcn/cora_L16_s0.2.json
    # smoke run
    python experiments/authors_gcn.py --code ... --layers 2 --epochs 3 \
        --seeds 0 --out /tmp/smoke.json
"""
import argparse
import ast
import contextlib
import hashlib
import importlib
import importlib.util
import json
import math
import os
import platform
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = 'PKU-ML/ContraNorm'
# Their modules, imported from --code under these top-level names.
THEIR_MODULES = ('data', 'layers', 'metrics', 'models', 'utils')
# Data set (their name) -> (raw folder in the mirror, raw folder under their
# root 'data/' as PyG reads it there).
DATASETS = {
    'cora': ('planetoid/Cora/raw', 'cora/raw'),
    'citeseer': ('planetoid/CiteSeer/raw', 'citeseer/raw'),
    **{name: (f'wikipedia/{name}/geom_gcn/raw', f'{name}/geom_gcn/raw')
       for name in ('chameleon', 'squirrel')},
}
STAND_IN_CALLS = {}


# ---------------------------------------------------------------- stand-ins
def _counted(module, fn):
    key = f'{module}.{fn.__name__}'
    STAND_IN_CALLS.setdefault(key, 0)

    def wrapper(*args, **kwargs):
        STAND_IN_CALLS[key] += 1
        return fn(*args, **kwargs)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def spmm(index, value, m, n, matrix):
    r"""``torch_sparse.spmm``: the [m, n] sparse matrix with entries
    :obj:`value` at :obj:`index` (duplicates summed) times :obj:`matrix`."""
    rows = value.unsqueeze(-1) * matrix[index[1]]
    return matrix.new_zeros(m, matrix.size(-1)).index_add(0, index[0], rows)


def matmul(src, other, reduce='sum'):
    r"""``torch_sparse.matmul`` for a torch sparse COO matrix :obj:`src`
    (their code passes no other kind); reduce ``sum``/``add``/``mean``."""
    src = src.coalesce()
    out = spmm(src.indices(), src.values(), src.size(0), src.size(1), other)
    if reduce == 'mean':
        count = other.new_zeros(src.size(0)).index_add(
            0, src.indices()[0], other.new_ones(src.values().numel()))
        out = out / count.clamp(min=1).unsqueeze(-1)
    elif reduce not in ('sum', 'add'):
        raise NotImplementedError(f'stand-in torch_sparse.matmul: {reduce}')
    return out


def _scatter_index(src, index, dim, dim_size):
    dim = dim % src.dim()
    if index.dim() == 1:  # torch_scatter broadcasts a 1-D index along dim
        shape = [1] * src.dim()
        shape[dim] = -1
        index = index.view(shape)
    index = index.expand_as(src)
    size = list(src.shape)
    size[dim] = dim_size if dim_size is not None else (
        int(index.max()) + 1 if index.numel() else 0)
    return dim, index, size


def scatter_add(src, index, dim=-1, out=None, dim_size=None):
    r"""``torch_scatter.scatter_add``: sums of :obj:`src` grouped by
    :obj:`index` along :obj:`dim` (into :obj:`out` when given)."""
    dim, index, size = _scatter_index(src, index, dim, dim_size)
    if out is None:
        out = src.new_zeros(size)
    return out.scatter_add_(dim, index, src)


def scatter_max(src, index, dim=-1, out=None, dim_size=None):
    r"""``torch_scatter.scatter_max``: (maxima, argmax) of :obj:`src` grouped
    by :obj:`index` along :obj:`dim`; an empty group gives 0 and argmax
    ``src.size(dim)``, as torch_scatter does."""
    if out is not None:
        raise NotImplementedError('stand-in torch_scatter.scatter_max: out')
    dim, index, size = _scatter_index(src, index, dim, dim_size)
    import torch
    values = src.new_zeros(size).scatter_reduce(
        dim, index, src, 'amax', include_self=False)
    shape = [1] * src.dim()
    shape[dim] = -1
    position = torch.arange(src.size(dim), device=src.device).view(shape)
    candidate = torch.where(src == values.gather(dim, index),
                            position.expand_as(src), src.size(dim))
    argmax = torch.full(size, src.size(dim), dtype=torch.long,
                        device=src.device)
    return values, argmax.scatter_reduce(dim, index, candidate, 'amin')


def rearrange(*args, **kwargs):
    r"""``einops.rearrange``: imported by their ``metrics.py``, never
    called."""
    raise NotImplementedError('stand-in einops.rearrange')


def stand_in_modules():
    r"""name -> stand-in module for the packages their code imports and
    this machine lacks (the functions count their calls in
    :obj:`STAND_IN_CALLS`)."""
    modules = {}
    for name, fns in (('torch_sparse', (spmm, matmul)),
                      ('torch_scatter', (scatter_add, scatter_max)),
                      ('einops', (rearrange,))):
        module = types.ModuleType(name, f'Stand-in {name} ({__file__}).')
        for fn in fns:
            setattr(module, fn.__name__, _counted(name, fn))
        modules[name] = module
    return modules


# ------------------------------------------------------------ their code
def _absent(name):
    return name not in sys.modules and importlib.util.find_spec(name) is None


@contextlib.contextmanager
def their_code(code, dataset, mirror):
    r"""Imports their ``gnn/`` folder :obj:`code` in a temporary working
    folder whose ``data/`` holds a copy of :obj:`dataset`'s raw files from
    :obj:`mirror`; yields a namespace with their modules. Restores the
    working folder, ``sys.path`` and ``sys.modules`` on exit."""
    code, mirror = Path(code).resolve(), Path(mirror)
    source, target = DATASETS[dataset]
    if not (mirror / source).is_dir():
        raise FileNotFoundError(f'no {source} in the data mirror {mirror}')
    import torch_geometric  # noqa: F401  (before the stand-ins: see above)
    saved = {n: sys.modules.pop(n) for n in THEIR_MODULES if n in sys.modules}
    added = {n: m for n, m in stand_in_modules().items() if _absent(n)}
    cwd = os.getcwd()
    work = tempfile.mkdtemp(prefix='authors_gcn_')
    shutil.copytree(mirror / source, Path(work, 'data', target))
    try:
        os.chdir(work)  # data.py creates and reads 'data/' on import
        sys.modules.update(added)
        sys.path.insert(0, str(code))
        yield types.SimpleNamespace(
            code=code, stand_ins=sorted(added),
            **{n: importlib.import_module(n) for n in THEIR_MODULES})
    finally:
        os.chdir(cwd)
        sys.path.remove(str(code))
        for name in (*THEIR_MODULES, *added):
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        shutil.rmtree(work, ignore_errors=True)


def their_parser(code):
    r"""The argument parser of their ``main.py`` (its ``parser = ...`` and
    ``parser.add_argument(...)`` statements, run alone)."""
    tree = ast.parse(Path(code, 'main.py').read_text())
    keep = [s for s in tree.body
            if isinstance(s, (ast.Assign, ast.Expr))
            and ast.unparse(s).startswith(('parser =',
                                           'parser.add_argument('))]
    scope = {'argparse': argparse}
    exec(compile(ast.Module(keep, []), str(Path(code, 'main.py')), 'exec'),
         scope)
    return scope['parser']


def their_argv(dataset, layers, scale, epochs, norm_mode='CN', hid=32,
               layer_norm=True):
    r"""Their command line for one cell, as ``run_baselines.sh`` writes it."""
    argv = ['--data', dataset, '--norm_mode', norm_mode, '--norm_scale',
            str(scale), '--nlayer', str(layers), '--epochs', str(epochs),
            '--model', 'DeepGCN', '--hid', str(hid)]
    return argv + ['--use_layer_norm'] * layer_norm


def load_their_data(their, targs, device='cpu'):
    r"""main.py's ``load_data`` call (on :obj:`device`)."""
    return their.data.load_data(
        targs.data, normalize_feature=targs.no_fea_norm,
        missing_rate=targs.missing_rate, cuda=device == 'cuda')


def train_seed(their, targs, data, seed, device='cpu', log_every=0):
    r"""One run of main.py's loop body after ``torch.manual_seed(seed)``."""
    import random

    import numpy as np
    import torch
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    nfeat, nclass = data.x.size(1), int(data.y.max()) + 1
    net = getattr(their.models, targs.model)(targs, nfeat, nclass).to(device)
    optimizer = torch.optim.Adam(net.parameters(), targs.lr,
                                 weight_decay=targs.wd)
    criterion = torch.nn.CrossEntropyLoss()
    best_val, best_epoch, best_test = 0, 0, float('nan')
    start = time.perf_counter()
    for epoch in range(targs.epochs):
        train_loss, _, _ = their.utils.train(net, optimizer, criterion, data)
        val_loss, val_acc = their.utils.val(net, criterion, data)
        if best_val < val_acc:  # main.py's checkpoint rule (eval: no RNG)
            best_val, best_epoch = val_acc, epoch + 1
            best_test = their.utils.test(net, criterion, data)[1].item()
        if log_every and (epoch + 1) % log_every == 0:
            print(f'  seed {seed} epoch {epoch + 1}: train loss '
                  f'{train_loss.item():.4f}, val acc {val_acc.item():.4f} '
                  f'({time.perf_counter() - start:.0f} s)', flush=True)
    seconds = time.perf_counter() - start
    val_loss, val_acc = their.utils.val(net, criterion, data)
    test_loss, test_acc = their.utils.test(net, criterion, data)
    return dict(test_acc_last=test_acc.item(), val_acc_last=val_acc.item(),
                test_loss_last=test_loss.item(),
                train_loss_last=train_loss.item(),
                test_acc_best_val=best_test, best_val_acc=float(best_val),
                best_val_epoch=best_epoch, seconds=round(seconds, 2),
                seconds_per_epoch=round(seconds / max(targs.epochs, 1), 4))


def their_main(their, argv, seed):
    r"""Runs their ``main.py`` unchanged (in :func:`their_code`) with
    :obj:`argv` after ``torch.manual_seed(seed)``; ``.cuda()`` is a no-op
    on a machine without CUDA. Returns its 5 last-epoch test accuracies."""
    import torch
    patches = [] if torch.cuda.is_available() else [
        (torch.nn.Module, 'cuda', lambda self, *a, **k: self),
        (torch.Tensor, 'cuda', lambda self, *a, **k: self)]
    saved = [(cls, name, getattr(cls, name)) for cls, name, _ in patches]
    old_argv = sys.argv
    try:
        for cls, name, fn in patches:
            setattr(cls, name, fn)
        sys.argv = [str(their.code / 'main.py'), *argv]
        torch.manual_seed(seed)
        scope = runpy.run_path(sys.argv[0], run_name='__main__')
    finally:
        sys.argv = old_argv
        for cls, name, fn in saved:
            setattr(cls, name, fn)
    return [float(a) for a in scope['all_test_acc']]


# ------------------------------------------------------------ the record
def load_record(path, config):
    r"""The record at :obj:`path` if it was made with :obj:`config`, else a
    new one (a record of another config is an error)."""
    path = Path(path)
    if path.exists():
        record = json.loads(path.read_text())
        if record['config'] != config:
            raise SystemExit(
                f'{path} holds runs of another configuration:\n'
                f'  theirs: {record["config"]}\n  now:    {config}\n'
                'choose another --out or remove the file')
        return record
    return dict(config=config, runs={}, summary={})


def summarize(runs):
    r"""Mean and std (ddof 0, as their main.py prints; and ddof 1) in
    percent of each accuracy over the finished runs."""
    summary = dict(seeds=[int(s) for s in runs], n=len(runs))
    for key in ('test_acc_last', 'test_acc_best_val'):
        values = [100 * r[key] for r in runs.values()]
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values)
        summary[key + '_pct'] = dict(
            mean=round(mean, 4), std=round(math.sqrt(var / len(values)), 4),
            std_ddof1=round(math.sqrt(var / (len(values) - 1)), 4)
            if len(values) > 1 else None)
    summary['seconds'] = round(sum(r['seconds'] for r in runs.values()), 2)
    return summary


def write_record(path, record):
    r"""Writes :obj:`record` to :obj:`path` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(record, indent=2) + '\n')
    os.replace(tmp, path)


@contextlib.contextmanager
def locked_folder(path):
    r"""Holds the lock of the folder of :obj:`path`
    (:func:`gnorm.train.locks.hold`: ``flock`` on the folder itself, so no
    lock file is left beside the records)."""
    from gnorm.train.locks import hold, release
    held = hold(Path(path).parent, wait=True)
    try:
        yield
    finally:
        release(held)


def run_seeds(path, config, seeds, train, meta=None):
    r"""Trains (``train(seed) -> dict``) each seed of :obj:`seeds` that the
    record at :obj:`path` lacks, rewriting the record after each. The
    record is read again under a lock before each write, so processes
    running other seeds of the same configuration may share :obj:`path`
    (a seed another process wrote meanwhile keeps that process's run)."""
    record = load_record(path, config)
    for seed in seeds:
        if str(seed) in load_record(path, config)['runs']:
            print(f'seed {seed}: done already, skipped', flush=True)
            continue
        result = train(seed)
        with locked_folder(path):
            record = load_record(path, config)
            record['runs'].setdefault(str(seed), result)
            record['runs'] = dict(sorted(record['runs'].items(),
                                         key=lambda kv: int(kv[0])))
            record['summary'] = summarize(record['runs'])
            record.update(meta or {})
            write_record(path, record)
        print(f'seed {seed}: last-epoch test acc '
              f'{100 * result["test_acc_last"]:.2f}, best-val test acc '
              f'{100 * result["test_acc_best_val"]:.2f} '
              f'({result["seconds"]:.0f} s) -> {path}', flush=True)
    return record


# ------------------------------------------------------------ provenance
def _git(folder, *args):
    try:
        return subprocess.run(['git', '-C', str(folder), *args], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def authors_commit(code):
    r"""Their commit: git, else a ``COMMIT`` file in or above :obj:`code`."""
    commit = _git(code, 'rev-parse', 'HEAD')
    for folder in (Path(code), Path(code).parent):
        if commit is None and (folder / 'COMMIT').is_file():
            commit = (folder / 'COMMIT').read_text().strip()
    return commit


def machine(threads, device):
    r"""What runs their code: the CPU (:func:`gnorm.bench.cpu_name`),
    threads, device and versions."""
    import torch
    import torch_geometric

    from gnorm.bench import cpu_name
    return dict(cpu=cpu_name(), threads=threads,
                torch_threads=torch.get_num_threads(), device=device,
                gpu=torch.cuda.get_device_name() if device == 'cuda' else None,
                torch=torch.__version__,
                torch_geometric=torch_geometric.__version__,
                python=platform.python_version())


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
        machine=machine(args.threads, args.device))
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
    main()
