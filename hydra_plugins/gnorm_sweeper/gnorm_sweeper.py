r"""``hydra/sweeper=gnorm`` (conf/hydra/sweeper/gnorm.yaml): Hydra takes
plugins from the ``hydra_plugins`` package only; the logic lives in
:mod:`gnorm.train.sweep`."""
from gnorm.train.sweep import BatchedSweeper


class GnormSweeper(BatchedSweeper):
    r"""Hydra's basic sweeper, each launched job training a batch of runs
    as one model (:class:`gnorm.train.sweep.BatchedSweeper`)."""
