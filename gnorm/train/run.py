r"""What every training task shares: config checks, seeding, device,
results files, resuming finished runs, and the command line.

A task (:mod:`gnorm.train.node`, and later graph-level tasks) is a module
with ``check_config(cfg)`` and ``run(cfg, device, results, path) -> dict``;
:func:`train` picks it from ``cfg.dataset.task``.
"""
import importlib
import json
import logging
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import hydra
import numpy as np
import torch
import torch_geometric
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf

import gnorm
from gnorm.errors import ConfigError, GnormError

log = logging.getLogger(__name__)

CONF_DIR = Path(__file__).resolve().parents[2] / 'conf'
TASKS = {'node': 'gnorm.train.node'}
SELECT = ('best_val', 'last')
# Config keys that do not change what a run computes: a finished run whose
# config differs from the asked one only here counts as the same run.
_NOT_RESULT_KEYS = ('resume', 'data', 'device')
_NOT_RESULT_TRAIN_KEYS = ('progress', )


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
    for key in ('lr', 'weight_decay'):
        value = cfg.train[key]
        if not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"train.{key} must be a number >= 0, got "
                              f"{value!r}")
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
    computes (where data comes from, the device, resuming, progress)."""
    config = {k: v for k, v in config.items() if k not in _NOT_RESULT_KEYS}
    if isinstance(config.get('train'), dict):
        config['train'] = {k: v for k, v in config['train'].items()
                           if k not in _NOT_RESULT_TRAIN_KEYS}
    return config


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


def base_results(cfg: DictConfig, device: torch.device,
                 path: Path) -> Dict[str, Any]:
    r"""The fields every task's ``results.json`` starts with."""
    return {
        'status': 'running',
        'error': None,
        'task': cfg.dataset.task,
        'config': OmegaConf.to_container(cfg, resolve=True),
        **hydra_info(),
        'device': str(device),
        'path': str(path),
        'versions': {'gnorm': gnorm.__version__, 'torch': torch.__version__,
                     'torch_geometric': torch_geometric.__version__},
    }


def task_module(cfg: DictConfig):
    r"""The module that trains :obj:`cfg.dataset.task`."""
    task = cfg.dataset.get('task', 'node')
    if task not in TASKS:
        raise ConfigError(f"unknown dataset.task={task!r}; pass one of "
                          f"{', '.join(TASKS)}")
    return importlib.import_module(TASKS[task])


def train(cfg: DictConfig, output_dir: Optional[str] = None) -> Dict[str, Any]:
    r"""Trains and evaluates one model as :obj:`cfg` says and writes
    ``results.json`` into :obj:`output_dir` (default: the Hydra output
    folder). Returns the results. With ``resume=true``, a folder that
    already holds the finished run of :obj:`cfg` is not run again: its
    results are returned. Raises a :class:`gnorm.errors.GnormError` for bad
    input and for a failed run (after writing a results file with
    ``status: failed``)."""
    start = time.perf_counter()
    if output_dir is None:
        if not HydraConfig.initialized():
            raise ValueError("train(cfg) outside a Hydra job needs "
                             "output_dir")
        output_dir = HydraConfig.get().runtime.output_dir
    path = Path(output_dir) / 'results.json'
    task = task_module(cfg)
    if cfg.get('resume', False):
        done = finished_run(path, cfg)
        if done is not None:
            print(f'done already: {path}', flush=True)
            return done
    check_config(cfg)
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed, cfg.train.deterministic)
    results = task.run(cfg, device, base_results(cfg, device, path), path)
    results['runtime_s'] = time.perf_counter() - start
    write_json(path, results)
    print(task.summary(results, cfg), flush=True)
    return results


# Failures of the jobs of this process: (exit code, message).
_FAILURES: List[tuple] = []


@hydra.main(version_base='1.3', config_path=str(CONF_DIR), config_name='train')
def main(cfg: DictConfig) -> Optional[float]:
    r"""The command line: runs :func:`train`, turns a
    :class:`~gnorm.errors.GnormError` into ``error: ...`` on stderr; returns
    the validation metric (for sweepers)."""
    try:
        results = train(cfg)
        return results.get('val_metric', results.get('val_acc'))
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        # Later jobs of a multirun still run; the exit status reports it.
        _FAILURES.append((e.exit_code, str(e)))
        return None


def _group_options(group: str) -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob('*.yaml'))


def check_choices(argv: List[str]) -> None:
    r"""Raises :class:`ConfigError` for a command-line override that picks
    an unknown option of a config group (``dataset=foo``), before Hydra
    composes the config (whose own report spans many lines)."""
    if any(a.split('=')[0] in ('--config-dir', '-cd', '--config-path', '-cp')
           for a in argv):
        return  # other config folders may hold other options
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith('-') or '=' not in arg:
            continue
        try:
            override = parser.parse_overrides([arg])[0]
        except Exception:
            continue  # Hydra reports syntax errors itself
        group = override.key_or_group.lstrip('/')
        if (group not in ('dataset', 'model', 'norm', 'experiment')
                or override.package is not None or override.is_delete()):
            continue
        values = (list(override.sweep_string_iterator())
                  if override.is_sweep_override() else [override.value()])
        options = _group_options(group)
        for value in values:
            if value is None and group == 'experiment':
                continue
            if str(value) not in options:
                raise ConfigError(f"unknown {group} {str(value)!r}; pass "
                                  f"{group}= one of {', '.join(options)}")


def cli() -> None:
    r"""Entry point of ``python -m gnorm.train``."""
    try:
        check_choices(sys.argv[1:])
    except ConfigError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(e.exit_code)
    main()
    if _FAILURES:
        sys.exit(max(code for code, _ in _FAILURES))
