r"""Progress of a training loop, for every task: a tqdm bar on a terminal,
and a log line every few epochs (and at the last one) wherever the output
goes, so that ``nohup``, a cluster log and Hydra's ``train.log`` show it::

    with Progress(cfg.train.epochs, every=cfg.train.log_every) as progress:
        for epoch in range(1, cfg.train.epochs + 1):
            ...
            progress.update(epoch, loss=loss, val_acc=val_acc)

logs ``epoch 10/200 | loss 0.6931 | val_acc 79.80% | 3.2s``: accuracies
and ROC-AUC (metrics named ``*acc``, ``*rocauc``, given as fractions) in
%, other metrics (loss, MAE) as they are.
"""
import contextlib
import logging
import sys
import time
from typing import Optional

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger(__name__)

# Metrics (the end of their name) given as fractions and shown in %.
PERCENT = ('acc', 'rocauc')


def in_reading(name: str, value: float) -> str:
    r""":obj:`value` of metric :obj:`name` as a person reads it:
    ``79.80%`` for an accuracy or ROC-AUC (:data:`PERCENT`, a fraction),
    else four decimals (``0.6931``)."""
    if name.endswith(PERCENT):
        return f'{100 * value:.2f}%'
    return f'{value:.4f}'


def on_one_line(thing) -> str:
    r"""``str(thing)`` on one line, as a log line shows it: a module whose
    repr spans several lines (a custom norm with submodules prints
    ``MyNorm(\n  (bn): BatchNorm1d(...)\n)``) becomes ``MyNorm( (bn):
    BatchNorm1d(...) )``."""
    return ' '.join(str(thing).split())


class Progress:
    r"""Shows the progress of :obj:`total` epochs.

    Args:
        total (int): Number of epochs.
        every (int, optional): A log line every :obj:`every` epochs and at
            the last one; :obj:`0` logs the last epoch only.
            (default: :obj:`10`)
        desc (str, optional): Label of the bar and the log lines.
            (default: :obj:`"train"`)
        bar (bool, optional): Show a tqdm bar when stderr is a terminal
            (log lines then print above it). (default: :obj:`True`)
    """
    def __init__(self, total: int, every: int = 10, desc: str = 'train',
                 bar: bool = True):
        self.total, self.every, self.desc = total, every, desc
        self.start = time.perf_counter()
        self._stack = contextlib.ExitStack()
        self.bar: Optional[tqdm] = None
        if bar and sys.stderr.isatty():
            self._stack.enter_context(logging_redirect_tqdm())
            self.bar = self._stack.enter_context(tqdm(
                total=total, desc=desc, unit='epoch', dynamic_ncols=True,
                leave=False))

    def update(self, epoch: int, **metrics: float) -> None:
        r"""Records that epoch :obj:`epoch` (1-based) ended with
        :obj:`metrics` (e.g. :obj:`loss`, :obj:`val_acc`)."""
        if self.bar is not None:
            self.bar.update(epoch - self.bar.n)
            self.bar.set_postfix({k: in_reading(k, v) for k, v in metrics.items()},
                                 refresh=False)
        if epoch == self.total or (self.every > 0 and epoch % self.every == 0):
            parts = [f'{self.desc} epoch {epoch}/{self.total}']
            parts += [f'{k} {in_reading(k, v)}' for k, v in metrics.items()]
            parts.append(f'{time.perf_counter() - self.start:.1f}s')
            log.info(' | '.join(parts))

    def close(self) -> None:
        r"""Removes the bar."""
        self._stack.close()

    def __enter__(self) -> 'Progress':
        return self

    def __exit__(self, *exc) -> None:
        self.close()
