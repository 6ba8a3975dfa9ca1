import json
import math

import pytest

import gnorm.train.graph as graph
from gnorm.train import node_setup
from gnorm.errors import ConfigError
from gnorm.results import aggregate, load_runs, main, repeat_keys
from gnorm.results.keys import (batch_key, check_resume, config_identity,
                                is_finished, record_identity)
from gnorm.train.common import finished_run
from gnorm.train.run import train_runs
from conftest import compose_train

pytestmark = pytest.mark.usefixtures('one_thread')

CONFIG = {'seed': 0, 'layers': 2, 'select': 'best_val',
          'train': {'lr': 0.01, 'eval_every': 1, 'log_every': 5}}
NODE = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=2',
        'train.progress=false']
GRAPH = ['dataset=zinc_fixture', 'model=graphormer', 'norm=sepnorm',
         'train.data_seed=0']


# (a) identity: what changes the numbers, the number of processes too.
def test_identity_counts_the_processes():
    assert config_identity(CONFIG) == config_identity(CONFIG, 1)
    assert config_identity(CONFIG, 2) != config_identity(CONFIG, 1)
    assert config_identity(CONFIG, 2)['world_size'] == 2
    # A record without world_size was made by one process.
    assert record_identity({'config': CONFIG}) == config_identity(CONFIG)
    assert record_identity({'config': CONFIG, 'world_size': 2}) == \
        config_identity(CONFIG, 2)
    # Logs do not change a result; the learning rate does.
    logs = dict(CONFIG, train=dict(CONFIG['train'], log_every=0))
    assert config_identity(logs) == config_identity(CONFIG)
    lr = dict(CONFIG, train=dict(CONFIG['train'], lr=0.1))
    assert config_identity(lr) != config_identity(CONFIG)


# (b) finished: a finished run of the config asked for, by as many
# processes.
def test_finished_needs_status_ok_and_the_same_identity():
    record = {'status': 'ok', 'config': CONFIG, 'world_size': 1}
    assert is_finished(record, CONFIG, 1, 'here')
    assert not is_finished(None, CONFIG, 1, 'here')
    assert not is_finished(dict(record, status='interrupted'), CONFIG, 2, 'x')
    with pytest.raises(ConfigError, match=r'^here holds a finished run of '
                       r'another config \(world_size 1 vs 2: another '
                       r'number of processes\)'):
        is_finished(record, CONFIG, 2, 'here')
    other = dict(CONFIG, layers=4)
    with pytest.raises(ConfigError, match=r'differs in layers\)'):
        is_finished(record, other, 1, 'here')


# (c) a checkpoint continues a run of the same identity only.
def test_check_resume_refuses_another_world_size():
    state = {'epoch': 2, 'config': CONFIG, 'world_size': 1}
    check_resume(state, CONFIG, 1, 'ckpt')
    check_resume({'epoch': 2, 'config': CONFIG}, CONFIG, 1, 'ckpt')
    with pytest.raises(ConfigError, match=r'^ckpt belongs to another config '
                       r'\(world_size 1 vs 2'):
        check_resume(state, CONFIG, 2, 'ckpt')


# (d) runs train as one model only when they differ in stacked keys.
def test_batch_key_ignores_only_the_stacked_keys():
    assert batch_key(CONFIG, ['seed']) == \
        batch_key(dict(CONFIG, seed=3), ['seed'])
    logs = dict(CONFIG, train=dict(CONFIG['train'], log_every=0))
    assert config_identity(logs) == config_identity(CONFIG)
    assert batch_key(logs, ['seed']) != batch_key(CONFIG, ['seed'])


@pytest.mark.parametrize('key', ['train.eval_every=4', 'train.log_every=2',
                                 'threads=1'])
def test_node_runs_that_differ_in_a_logged_key_train_apart(key):
    base = compose_train(*NODE, 'select=last', 'seed=0')
    assert node_setup.batch_key(base) == node_setup.batch_key(
        compose_train(*NODE, 'select=last', 'seed=1'))
    assert node_setup.batch_key(compose_train(*NODE, 'select=last', key)) != \
        node_setup.batch_key(base)


@pytest.mark.parametrize('key', ['train.eval_every=2', 'train.log_steps=7',
                                 'train.tensorboard=true',
                                 'train.precision=fp32'])
def test_graph_runs_that_differ_in_a_logged_key_train_apart(key):
    base = graph.batch_key(compose_train(*GRAPH, 'seed=0'))
    assert base is not None
    assert base == graph.batch_key(compose_train(*GRAPH, 'seed=1'))
    assert graph.batch_key(compose_train(*GRAPH, 'seed=1', key)) != base


