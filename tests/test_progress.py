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
                                '0.5000 | ')
    assert lines[-1].endswith('s')
