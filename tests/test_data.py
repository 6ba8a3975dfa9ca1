import errno
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from gnorm.data import (
    PYG_DATASETS,
    check_split,
    copy_from_mirror,
    csbm,
    load_dataset,
    normalize_rows,
    raw_files,
    split_masks,
)
from gnorm.errors import ConfigError, DataError
from conftest import MIRROR, free_port, join_gloo, needs_mirror



def test_csbm():
    data = csbm(num_nodes=300, num_classes=3, num_features=8, homophily=0.9,
                avg_degree=6.0, graph_seed=1)
    assert data.x.shape == (300, 8) and data.y.shape == (300, )
    assert torch.bincount(data.y).tolist() == [100, 100, 100]
    assert data.is_undirected() and not data.has_self_loops()
    src, dst = data.edge_index
    assert abs(data.num_edges / 300 - 6.0) < 1.0  # mean degree
    assert abs(float((data.y[src] == data.y[dst]).float().mean()) - 0.9) < 0.05

    again = csbm(num_nodes=300, num_classes=3, num_features=8,
                 homophily=0.9, avg_degree=6.0, graph_seed=1)
    assert torch.equal(data.x, again.x)
    assert torch.equal(data.edge_index, again.edge_index)
    other = csbm(num_nodes=300, num_classes=3, num_features=8, graph_seed=2)
    assert not torch.equal(data.y, other.y)


def test_csbm_signal():
    # With a strong signal, the class means separate the features.
    data = csbm(num_nodes=400, num_classes=2, num_features=16, signal=5.0)
    means = torch.stack([data.x[data.y == c].mean(0) for c in range(2)])
    pred = torch.cdist(data.x, means).argmin(dim=1)
    assert float((pred == data.y).float().mean()) > 0.95


@pytest.mark.parametrize('kwargs', [
    dict(num_classes=1), dict(homophily=1.5), dict(num_nodes=3),
    dict(num_nodes=20, avg_degree=50.0), dict(signal=-1.0),
])
def test_csbm_errors(kwargs):
    with pytest.raises(ConfigError, match='csbm'):
        csbm(**kwargs)


def test_normalize_rows():
    x = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]])
    assert torch.equal(normalize_rows(x),
                       torch.tensor([[0.25, 0.75], [0.0, 0.0], [0.5, 0.5]]))


def test_random_split_is_stratified_and_seeded():
    y = torch.arange(5).repeat_interleave(torch.tensor([10, 20, 30, 40, 50]))
    data = Data(y=y, num_nodes=y.numel())
    train, val, test = split_masks(data, 'random', seed=0)
    assert not (train & val).any() and not (train & test).any()
    assert not (val & test).any() and bool((train | val | test).all())
    for c, n in enumerate([10, 20, 30, 40, 50]):
        in_c = y == c
        assert int((train & in_c).sum()) == round(0.6 * n)
        assert int((val & in_c).sum()) == round(0.2 * n)
    assert torch.equal(train, split_masks(data, 'random', seed=0)[0])
    assert not torch.equal(train, split_masks(data, 'random', seed=1)[0])


def test_stored_splits():
    mask = torch.zeros(6, 10, dtype=torch.bool)
    mask[:, 3] = torch.tensor([1, 1, 0, 0, 0, 0], dtype=torch.bool)
    data = Data(y=torch.zeros(6, dtype=torch.long), train_mask=mask,
                val_mask=~mask, test_mask=mask, num_nodes=6)
    train, val, _ = split_masks(data, 'geom_gcn', split_index=3)
    assert train.tolist() == [True, True, False, False, False, False]
    assert torch.equal(val, ~train)
    with pytest.raises(ConfigError, match='split_index=10'):
        split_masks(data, 'geom_gcn', split_index=10)
    with pytest.raises(ConfigError, match='no public split'):
        split_masks(data, 'public')


