r"""Training, driven by Hydra::

    python -m gnorm.train dataset=cora layers=32 norm=contranorm
    python -m gnorm.train -m dataset=cora layers=2,32 seed=0,1,2,3,4

Configuration lives in ``conf/`` (primary config ``conf/train.yaml``). Each
run writes ``results.json`` into its Hydra output folder and prints one
summary line. :func:`train` is the plain function behind the command line.

Modules, each importing only those above it in this list:

* :mod:`gnorm.train.common`: what the others share (the config folder,
  config checks, results files, finished runs, batches of runs);
* :mod:`gnorm.train.hydra_adapter`: the only use of Hydra's internals;
* :mod:`gnorm.train.progress`: progress bar and log lines of a loop;
* :mod:`gnorm.train.scores`: accuracy and ROC-AUC of node predictions,
  many runs at once, on the device;
* :mod:`gnorm.train.node`: node classification, full batch; many runs as
  one model;
* :mod:`gnorm.train.epoch_log`: per-epoch ``metrics.csv`` (and
  TensorBoard) of a graph-level run;
* :mod:`gnorm.train.graph_batches`: mini-batches of graphs (size buckets,
  equal shares for data-parallel processes);
* :mod:`gnorm.train.graph`: graph-level prediction (Graphormer);
* :mod:`gnorm.train.run`: training runs for every task (seeding, device,
  resuming, batches, recording failed and interrupted runs);
* :mod:`gnorm.train.sweep`: ``-m`` sweeps whose jobs each train a batch of
  runs as one model;
* :mod:`gnorm.train.arguments`: unknown options and keys, ``--help``;
* :mod:`gnorm.train.command`: the command line.
"""
import importlib

from gnorm.errors import interrupt_exits

with interrupt_exits():  # Ctrl-C while the command imports torch: one line
    from gnorm.train.common import CONF_DIR, check_config, write_json

# The others are imported where first used (PEP 562), so that what only
# reads configs and results (``python -m gnorm.study queue --list``, a
# study's ``--dry-run``) does not import torch_geometric.
_WHERE = {'build_model': 'node_setup', 'load_data': 'node_setup',
          'resolve_device': 'run', 'seed_everything': 'run', 'train': 'run',
          'train_runs': 'run', 'check_choices': 'arguments',
          'check_keys': 'arguments', 'help_text': 'arguments',
          'cli': 'command', 'main': 'command'}


def __getattr__(name: str):
    r"""The function :obj:`name` of :data:`__all__`, imported from its
    module on first use."""
    if name not in _WHERE:
        raise AttributeError(f'module {__name__!r} has no attribute '
                             f'{name!r}')
    with interrupt_exits():
        module = importlib.import_module(f'{__name__}.{_WHERE[name]}')
    return getattr(module, name)

__all__ = [
    'CONF_DIR',
    'build_model',
    'check_choices',
    'check_keys',
    'check_config',
    'cli',
    'help_text',
    'load_data',
    'main',
    'resolve_device',
    'seed_everything',
    'train',
    'train_runs',
    'write_json',
]
