r"""What the parts of :mod:`gnorm.train` share, below all of them: the
config folder, config checks, results files, finished runs, batches of
runs, the names of runs (:func:`run_name`), and the resolvers of the Hydra
configs.

Imports run one way: this module; the tasks (:mod:`gnorm.train.node`,
:mod:`gnorm.train.graph`, picked by name in :func:`task_module`), the
loop over runs (:mod:`gnorm.train.run`) and the sweeper
(:mod:`gnorm.train.sweep`, through :mod:`gnorm.train.hydra_adapter`) on
it; the command line (:mod:`gnorm.train.command`) on top.
"""
import contextlib
import importlib
import importlib.resources
import inspect
import json
import math
import os
import signal
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence)

import numpy as np
import torch
from hydra.core.override_parser.types import Quote, QuotedString
from hydra.errors import InstantiationException
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from gnorm.errors import ConfigError
from gnorm.results.folders import check_folder
from gnorm.results.keys import NOT_RESULT_KEYS, is_finished, world_size
from gnorm.results.user_code import changed_user_code, retraining

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

# `${gnorm.name:norm}` in conf/hydra/default.yaml: what a run trains for a
# group, by name (run_name), from the run's config and Hydra's record of it.
OmegaConf.register_new_resolver(
    'gnorm.name', lambda group, _root_: _name_of(group, _root_),
    replace=True)


def source_folder(path: str, schema: str = 'file') -> Optional[Path]:
    r"""The folder of the Hydra config source :obj:`path` of
    :obj:`schema`: ``file`` (a path, relative to the working folder) or
    ``pkg`` (a package, dotted, whose files lie in a folder); :obj:`None`
    for a source that is no folder (structured configs, a zipped
    package, a package that cannot be imported)."""
    if schema == 'file':
        return Path(path)
    if schema != 'pkg':
        return None
    try:
        folder = importlib.resources.files(path.replace('/', '.').strip('.'))
    except (ImportError, TypeError, ValueError):
        return None
    return folder if isinstance(folder, Path) and folder.is_dir() else None


def run_name(group: str, choice: Optional[str], node: Any,
             sources: Optional[Sequence[Mapping[str, str]]] = None,
             ) -> Optional[str]:
    r"""What a run trains for config group :obj:`group`, by name: the
    option :obj:`choice` (``contranorm``, ``halfln``), unless the group's
    config :obj:`node` builds another class than that option's
    ``_target_`` (``norm=none norm._target_=mynorm.HalfLN``): then that
    class's name (``HalfLN``); the class's name also without a choice (a
    run trained outside Hydra). The option's file is the first
    ``<group>/<choice>.yaml`` of :obj:`sources` (Hydra's config sources,
    each with ``schema`` and ``path``, as ``hydra.runtime.config_sources``
    lists them; default: gnorm's ``conf/``); an option that none of them
    holds as a file, or whose file names no ``_target_`` of its own, keeps
    its name. The output folder (``${gnorm.name:norm}`` in
    ``conf/hydra/default.yaml``), the summary line and ``names`` in
    ``results.json`` (which :mod:`gnorm.results` shows) all use it."""
    target = node.get('_target_') if isinstance(node, (dict, DictConfig)) \
        else None
    if target is None:
        return choice
    name = str(target).rsplit('.', 1)[-1]
    if choice is None:
        return name
    if sources is None:
        sources = [{'schema': 'file', 'path': str(CONF_DIR)}]
    for source in sources:
        folder = source_folder(str(source['path']), str(source['schema']))
        path = None if folder is None else folder / group / f'{choice}.yaml'
        if path is not None and path.is_file():
            own = OmegaConf.load(path).get('_target_')
            return choice if own is None or own == target else name
    return choice


def run_names(cfg: DictConfig, choices: Mapping[str, Any],
              sources: Optional[Sequence[Mapping[str, str]]] = None,
              ) -> Dict[str, Any]:
    r"""The :func:`run_name` of each group of :obj:`choices` (Hydra's
    options of the run of :obj:`cfg`)."""
    return {group: run_name(group, choice, cfg.get(group), sources)
            for group, choice in choices.items()}


def _name_of(group: str, root: DictConfig) -> Optional[str]:
    r"""The :func:`run_name` of :obj:`group` in the composed config
    :obj:`root` (with its ``hydra`` node)."""
    runtime = root.hydra.runtime
    return run_name(group, runtime.choices.get(group), root.get(group),
                    runtime.config_sources)


def import_error(target: str) -> Optional[str]:
    r"""Why the class or function :obj:`target` (a ``_target_``,
    ``mynorm.HalfLN``) does not import, in words with the usual fix
    (``does not import (ModuleNotFoundError: No module named 'mynorm');
    is its module on PYTHONPATH?``); :obj:`None` where it imports."""
    module, _, name = str(target).rpartition('.')
    try:
        getattr(importlib.import_module(module), name)
    except Exception as e:  # any error of the user's module, in one line
        return (f'does not import ({type(e).__name__}: '
                f"{one_line(e)}); is its module on PYTHONPATH?")
    return None


