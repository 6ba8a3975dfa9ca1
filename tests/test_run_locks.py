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
    first = locks.lock_folder(folder)
    assert first is not None and folder.is_dir()
    assert locks.lock_folder(folder) is None  # another open file
    locks.release(first)
    assert not folder.exists()  # nothing written: no folder left
    again = locks.lock_folder(folder)
    (folder / 'results.json').touch()
    locks.release(again)
    assert folder.is_dir()
    (folder / 'results.json').unlink()  # a folder it did not make stays
    locks.release(locks.lock_folder(folder))
    assert folder.is_dir()


def test_torchruns_processes_train_their_runs_together(tmp_path,
                                                      monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '2')
    first, second = (locks.lock_folder(tmp_path / 'run') for _ in range(2))
    assert first.fd == second.fd == -1
    locks.release(first)


def test_a_waiting_holder_takes_the_folder_made_anew(tmp_path):
    folder = tmp_path / 'run'
    first, taken = locks.lock_folder(folder), []
    waiter = threading.Thread(target=lambda: taken.append(
        locks.lock_folder(folder, wait=True)))
    waiter.start()
    time.sleep(0.2)
    locks.release(first)  # the folder, empty, is removed
    waiter.join(10)
    lock, = taken
    assert folder.is_dir() and locks.lock_folder(folder) is None
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


def _train_in_thread(cfgs, dirs):
    r"""Starts :func:`train_runs` of :obj:`cfgs` into :obj:`dirs` in a
    thread; returns it and the list its results (or error) go to."""
    out = []

    def target():
        try:
            out.append(train_run.train_runs(cfgs, [str(d) for d in dirs],
                                            [{}] * len(cfgs)))
        except BaseException as e:  # seen by the test, not the thread
            out.append(e)
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def test_a_folder_named_twice_trains_once(tmp_path, monkeypatch, capsys):
    r"""``-m seed=0,0`` with one folder per override set: two runs, one
    folder; trained once, both get its results, no run waits for the
    other (a regression would hang: the thread's timeout fails it)."""
    real, calls = train_run._train_batch, []
    monkeypatch.setattr(train_run, '_train_batch',
                        lambda *args: calls.append(args) or real(*args))
    cfgs = [compose_train(*TINY[:-1], 'seed=0') for _ in range(2)]
    thread, out = _train_in_thread(cfgs, [tmp_path / 'run'] * 2)
    thread.join(60)
    assert not thread.is_alive(), 'train_runs hangs on a folder named twice'
    first, second = out[0]
    assert len(calls) == 1 and len(calls[0][1]) == 1  # one run, trained once
    assert first == second and first['status'] == 'ok'
    assert 'trained by another process' not in capsys.readouterr().out


def test_a_folder_named_twice_and_held_elsewhere_is_waited_for(tmp_path):
    r"""The folder named twice is held by another holder (a lock of the
    test's own) that lets go after 2 s: the call waits, trains it once and
    returns."""
    folder = tmp_path / 'run'
    other = locks.lock_folder(folder)
    cfgs = [compose_train(*TINY[:-1], 'seed=0') for _ in range(2)]
    thread, out = _train_in_thread(cfgs, [folder] * 2)
    time.sleep(2)
    assert thread.is_alive() and not out  # waiting for the other holder
    locks.release(other)
    thread.join(60)
    assert not thread.is_alive(), 'train_runs hangs on a folder named twice'
    first, second = out[0]
    assert first == second and first['status'] == 'ok'
    assert (folder / 'results.json').is_file()


def test_a_folder_named_for_two_configs_is_refused(tmp_path):
    from gnorm.errors import ConfigError
    cfgs = [compose_train(*TINY, f'seed={seed}') for seed in (0, 1)]
    with pytest.raises(ConfigError, match=r"run is the folder of two runs "
                                          r"of different configs"):
        train_run.train_runs(cfgs, [str(tmp_path / 'run')] * 2, [{}, {}])


def test_a_multirun_naming_a_folder_twice_returns(tmp_path):
    r"""``-m seed=1,0,0`` into folders named by the overrides (as the
    study configs name them): the two seed=0 jobs share a folder, trained
    once, whose log holds each line once."""
    import os
    import subprocess
    import sys
    proc = subprocess.run(
        [sys.executable, '-m', 'gnorm.train', '-m', *TINY[:-1], 'seed=1,0,0',
         'hydra.sweep.dir=sweep', 'hydra.sweep.subdir=${hydra.job.'
         'override_dirname}', 'hydra.job.config.override_dirname.'
         'exclude_keys=[dataset,train.progress,collapse_metrics]'],
        cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS='1'),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    folders = sorted(f.name for f in (tmp_path / 'sweep').iterdir()
                     if f.is_dir() and not f.name.startswith('.'))
    assert folders == ['dataset.num_nodes=60,seed=0,train.epochs=3',
                       'dataset.num_nodes=60,seed=1,train.epochs=3']
    summaries = [l for l in proc.stdout.splitlines() if l.startswith('csbm')]
    assert len(summaries) == 2  # seed=0 trained once
    for folder in folders:
        lines = (tmp_path / 'sweep' / folder / 'train.log').read_text(
            ).splitlines()
        assert lines and len(set(lines)) == len(lines)