@pytest.mark.parametrize('name,split,match', [
    ('chameleon', 'public', "'chameleon' has no public split"),
    ('cora', 'geom_gcn', "'cora' has no geom_gcn split"),
    ('csbm', 'geom_gcn', "'csbm' has no geom_gcn split"),
    ('cora', 'full', "unknown split='full'"),
])
def test_check_split(name, split, match):
    with pytest.raises(ConfigError, match=match):
        check_split(name, split)
    check_split(name, 'random')


@pytest.mark.parametrize('split', ['public', 'random'])
def test_only_geom_gcn_takes_a_split_index(split):
    # Else split_index=12 would be ignored yet name its own run folder.
    with pytest.raises(ConfigError, match=f'split_index=12 .* split={split}'):
        check_split('cora', split, 12)
    check_split('chameleon', 'geom_gcn', 9)


def test_load_dataset_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown dataset 'pubmed'"):
        load_dataset('pubmed', tmp_path, split='random')
    with pytest.raises(ConfigError, match='takes no option'):
        load_dataset('cora', tmp_path, split='public', num_nodes=5)
    with pytest.raises(DataError, match='is not a folder'):
        load_dataset('cora', tmp_path, tmp_path / 'nowhere', split='public')
    empty = tmp_path / 'mirror'
    empty.mkdir()
    with pytest.raises(DataError) as info:
        load_dataset('squirrel', tmp_path / 'data', empty, split='geom_gcn')
    message = str(info.value)
    assert '\n' not in message
    assert 'squirrel_split_0.6_0.2_{0..9}.npz' in message
    assert str(empty / 'wikipedia/squirrel/geom_gcn/raw') in message


def test_load_csbm():
    data = load_dataset('csbm', split='random', normalize_features=False,
                        num_nodes=100, num_classes=2)
    assert data.train_mask.dim() == 1 and int(data.train_mask.sum()) == 60
    assert data.x.min() < 0  # signed features left alone


def test_raw_files():
    assert raw_files('cora')[0] == 'ind.cora.x' and len(raw_files('cora')) == 8
    assert len(raw_files('chameleon')) == 12
    assert raw_files('minesweeper') == ('minesweeper.npz', )
    assert set(PYG_DATASETS) == {
        'cora', 'citeseer', 'chameleon', 'squirrel', 'chameleon_filtered',
        'squirrel_filtered', 'minesweeper', 'tolokers'}


@needs_mirror
def test_copy_from_mirror_and_public_split(tmp_path):
    root = tmp_path / 'data'
    assert copy_from_mirror('cora', root, MIRROR) == 8
    assert copy_from_mirror('cora', root, MIRROR) == 0  # nothing left to copy
    assert not list((root / 'planetoid/Cora/raw').glob('.*.tmp'))

    data = load_dataset('cora', root, MIRROR, split='public')
    assert data.x.shape == (2708, 1433)
    assert [int(m.sum()) for m in (data.train_mask, data.val_mask,
                                   data.test_mask)] == [140, 500, 1000]
    assert torch.allclose(data.x.sum(dim=1), torch.ones(2708))  # L1 rows
    random = load_dataset('cora', root, MIRROR, split='random', seed=3,
                          normalize_features=False)
    assert int(random.train_mask.sum()) in range(1620, 1630)
    assert random.x.max() == 1.0


@pytest.fixture
def read_only(tmp_path, monkeypatch):
    r"""A data root that refuses writes as a read-only folder does, even for
    root (who ignores chmod): os.mkdir inside it raises EACCES."""
    root = tmp_path / 'read-only'
    mkdir = os.mkdir

    def refuse(path, *args, **kwargs):
        if str(path).startswith(str(root)):
            raise PermissionError(errno.EACCES, 'Permission denied',
                                  str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, 'mkdir', refuse)
    return root


@pytest.mark.parametrize('mirror', [
    None, pytest.param(MIRROR, marks=needs_mirror)])
def test_read_only_root(read_only, mirror):
    # With a mirror the copy fails, without one PyG's download would: both
    # are one line naming the folder and the fix.
    with pytest.raises(DataError) as info:
        load_dataset('cora', read_only, mirror, split='public')
    message = str(info.value)
    assert message.startswith(f'cannot write to {read_only}')
    assert 'pass data.root=' in message and '\n' not in message
    assert ('from the mirror' in message) == (mirror is not None)


