r"""Table 3 of the ContraNorm paper: the authors' protocol point by point
(experiment=table3_paper), the sound one (table3_fair) and the results
tool. The study engine that runs the table: tests/test_study.py."""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import is_undirected, to_undirected

from gnorm.results import aggregate, default_keys, load_runs
from gnorm.results import main as results_main
from gnorm.train import build_model, load_data
from gnorm.study import load_spec
from conftest import compose_train, needs_mirror

ROOT = Path(__file__).resolve().parents[1]

PAPER_ROWS = load_spec('table3_paper').table['rows']


def _paper(row, *overrides):
    return compose_train('experiment=table3_paper', *PAPER_ROWS[row], *overrides)


def test_paper_recipe():
    cfg = _paper('contranorm')
    assert cfg.select == 'last' and cfg.train.epochs == 200
    assert cfg.train.lr == 0.005 and cfg.train.weight_decay == 0.0005
    assert cfg.model.hidden_channels == 32 and cfg.model.dropout == 0.6
    assert cfg.model.conv == 'row' and cfg.model.init == 'uniform'
    assert cfg.dataset.to_undirected and cfg.test_set == 'rest'
    assert cfg.norm.negatives == 'non_neighbors' and not cfg.norm.layer_norm
    spec = load_spec('table3_paper').table
    assert spec['depths'] == [2, 4, 8, 16, 32] and len(spec['seeds']) == 5
    assert spec['grid'] == {
        'pairnorm': {'norm.mode': ['PN', 'PN-SI', 'PN-SCS'],
                     'norm.scale': [0.2, 0.5, 0.8, 1.0]},
        'contranorm': {'norm.scale': [0.2, 0.5, 0.8, 1.0]}}
    assert set(spec['rows']) == {'none', 'layernorm', 'pairnorm',
                                 'contranorm'}


@needs_mirror
@pytest.mark.parametrize('dataset,sizes', [
    ('cora', [140, 500, 2068]),        # not the public 1,000
    ('citeseer', [120, 500, 2707]),
])
def test_paper_test_set_is_every_other_node(tmp_path, dataset, sizes):
    cfg = _paper('none', f'dataset={dataset}', f'data.root={tmp_path}')
    data = load_data(cfg)
    masks = [data.train_mask, data.val_mask, data.test_mask]
    assert [int(m.sum()) for m in masks] == sizes
    assert bool((data.test_mask == ~(data.train_mask | data.val_mask)).all())
    fair = load_data(compose_train('experiment=table3_fair', f'dataset={dataset}',
                              f'data.root={tmp_path}'))
    n = data.num_nodes
    assert int(fair.train_mask.sum()) == pytest.approx(0.6 * n, abs=8)
    assert int(fair.test_mask.sum()) == pytest.approx(0.2 * n, abs=8)


@needs_mirror
def test_paper_symmetrises_chameleon(tmp_path):
    stored = load_data(compose_train('dataset=chameleon', f'data.root={tmp_path}'))
    assert not is_undirected(stored.edge_index)
    data = load_data(_paper('none', 'dataset=chameleon',
                            f'data.root={tmp_path}'))
    assert is_undirected(data.edge_index)
    # A := max(A, A^T): every stored edge and its reverse, once each.
    assert torch.equal(data.edge_index, to_undirected(stored.edge_index))
    sizes = [int(data[f'{s}_mask'].sum()) for s in ('train', 'val', 'test')]
    assert sizes == [1092, 729, 456]  # Geom-GCN split 0: 48/32/20


def _reference_forward(model, x, edge_index, scale, shared_ln):
    r"""The authors' GCN in eval mode, dense: propagate with D^-1 (A + I),
    linear, bias, ContraNorm against non-neighbours, the one shared
    LayerNorm, ReLU; the last layer is a plain convolution."""
    n = x.size(0)
    adj = torch.zeros(n, n, dtype=x.dtype)
    adj[edge_index[1], edge_index[0]] = 1.0
    adj.fill_diagonal_(1.0)  # self-loops (one each, also where stored)
    adj_hat = adj / adj.sum(dim=1, keepdim=True)
    h = x
    for i, conv in enumerate(model.convs):
        h = adj_hat @ (h @ conv.weight.T) + conv.bias
        if i == len(model.convs) - 1:
            break
        if scale > 0:
            hn = F.normalize(h, dim=1)
            sim = (hn @ hn.T).masked_fill(adj > 0, float('-inf'))
            h = (1 + scale) * h - scale * torch.softmax(sim, dim=1) @ h
        if shared_ln:
            h = F.layer_norm(h, (h.size(1), ), model.shared_norm.weight,
                             model.shared_norm.bias)
        h = h.relu()
    return h


