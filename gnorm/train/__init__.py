r"""Training, driven by Hydra:

    python -m gnorm.train dataset=cora layers=32 norm=contranorm
    python -m gnorm.train -m dataset=cora layers=2,32 seed=0,1,2,3,4

Configuration lives in ``conf/`` (primary config ``conf/train.yaml``). Each
run writes ``results.json`` into its Hydra output folder and prints one
summary line. :func:`train` is the plain function behind the command line.

* :mod:`gnorm.train.run`: what every task shares (config checks, seeding,
  device, results files, resuming, recording failed and interrupted runs,
  the command line);
* :mod:`gnorm.train.progress`: progress bar and log lines of a loop;
* :mod:`gnorm.train.arguments`: unknown options and keys, ``--help``;
* :mod:`gnorm.train.node`: node classification, full batch; many runs as
  one model;
* :mod:`gnorm.train.graph`: graph-level prediction (Graphormer);
* :mod:`gnorm.train.sweep`: ``-m`` sweeps whose jobs each train a batch of
  runs as one model.
"""
from gnorm.train.run import (
    CONF_DIR,
    check_config,
    cli,
    main,
    resolve_device,
    seed_everything,
    train,
    train_runs,
    write_json,
)
from gnorm.train.node import build_model, load_data
from gnorm.train.arguments import check_choices, check_keys, help_text

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
