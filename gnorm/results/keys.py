r"""What makes two runs the same: one declared rule per question
(``docs/training.rst``, "What makes two runs the same").

(a) :func:`config_identity`: which runs are one result (one row of
    :mod:`gnorm.results`, one cell of a table): everything that changes
    the numbers, the number of processes (``world_size``) included, and
    nothing else (:data:`NOT_RESULT_KEYS`, :data:`ADDED_KEYS`,
    :data:`LAST_EPOCH_KEYS`).
(b) :func:`finished`: whether a ``results.json`` holds a finished run of
    the config asked for (``resume=true`` skips it).
(c) :func:`check_resume`: whether a checkpoint may continue the run asked
    for.
(d) :func:`batch_key`: which runs may train as one model: runs whose
    configs differ only in the keys the engine stacks (seed, split, norm
    scale...); every other key, also those of (a)'s exceptions (how often
    a run evaluates, logs, writes TensorBoard events), is equal, since a
    batch of runs follows one config for them.

Beside these, :mod:`gnorm.results.user_code` says whether the user's own
code that a config names is still the code that made a finished run or a
checkpoint (a run whose code changed is trained again).

:data:`NOT_RESULT_KEYS` also names the keys left out of Hydra's run-folder
names (``exclude_keys: ${gnorm.not_result_keys:...}`` in
``conf/hydra/default.yaml``; the resolver is registered by
:mod:`gnorm.train.common`).
"""
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence

from gnorm.errors import ConfigError, renamed

# Config keys that do not change what a run computes: where data comes
# from, the device and its threads, replaying the step as CUDA graphs (the
# same kernels and dropout masks as eager; the GPU suite checks it),
# resuming and how often a checkpoint is written (a resumed run gives the
# uninterrupted one's results; the tests check it), batching runs
# together, progress output and logs, recording gradient norms (hooks
# that only read), and the
# ``table:`` spec of a table's experiment (which runs a table has, not what
# one run computes).
NOT_RESULT_KEYS = ('data.root', 'data.mirror', 'device', 'threads',
                   'train.cuda_graph', 'resume', 'train.checkpoint_every',
                   'batch_runs', 'batch_file', 'train.progress',
                   'train.log_every', 'train.log_steps', 'train.tensorboard',
                   'train.grad_every', 'table')
# Keys added after runs were made, each with the value that computes what
# those runs computed: a config holding that value is the same run as one
# without the key (committed runs stay finished runs of their config).
ADDED_KEYS = {'train.precision': 'fp32', 'train.compile': False,
              'train.data_seed': None, 'train.eval_every': 1,
              'dataset.metric': 'acc', 'train.optimizer': 'adam',
              'model.block': 'pre', 'model.skip': 'linear',
              'model.conv_init': 'glorot'}
# Keys that change nothing a run selects when its ``select`` is ``last``:
# how often it evaluates (evaluation draws no random number and changes no
# weight or statistic; the last epoch is always evaluated).
LAST_EPOCH_KEYS = ('train.eval_every', )
# What a run's record says beside its config that changes its numbers,
# with the value of the records made before it was recorded.
RECORD_KEYS = {'world_size': 1}


def dotted_keys(node: Dict[str, Any], prefix: str = '') -> Iterator[str]:
    r"""Every dotted key of a nested dict (``train``, ``train.lr``, ...)."""
    for key, value in node.items():
        yield prefix + str(key)
        if isinstance(value, dict):
            yield from dotted_keys(value, f'{prefix}{key}.')


def drop_keys(config: dict, keys=NOT_RESULT_KEYS) -> dict:
    r"""A copy of the nested dict :obj:`config` without the dotted
    :obj:`keys`."""
    config = dict(config)
    for key in keys:
        node, *path = key.split('.')
        if not path:
            config.pop(node, None)
        elif isinstance(config.get(node), dict):
            config[node] = drop_keys(config[node], ['.'.join(path)])
    return config


def _get(config: dict, key: str):
    for part in key.split('.'):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def world_size() -> int:
    r"""The number of processes this one trains with: ``WORLD_SIZE`` of
    ``torchrun``, else 1."""
    return int(os.environ.get('WORLD_SIZE', 1))


