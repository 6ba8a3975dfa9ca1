r"""Training runs, for every task: seeding, device, the shared fields of
``results.json``, resuming finished runs, batches of runs as one model,
and recording runs that stop early.

A task (:mod:`gnorm.train.node`, :mod:`gnorm.train.graph`) is a module
with ``check_config(cfg)``, ``batch_key(cfg)`` (runs with equal keys may
train as one model; :obj:`None`: alone), ``max_runs(cfgs, device)`` (how
many at most), ``run(cfgs, device, results, paths) -> list`` (one results
dict per run) and ``summary(results, cfg) -> str``; :func:`train_runs`
picks it from ``cfg.dataset.task``. A task's loop keeps each run's progress
in the ``results`` it is given (``curve``: lists appended every epoch;
``best_epoch`` and ``best``: the best epoch so far and its metrics) and
shows it with :class:`gnorm.train.progress.Progress`; when a run stops
early (an error, Ctrl-C, SIGTERM), :func:`train_runs` writes what it holds
to ``results.json`` with ``status: failed`` or ``interrupted``.
"""
import contextlib
import functools
import hashlib
import logging
import os
import random
import resource
import signal
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch
import torch_geometric
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import gnorm
from gnorm.errors import ConfigError, GnormError, TrainingError
from gnorm.machine import denormals_flushed, this_machine
from gnorm.results.keys import result_config
from gnorm.results.user_code import user_code
from gnorm.train.locks import lock_folder, release
from gnorm.train.common import (  # noqa: F401 (CONF_DIR: gnorm.train.run's)
    CONF_DIR,
    check_config,
    finished_run,
    group_batches,
    main_process,
    one_line,
    run_names,
    task_module,
    write_json,
)

log = logging.getLogger(__name__)

# cuBLAS workspace of deterministic runs (CUDA's documented setting).
CUBLAS_WORKSPACE = ':4096:8'


def seed_everything(seed: int, deterministic: bool = False) -> None:
    r"""Seeds python, numpy and torch (CPU and every CUDA device); with
    :obj:`deterministic`, also makes torch use deterministic kernels and
    raise a :class:`RuntimeError` naming any op that has none
    (:func:`torch.use_deterministic_algorithms`, not ``warn_only``), and
    sets ``CUBLAS_WORKSPACE_CONFIG`` (it only acts if set before the
    process's first cuBLAS call: :func:`train_runs` sets it first thing).
    See :func:`deterministic_kernels` for what it guarantees."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(deterministic)


@contextlib.contextmanager
def deterministic_kernels(device: torch.device,
                          enabled: bool = True) -> Iterator[None]:
    r"""The kernels of ``train.deterministic=true`` for the block, on
    :obj:`device`, after :func:`seed_everything` with
    :obj:`deterministic`: on CUDA, scaled dot-product attention (the
    Graphormer's, ContraNorm's) uses its math backend only, since the
    fused flash and memory-efficient backward kernels accumulate in an
    order that changes from run to run, and cuDNN does not benchmark
    algorithms; on the CPU nothing changes (its kernels already give the
    same bits on the same machine and thread count).

    What ``train.deterministic=true`` then guarantees: two runs of one
    config on the same machine, device, thread count and versions give
    bitwise-equal results (``tests/test_train.py`` checks it on the CPU);
    on CUDA, an op without a deterministic kernel stops the run with an
    error naming it instead of silently differing. Runs on other devices,
    GPUs, thread counts or versions may still differ in the last bits."""
    if not enabled or device.type != 'cuda':
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.cudnn.benchmark = benchmark


@contextlib.contextmanager
def flushed_denormals(device: torch.device) -> Iterator[None]:
    r"""On the CPU, float32 numbers below the normal range (denormals,
    under 1.18e-38) read and written as zero for the block
    (:func:`torch.set_flush_denormal`), as a GPU's kernels mostly do; the
    state before is restored after. x86 CPUs compute on denormals many
    times slower, and a softmax whose rows are nearly one-hot (ContraNorm-D's
    d x d one on a large graph: ``docs/layers.rst``) fills its outputs and
    gradients with them: ``experiments/bench/denormals.py`` measures the
    step with and without, and finds outputs and gradients bitwise equal.
    ``results.json`` records the state (``machine``:
    ``denormals_flushed``). It holds on the calling thread and on the
    worker threads torch starts after it, so on all of them for a run of
    one thread."""
    if device.type != 'cpu':
        yield
        return
    before = denormals_flushed()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def resolve_device(name: str) -> torch.device:
    r"""``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:<i>``."""
    name = str(name)
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if name == 'cpu':
        return torch.device('cpu')
    if name.startswith('cuda'):
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but no CUDA device is "
                              f"visible; pass device=cpu or device=auto")
        try:
            device = torch.device(name)
        except RuntimeError:
            device = None
        if device is None or (device.index or 0) >= torch.cuda.device_count():
            raise ConfigError(f"device={name} does not exist; pass "
                              f"device=cuda or device=auto")
        return device
    raise ConfigError(f"unknown device={name!r}; pass auto, cpu or cuda")


def hydra_info(cfg: DictConfig) -> Dict[str, Any]:
    r"""The group choices of the current Hydra job (if any), what the run
    of :obj:`cfg` trains for each by name
    (:func:`~gnorm.train.common.run_names`) and the job's overrides."""
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items()
               if not k.startswith('hydra/') and k != 'hydra'}
    return {'choices': choices,
            'names': run_names(cfg, choices, hc.runtime.config_sources),
            'overrides': list(hc.overrides.task)}


