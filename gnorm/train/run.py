r"""What every training task shares: config checks, seeding, device,
results files, resuming finished runs, batches of runs, and the command
line.

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
import importlib
import json
import logging
import math
import os
import platform
import random
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import hydra
import numpy as np
import torch
import torch_geometric
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import gnorm
from gnorm.errors import ConfigError, GnormError, Interrupted, TrainingError
from gnorm.run_keys import NOT_RESULT_KEYS, drop_keys

log = logging.getLogger(__name__)

# The Hydra configs: gnorm/conf/ in an installed wheel (setup.py ships
# them there), else conf/ at the top of the repository (a checkout or an
# editable install).
_PACKAGE = Path(__file__).resolve().parents[1]
CONF_DIR = next((d for d in (_PACKAGE / 'conf', _PACKAGE.parent / 'conf')
                 if d.is_dir()), _PACKAGE.parent / 'conf')
TASKS = {'node': 'gnorm.train.node', 'graph': 'gnorm.train.graph'}
SELECT = ('best_val', 'last')

# `${gnorm.tail:${hydra.job.override_dirname}}` in conf/hydra/default.yaml:
# the overrides after a comma, or nothing when there are none.
OmegaConf.register_new_resolver(
    'gnorm.tail', lambda text: f',{text}' if text else '', replace=True)
# `${gnorm.not_result_keys:dataset,norm}`: the keys left out of run-folder
# names, those named plus NOT_RESULT_KEYS.
OmegaConf.register_new_resolver(
    'gnorm.not_result_keys', lambda *keys: [*keys, *NOT_RESULT_KEYS],
    replace=True)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    r"""Seeds python, numpy and torch (CPU and every CUDA device); with
    :obj:`deterministic`, also asks torch for deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


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


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(cfg: DictConfig) -> None:
    r"""Raises :class:`ConfigError` with a one-line fix for bad values of
    the keys every task has, then of the keys of :obj:`cfg`'s task."""
    if not is_int(cfg.seed) or cfg.seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {cfg.seed!r}")
    if cfg.select not in SELECT:
        raise ConfigError(f"unknown select={cfg.select!r}; pass best_val "
                          f"or last")
    if not is_int(cfg.train.epochs) or cfg.train.epochs < 1:
        raise ConfigError(f"train.epochs must be an integer >= 1, got "
                          f"{cfg.train.epochs!r}")
    if not is_int(cfg.train.log_every) or cfg.train.log_every < 0:
        raise ConfigError(f"train.log_every must be an integer >= 0, got "
                          f"{cfg.train.log_every!r}; pass e.g. "
                          f"train.log_every=10")
    if cfg.threads is not None and (not is_int(cfg.threads)
                                    or cfg.threads < 1):
        raise ConfigError(f"threads must be an integer >= 1 or null, got "
                          f"{cfg.threads!r}; pass e.g. threads=2")
    for key in ('lr', 'weight_decay'):
        value = cfg.train[key]
        if not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"train.{key} must be a number >= 0, got "
                              f"{value!r}")
    runs = cfg.get('batch_runs', 'auto')
    if runs != 'auto' and (not is_int(runs) or runs < 1):
        raise ConfigError(f"batch_runs must be auto or an integer >= 1, got "
                          f"{runs!r}; pass e.g. batch_runs=auto")
    scale = cfg.norm.get('scale', None)
    if scale is not None and (not isinstance(scale, (int, float))
                              or scale < 0):
        raise ConfigError(f"norm.scale must be a number >= 0, got "
                          f"{scale!r}; pass e.g. norm.scale=0.5")
    task_module(cfg).check_config(cfg)


def one_line(error: BaseException) -> str:
    r"""The message of :obj:`error` (or of what Hydra wrapped) on one
    line."""
    cause = error.__cause__ if isinstance(error, InstantiationException) \
        and error.__cause__ is not None else error
    text = str(cause) or type(cause).__name__
    return ' '.join(text.split())