@pytest.mark.parametrize('row,scale,shared_ln', [
    ('contranorm', 0.5, True), ('layernorm', 0.0, True),
    ('none', 0.0, False)])
def test_paper_model_equals_reference(row, scale, shared_ln):
    torch.manual_seed(0)
    overrides = ['layers=4', 'model.dropout=0.0']
    if row == 'contranorm':
        overrides.append(f'norm.scale={scale}')
    model = build_model(_paper(row, *overrides), 5, 3).double().eval()
    # The one LayerNorm is one module (one gamma/beta) used by every layer.
    assert (model.shared_norm is not None) == shared_ln
    lns = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(lns) == int(shared_ln)
    if shared_ln:
        with torch.no_grad():  # make gamma/beta matter
            model.shared_norm.weight.uniform_(0.5, 1.5)
            model.shared_norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(12, 5, dtype=torch.double)
    edge_index = to_undirected(torch.randint(0, 12, (2, 20)))
    expected = _reference_forward(model, x, edge_index, scale, shared_ln)
    assert torch.allclose(model(x, edge_index), expected, atol=1e-10)


def test_paper_init_is_uniform_in_fan_out():
    torch.manual_seed(0)
    model = build_model(_paper('none', 'layers=3'), 200, 7)
    for conv in model.convs:
        bound = conv.out_channels ** -0.5
        weight, bias = conv.weight.detach(), conv.bias.detach()
        for p in (weight, bias):
            assert float(p.abs().max()) <= bound
            assert float(p.abs().min()) < 0.5 * bound < float(p.abs().max())
        assert float(weight.abs().max()) > 0.95 * bound
    fair = build_model(compose_train('experiment=table3_fair', 'layers=3'), 200, 7)
    assert all(float(c.bias.detach().abs().max()) == 0 for c in fair.convs)
    assert fair.shared_norm is None


def test_layernorm_row_is_contranorm_at_zero_scale():
    x = torch.randn(15, 6)
    edge_index = to_undirected(torch.randint(0, 15, (2, 30)))
    outs = []
    for overrides in (PAPER_ROWS['layernorm'],
                      ['norm=none', 'model.shared_layer_norm=true']):
        torch.manual_seed(3)
        cfg = compose_train('experiment=table3_paper', *overrides, 'layers=5')
        outs.append(build_model(cfg, 6, 3).eval()(x, edge_index))
    assert torch.equal(outs[0], outs[1])
    pairnorm = build_model(_paper('pairnorm', 'layers=3'), 6, 3)
    assert pairnorm.shared_norm is None
    assert pairnorm.norms[0].mode == 'PN' and pairnorm.norms[0].scale == 1.0


def _run(path, seed, test_acc, val_acc, **config):
    path.mkdir(parents=True)
    run = {'status': 'ok', 'test_acc': test_acc, 'val_acc': val_acc,
           'overrides': [f'{k}={v}' for k, v in config.items()] +
           [f'seed={seed}'],
           'config': {**config, 'seed': seed}}
    (path / 'results.json').write_text(json.dumps(run))


def test_results_tool_mean_and_std(tmp_path, capsys):
    for seed, acc in enumerate([0.5, 0.7]):
        _run(tmp_path / f'a{seed}', seed, acc, 0.1, layers=2)
    _run(tmp_path / 'b0', 0, 0.9, 0.2, layers=4)
    (tmp_path / 'c').mkdir()
    (tmp_path / 'c' / 'results.json').write_text(json.dumps(
        {'status': 'failed', 'error': 'boom', 'overrides': ['layers=4'],
         'config': {'layers': 4}}))
    runs = load_runs(tmp_path)
    assert default_keys(runs) == ['layers']
    rows = aggregate(runs, ['layers'], ['test_acc'])
    assert [(r['layers'], r['runs'], r['failed']) for r in rows] == [
        (2, 2, 0), (4, 1, 1)]
    assert rows[0]['test_acc_mean'] == pytest.approx(0.6)
    assert rows[0]['test_acc_std'] == pytest.approx(0.1)  # ddof=0
    assert results_main([str(tmp_path)]) == 0
    assert '| layers | runs | failed |' in capsys.readouterr().out
    assert results_main([str(tmp_path), '--failed']) == 0
    assert 'boom' in capsys.readouterr().out
    assert results_main([str(tmp_path / 'nope')]) == 2
