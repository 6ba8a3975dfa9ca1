r"""The per-epoch record of a run (:mod:`gnorm.train.graph`,
:mod:`gnorm.train.node`): ``metrics.csv`` in the run folder and, for
graph-level runs optionally, TensorBoard events.
"""
import csv
import math
from pathlib import Path
from typing import Dict

from gnorm.errors import ConfigError
from gnorm.train.common import json_safe

METRICS_CSV = 'metrics.csv'
TENSORBOARD = 'tensorboard'
# The per-epoch columns of results.json's curve and of metrics.csv.
CURVE = ('epoch', 'loss', 'lr', 'val_metric', 'val_loss', 'test_metric',
         'time_s')
# The columns of a node-level run's metrics.csv: the same, and the
# training nodes' accuracy (its curve's train_acc).
NODE_CURVE = CURVE + ('train_metric', )
DIGITS = 6  # significant digits of the floats of metrics.csv


def csv_value(value):
    r""":obj:`value` as ``metrics.csv`` shows it: a float rounded to
    :data:`DIGITS` significant digits (``0.000920446``, not
    ``0.0009204464285714286``; results.json keeps the full values), a
    non-finite one empty, anything else as it is."""
    value = json_safe(value)
    if isinstance(value, float):
        return float(f'{value:.{DIGITS}g}')
    return value


class EpochLog:
    r"""The per-epoch record of a run for a person watching it: one row per
    epoch (the columns of :obj:`columns`, default :obj:`CURVE`) appended to ``metrics.csv`` in the
    run folder (always; it costs nothing), and with :obj:`tensorboard` the
    same scalars in TensorBoard event files in ``tensorboard/``
    (:class:`torch.utils.tensorboard.SummaryWriter`, needs the
    ``tensorboard`` package). Opening it rewrites the CSV from
    :obj:`curve` (the epochs a resumed run restored) and drops later
    TensorBoard events, so neither holds epochs the checkpoint lacks."""
    def __init__(self, folder: Path, curve: Dict[str, list], metric: str,
                 tensorboard: bool = False, columns=CURVE):
        self.path = folder / METRICS_CSV
        self.metric, self.columns = metric, tuple(columns)
        folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, 'w', newline='') as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            writer.writerows(zip(*([csv_value(v) for v in curve[k]]
                                   for k in self.columns)))
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("train.tensorboard=true needs the "
                                  "tensorboard package: pip install "
                                  "tensorboard (metrics.csv is written "
                                  "without it)") from None
            self.writer = SummaryWriter(str(folder / TENSORBOARD),
                                        purge_step=len(curve['epoch']) + 1)

    def add(self, row: Dict[str, float]) -> None:
        r"""Records the epoch :obj:`row` (keys :obj:`columns`)."""
        with open(self.path, 'a', newline='') as f:
            csv.writer(f).writerow([csv_value(row[k]) for k in self.columns])
        if self.writer is None:
            return
        tags = {'loss': 'train/loss', 'lr': 'train/lr',
                'time_s': 'train/epoch_time_s', 'val_loss': 'val/loss',
                'val_metric': f'val/{self.metric}',
                'test_metric': f'test/{self.metric}'}
        for key, tag in tags.items():
            if math.isfinite(row[key]):
                self.writer.add_scalar(tag, row[key], row['epoch'])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