def _json_safe(value: Any) -> Any:
    r"""Replaces non-finite floats by :obj:`None` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _dumps(value: Any, indent: str = '') -> str:
    r"""JSON with one key per line and lists of numbers on one line."""
    inner = indent + ' '
    if isinstance(value, dict) and value:
        items = [f'{inner}{json.dumps(str(k))}: {_dumps(v, inner)}'
                 for k, v in value.items()]
        return '{\n' + ',\n'.join(items) + f'\n{indent}}}'
    if isinstance(value, list) and any(isinstance(v, (dict, list))
                                       for v in value):
        items = [f'{inner}{_dumps(v, inner)}' for v in value]
        return '[\n' + ',\n'.join(items) + f'\n{indent}]'
    return json.dumps(value, allow_nan=False)


def write_json(path: Path, obj: Dict[str, Any]) -> None:
    r"""Writes :obj:`obj` to :obj:`path` atomically (temporary file, then
    :func:`os.replace`); non-finite numbers become :obj:`null`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'.{path.name}.tmp')
    with open(tmp, 'w') as f:
        f.write(_dumps(_json_safe(obj)) + '\n')
    os.replace(tmp, path)


def hydra_info() -> Dict[str, Any]:
    r"""The group choices and overrides of the current Hydra job, if any."""
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items()
               if not k.startswith('hydra/') and k != 'hydra'}
    return {'choices': choices, 'overrides': list(hc.overrides.task)}


def result_config(config: Dict[str, Any]) -> Dict[str, Any]:
    r""":obj:`config` without the keys that do not change what a run
    computes (:data:`gnorm.run_keys.NOT_RESULT_KEYS`)."""
    return drop_keys(config)


def finished_run(path: Path, cfg: DictConfig) -> Optional[Dict[str, Any]]:
    r"""The results in :obj:`path` if they are those of a finished run of
    :obj:`cfg` (``status: ok``), else :obj:`None`. Raises
    :class:`ConfigError` if a finished run of another config lies there."""
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # unreadable: run again
    if results.get('status') != 'ok':
        return None
    asked = result_config(OmegaConf.to_container(cfg, resolve=True))
    if result_config(results.get('config', {})) != asked:
        raise ConfigError(f"{path} holds a finished run of another config; "
                          f"pass resume=false or another output folder")
    return results


def machine(device: torch.device) -> Dict[str, Any]:
    r"""What ran the job: the CPU model, torch's thread count and the GPU
    (for CUDA devices)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            cpu = next((line.split(':', 1)[1].strip() for line in f
                        if line.startswith('model name')), cpu)
    except OSError:
        pass
    info = {'cpu': cpu, 'cpu_count': os.cpu_count(),
            'threads': torch.get_num_threads()}
    if device.type == 'cuda':
        info['gpu'] = torch.cuda.get_device_name(device)
    return info


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
        **(hydra_info() if info is None else info),
        'device': str(device),
        'machine': machine(device),
        'batch_runs': batch_runs,
        'path': str(path),
        'versions': {'gnorm': gnorm.__version__, 'torch': torch.__version__,
                     'torch_geometric': torch_geometric.__version__},
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


def free_memory(device: torch.device) -> int:
    r"""Bytes free on :obj:`device`: the GPU's free memory, or the
    system's available memory for the CPU."""
    if device.type == 'cuda':
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')


def task_module(cfg: DictConfig):
    r"""The module that trains :obj:`cfg.dataset.task`."""
    task = cfg.dataset.get('task', 'node')
    if task not in TASKS:
        raise ConfigError(f"unknown dataset.task={task!r}; pass one of "
                          f"{', '.join(TASKS)}")
    return importlib.import_module(TASKS[task])


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
    for key, value in (hydra_info() if info is None else info).items():
        results.setdefault(key, value)
    results.setdefault('path', str(path))
    curve = results.get('curve')
    if isinstance(curve, dict) and curve:
        length = min(len(v) for v in curve.values())
        results['curve'] = {k: v[:length] for k, v in curve.items()}
    if main_process():
        write_json(path, results)


def main_process() -> bool:
    r"""Whether this process writes the run's files: always, except in the
    processes of rank > 0 under ``torchrun``."""
    return int(os.environ.get('RANK', '0')) == 0