def result_config(config: dict) -> dict:
    r"""The part of :func:`config_identity` a config holds: the nested dict
    :obj:`config` without :data:`NOT_RESULT_KEYS`, without the
    :data:`ADDED_KEYS` that hold the value runs made before them computed
    with, and, for a run that tests its last epoch (``select: last``),
    without :data:`LAST_EPOCH_KEYS`."""
    same = [k for k, v in ADDED_KEYS.items() if _get(config, k) == v]
    if config.get('select') == 'last':
        same += LAST_EPOCH_KEYS
    return drop_keys(drop_keys(config), same)


def config_identity(config: dict, world_size: int = 1) -> dict:
    r"""(a) What identifies a result: :func:`result_config` of the nested
    dict :obj:`config` and, when it is not 1, the number of processes
    :obj:`world_size` (``train.batch_size`` counts per process: more
    processes train with a larger batch and fewer updates)."""
    found = result_config(config)
    if world_size != RECORD_KEYS['world_size']:
        found['world_size'] = world_size
    return found


def record_identity(record: Dict[str, Any]) -> dict:
    r""":func:`config_identity` of a run's record (``results.json``, or a
    checkpoint): its ``config`` and ``world_size`` (1 when not
    recorded)."""
    config = record.get('config')
    return config_identity(config if isinstance(config, dict) else {},
                    record.get('world_size') or RECORD_KEYS['world_size'])


def differences(a: dict, b: dict, prefix: str = '') -> List[str]:
    r"""The dotted keys whose values differ between the nested dicts
    :obj:`a` and :obj:`b` (sorted)."""
    keys = []
    for key in sorted(set(a) | set(b), key=str):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            keys += differences(x, y, f'{prefix}{key}.')
        elif x != y or (key in a) != (key in b):
            keys.append(f'{prefix}{key}')
    return keys


def _differ(record: Dict[str, Any], config: dict, world: int) -> str:
    r"""Where the record :obj:`record` and the run asked for differ, for
    an error message: ``world_size 1 vs 2``, ``train.lr, seed``."""
    keys = differences(record_identity(record),
                       config_identity(config, world))
    if keys == ['world_size']:
        return (f"world_size {record.get('world_size') or 1} vs {world}: "
                f"another number of processes")
    shown = ', '.join(keys[:4]) + (', ...' if len(keys) > 4 else '')
    return f'differs in {shown}'


def is_finished(record: Optional[Dict[str, Any]], config: dict, world: int,
             where: Any) -> bool:
    r"""(b) Whether :obj:`record` (the ``results.json`` at :obj:`where`,
    or :obj:`None`) is a finished run (``status: ok``) of :obj:`config`
    trained by :obj:`world` processes; :obj:`False` for a missing or
    unfinished one. Raises :class:`ConfigError` if it is a finished run of
    another :func:`config_identity`."""
    if not isinstance(record, dict) or record.get('status') != 'ok':
        return False
    if record_identity(record) != config_identity(config, world):
        raise ConfigError(f"{where} holds a finished run of another config "
                          f"({_differ(record, config, world)}); pass "
                          f"resume=false or another output folder")
    return True


def check_resume(state: Dict[str, Any], config: dict, world: int,
                 where: Any) -> None:
    r"""(c) Raises :class:`ConfigError` unless the checkpoint
    :obj:`state` (saved at :obj:`where`) continues a run of :obj:`config`
    trained by :obj:`world` processes: the same :func:`config_identity`."""
    if record_identity(state) != config_identity(config, world):
        raise ConfigError(f"{where} belongs to another config "
                          f"({_differ(state, config, world)}); pass "
                          f"resume=false or another output folder")


def batch_key(config: dict, stacked: Sequence[str]) -> str:
    r"""(d) Runs with the same key may train as one model: the nested dict
    :obj:`config` without the keys :obj:`stacked` that the engine gives
    every run of a batch its own value of; every other key must be
    equal."""
    return json.dumps(drop_keys(config, stacked), sort_keys=True)


# The former name, for one release.
identity = renamed(config_identity, 'gnorm.results.keys.identity')
