r"""``experiments.authors.code`` (``experiments/authors_gcn.py``): the
stand-ins for torch_sparse and torch_scatter against dense torch, the JSON
record and its resume logic, and (when their code is here: ``AUTHORS_GCN_CODE=<ContraNorm>/gnn``) that
the script's run of a seed equals their ``main.py``'s first run."""
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from conftest import MIRROR, experiment, needs_mirror
from gnorm.errors import DataError
from experiments.authors import code as ag

script = experiment('authors_gcn')

pytestmark = pytest.mark.usefixtures('one_thread')
CODE = os.environ.get('AUTHORS_GCN_CODE')


def _sparse(m=5, n=4, nnz=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    index = torch.stack([torch.randint(0, m, (nnz,), generator=g),
                         torch.randint(0, n, (nnz,), generator=g)])
    value = torch.randn(nnz, generator=g, dtype=torch.float64)
    dense = torch.zeros(m, n, dtype=torch.float64)
    dense.index_put_((index[0], index[1]), value, accumulate=True)
    return index, value, dense


def test_spmm_is_the_dense_product_with_its_gradient():
    index, value, dense = _sparse()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    value.requires_grad_()
    out = ag.spmm(index, value, 5, 4, x)
    torch.testing.assert_close(out, dense @ x)
    out.square().sum().backward()
    x_grad, value_grad = x.grad, value.grad
    x.grad = value.grad = None
    dense_of = torch.zeros(5, 4, dtype=torch.float64).index_put(
        (index[0], index[1]), value, accumulate=True)
    (dense_of @ x).square().sum().backward()
    torch.testing.assert_close(x_grad, x.grad)
    torch.testing.assert_close(value_grad, value.grad)


@pytest.mark.parametrize('reduce', ['sum', 'add', 'mean'])
def test_matmul_is_the_dense_product(reduce):
    index, value, dense = _sparse()
    x = torch.randn(4, 3, dtype=torch.float64)
    out = ag.matmul(torch.sparse_coo_tensor(
        index, value, (5, 4), check_invariants=True), x, reduce)
    expected = dense @ x
    if reduce == 'mean':  # over the stored entries of each row
        stored = torch.sparse_coo_tensor(
            index, torch.ones_like(value), (5, 4),
            check_invariants=True).coalesce().to_dense()
        expected = expected / (stored != 0).sum(1, keepdim=True).clamp(min=1)
    torch.testing.assert_close(out, expected)


def _groups(src, index, size):
    r"""Dense reference: row k holds the entries of :obj:`src` (dim 0)
    whose index is k."""
    return [src[index == k] for k in range(size)]


@pytest.mark.parametrize('shape', [(9,), (9, 3)])
def test_scatter_add_and_max_are_the_group_sums_and_maxima(shape):
    g = torch.Generator().manual_seed(1)
    src = torch.randn(*shape, generator=g, dtype=torch.float64)
    index = torch.tensor([0, 2, 2, 0, 4, 2, 0, 4, 4])  # group 1, 3: empty
    add = ag.scatter_add(src, index, dim=0, dim_size=6)
    values, argmax = ag.scatter_max(src, index, dim=0, dim_size=6)
    for k, group in enumerate(_groups(src, index, 6)):
        if len(group):
            torch.testing.assert_close(add[k], group.sum(0))
            torch.testing.assert_close(values[k], group.max(0).values)
            torch.testing.assert_close(  # src at argmax, per column
                src.gather(0, argmax[k:k + 1])[0], group.max(0).values)
        else:  # torch_scatter: 0 and argmax = src.size(0)
            assert (add[k] == 0).all() and (values[k] == 0).all()
            assert (argmax[k] == src.size(0)).all()
    # Without dim_size: one past the largest index; into out when given.
    assert ag.scatter_add(src, index, dim=0).shape[0] == 5
    out = torch.ones(6, *shape[1:], dtype=torch.float64)
    torch.testing.assert_close(ag.scatter_add(src, index, 0, out=out),
                               add + 1)


def test_their_sparse_softmax_with_the_stand_ins():
    r"""Their layers.softmax (GAT) computes max and sums with
    scatter_max/scatter_add: a softmax within each group."""
    src = torch.tensor([1., 2., 3., 0.5, -1.])
    index = torch.tensor([0, 0, 1, 1, 1])
    out = src - ag.scatter_max(src, index, dim=0, dim_size=2)[0][index]
    out = out.exp()
    out = out / (ag.scatter_add(out, index, dim=0, dim_size=2)[index] + 1e-16)
    torch.testing.assert_close(out[:2], src[:2].softmax(0))
    torch.testing.assert_close(out[2:], src[2:].softmax(0))


def test_stand_in_modules_count_their_calls():
    modules = ag.stand_in_modules()
    assert set(modules) == {'torch_sparse', 'torch_scatter', 'einops'}
    before = ag.STAND_IN_CALLS['torch_scatter.scatter_add']
    modules['torch_scatter'].scatter_add(torch.ones(3),
                                         torch.tensor([0, 1, 1]))
    assert ag.STAND_IN_CALLS['torch_scatter.scatter_add'] == before + 1
    with pytest.raises(NotImplementedError):
        modules['einops'].rearrange(torch.ones(1), 'a -> a')


def _fake(calls, fail_at=None):
    def train(seed):
        if seed == fail_at:
            raise KeyboardInterrupt
        calls.append(seed)
        return dict(test_acc_last=0.5 + seed / 100,
                    test_acc_best_val=0.6 + seed / 100, seconds=10.0)
    return train


def test_record_is_written_after_each_seed_and_resumed(tmp_path):
    path, config = tmp_path / 'r' / 'cell.json', dict(layers=16, scale=0.2)
    calls = []
    with pytest.raises(KeyboardInterrupt):  # interrupted during seed 1
        ag.run_seeds(path, config, [0, 1, 2], _fake(calls, fail_at=1),
                     dict(machine='m'))
    record = json.loads(path.read_text())
    assert calls == [0] and list(record['runs']) == ['0']
    assert record['machine'] == 'm' and record['config'] == config
    assert not path.with_name('cell.json.tmp').exists()
    record = ag.run_seeds(path, config, [2, 0, 1], _fake(calls))
    assert calls == [0, 2, 1]  # seed 0 skipped
    assert record == json.loads(path.read_text())
    assert list(record['runs']) == ['0', '1', '2']
    s = record['summary']
    assert s['n'] == 3 and s['seeds'] == [0, 1, 2] and s['seconds'] == 30
    last = s['test_acc_last_pct']
    assert last['mean'] == pytest.approx(51)
    assert last['std'] == pytest.approx((2 / 3) ** 0.5, abs=1e-4)  # ddof 0
    assert last['std_ddof1'] == pytest.approx(1)
    assert s['test_acc_best_val_pct']['mean'] == pytest.approx(61)
    # A record of another configuration is never extended.
    with pytest.raises(DataError, match='another configuration'):
        ag.run_seeds(path, dict(config, scale=0.5), [3], _fake(calls))
    assert calls == [0, 2, 1]


def test_processes_sharing_a_record_keep_each_others_seeds(tmp_path):
    # While this process trains seed 0, "another process" (a nested call)
    # finishes seeds 1 and 0 into the same file: nothing of it is lost and
    # its seed 0 is kept.
    path, config = tmp_path / 'cell.json', dict(layers=16, scale=0.2)
    other = []

    def train(seed):
        ag.run_seeds(path, config, [1, 0], _fake(other))
        return dict(test_acc_last=0.9, test_acc_best_val=0.9, seconds=1.0)
    record = ag.run_seeds(path, config, [0, 2], train)
    assert other == [1, 0]
    assert list(record['runs']) == ['0', '1', '2']
    assert record['runs']['0']['test_acc_last'] == 0.5  # the first writer's
    assert record['runs']['2']['test_acc_last'] == 0.9
    assert record == json.loads(path.read_text())
    assert record['summary']['n'] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ['cell.json']


def test_relative_paths_are_made_absolute(tmp_path, monkeypatch):
    # Their code runs in a temporary working folder: a relative --out must
    # name the file beside the caller, not one inside that folder.
    import argparse
    monkeypatch.chdir(tmp_path)
    for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):  # it sets them
        monkeypatch.setenv(var, os.environ.get(var, '1'))
    parser = argparse.ArgumentParser()
    script.cell_arguments(parser, scale=0.2)
    args = script.parse_cell_arguments(parser, [
        '--code', 'gnn', '--out', 'r/cell.json', '--mirror', 'data'])
    assert args.out == str(tmp_path / 'r' / 'cell.json')
    assert args.code == str(tmp_path / 'gnn')
    assert args.mirror == str(tmp_path / 'data')


