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


def test_metrics_csv_rounds_to_six_significant_digits(tmp_path):
    r"""metrics.csv is for reading: 6 significant digits, not the float's
    17 (results.json keeps them); a non-finite value is empty."""
    curve = {k: [] for k in epoch_log.CURVE}
    log = epoch_log.EpochLog(tmp_path, curve, 'rocauc')
    log.add(dict(epoch=1, loss=0.229067302113235, lr=0.0009204464285714286,
                 val_metric=0.67466288212816, val_loss=float('nan'),
                 test_metric=0.6742154155159428, time_s=63.45136065799943))
    assert (tmp_path / epoch_log.METRICS_CSV).read_text().splitlines()[1] \
        == '1,0.229067,0.000920446,0.674663,,0.674215,63.4514'
    # Reopened (a resumed run), the restored epochs are rounded alike.
    curve = {k: [v] for k, v in zip(epoch_log.CURVE, [
        1, 0.229067302113235, 1e-05, 0.5, 0.1, 0.25, 1.0])}
    epoch_log.EpochLog(tmp_path, curve, 'rocauc')
    assert (tmp_path / epoch_log.METRICS_CSV).read_text().splitlines()[1] \
        == '1,0.229067,1e-05,0.5,0.1,0.25,1.0'