def check_targets(cfg: DictConfig, groups: Sequence[str]) -> None:
    r"""Raises :class:`ConfigError`, one line, where the ``_target_`` of a
    config group of :obj:`groups` (``model``, ``norm``) does not import
    (:func:`import_error`), before Hydra tries to build it."""
    for group in groups:
        node = cfg.get(group)
        target = node.get('_target_') if isinstance(node, DictConfig) \
            else None
        why = target and import_error(target)
        if why:
            raise ConfigError(f'{group}._target_={target} {why}')


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
    if not isinstance(cfg.train.deterministic, bool):
        raise ConfigError(f"train.deterministic must be true or false, got "
                          f"{cfg.train.deterministic!r}")
    runs = cfg.get('batch_runs', 'auto')
    if runs != 'auto' and (not is_int(runs) or runs < 1):
        raise ConfigError(f"batch_runs must be auto or an integer >= 1, got "
                          f"{runs!r}; pass e.g. batch_runs=auto")
    width = cfg.model.get('hidden_channels')
    if not is_int(width) or width < 1:
        raise ConfigError(f"model.hidden_channels must be an integer >= 1, "
                          f"got {width!r}; pass e.g. model.hidden_channels=32")
    # The data folder may be read-only when it holds the data already.
    check_folder(cfg.data.root, f'data.root={cfg.data.root}', write=False)
    scale = cfg.norm.get('scale', None)
    if scale is not None and (not isinstance(scale, (int, float))
                              or scale < 0):
        raise ConfigError(f"norm.scale must be a number >= 0, got "
                          f"{scale!r}; pass e.g. norm.scale=0.5")
    check_targets(cfg, ('model', 'norm'))
    task_module(cfg).check_config(cfg)


def option(group: str, node: DictConfig) -> str:
    r"""What one types for the option of config group :obj:`group` that
    :obj:`node` (e.g. ``cfg.model``) holds, for error messages:
    ``model=graphormer``, the option of ``conf/<group>/`` with the same
    ``_target_``; else ``<group>._target_=<target>``."""
    target = node.get('_target_')
    for path in sorted((CONF_DIR / group).glob('*.yaml')):
        if OmegaConf.load(path).get('_target_') == target:
            return f'{group}={path.stem}'
    return f'{group}._target_={target}'


def unknown_norm_keys(node: DictConfig) -> Optional[str]:
    r"""Why the norm config :obj:`node` cannot build its class, if it is
    keys that the class does not take (those of another option, e.g.
    ``norm=layernorm norm._target_=mynorm.HalfLN``: LayerNorm's ``eps``),
    as one line with both fixes; else :obj:`None`."""
    target = node.get('_target_')
    try:
        params = inspect.signature(get_object(str(target))).parameters
    except Exception:  # not importable, no signature: building says why
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    keys = [str(k) for k in node if not str(k).startswith('_')
            and k not in params]
    if not keys:
        return None
    them = 'it' if len(keys) == 1 else 'them'
    return (f"norm._target_={target} takes no "
            f"{', '.join(f'norm.{k}' for k in keys)}; pass norm=none "
            f"norm._target_={target} (an option without keys), or drop "
            f"{them}: " + ' '.join(f'~norm.{k}' for k in keys))


def quoted(text: str) -> str:
    r""":obj:`text` as a quoted value of a Hydra override, which Hydra's
    parser reads back as :obj:`text`. Hydra's grammar (its own
    :meth:`QuotedString.with_quotes`) escapes a quote and the backslashes
    right before a quote only; any other backslash stays as it is (a run
    folder named after ``'split_index=${seed}'`` holds Hydra's
    ``$\{seed\}``, which doubled would name another file)."""
    return QuotedString(text=text, quote=Quote.single).with_quotes()


def one_line(error: BaseException) -> str:
    r"""The message of :obj:`error` (or of what Hydra wrapped) on one
    line."""
    cause = error.__cause__ if isinstance(error, InstantiationException) \
        and error.__cause__ is not None else error
    text = str(cause) or type(cause).__name__
    return ' '.join(text.split())


def json_safe(value: Any) -> Any:
    r""":obj:`value` as ``results.json`` keeps it: non-finite floats become
    :obj:`None` (strict JSON), and a float that a float32 holds exactly (a
    metric of a float32 tensor, :obj:`0.10000000149011612`) the shortest
    decimal that float32 reads back (:obj:`0.1`); other floats stay."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        single = np.float32(value)
        return float(str(single)) if float(single) == value else value
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
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


def write_json(path: Path, obj: Dict[str, Any]) -> Dict[str, Any]:
    r"""Writes :obj:`obj` to :obj:`path` atomically (temporary file, then
    :func:`os.replace`), with the queue's deadline alarm (``SIGALRM``)
    held until the file is in place (:func:`alarm_held`: a finished run is
    never lost to it); non-finite numbers become :obj:`null`, float32
    values their shortest decimal. Returns what it wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = json_safe(obj)
    tmp = path.with_name(f'.{path.name}.tmp')
    with alarm_held():
        with open(tmp, 'w') as f:
            f.write(_dumps(obj) + '\n')
        os.replace(tmp, path)
    return obj


@contextlib.contextmanager
def alarm_held() -> Iterator[None]:
    r"""Holds ``SIGALRM`` for the block in this thread (where the platform
    can): an alarm that falls inside it is delivered when it ends."""
    mask = getattr(signal, 'pthread_sigmask', None)
    if mask is None:
        yield
        return
    previous = mask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, previous)


def finished_run(path: Path, cfg: DictConfig,
                 say: bool = False) -> Optional[Dict[str, Any]]:
    r"""The results in :obj:`path` if they are those of a finished run of
    :obj:`cfg` trained by as many processes as this one
    (:func:`gnorm.results.keys.is_finished`) with the user's code of now
    (:func:`gnorm.results.user_code.changed_user_code`: a file of the
    user's that the config names changed since, and the run is trained
    again; with :obj:`say`, a ``retraining: mynorm.py changed since this
    run`` line says so), else :obj:`None`. Raises :class:`ConfigError`
    if a finished run of another config lies there."""
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # unreadable: run again
    asked = json_safe(OmegaConf.to_container(cfg, resolve=True))
    if not is_finished(results, asked, world_size(), path):
        return None
    changed = changed_user_code(results, asked)
    if changed:
        if say:
            print(retraining(results, changed, path), flush=True)
        return None
    return results


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