def test_their_argv_is_their_run_baselines_line():
    assert ag.their_argv('cora', 16, 0.2, 200) == [
        '--data', 'cora', '--norm_mode', 'CN', '--norm_scale', '0.2',
        '--nlayer', '16', '--epochs', '200', '--model', 'DeepGCN',
        '--hid', '32', '--use_layer_norm']


@pytest.mark.skipif(not CODE or not Path(CODE, 'main.py').is_file(),
                    reason='their gnn/ code: set AUTHORS_GCN_CODE')
@needs_mirror
def test_a_seed_is_their_main_first_run():
    modules = set(sys.modules)
    targv = ag.their_argv('cora', 2, 0.5, 3)
    targs = ag.their_parser(CODE).parse_args(targv)
    assert targs.lr == 0.005 and targs.wd == 5e-4 and targs.dropout == 0.6
    with ag.their_code(CODE, 'cora', MIRROR) as their:
        assert Path('data/cora/raw/ind.cora.graph').is_file()
        data = ag.load_their_data(their, targs)
        assert (int(data.train_mask.sum()), int(data.val_mask.sum()),
                int(data.test_mask.sum())) == (140, 500, 2068)
        ours = [ag.train_seed(their, targs, data, seed)['test_acc_last']
                for seed in (0, 1)]
        theirs = ag.their_main(their, targv, seed=0)
    assert len(theirs) == 5 and theirs[0] == ours[0] and ours[1] != ours[0]
    # Their modules and the stand-ins are gone again.
    assert not {'torch_sparse', 'models', 'layers'} & (set(sys.modules)
                                                       - modules)


@pytest.mark.skipif(not CODE or not Path(CODE, 'main.py').is_file(),
                    reason='their gnn/ code: set AUTHORS_GCN_CODE')
@needs_mirror
def test_main_records_what_made_each_run(tmp_path):
    out = tmp_path / 'cell.json'
    cell = ['--code', CODE, '--dataset', 'cora', '--layers', '2',
            '--epochs', '2', '--out', str(out), '--log-every', '0']
    script.main([*cell, '--seeds', '0'])
    script.main([*cell, '--seeds', '0', '1'])  # extended by one seed
    record = json.loads(out.read_text())
    assert list(record['runs']) == ['0', '1']
    for run in record['runs'].values():
        assert run['made_by']['machine'] == record['machine']
        assert run['made_by']['gnorm'] == record['script']['gnorm']
