import sys

import pytest

import gnorm.train.epoch_log as epoch_log
from gnorm.errors import ConfigError


def test_tensorboard_without_the_package_names_the_fix(tmp_path,
                                                        monkeypatch):
    monkeypatch.setitem(sys.modules, 'torch.utils.tensorboard', None)
    curve = {k: [] for k in epoch_log.CURVE}
    with pytest.raises(ConfigError, match='pip install tensorboard'):
        epoch_log.EpochLog(tmp_path, curve, 'mae', tensorboard=True)
    log = epoch_log.EpochLog(tmp_path, curve, 'mae')  # CSV only: works
    log.add({k: 1.0 for k in epoch_log.CURVE})
    assert (tmp_path / epoch_log.METRICS_CSV).read_text().splitlines()[1] == \
        ','.join(['1.0'] * len(epoch_log.CURVE))