def group_batches(keys: Sequence[Any],
                  size: Callable[[List[int]], int]) -> List[List[int]]:
    r"""The indices of runs with batch keys :obj:`keys`, grouped by equal
    key (:obj:`None`: a run alone) and each group cut into batches of
    :obj:`size(group)` runs."""
    groups: Dict[Any, List[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(('alone', i) if key is None else key, []).append(i)
    batches = []
    for group in groups.values():
        n = size(group)
        batches += [group[k:k + n] for k in range(0, len(group), n)]
    return batches


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError))


def _train_batch(task, cfgs: List[DictConfig], paths: List[Path],
                 infos: List[Optional[Dict[str, Any]]],
                 device: torch.device) -> List[Dict[str, Any]]:
    r"""Trains the runs :obj:`cfgs` as one model and writes each run's
    ``results.json``; a run that stops early writes what it holds (see
    :func:`train_runs`)."""
    start = time.perf_counter()
    results = [{'status': 'running', 'error': None} for _ in cfgs]
    try:
        results = [base_results(c, device, p, i, len(cfgs))
                   for c, p, i in zip(cfgs, paths, infos)]
        seed_everything(cfgs[0].seed, cfgs[0].train.deterministic)
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
            error, wrapped = one_line(e), e
        else:
            error = f'{type(e).__name__}: {one_line(e)}'
            wrapped = TrainingError(f'{error} (traceback in {paths[0]})')
            for r in results:
                r['traceback'] = traceback.format_exc()
        for c, p, r, i in zip(cfgs, paths, results, infos):
            record_stop(p, c, r, 'failed', error, start, i)
        raise wrapped from e
    failed = []
    for c, p, r, i in zip(cfgs, paths, results, infos):
        if r.get('status') == 'failed':  # this run only (e.g. a NaN loss)
            record_stop(p, c, r, 'failed', r['error'], start, i)
            failed.append(r['error'] if len(cfgs) == 1
                          else f"{p.parent}: {r['error']}")
            continue
        r['runtime_s'] = time.perf_counter() - start
        if main_process():
            write_json(p, r)
            print(task.summary(r, c), flush=True)
    if failed:
        raise TrainingError('; '.join(failed))
    return results


def train_runs(cfgs: List[DictConfig], output_dirs: List[str],
               infos: Optional[List[Optional[Dict[str, Any]]]] = None,
               ) -> List[Dict[str, Any]]:
    r"""Trains the runs :obj:`cfgs` (each writing ``results.json`` into its
    folder of :obj:`output_dirs`), as few models as possible: runs that
    differ only in seed, split and norm scale train as one model of up to
    ``batch_runs`` runs (``auto``: as many as the device's memory holds).
    A batch that runs out of memory is split in two and retried. A run's
    results do not depend on the runs it trained with. Returns every run's
    results. :obj:`infos`: each run's group choices and overrides for
    ``results.json`` (default: the current Hydra job's).

    With ``resume=true``, a run whose folder holds its finished results is
    not run again. A run that stops early still writes ``results.json``,
    with what it holds so far (curve, best epoch and its metrics):
    ``status: failed`` and the one-line error for an error (an unexpected
    exception becomes a :class:`~gnorm.errors.TrainingError`, its traceback
    kept in the file), re-raised as a :class:`gnorm.errors.GnormError`
    after the other batches ran; ``status: interrupted`` for Ctrl-C or
    SIGTERM, re-raised."""
    infos = infos or [None] * len(cfgs)
    paths = [Path(d) / 'results.json' for d in output_dirs]
    done: Dict[int, Dict[str, Any]] = {}
    for i, (cfg, path) in enumerate(zip(cfgs, paths)):
        if cfg.get('resume', False):
            finished = finished_run(path, cfg)
            if finished is not None:
                print(f'done already: {path}', flush=True)
                done[i] = finished
    todo = [i for i in range(len(cfgs)) if i not in done]
    if not todo:
        return [done[i] for i in range(len(cfgs))]
    start = time.perf_counter()
    try:
        task = task_module(cfgs[todo[0]])
        for i in todo:
            check_config(cfgs[i])
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
        for i in todo:
            record_stop(paths[i], cfgs[i], {'status': 'running'}, 'failed',
                        one_line(e), start, infos[i])
        raise
    failures = []
    while queue:
        batch = queue.pop(0)
        try:
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
    if failures:
        raise failures[0]
    return [done[i] for i in range(len(cfgs))]


