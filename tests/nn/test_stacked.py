import functools

import pytest
import torch
from torch_geometric.utils import to_undirected

from gnorm.nn import ContraNorm, DualContraNorm, IsoBN, PairNorm, Stacked

C = 6
NORMS = {
    'contranorm': lambda r: ContraNorm(C, scale=[0.0, 0.5, 1.0][r]),
    'contranorm_nn': lambda r: ContraNorm(C, scale=[0.2, 0.0, 1.0][r],
                                          negatives='non_neighbors'),
    'contranorm_sym': lambda r: ContraNorm(C, scale=0.5, symmetric=True),
    'contranorm_learn': lambda r: ContraNorm(C, scale=[0.2, 0.5, 1.0][r],
                                             learnable_scale=True,
                                             positive_scale=True),
    'contranorm_batch': lambda r: ContraNorm(C, scale=[0.2, 0.0, 1.0][r],
                                             negatives='non_neighbors'),
    'contranorm_d': lambda r: DualContraNorm(C, scale=[0.0, 0.3, 1.0][r]),
    'contranorm_d_batch': lambda r: DualContraNorm(C, scale=[0.4, 0.3, 1.0][r]),
    'pairnorm': lambda r: PairNorm(scale=[1.0, 2.0, 0.5][r]),
    'pairnorm_scs': lambda r: PairNorm(mode='PN-SCS'),
    'layernorm': lambda r: torch.nn.LayerNorm(C),
    'isobn': lambda r: IsoBN(C),
}


def _modules(name, runs=3, dtype=torch.float):
    torch.manual_seed(1)
    modules = [NORMS[name](r).to(dtype) for r in range(runs)]
    with torch.no_grad():  # make every run's parameters its own
        for m in modules:
            for p in m.parameters():
                p.uniform_(0.5, 1.5)
    return modules


def _inputs(name, runs=3, nodes=15, dtype=torch.float):
    x = torch.randn(runs, nodes, C, dtype=dtype)
    edge_index = to_undirected(torch.randint(0, nodes, (2, 30)))
    kwargs = {}
    if name in ('contranorm_nn', 'contranorm_batch'):
        kwargs['edge_index'] = edge_index
    if name.endswith('_batch'):  # a mini-batch of two graphs per run
        split = nodes // 3
        kwargs['batch'] = (torch.arange(nodes) >= split).long()
        keep = (kwargs['batch'][edge_index] == kwargs['batch'][edge_index[0]]
                ).all(0)
        if 'edge_index' in kwargs:
            kwargs['edge_index'] = edge_index[:, keep]
        kwargs['batch_size'] = 2
    return x, kwargs


@pytest.mark.parametrize('name', NORMS)
@pytest.mark.parametrize('at_once', [True, False])
def test_stacked_equals_each_module(name, at_once):
    modules = _modules(name)
    stacked = Stacked(modules, at_once=at_once)
    x, kwargs = _inputs(name)
    x = x.requires_grad_()
    out = stacked(x, **kwargs)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    for r, module in enumerate(modules):
        x_r = x[r].detach().requires_grad_()
        expected = module(x_r, **kwargs)
        (expected * torch.linspace(-1, 1, out.numel()).view_as(out)[r]
         ).sum().backward()
        assert torch.allclose(out[r], expected, atol=1e-5)
        assert torch.allclose(x.grad[r], x_r.grad, atol=1e-5)
        for i, (_, p) in enumerate(module.named_parameters()):
            assert torch.allclose(getattr(stacked, f'param{i}').grad[r],
                                  p.grad, atol=1e-5)


@pytest.mark.parametrize('at_once', [True, False])
def test_stacked_updates_each_run_buffers(at_once):
    modules = _modules('isobn')
    stacked = Stacked(modules, at_once=at_once)
    x, _ = _inputs('isobn')
    stacked.train()(x)
    for r, module in enumerate(modules):
        module.train()(x[r])
        assert torch.allclose(stacked.buffer1[r], module.running_cov)
    assert not torch.allclose(stacked.buffer1[0], stacked.buffer1[1])
    stacked.eval()
    for r, module in enumerate(modules):  # eval uses each run's statistics
        assert torch.allclose(stacked(x)[r], module.eval()(x[r]), atol=1e-6)


@pytest.mark.parametrize('name', ['contranorm_nn', 'contranorm_d',
                                  'pairnorm', 'layernorm'])
@pytest.mark.parametrize('at_once', [True, False])
def test_stacked_gradcheck(name, at_once):
    modules = _modules(name, runs=2, dtype=torch.double)
    stacked = Stacked(modules, at_once=at_once).double()
    x, kwargs = _inputs(name, runs=2, nodes=6, dtype=torch.double)
    x.requires_grad_()
    assert torch.autograd.gradcheck(
        functools.partial(stacked, **kwargs), (x, ))


def test_stacked_repr_and_errors():
    stacked = Stacked(_modules('contranorm'))
    assert str(stacked) == ('Stacked(ContraNorm(6, scale=0.0), runs=3, '
                            'scale=[0.0, 0.5, 1.0])')
    assert stacked.param0.shape == (3, C)  # the LayerNorm weight of 3 runs
    with pytest.raises(ValueError, match='differ in mode'):
        Stacked([PairNorm(mode='PN'), PairNorm(mode='PN-SI')])
    with pytest.raises(ValueError, match='one class'):
        Stacked([PairNorm(), torch.nn.LayerNorm(C)])
    with pytest.raises(ValueError, match='inputs of 3 runs'):
        stacked(torch.randn(2, 5, C))


def test_stacked_reset_parameters():
    stacked = Stacked(_modules('layernorm'))
    stacked.reset_parameters()
    assert torch.equal(stacked.param0, torch.ones(3, C))
    assert torch.equal(stacked.param1, torch.zeros(3, C))
