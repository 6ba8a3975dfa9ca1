import pytest
import torch
import torch.nn.functional as F

from gnorm.nn import DualContraNorm
from test_contra_norm import UNSORTED, per_graph


def reference(norm, x, batch):
    """ContraNorm-D written out channel by channel, graph by graph."""
    out = torch.empty_like(x)
    for g in batch.unique().tolist():
        idx = (batch == g).nonzero().view(-1)
        h = x[idx]
        if norm.center:
            h = h - h.mean(dim=1, keepdim=True)
        hn = h / h.norm(dim=1, keepdim=True).clamp_min(1e-12)
        d = h.size(1)
        sim = torch.empty(d, d, dtype=x.dtype)
        for a in range(d):
            for b in range(d):
                sim[a, b] = (hn[:, a] * hn[:, b]).sum() / norm.temperature
        prob = torch.exp(sim) / torch.exp(sim).sum(dim=1, keepdim=True)
        neg = h @ prob
        s = norm.scale
        out[idx] = (1 + s) * h - s * neg if norm.identity else h - s * neg
    if norm.norm is not None:
        out = F.layer_norm(out, (x.size(1), ), norm.norm.weight,
                           norm.norm.bias, norm.norm.eps)
    return out


def inputs(sizes=(4, 1, 6), channels=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), channels, generator=gen, dtype=torch.float64)
    batch = torch.cat([torch.full((n, ), g) for g, n in enumerate(sizes)])
    return x, batch


@pytest.mark.parametrize('identity', [True, False])
@pytest.mark.parametrize('center', [False, True])
@pytest.mark.parametrize('layer_norm', [True, False])
@pytest.mark.parametrize('temperature', [1.0, 0.3])
def test_dual_contra_norm_matches_reference(identity, center, layer_norm,
                                            temperature):
    x, batch = inputs()
    norm = DualContraNorm(5, scale=0.6, temperature=temperature,
                          identity=identity, center=center,
                          layer_norm=layer_norm).double()
    if layer_norm:
        torch.nn.init.normal_(norm.norm.weight)
    out = norm(x, batch, batch_size=3)
    assert out.shape == x.shape
    assert torch.allclose(out, reference(norm, x, batch), atol=1e-10)
    # batched == per-graph
    for g in range(3):
        assert torch.allclose(out[batch == g], norm(x[batch == g]),
                              atol=1e-10)


@pytest.mark.parametrize('order', UNSORTED)
@pytest.mark.parametrize('center', [False, True])
def test_dual_contra_norm_unsorted_batch_equals_per_graph(order, center):
    batch = UNSORTED[order]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch.numel(), 5, generator=gen, dtype=torch.float64)
    norm = DualContraNorm(5, scale=0.6, temperature=0.5,
                          center=center).double()
    expected = per_graph(norm, x, batch)
    assert torch.allclose(expected, reference(norm, x, batch), atol=1e-10)
    for batch_size in (None, 5):
        assert torch.allclose(norm(x, batch, batch_size), expected, rtol=0,
                              atol=1e-10)
    runs = norm(torch.stack([x, 2 * x]), batch)
    assert torch.allclose(runs[1], per_graph(norm, 2 * x, batch), rtol=0,
                          atol=1e-10)


def test_dual_contra_norm_runs_dimension_is_each_run():
    torch.manual_seed(0)
    x = torch.randn(3, 10, 4, dtype=torch.float64)
    batch = torch.tensor([0] * 4 + [1] * 6)
    norm = DualContraNorm(4, scale=0.7, center=True).double()
    for kwargs in (dict(batch=batch, batch_size=2), {}):
        out = norm(x, **kwargs)
        for r in range(3):
            assert torch.allclose(out[r], norm(x[r], **kwargs), atol=1e-12)


def test_dual_contra_norm_gradcheck():
    x, batch = inputs(sizes=(3, 4), channels=3)
    x.requires_grad_()
    norm = DualContraNorm(3, scale=0.9, temperature=0.5).double()
    assert torch.autograd.gradcheck(lambda x: norm(x, batch), (x, ))
    assert torch.autograd.gradcheck(lambda x: norm(x), (x, ))


def test_dual_contra_norm_gradients_unsorted_batch():
    batch = torch.tensor([1, 0, 1, 0, 0, 1, 1])
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(7, 3, generator=gen, dtype=torch.float64,
                    requires_grad=True)
    norm = DualContraNorm(3, scale=0.9, temperature=0.5).double()
    assert torch.autograd.gradcheck(lambda x: norm(x, batch), (x, ))
    # and they are the gradients of the graphs one at a time
    weight = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    grad, = torch.autograd.grad((weight * norm(x, batch)).sum(), x)
    expected, = torch.autograd.grad(
        (weight * per_graph(norm, x, batch)).sum(), x)
    assert torch.allclose(grad, expected, rtol=0, atol=1e-10)


def test_dual_contra_norm_scale_zero_is_layer_norm():
    x = torch.randn(7, 4)
    norm = DualContraNorm(4, scale=0.0)
    torch.nn.init.normal_(norm.norm.bias)
    ln = torch.nn.LayerNorm(4)
    ln.load_state_dict(norm.norm.state_dict())
    assert torch.equal(norm(x), ln(x))


def test_dual_contra_norm_is_its_layer_norm_on_many_nodes_of_even_channels():
    r"""The channel similarity sums over the graph's nodes: its mean
    diagonal is n / (d tau), so with n >> d and channels of even energy
    its softmax is the identity to float precision, even for strongly
    correlated channels, and the layer is its LayerNorm (docs/layers.rst);
    with a few nodes the softmax is nearly uniform, close to LayerNorm
    again. It contrasts where channels differ in energy, or between the
    limits (n / d = 4)."""
    gen = torch.Generator().manual_seed(0)
    shared = torch.randn(10_000, 1, generator=gen)
    norm = DualContraNorm(64, scale=1.0)
    with torch.no_grad():
        for rho in (0.0, 0.9):  # independent channels, one shared direction
            x = rho**0.5 * shared + (1 - rho)**0.5 * torch.randn(
                10_000, 64, generator=gen)
            assert torch.allclose(norm(x), norm.norm(x), atol=1e-5)
        tiny = torch.randn(4, 64, generator=gen)
        assert torch.allclose(norm(tiny), norm.norm(tiny), atol=1e-2)
        uneven = torch.randn(10_000, 64, generator=gen) * torch.logspace(
            -1, 1, 64)
        few = torch.randn(256, 64, generator=gen)
        for x in (uneven, few):
            assert not torch.allclose(norm(x), norm.norm(x), atol=1e-2)


def test_dual_contra_norm_repr_and_errors():
    assert str(DualContraNorm(16)) == 'DualContraNorm(16, scale=1.0)'
    assert str(DualContraNorm(8, scale=0.5, center=True)) == \
        'DualContraNorm(8, scale=0.5, center=True)'
    for kwargs in (dict(in_channels=0), dict(in_channels=3, scale=-0.1),
                   dict(in_channels=3, temperature=0.0)):
        with pytest.raises(ValueError, match='DualContraNorm'):
            DualContraNorm(**kwargs)
    with pytest.raises(ValueError, match=r'\[num_nodes, 3\]'):
        DualContraNorm(3)(torch.randn(4, 5))