def train(cfg: DictConfig, output_dir: Optional[str] = None) -> Dict[str, Any]:
    r"""Trains and evaluates one model as :obj:`cfg` says and writes
    ``results.json`` into :obj:`output_dir` (default: the Hydra output
    folder). Returns the results. See :func:`train_runs` for resuming and
    for runs that stop early."""
    if output_dir is None:
        if not HydraConfig.initialized():
            raise ValueError("train(cfg) outside a Hydra job needs "
                             "output_dir")
        output_dir = HydraConfig.get().runtime.output_dir
    return train_runs([cfg], [output_dir])[0]


def job_label() -> str:
    r"""``job <num> (<overrides>): `` for a job of a multirun, else
    nothing."""
    if not HydraConfig.initialized():
        return ''
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return ''
    return f"job {hc.job.num} ({' '.join(hc.overrides.task)}): "


# Failures of the jobs of this process: (exit code, message).
_FAILURES: List[tuple] = []


@hydra.main(version_base='1.3', config_path=str(CONF_DIR), config_name='train')
def main(cfg: DictConfig) -> Optional[float]:
    r"""The command line: runs :func:`train`, turns a
    :class:`~gnorm.errors.GnormError` into ``error: ...`` on stderr; returns
    the validation metric (for sweepers)."""
    try:
        if cfg.get('batch_file'):  # a job of gnorm's sweeper: many runs
            results = train_batch_file(cfg.batch_file)[0]
        else:
            results = train(cfg)
        return results.get('val_metric', results.get('val_acc'))
    except GnormError as e:
        print(f'error: {job_label()}{e}', file=sys.stderr, flush=True)
        # Later jobs of a multirun still run; the exit status reports it.
        _FAILURES.append((e.exit_code, str(e)))
        return None


def train_batch_file(path: str) -> List[Dict[str, Any]]:
    r"""Trains the runs listed in the batch file :obj:`path` of
    :class:`gnorm.train.sweep.BatchedSweeper`, each recorded in its folder
    as a run of its own (``.hydra/config.yaml``, ``overrides.yaml``,
    ``results.json``)."""
    from gnorm.train.sweep import load_batch
    cfgs, dirs, infos = load_batch(path)
    if main_process():
        for cfg, folder, info in zip(cfgs, dirs, infos):
            hydra_dir = Path(folder) / '.hydra'
            hydra_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(cfg, hydra_dir / 'config.yaml')
            OmegaConf.save(OmegaConf.create(info['overrides']),
                           hydra_dir / 'overrides.yaml')
    log.info('training %d runs as one model: %s', len(cfgs),
             ', '.join(Path(d).name for d in dirs))
    return train_runs(cfgs, dirs, infos)


def _interrupt(signum: int, frame: Any) -> None:
    r"""Signal handler: stops the run with :class:`Interrupted` (further
    signals are ignored while the results are written)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def register_sweeper() -> None:
    r"""Makes ``hydra/sweeper=gnorm`` known to Hydra, which finds plugins
    by walking the ``hydra_plugins`` folders on the path: an editable
    install of gnorm has none."""
    from hydra.core.plugins import Plugins
    from hydra_plugins.gnorm_sweeper.gnorm_sweeper import GnormSweeper
    Plugins.instance().register(GnormSweeper)


def cli() -> None:
    r"""Entry point of ``python -m gnorm.train`` and ``gnorm-train``:
    ``--help`` lists the main keys; an unknown group option or key is one
    line (exit status 2) before Hydra starts; SIGINT and SIGTERM stop the
    run cleanly (exit status 130, 143); a failed job exits with its
    error's status after the other jobs of a multirun ran."""
    from gnorm.train.arguments import check_choices, check_keys, help_text
    argv = sys.argv[1:]
    if '--help' in argv or '-h' in argv:
        print(help_text())
        return
    try:
        check_choices(argv)
        check_keys(argv)
    except ConfigError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(e.exit_code)
    register_sweeper()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # A signal ignored from the start (e.g. SIGINT of a job started in
        # the background by a script) stays ignored.
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _interrupt)
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(getattr(e, 'exit_code', 128 + signal.SIGINT))
    if _FAILURES:
        sys.exit(max(code for code, _ in _FAILURES))
