r"""The ContraNorm authors' published GCN code (GitHub PKU-ML/ContraNorm,
folder ``gnn/``) run beside gnorm: ``experiments/authors_gcn.py`` trains
their model on one cell of the paper's Table 3, ``experiments/authors_twin.py``
trains it beside gnorm's on the same random numbers (docs/table3.rst).

Their code is not copied: :func:`their_code` imports the ``gnn/`` folder
a user names, with stand-ins in plain torch for the packages it imports
that the machine lacks (:func:`stand_in_modules`: ``torch_sparse``,
``torch_scatter``, ``einops``; each call counted), and their data read
from a temporary copy of the offline mirror's raw files. A cell's runs
go to one JSON record (:func:`run_seeds`), rewritten after every seed,
resumable and shared by processes under a lock, which
:func:`experiments.authors.report.read_authors` reads for the reports."""
import argparse
import ast
import contextlib
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

from gnorm.errors import DataError

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
    # PyG first: imported after the stand-ins, it would take them for the
    # packages themselves.
    import torch_geometric  # noqa: F401
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
            raise DataError(
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
    (:func:`gnorm.train.locks.lock_folder`: ``flock`` on the folder itself, so no
    lock file is left beside the records)."""
    from gnorm.train.locks import lock_folder, release
    held = lock_folder(Path(path).parent, wait=True)
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


def machine_record(device):
    r"""What runs their code: :func:`gnorm.machine.this_machine` of
    :obj:`device` (torch's threads as ``threads``), the device and the
    versions of PyG and Python."""
    import torch_geometric

    from gnorm.machine import this_machine
    return dict(this_machine(device), device=device,
                torch_geometric=torch_geometric.__version__,
                python=platform.python_version())