@functools.lru_cache(maxsize=None)
def source() -> Optional[Dict[str, Any]]:
    r"""The git commit of the gnorm checkout this process runs and whether
    its code (``gnorm/``, ``conf/``, ``hydra_plugins/``) differs from that
    commit; :obj:`None` for an installed package, outside a checkout. It
    says which code made a run."""
    root = Path(gnorm.__file__).resolve().parent.parent
    if not (root / '.git').exists():
        return None
    try:
        def git(*args):
            return subprocess.run(['git', '-C', str(root), *args],
                                  capture_output=True, text=True, timeout=30,
                                  check=True).stdout.strip()
        paths = ('--', *CODE_PATHS)
        found = {'commit': git('rev-parse', 'HEAD'),
                 'modified': bool(git('status', '--porcelain', *paths))}
        if found['modified']:
            found['diff_sha256'] = _diff_sha256(root, git('diff', 'HEAD',
                                                          '--binary', *paths),
                                                git('ls-files', '--others',
                                                    '--exclude-standard',
                                                    *paths))
        return found
    except (OSError, subprocess.SubprocessError):
        return None


def run_source(cfg: DictConfig) -> Optional[Dict[str, Any]]:
    r"""Which code makes the run of :obj:`cfg`: gnorm's (:func:`source`)
    and, where the config names modules of the user's through a
    ``_target_``, ``user_code``: each one's file and SHA-256
    (:func:`gnorm.results.user_code.user_code`), which ``resume``
    compares; :obj:`None` for neither."""
    mine = user_code(OmegaConf.to_container(cfg, resolve=True))
    found = source()
    return {**(found or {}), 'user_code': mine} if mine else found


# The folders whose code makes a run's results.
CODE_PATHS = ('gnorm', 'conf', 'hydra_plugins')