def test_a_sweep_over_eval_every_keeps_each_runs_curve(tmp_path):
    # python -m gnorm.train -m ... select=last train.eval_every=1,4
    cfgs = [compose_train(*NODE, 'select=last', 'train.epochs=8',
                          f'train.eval_every={k}') for k in (1, 4)]
    every, fourth = train_runs(cfgs, [str(tmp_path / 'e1'),
                                      str(tmp_path / 'e4')])
    def evaluated(run):
        return [v is not None and math.isfinite(v)
                for v in run['curve']['val_acc']]
    assert every['curve']['epoch'] == fourth['curve']['epoch'] == \
        list(range(1, 9))
    assert evaluated(every) == [True] * 8
    assert evaluated(fourth) == [False, False, False, True] * 2
    assert fourth['config']['train']['eval_every'] == 4
    # Evaluating more often changes nothing a last-epoch run selects.
    assert fourth['test_acc'] == every['test_acc']


def test_a_result_of_another_world_size_is_not_done(tmp_path, monkeypatch):
    cfg = compose_train(*NODE, 'train.epochs=2')
    train_runs([cfg], [str(tmp_path)])
    path = tmp_path / 'results.json'
    assert finished_run(path, cfg) is not None
    monkeypatch.setenv('WORLD_SIZE', '2')
    with pytest.raises(ConfigError, match='world_size 1 vs 2'):
        finished_run(path, cfg)


def _record(folder, seed, world=None, commit=None, test_acc=0.5):
    run = {'status': 'ok', 'config': {'seed': seed, 'layers': 2},
           'overrides': ['layers=2', f'seed={seed}'], 'test_acc': test_acc}
    if world is not None:
        run['world_size'] = world
    if commit is not None:
        run['source'] = {'commit': commit, 'modified': False}
    folder.mkdir(parents=True)
    (folder / 'results.json').write_text(json.dumps(run))


def test_results_keep_world_sizes_apart(tmp_path, capsys):
    _record(tmp_path / 'one' / 's0', 0, world=1, test_acc=0.8)
    _record(tmp_path / 'two' / 's0', 0, world=2, test_acc=0.6)
    rows = aggregate(load_runs(tmp_path), ['layers', 'world_size'],
                     ['test_acc'])
    assert [(r['world_size'], r['runs'], r['test_acc_mean'])
            for r in rows] == [(1, 1, 0.8), (2, 1, 0.6)]
    assert main([str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert '| layers | world_size | runs | failed |' in table
    assert '| 2 | 1 | 1 | 0 | 80.00 ± 0.00 |' in table
    assert '| 2 | 2 | 1 | 0 | 60.00 ± 0.00 |' in table


def test_repeated_seeds_split_by_code_then_sweep(tmp_path):
    for seed in (0, 1):
        _record(tmp_path / 'a' / f's{seed}', seed, commit='a' * 40)
        _record(tmp_path / 'b' / f's{seed}', seed, commit='b' * 40)
    runs = load_runs(tmp_path)
    assert repeat_keys(runs, ['layers']) == ['code']
    for run in runs:
        run.pop('source')
    assert repeat_keys(runs, ['layers']) == ['sweep']
    rows = aggregate(runs, ['layers', 'sweep'], ['test_acc'])
    assert [(r['sweep'], r['runs'], r['seeds']) for r in rows] == \
        [('a', 2, 2), ('b', 2, 2)]


def test_a_repeated_seed_counts_once(tmp_path, capsys):
    # Seeds 0, 0, 1 in one sweep folder: nothing tells the repeats apart.
    _record(tmp_path / 'sweep' / 'r0', 0, test_acc=0.6)
    _record(tmp_path / 'sweep' / 'r1', 0, test_acc=0.8)
    _record(tmp_path / 'sweep' / 'r2', 1, test_acc=0.5)
    runs = load_runs(tmp_path)
    assert repeat_keys(runs, ['layers']) == []
    (row, ) = aggregate(runs, ['layers'], ['test_acc'])
    assert (row['runs'], row['seeds']) == (3, 2)
    # Seed 0 is 0.7 (its runs averaged), seed 1 0.5.
    assert row['test_acc_mean'] == pytest.approx(0.6)
    assert row['test_acc_std'] == pytest.approx(0.1)
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert '| layers | runs | seeds | failed |' in out
    assert 'fewer seeds than runs repeat a seed' in out
