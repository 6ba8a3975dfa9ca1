r"""What every run records of where it comes from: the split it trained and
was tested on (a fingerprint of its node indices), the code (commit, and a
hash of the changes of a modified checkout), the time of its epochs alone
and its peak memory."""
import json

import pytest
import torch

from gnorm.data import split_fingerprint
from gnorm.train import train
from gnorm.train.node_setup import load_data
from gnorm.train.run import _diff_sha256, peak_memory
from conftest import compose_train, needs_mirror

TINY = ['dataset=csbm', 'dataset.num_nodes=200', 'layers=2',
        'train.epochs=3', 'train.progress=false', 'collapse_metrics=false']

pytestmark = pytest.mark.usefixtures('one_thread')


def _masks(n=10, train=(0, 1, 2), val=(3, 4), test=(5, 6)):
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    for mask, nodes in zip(masks, (train, val, test)):
        mask[list(nodes)] = True
    return masks


def test_split_fingerprint_names_the_nodes_of_each_part():
    found = split_fingerprint(*_masks())
    assert found == split_fingerprint(*_masks())
    assert len(found) == 16 and int(found, 16) >= 0
    # a node moved from validation to test, or one more training node
    assert split_fingerprint(*_masks(val=(3, ), test=(4, 5, 6))) != found
    assert split_fingerprint(*_masks(train=(0, 1, 2, 7))) != found
    # the same nodes as parts of another graph's masks: the same split
    assert split_fingerprint(*_masks(n=20)) == found


def test_a_run_records_its_split_loop_time_and_memory(tmp_path):
    results = train(compose_train(*TINY, 'seed=3'), output_dir=tmp_path)
    data = load_data(compose_train(*TINY, 'seed=3'))
    assert results['dataset']['split_fingerprint'] == split_fingerprint(
        data.train_mask, data.val_mask, data.test_mask)
    other = train(compose_train(*TINY, 'seed=4'), output_dir=tmp_path / 'b')
    assert other['dataset']['split_fingerprint'] != \
        results['dataset']['split_fingerprint']  # seed k draws split k
    assert 0 < results['loop_s'] <= results['runtime_s']
    assert results['peak_memory']['host_rss_mib'] > 10
    assert json.loads((tmp_path / 'results.json').read_text())[
        'peak_memory'] == results['peak_memory']


def test_the_hash_of_a_modified_checkout_follows_its_changes(tmp_path):
    (tmp_path / 'new.py').write_text('x = 1\n')
    first = _diff_sha256(tmp_path, 'diff a', 'new.py')
    assert first == _diff_sha256(tmp_path, 'diff a', 'new.py')
    assert first != _diff_sha256(tmp_path, 'diff b', 'new.py')
    (tmp_path / 'new.py').write_text('x = 2\n')
    assert first != _diff_sha256(tmp_path, 'diff a', 'new.py')


def test_peak_memory_of_the_cpu_is_the_process_rss():
    found = peak_memory(torch.device('cpu'))
    assert set(found) == {'host_rss_mib'} and found['host_rss_mib'] > 10


def _graph(x, y, edges):
    from torch_geometric.data import Data
    return Data(x=torch.tensor(x, dtype=torch.float), y=torch.tensor(y),
                edge_index=torch.tensor(edges).t())


def test_leakage_counts_test_nodes_with_a_twin_in_training():
    from gnorm.data import leakage, leaks
    # nodes 0-2 train, 3-5 test; 3 is a copy of 0 (label, neighbours too),
    # 4 a copy of 1 with another label, 5 is new
    x = [[1, 0], [0, 1], [1, 1], [1, 0], [0, 1], [2, 2]]
    y = [0, 1, 0, 0, 0, 1]
    edges = [[2, 0], [2, 3], [0, 1], [4, 1], [5, 2]]
    train = torch.tensor([1, 1, 1, 0, 0, 0], dtype=torch.bool)
    found = leakage(_graph(x, y, edges), train, ~train)
    assert found == {'test': 3, 'duplicated_in_train': 2, 'same_label': 1,
                     'same_neighbours': 1}
    assert leaks(found)
    # 3's twin 0 gets another neighbour: same label, not the same
    # neighbourhood any more
    found = leakage(_graph(x, y, edges + [[5, 0]]), train, ~train)
    assert found['same_label'] == 1 and found['same_neighbours'] == 0
    assert not leaks(found)  # feature twins, no duplicate: no leak
    # no twin of a test node among the training nodes
    x[3], x[4] = [3, 3], [4, 4]
    assert not leaks(leakage(_graph(x, y, edges), train, ~train))


@needs_mirror
def test_chameleons_geom_gcn_split_0_leaks_64_test_nodes(tmp_path):
    results = train(compose_train(
        'dataset=chameleon', 'split=geom_gcn', 'split_index=0', 'layers=2',
        'train.epochs=1', 'train.progress=false', 'collapse_metrics=false'),
        output_dir=tmp_path)
    assert results['dataset']['leakage'] == {
        'test': 456, 'duplicated_in_train': 64, 'same_label': 63,
        'same_neighbours': 42}