def _diff_sha256(root: Path, diff: str, untracked: str) -> str:
    r"""SHA-256 of a modified checkout's changes: the diff of the tracked
    files against the commit, then each untracked file's name and bytes.
    Two runs with the same commit and hash ran the same code."""
    digest = hashlib.sha256(diff.encode())
    for name in sorted(filter(None, untracked.splitlines())):
        digest.update(f'\0{name}\0'.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def peak_memory(device: torch.device) -> Dict[str, float]:
    r"""The peak memory of this process, in MiB: ``host_rss_mib``, the
    largest resident set it has had since it started (``getrusage``:
    earlier runs of the same process included), and on CUDA
    ``device_mib``, the most memory torch allocated on :obj:`device` since
    :func:`reset_peak_memory` (since the run started)."""
    found = {'host_rss_mib': round(resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.type == 'cuda':
        found['device_mib'] = round(
            torch.cuda.max_memory_allocated(device) / 2 ** 20, 1)
    return found


def reset_peak_memory(device: torch.device) -> None:
    r"""Starts :func:`peak_memory`'s count of device memory afresh."""
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)


def base_results(cfg: DictConfig, device: torch.device, path: Path,
                 info: Optional[Dict[str, Any]] = None,
                 batch_runs: int = 1) -> Dict[str, Any]:
    r"""The fields every task's ``results.json`` starts with; :obj:`info`:
    the run's group choices and overrides (default: the current Hydra
    job's)."""
    return {
        'status': 'running',
        'error': None,
        'task': cfg.dataset.task,
        'config': OmegaConf.to_container(cfg, resolve=True),
        **(hydra_info(cfg) if info is None else info),
        'device': str(device),
        'machine': this_machine(device),
        'batch_runs': batch_runs,
        'path': str(path),
        'versions': {'gnorm': gnorm.__version__, 'torch': torch.__version__,
                     'torch_geometric': torch_geometric.__version__},
        'source': run_source(cfg),
    }


def launcher_threads() -> Optional[int]:
    r"""CPU threads of one job when Hydra's joblib launcher runs
    :obj:`n_jobs` jobs at once: the cores shared out between them
    (:obj:`None` otherwise: torch's default)."""
    if not HydraConfig.initialized():
        return None
    launcher = HydraConfig.get().launcher
    if 'joblib' not in str(launcher.get('_target_', '')):
        return None
    cores = os.cpu_count() or 1
    jobs = launcher.get('n_jobs', -1)
    jobs = cores if jobs is None or jobs < 1 else jobs
    return max(1, cores // jobs)


def _config(cfg: DictConfig) -> Dict[str, Any]:
    r""":obj:`cfg` as a dict, resolved if it resolves."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        return OmegaConf.to_container(cfg, resolve=False)


def record_stop(path: Path, cfg: DictConfig, results: Dict[str, Any],
                status: str, error: str, start: float,
                info: Optional[Dict[str, Any]] = None) -> None:
    r"""Writes :obj:`results` (what the run holds so far) to :obj:`path`
    with :obj:`status` (``failed`` or ``interrupted``) and :obj:`error`.
    Curve lists cut short by a signal are trimmed to a common length."""
    results.update(status=status, error=error,
                   runtime_s=time.perf_counter() - start)
    results.setdefault('task', cfg.dataset.get('task', 'node'))
    results.setdefault('config', _config(cfg))
    for key, value in (hydra_info(cfg) if info is None else info).items():
        results.setdefault(key, value)
    results.setdefault('path', str(path))
    curve = results.get('curve')
    if isinstance(curve, dict) and curve:
        length = min(len(v) for v in curve.values())
        results['curve'] = {k: v[:length] for k, v in curve.items()}
    if main_process():
        write_json(path, results)


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError))


def _train_batch(task, cfgs: List[DictConfig], paths: List[Path],
                 infos: List[Optional[Dict[str, Any]]],
                 device: torch.device) -> List[Dict[str, Any]]:
    r"""Trains the runs :obj:`cfgs` as one model and writes each run's
    ``results.json``; a run that stops early writes what it holds (see
    :func:`train_runs`)."""
    start = time.perf_counter()
    reset_peak_memory(device)
    results = [{'status': 'running', 'error': None} for _ in cfgs]
    try:
        results = [base_results(c, device, p, i, len(cfgs))
                   for c, p, i in zip(cfgs, paths, infos)]
        deterministic = cfgs[0].train.deterministic
        seed_everything(cfgs[0].seed, deterministic)
        with deterministic_kernels(device, deterministic):
            results = task.run(cfgs, device, results, paths)
    except KeyboardInterrupt as e:
        name = signal.Signals(getattr(e, 'signum', signal.SIGINT)).name
        for c, p, r, i in zip(cfgs, paths, results, infos):
            epochs = len(r.get('curve', {}).get('epoch', []))
            record_stop(p, c, r, 'interrupted',
                        f'interrupted by {name} after {epochs} epoch(s)',
                        start, i)
        log.warning('interrupted by %s after %d epoch(s); results so far: '
                    '%s', name, epochs, ', '.join(str(p) for p in paths))
        raise
    except Exception as e:
        if _out_of_memory(e):
            raise
        if isinstance(e, GnormError):
            if not any('curve' in r for r in results):
                raise  # refused before training started: nothing written
            error, wrapped = one_line(e), e
        else:
            error = f'{type(e).__name__}: {one_line(e)}'
            wrapped = TrainingError(f'{error} (traceback in {paths[0]})')
            for r in results:
                r['traceback'] = traceback.format_exc()
        for c, p, r, i in zip(cfgs, paths, results, infos):
            record_stop(p, c, r, 'failed', error, start, i)
        raise wrapped from e
    failed, written = [], []
    for c, p, r, i in zip(cfgs, paths, results, infos):
        if r.get('status') == 'failed':  # this run only (e.g. a NaN loss)
            record_stop(p, c, r, 'failed', r['error'], start, i)
            failed.append(r['error'] if len(cfgs) == 1
                          else f"{p.parent}: {r['error']}")
            continue
        r['runtime_s'] = time.perf_counter() - start
        r['peak_memory'] = peak_memory(device)
        if main_process():
            r = write_json(p, r)
            print(task.summary(r, c), flush=True)
        written.append(r)
    if failed:
        raise TrainingError('; '.join(failed))
    return written


def _of_run(error: GnormError, folder: Path, runs: int) -> GnormError:
    r""":obj:`error`, naming the run's :obj:`folder` when it is one of
    several :obj:`runs`."""
    return error if runs == 1 else type(error)(f'{folder}: {error}')


def train_runs(cfgs: List[DictConfig], output_dirs: List[str],
               infos: Optional[List[Optional[Dict[str, Any]]]] = None,
               ) -> List[Dict[str, Any]]:
    r"""Trains the runs :obj:`cfgs` (each writing ``results.json`` into its
    folder of :obj:`output_dirs`), as few models as possible: runs that
    differ only in seed, split and norm scale train as one model of up to
    ``batch_runs`` runs (``auto``: as many as the device's memory holds).
    A batch that runs out of memory is split in two and retried. A run's
    results do not depend on the runs it trained with. Returns every run's
    results, as written. :obj:`infos`: each run's group choices and
    overrides for ``results.json`` (default: the current Hydra job's).

    With ``resume=true``, a run whose folder holds its finished results is
    not run again. A run refused before training starts (a
    :class:`gnorm.errors.GnormError` such as a bad value, a missing device
    or missing data) writes nothing. A run that stops later still writes
    ``results.json``, with what it holds so far (curve, best epoch and its
    metrics): ``status: failed`` and the one-line error for an error (an
    unexpected exception becomes a :class:`~gnorm.errors.TrainingError`,
    its traceback kept in the file); ``status: interrupted`` for Ctrl-C or
    SIGTERM, re-raised at once. The first error is re-raised (as a
    :class:`gnorm.errors.GnormError`) after the other runs ran.

    A run is trained by the process that holds its folder's lock
    (:mod:`gnorm.train.locks`): a run another process trains now is left
    until the other runs are trained, then waited for, and its results
    taken once that process finished it. A folder named twice (``-m
    seed=0,0``, whose two jobs share a folder) is trained once, and each
    of its runs gets its results."""
    infos = infos or [None] * len(cfgs)
    paths = [Path(d).absolute() / 'results.json' for d in output_dirs]
    done: Dict[int, Dict[str, Any]] = {}
    failures: List[GnormError] = []
    first = _first_of_folders(cfgs, paths, failures)
    left = []
    for i, (cfg, path) in enumerate(zip(cfgs, paths)):
        if first[i] != i:
            continue  # the folder's first run trains it
        found = _finished(cfg, path, waited=False, say=True)
        if found is not None:
            print(f'done already: {path}', flush=True)
            done[i] = found
            continue
        try:
            check_config(cfg)
            left.append(i)
        except GnormError as e:
            failures.append(_of_run(e, path.parent, len(cfgs)))
    for wait in (False, True):
        if left:
            left = _train_held(cfgs, paths, infos, left, wait, done,
                               failures)
    if failures:
        raise failures[0]
    return [done[first[i]] for i in range(len(cfgs))]


def _first_of_folders(cfgs: List[DictConfig], paths: List[Path],
                      failures: List[GnormError]) -> List[int]:
    r"""For each run, the first run of :obj:`paths` with its folder, which
    trains it for both (a second lock of the folder by this process would
    wait for the first); a run of another result in that folder goes to
    :obj:`failures` as a :class:`ConfigError`."""
    first: Dict[Path, int] = {}
    found = []
    for i, path in enumerate(paths):
        k = first.setdefault(path, i)
        if k != i and result_config(_config(cfgs[k])) != \
                result_config(_config(cfgs[i])):
            failures.append(ConfigError(
                f"{path.parent} is the folder of two runs of different "
                f"configs; give each its own folder"))
        found.append(k)
    return found


def _finished(cfg: DictConfig, path: Path, waited: bool,
              say: bool = False) -> Optional[Dict[str, Any]]:
    r"""The results at :obj:`path` of a finished run of :obj:`cfg` that is
    not to be trained again: with ``resume=true``, or when another process
    trained it while this one :obj:`waited` for it; one whose user code
    changed since is trained again (with :obj:`say`, a line says so:
    :func:`~gnorm.train.common.finished_run`)."""
    if cfg.get('resume', False):
        return finished_run(path, cfg, say)
    if not waited:
        return None
    try:
        return finished_run(path, cfg)
    except ConfigError:  # another config's: resume=false trains over it
        return None


def _train_held(cfgs: List[DictConfig], paths: List[Path],
                infos: List[Optional[Dict[str, Any]]], indices: List[int],
                wait: bool, done: Dict[int, Dict[str, Any]],
                failures: List[GnormError]) -> List[int]:
    r"""Trains the runs :obj:`indices` whose folder locks this process
    takes (:mod:`gnorm.train.locks`; with :obj:`wait`, waiting for each in
    the order of their paths) into :obj:`done` and :obj:`failures`; a run
    finished meanwhile by another process is taken as it is. Returns the
    runs another process holds (none with :obj:`wait`)."""
    held = {i: lock_folder(paths[i].parent, wait)
            for i in sorted(indices, key=lambda i: paths[i])}
    busy = [i for i in indices if held[i] is None]
    for i in busy:
        print(f'trained by another process now: {paths[i].parent}; '
              f'waiting for it after the other runs', flush=True)
    try:
        todo = []
        for i in (i for i in indices if held[i] is not None):
            found = _finished(cfgs[i], paths[i], wait)
            if found is None:
                todo.append(i)
            else:
                print(f'done already: {paths[i]}', flush=True)
                done[i] = found
        _train_todo(cfgs, paths, infos, todo, done, failures)
    finally:
        for lock in held.values():
            if lock is not None:
                release(lock)
    return busy


def _train_todo(cfgs: List[DictConfig], paths: List[Path],
                infos: List[Optional[Dict[str, Any]]], todo: List[int],
                done: Dict[int, Dict[str, Any]],
                failures: List[GnormError]) -> None:
    r"""Trains the checked runs :obj:`todo` in batches of runs that train
    as one model (halved when out of memory) into :obj:`done` and
    :obj:`failures`."""
    queue: List[List[int]] = []
    if any(cfgs[i].train.deterministic for i in todo):
        # Before the first cuBLAS call of the process.
        os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', CUBLAS_WORKSPACE)
    if todo:
        try:
            task = task_module(cfgs[todo[0]])
            cfg = cfgs[todo[0]]
            threads = cfg.threads if cfg.threads is not None else \
                launcher_threads()
            if threads is not None:
                torch.set_num_threads(threads)
            device = resolve_device(cfg.device)
            queue = [[todo[k] for k in batch] for batch in group_batches(
                [task.batch_key(cfgs[i]) for i in todo],
                lambda group: task.max_runs([cfgs[todo[k]] for k in group],
                                            device))]
        except GnormError as e:
            failures.append(e)
    while queue:
        batch = queue.pop(0)
        try:
            with flushed_denormals(device):
                results = _train_batch(task, [cfgs[i] for i in batch],
                                       [paths[i] for i in batch],
                                       [infos[i] for i in batch], device)
        except GnormError as e:
            failures.append(e)
            continue
        except Exception as e:
            if not _out_of_memory(e) or len(batch) == 1:
                raise
            if device.type == 'cuda':
                torch.cuda.empty_cache()
            half = len(batch) // 2
            log.warning('%d runs do not fit in memory together: training '
                        'them as %d + %d', len(batch), half,
                        len(batch) - half)
            queue[:0] = [batch[:half], batch[half:]]
            continue
        done.update(zip(batch, results))


def train(cfg: DictConfig, output_dir: Optional[str] = None) -> Dict[str, Any]:
    r"""Trains and evaluates one model as :obj:`cfg` says and writes
    ``results.json`` into :obj:`output_dir` (default: the Hydra output
    folder, and the Hydra job's group choices and overrides go into the
    results; with an :obj:`output_dir`, :obj:`cfg` need not come from the
    Hydra job a process may hold, so none are recorded). Returns the
    results. See :func:`train_runs` for resuming and for runs that stop
    early."""
    if output_dir is not None:
        return train_runs([cfg], [output_dir], infos=[{}])[0]
    if not HydraConfig.initialized():
        raise ValueError("train(cfg) outside a Hydra job needs output_dir")
    return train_runs([cfg], [HydraConfig.get().runtime.output_dir])[0]
