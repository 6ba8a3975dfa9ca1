r"""Config keys that do not change what a run computes: where data comes
from, the device and its threads, resuming, batching runs together,
progress output and logs (``train.log_steps``, ``train.tensorboard`` of
graph runs), and the ``table:`` spec of a table's experiment (which runs
a table has, not what one run computes). Defined once, read by

* :func:`result_config` (a finished run of a config that differs only here
  is the same run: ``resume=true`` skips it, a table counts it);
* :mod:`gnorm.results` (not a configuration axis of a table);
* Hydra's run-folder names (``exclude_keys:
  ${gnorm.not_result_keys:...}`` in ``conf/hydra/default.yaml`` and the
  ``table3_*`` experiments; the resolver is registered by
  :mod:`gnorm.train.common`).
"""
NOT_RESULT_KEYS = ('data.root', 'data.mirror', 'device', 'threads', 'resume',
                   'batch_runs', 'batch_file', 'train.progress',
                   'train.log_every', 'train.log_steps', 'train.tensorboard',
                   'table')
# Keys added after runs were made, each with the value that computes what
# those runs computed: a config holding that value is the same run as one
# without the key (committed runs stay finished runs of their config).
ADDED_KEYS = {'train.precision': 'fp32', 'train.compile': False,
              'train.data_seed': None, 'train.eval_every': 1}
# Keys that change nothing a run selects when its ``select`` is ``last``:
# how often it evaluates (evaluation draws no random number and changes no
# weight or statistic; the last epoch is always evaluated).
LAST_EPOCH_KEYS = ('train.eval_every', )


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


def result_config(config: dict) -> dict:
    r"""What identifies a run: the nested dict :obj:`config` without
    :data:`NOT_RESULT_KEYS`, without the :data:`ADDED_KEYS` that hold
    the value runs made before them computed with, and, for a run that
    tests its last epoch (``select: last``), without
    :data:`LAST_EPOCH_KEYS`."""
    same = [k for k, v in ADDED_KEYS.items() if _get(config, k) == v]
    if config.get('select') == 'last':
        same += LAST_EPOCH_KEYS
    return drop_keys(drop_keys(config), same)
