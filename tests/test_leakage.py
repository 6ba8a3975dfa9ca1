r"""Leakage of a split through duplicate nodes (gnorm.data.leakage): one
definition (neighbours in the graph a run trains on), a line whose level
and words follow the share that leaks, said once per process and split,
and the leakage of each split listed from the records of runs."""
import importlib
import logging

import pytest

from gnorm.data import leakage_summary
from gnorm.data.leakage import WARN_SHARE, leakage_line, leaks, report
from conftest import compose_train, needs_mirror

pytestmark = pytest.mark.usefixtures('one_thread')

# Split 0 of chameleon (Geom-GCN, symmetrised) and of chameleon_filtered.
CHAMELEON = {'test': 456, 'duplicated_in_train': 64, 'same_label': 63,
             'same_neighbours': 30}
FILTERED = {'test': 194, 'duplicated_in_train': 19, 'same_label': 19,
            'same_neighbours': 2}


@pytest.fixture
def fresh(monkeypatch, caplog):
    r"""A process that has reported nothing yet; its lines in caplog."""
    module = importlib.import_module('gnorm.data.leakage')  # not the function
    monkeypatch.setattr(module, '_REPORTED', set())
    caplog.set_level(logging.INFO, logger='gnorm.data.leakage')
    return caplog


def _lines(caplog):
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == 'gnorm.data.leakage']


def test_the_line_reads_the_scale_of_the_leak():
    assert WARN_SHARE == 0.03
    assert leaks(CHAMELEON) and not leaks(FILTERED)
    assert leakage_line('chameleon, geom_gcn split 0', 'chameleon',
                        CHAMELEON) == (
        'chameleon, geom_gcn split 0: 30 of 456 test nodes (6.6 %) have a '
        'duplicate in training (the same features, label and neighbours): '
        'the split leaks; dataset=chameleon_filtered is chameleon without '
        'its duplicate nodes (gnorm.data.leakage)')
    assert leakage_line('chameleon_filtered, platonov split 0',
                        'chameleon_filtered', FILTERED) == (
        'chameleon_filtered, platonov split 0: 2 of 194 test nodes (1.0 %) '
        'have a duplicate in training (the same features, label and '
        'neighbours), under the 3 % at which a split leaks '
        '(gnorm.data.leakage)')
    # A dataset without a filtered variant names none.
    line = leakage_line('cora, public split', 'cora', CHAMELEON)
    assert line.endswith(': the split leaks (gnorm.data.leakage)')


def test_a_split_is_reported_once_per_process(fresh):
    for _ in range(3):  # three runs (or batches) of one split
        report('chameleon, geom_gcn split 0', 'chameleon', 'f0', CHAMELEON)
        report('chameleon_filtered, platonov split 0', 'chameleon_filtered',
               'f1', FILTERED)
        report('cora, public split', 'cora', 'f2',
               {**CHAMELEON, 'same_neighbours': 0})  # no duplicate: silent
    levels = [level for level, _ in _lines(fresh)]
    assert levels == ['WARNING', 'INFO']
    # Another split (fingerprint) of the dataset is said too.
    report('chameleon, geom_gcn split 1', 'chameleon', 'f3', CHAMELEON)
    assert len(_lines(fresh)) == 3


@needs_mirror
def test_runs_count_neighbours_in_the_graph_they_train_on(tmp_path, fresh):
    r"""Chameleon's split 0 as stored (directed) and symmetrised: each run
    records the leakage of its own graph, warned of once for each graph
    however many runs train on it; the filtered graph's 2 of 194 is an
    info line."""
    from gnorm.data import leakage, load_dataset
    from gnorm.train.run import train_runs
    tiny = ['split=geom_gcn', 'split_index=0', 'layers=2',
            'model.hidden_channels=4', 'train.epochs=1',
            'train.progress=false', 'collapse_metrics=false']
    for undirected, count in ((False, 42), (True, 30)):
        cfgs = [compose_train('dataset=chameleon', *tiny, f'seed={seed}',
                              f'dataset.to_undirected={undirected}')
                for seed in (0, 1)]
        for k, cfg in enumerate(cfgs):  # one call per run, as a study's
            found = train_runs([cfg], [str(tmp_path / f'{undirected}{k}')],
                               [{}])[0]['dataset']['leakage']
            assert found['same_neighbours'] == count
        data = load_dataset('chameleon', cfgs[0].data.root,
                            cfgs[0].data.mirror, split='geom_gcn',
                            to_undirected=undirected)
        assert leakage(data, data.train_mask, data.test_mask) == found
    train_runs([compose_train('dataset=chameleon_filtered',
                              *tiny[2:])], [str(tmp_path / 'filtered')],
               [{}])
    lines = _lines(fresh)
    assert [level for level, _ in lines] == ['WARNING', 'WARNING', 'INFO']
    assert '42 of 456 test nodes (9.2 %)' in lines[0][1]
    assert '30 of 456 test nodes (6.6 %)' in lines[1][1]
    assert 'dataset=chameleon_filtered' in lines[1][1]
    assert lines[2][1].startswith('chameleon_filtered, platonov split 0: '
                                  '2 of 194 test nodes (1.0 %)')


def _record(name, split, leaked, test=100, split_index=0, seed=0):
    return {'status': 'ok',
            'config': {'split': split, 'split_index': split_index,
                       'seed': seed},
            'dataset': {'name': name, 'split': split,
                        'leakage': {'test': test, 'duplicated_in_train': 9,
                                    'same_label': 8,
                                    'same_neighbours': leaked}}}


def test_leakage_summary_lists_each_split_once_from_the_records():
    records = [
        _record('squirrel', 'random', 3, 1041, seed=10),
        _record('chameleon', 'geom_gcn', 30, 456, split_index=1),
        _record('chameleon', 'geom_gcn', 30, 456, split_index=1),  # a 2nd run
        _record('squirrel', 'random', 1, 1041, seed=2),
        _record('chameleon', 'geom_gcn', 42, 456),
        _record('cora', 'public', 0, 1000),
        {'status': 'ok', 'config': {'split': 'scaffold'},
         'dataset': {'name': 'molhiv'}},  # a graph-level run: no leakage
        {'status': 'failed', 'config': {}},  # refused before its data
    ]
    rows = leakage_summary(records)
    assert rows == [('chameleon', 'geom_gcn split 0', 456, 42),
                    ('chameleon', 'geom_gcn split 1', 456, 30),
                    ('cora', 'public split', 1000, 0),
                    ('squirrel', 'random split of seed 2', 1041, 1),
                    ('squirrel', 'random split of seed 10', 1041, 3)]
    assert rows[0].same_neighbours == 42 and rows[0].dataset == 'chameleon'
    assert leakage_summary(records[::-1]) == rows  # a function of the runs
    assert leakage_summary([]) == []
