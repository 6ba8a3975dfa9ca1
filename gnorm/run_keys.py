r"""Config keys that do not change what a run computes: where data comes
from, the device and its threads, resuming, batching runs together,
progress output, and the ``table:`` spec of a table's experiment (which runs
a table has, not what one run computes). Defined once, read by

* :func:`gnorm.train.common.result_config` (a finished run of a config that
  differs only here is the same run: ``resume=true`` skips it);
* :mod:`gnorm.results` (not a configuration axis of a table);
* Hydra's run-folder names (``exclude_keys:
  ${gnorm.not_result_keys:...}`` in ``conf/hydra/default.yaml`` and the
  ``table3_*`` experiments; the resolver is registered by
  :mod:`gnorm.train.common`).
"""
NOT_RESULT_KEYS = ('data.root', 'data.mirror', 'device', 'threads', 'resume',
                   'batch_runs', 'batch_file', 'train.progress',
                   'train.log_every', 'table')


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