# --- Several processes preparing one dataset at once (torchrun) ---

def _fake_mirror(root):
    r"""A mirror of cora's raw files (made-up bytes) and of a tree of files
    as ``molhiv``'s mirror folder has."""
    rel = PYG_DATASETS['cora'][2]
    (root / rel).mkdir(parents=True)
    for i, f in enumerate(raw_files('cora')):
        (root / rel / f).write_bytes(bytes([i]) * 5000)
    (root / 'tree' / 'raw').mkdir(parents=True)
    for f in ('a.csv', 'raw/b.csv'):
        (root / 'tree' / f).write_bytes(f.encode() * 5000)


def _copy(how, mirror, root):
    from gnorm.data.molecules import _copy_tree
    if how == 'tree':
        _copy_tree(mirror / 'tree', root / 'tree')
    else:
        copy_from_mirror('cora', root, mirror)


@pytest.mark.parametrize('how', ['tree', 'mirror'])
def test_copies_at_once_do_not_collide(tmp_path, monkeypatch, how):
    r"""A second process copies the same files while the first is between
    writing its temporary file and renaming it: each renames a whole copy
    of its own, and no temporary file stays."""
    mirror, root = tmp_path / 'mirror', tmp_path / 'root'
    _fake_mirror(mirror)
    copyfile, nested = shutil.copyfile, []

    def interrupted(src, dst, **kwargs):
        out = copyfile(src, dst, **kwargs)
        if not nested:  # the other process, all of it, right now
            nested.append(1)
            _copy(how, mirror, root)
        return out
    monkeypatch.setattr(shutil, 'copyfile', interrupted)
    _copy(how, mirror, root)
    assert nested
    copied = sorted(p for p in root.rglob('*') if p.is_file())
    assert not [p for p in copied if p.name.endswith('.tmp')]
    for path in copied:
        relative = path.relative_to(root)
        assert path.read_bytes() == (mirror / relative).read_bytes()
    assert len(copied) == (2 if how == 'tree' else len(raw_files('cora')))


def _prepare_rank(rank, world, port, folder):
    r"""Process :obj:`rank` of :obj:`world` (gloo): loads ``molhiv``
    twice with a stand-in loader that records when it ran, the second time
    failing in process 0; writes ``<folder>/<rank>_{ok,fail}.txt``."""
    import gnorm.data.molecules as molecules
    join_gloo(rank, world, port)
    for case in ('ok', 'fail'):
        spans = []

        def load_molhiv(root, mirror):
            begin = time.time()
            time.sleep(1.0)  # as processing takes a while
            if case == 'fail' and rank == 0:
                raise DataError('process 0 failed')
            spans.append((begin, time.time()))
            return torch.arange(10), {k: torch.arange(2) for k in
                                      ('train', 'valid', 'test')}
        molecules.load_molhiv = load_molhiv
        torch.distributed.barrier()  # every process asks at once
        try:
            molecules.load_graph_dataset('molhiv', str(folder))
            outcome = 'ok {} {}'.format(*spans[0])
        except DataError as e:
            outcome = str(e)
        Path(folder, f'{rank}_{case}.txt').write_text(outcome)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_process_0_prepares_a_dataset_first(tmp_path):
    r"""Under a process group, the other processes load the dataset after
    process 0 has (it copied and processed the files; they read them), and
    go on, to fail or not by themselves, when process 0 failed."""
    torch.multiprocessing.spawn(_prepare_rank, args=(
        2, free_port(), str(tmp_path)), nprocs=2, join=True)
    first, second = [(tmp_path / f'{r}_ok.txt').read_text() for r in (0, 1)]
    first_end = float(first.split()[2])
    second_begin = float(second.split()[1])
    assert second_begin >= first_end
    first, second = [(tmp_path / f'{r}_fail.txt').read_text()
                     for r in (0, 1)]
    assert first == 'process 0 failed' and second.startswith('ok')
