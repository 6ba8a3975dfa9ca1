r"""One run, one trainer (:mod:`gnorm.train.locks`): callers of
:func:`gnorm.train.run.train_runs` that share run folders (two studies
into one runs folder) train each run once; the other waits for it and
takes its results, and ``metrics.csv`` holds each epoch once."""
import threading
import time

import pytest

from gnorm.train import locks
from gnorm.train import run as train_run
from conftest import compose_train

pytestmark = pytest.mark.usefixtures('one_thread')

TINY = ['dataset=csbm', 'dataset.num_nodes=60', 'train.epochs=3',
        'train.progress=false', 'collapse_metrics=false', 'resume=true']


def test_a_folder_is_held_by_one_holder_at_a_time(tmp_path):
    folder = tmp_path / 'run'
    first = locks.hold(folder)
    assert first is not None and folder.is_dir()
    assert locks.hold(folder) is None  # another open file
    locks.release(first)
    assert not folder.exists()  # nothing written: no folder left
    again = locks.hold(folder)
    (folder / 'results.json').touch()
    locks.release(again)
    assert folder.is_dir()
    (folder / 'results.json').unlink()  # a folder it did not make stays
    locks.release(locks.hold(folder))
    assert folder.is_dir()


def test_torchruns_processes_train_their_runs_together(tmp_path,
                                                      monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '2')
    first, second = (locks.hold(tmp_path / 'run') for _ in range(2))
    assert first.fd == second.fd == -1
    locks.release(first)


def test_a_waiting_holder_takes_the_folder_made_anew(tmp_path):
    folder = tmp_path / 'run'
    first, taken = locks.hold(folder), []
    waiter = threading.Thread(target=lambda: taken.append(
        locks.hold(folder, wait=True)))
    waiter.start()
    time.sleep(0.2)
    locks.release(first)  # the folder, empty, is removed
    waiter.join(10)
    lock, = taken
    assert folder.is_dir() and locks.hold(folder) is None
    locks.release(lock)


def test_runs_asked_for_twice_at_once_train_once(tmp_path, monkeypatch,
                                                 capsys):
    real, calls, second = train_run._train_batch, [], threading.Event()

    def train_batch(*args):
        calls.append(args)
        if len(calls) == 1:
            second.wait(3)  # time for the other caller to come in
        else:
            second.set()
        return real(*args)

    monkeypatch.setattr(train_run, '_train_batch', train_batch)
    cfgs = [compose_train(*TINY, f'seed={seed}') for seed in (0, 1)]
    dirs = [tmp_path / f'seed_{seed}' for seed in (0, 1)]
    dirs[0].mkdir()  # a stale log of an earlier run of the folder
    (dirs[0] / 'metrics.csv').write_text('epoch\n1\n2\n3\n4\n5\n')
    results, errors = [None, None], []

    def caller(k):
        try:
            results[k] = train_run.train_runs(cfgs, [str(d) for d in dirs],
                                              [{}, {}])
        except BaseException as e:  # seen by the test, not the thread
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k, )) for k in (0, 1)]
    threads[0].start()
    while not calls and threads[0].is_alive():
        time.sleep(0.01)
    threads[1].start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(calls) == 1  # one caller trained, the other waited
    assert 'trained by another process now' in capsys.readouterr().out
    for first, second in zip(*results):
        assert first['status'] == second['status'] == 'ok'
        assert first['test_acc'] == second['test_acc']
    for folder in dirs:
        lines = (folder / 'metrics.csv').read_text().splitlines()
        assert [line.split(',')[0] for line in lines] == [
            'epoch', '1', '2', '3']
