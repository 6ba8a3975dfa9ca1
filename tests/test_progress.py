import logging

import pytest

from gnorm.train.progress import Progress


@pytest.mark.parametrize('every,logged', [
    (2, [2, 4, 5]), (0, [5]), (10, [5]), (1, [1, 2, 3, 4, 5])])
def test_log_lines(caplog, every, logged):
    caplog.set_level(logging.INFO, logger='gnorm.train.progress')
    with Progress(5, every=every, desc='train') as progress:
        assert progress.bar is None  # pytest's stderr is not a terminal
        for epoch in range(1, 6):
            progress.update(epoch, loss=1.0 / epoch, val_acc=0.5)
    lines = [r.getMessage() for r in caplog.records]
    assert [int(l.split()[2].split('/')[0]) for l in lines] == logged
    assert lines[-1].startswith('train epoch 5/5 | loss 0.2000 | val_acc '
                                '50.00% | ')
    assert lines[-1].endswith('s')


def test_accuracies_in_percent_other_metrics_as_they_are(caplog):
    caplog.set_level(logging.INFO, logger='gnorm.train.progress')
    with Progress(1, desc='train') as progress:
        progress.update(1, loss=0.25, val_acc=0.158, test_rocauc=0.78125,
                        val_mae=0.4321)
    line, = [r.getMessage() for r in caplog.records]
    assert line.startswith('train epoch 1/1 | loss 0.2500 | val_acc 15.80% '
                           '| test_rocauc 78.12% | val_mae 0.4321 | ')
