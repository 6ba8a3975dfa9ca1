import itertools

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GCN
from torch_geometric.utils import erdos_renyi_graph

from gnorm.nn import ContraNorm, validate_inputs
from gnorm.nn.contra_norm import graph_places, masked_pairs
from conftest import saved_bytes


def random_batch(sizes=(5, 1, 7, 3), channels=6, p=0.4, seed=0,
                 dtype=torch.float64):
    """Node features, a sorted batch vector and random directed edges that
    stay inside each graph."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), channels, generator=gen, dtype=dtype)
    batch = torch.cat([torch.full((n, ), g) for g, n in enumerate(sizes)])
    edges, offset = [], 0
    for n in sizes:
        torch.manual_seed(seed + offset)
        edges.append(erdos_renyi_graph(n, p, directed=True) + offset)
        offset += n
    return x, batch, torch.cat(edges, dim=1)


# Graph ids in any order, as PyG's norms take them.
UNSORTED = {
    'interleaved': torch.tensor([0, 1, 0, 1, 1, 0, 2, 2, 0, 1]),
    'descending': torch.tensor([3] * 4 + [2] * 2 + [1] * 5 + [0] * 3),
    **{f'random{seed}': torch.tensor([0] * 5 + [1] + [2] * 7 + [4] * 3)[
        torch.randperm(16, generator=torch.Generator().manual_seed(seed))]
       for seed in range(3)},  # graph 3 empty, graph 1 a single node
}


def inputs_for(batch, channels=6, p=0.4, seed=0, dtype=torch.float64):
    """Node features and random directed edges inside each graph (no
    self-loops, in random order) for the graph ids :obj:`batch`, in any
    order."""
    gen = torch.Generator().manual_seed(seed)
    n = batch.numel()
    x = torch.randn(n, channels, generator=gen, dtype=dtype)
    same = (batch[:, None] == batch[None, :]).fill_diagonal_(False)
    edge_index = (same & (torch.rand(n, n, generator=gen) < p)).nonzero().t()
    return x, edge_index[:, torch.randperm(edge_index.size(1), generator=gen)]


def per_graph(norm, x, batch, edge_index=None):
    """The layer applied to each graph of :obj:`batch` alone (no batch), its
    nodes in their order in :obj:`batch`."""
    outs, order = [], []
    for g in batch.unique():
        nodes = (batch == g).nonzero().view(-1)
        kwargs = {}
        if edge_index is not None:
            local = torch.full_like(batch, -1)
            local[nodes] = torch.arange(nodes.numel())
            kwargs['edge_index'] = local[edge_index[:, batch[edge_index[0]]
                                                    == g]]
        outs.append(norm(x[nodes], **kwargs))
        order.append(nodes)
    return torch.cat(outs)[torch.cat(order).argsort()]  # in the nodes' order


def reference(norm, x, batch, edge_index):
    """Dense ContraNorm: one explicit n x n similarity per graph."""
    out = torch.empty_like(x)
    for g in batch.unique():
        idx = (batch == g).nonzero().view(-1)
        xg = x[idx]
        xn = xg / xg.norm(dim=1, keepdim=True).clamp_min(1e-12)
        value = xn if norm.pre_norm else xg
        sim = xn @ xn.t() / norm.temperature
        if norm.negatives == 'non_neighbors':
            keep = torch.ones_like(sim, dtype=torch.bool)
            local = {int(v): k for k, v in enumerate(idx)}
            for j, i in edge_index.t().tolist():
                if i in local:
                    keep[local[i], local[j]] = False  # i ignores j
            keep.fill_diagonal_(False)
            sim = sim.masked_fill(~keep, float('-inf'))
        neg = torch.nan_to_num(sim.softmax(dim=1)) @ value
        if norm.symmetric:
            neg = neg + torch.nan_to_num(sim.softmax(dim=0)) @ value
        s = norm.scale
        if norm.scale_param is not None:
            s = norm.scale_param
            s = s.exp() if norm.positive_scale else s
        out[idx] = (1 + s) * value - s * neg if norm.identity else \
            value - s * neg
    if norm.norm is not None:
        out = F.layer_norm(out, (x.size(1), ), norm.norm.weight,
                           norm.norm.bias, norm.norm.eps)
    return out


OPTIONS = list(itertools.product(
    [True, False],  # identity
    ['all', 'non_neighbors'],  # negatives
    [False, True],  # symmetric
    [False, True],  # pre_norm
    ['fixed', 'learnable', 'positive'],  # scale
))


@pytest.mark.parametrize('identity,negatives,symmetric,pre_norm,scale_mode',
                         OPTIONS)
def test_contra_norm_matches_dense_reference(identity, negatives, symmetric,
                                             pre_norm, scale_mode):
    x, batch, edge_index = random_batch()
    for temperature, layer_norm in [(1.0, True), (0.5, False)]:
        norm = ContraNorm(6, scale=0.7, temperature=temperature,
                          identity=identity, negatives=negatives,
                          symmetric=symmetric,
                          learnable_scale=scale_mode != 'fixed',
                          positive_scale=scale_mode == 'positive',
                          pre_norm=pre_norm, layer_norm=layer_norm).double()
        if norm.scale_param is not None:  # per-channel scales differ
            with torch.no_grad():
                norm.scale_param.add_(0.1 * torch.arange(6.0))
        if norm.norm is not None:
            torch.nn.init.normal_(norm.norm.weight)
            torch.nn.init.normal_(norm.norm.bias)
        out = norm(x, batch, edge_index=edge_index)
        expected = reference(norm, x, batch, edge_index)
        assert out.shape == x.shape
        assert torch.allclose(out, expected, atol=1e-10)

        # One graph (batch=None) goes through the same path.
        mask = batch == 2
        sub = edge_index[:, mask[edge_index[0]]] - int(mask.nonzero()[0])
        single = norm(x[mask], edge_index=sub)
        assert torch.allclose(single, expected[mask], atol=1e-10)


@pytest.mark.parametrize('negatives', ['all', 'non_neighbors'])
@pytest.mark.parametrize('symmetric', [False, True])
def test_contra_norm_batched_equals_per_graph(negatives, symmetric):
    x, batch, edge_index = random_batch(sizes=(4, 9, 2, 6), seed=3)
    norm = ContraNorm(6, scale=0.5, negatives=negatives,
                      symmetric=symmetric).double()
    out = norm(x, batch, batch_size=4, edge_index=edge_index)
    for g in range(4):
        mask = batch == g
        start = int(mask.nonzero()[0])
        sub = edge_index[:, mask[edge_index[0]]] - start
        assert torch.allclose(out[mask], norm(x[mask], edge_index=sub),
                              atol=1e-10)


@pytest.mark.parametrize('order', UNSORTED)
def test_graph_places_of_any_order(order):
    # Against the definition: a node's place is the number of nodes of its
    # graph before it, its count the number of nodes of its graph.
    batch = UNSORTED[order]
    place, count = graph_places(batch)
    ids = batch.tolist()
    assert place.tolist() == [ids[:i].count(g) for i, g in enumerate(ids)]
    assert count.tolist() == [ids.count(g) for g in ids]


@pytest.mark.parametrize('order', UNSORTED)
@pytest.mark.parametrize('negatives,symmetric', [
    ('all', False), ('all', True), ('non_neighbors', False),
    ('non_neighbors', True)])
def test_contra_norm_unsorted_batch_equals_per_graph(order, negatives,
                                                     symmetric):
    batch = UNSORTED[order]
    x, edge_index = inputs_for(batch, p=0.5)
    norm = ContraNorm(6, scale=0.7, negatives=negatives,
                      symmetric=symmetric).double()
    expected = per_graph(norm, x, batch, edge_index)
    assert torch.allclose(expected, reference(norm, x, batch, edge_index),
                          atol=1e-10)
    for batch_size in (None, 5):
        out = norm(x, batch, batch_size, edge_index=edge_index)
        assert torch.allclose(out, expected, rtol=0, atol=1e-10)
    if negatives == 'non_neighbors':  # pairs built once, as DeepGCN does
        pairs = masked_pairs(edge_index, x.size(0), batch)
        assert torch.allclose(norm(x, batch, edge_index=pairs), expected,
                              rtol=0, atol=1e-10)
    runs = norm(torch.stack([x, 2 * x]), batch, edge_index=edge_index)
    assert torch.allclose(runs[1], per_graph(norm, 2 * x, batch, edge_index),
                          rtol=0, atol=1e-10)


@pytest.mark.parametrize('negatives,symmetric', [
    ('all', False), ('all', True), ('non_neighbors', False),
    ('non_neighbors', True)])
def test_contra_norm_gradients_unsorted_batch(negatives, symmetric):
    batch = torch.tensor([1, 0, 1, 0, 0, 1, 1])
    x, edge_index = inputs_for(batch, channels=3, p=0.5, seed=2)
    x.requires_grad_()
    norm = ContraNorm(3, scale=0.8, negatives=negatives, symmetric=symmetric,
                      learnable_scale=True).double()
    assert torch.autograd.gradcheck(
        lambda x, s: norm(x, batch, edge_index=edge_index),
        (x, norm.scale_param))
    # and they are the gradients of the graphs one at a time
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    inputs = (x, norm.scale_param)
    grads = torch.autograd.grad(
        (weight * norm(x, batch, edge_index=edge_index)).sum(), inputs)
    expected = torch.autograd.grad(
        (weight * per_graph(norm, x, batch, edge_index)).sum(), inputs)
    for grad, grad_expected in zip(grads, expected):
        assert torch.allclose(grad, grad_expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize('identity,negatives,symmetric,pre_norm,scale_mode',
                         OPTIONS)
def test_contra_norm_runs_dimension_is_each_run(identity, negatives,
                                                symmetric, pre_norm,
                                                scale_mode):
    # [runs, nodes, channels]: each run normalised on its own, one graph or
    # a mini-batch of graphs per run.
    x, batch, edge_index = random_batch(seed=7)
    runs = torch.stack([x, x.flip(0), 2 * x])
    norm = ContraNorm(6, scale=0.6, identity=identity, negatives=negatives,
                      symmetric=symmetric,
                      learnable_scale=scale_mode != 'fixed',
                      positive_scale=scale_mode == 'positive',
                      pre_norm=pre_norm).double()
    for kwargs in (dict(batch=batch, batch_size=4), {}):
        out = norm(runs, edge_index=edge_index, **kwargs)
        assert out.shape == runs.shape
        for r in range(3):
            assert torch.allclose(out[r], norm(runs[r], edge_index=edge_index,
                                               **kwargs), atol=1e-12)


@pytest.mark.parametrize('symmetric', [False, True])
def test_contra_norm_keeps_no_edge_features_for_backward(symmetric):
    # Non-neighbour negatives on a dense graph: what the backward pass keeps
    # grows with nodes x channels and edges, never edges x channels.
    nodes, channels = 300, 32
    torch.manual_seed(0)
    x = torch.randn(nodes, channels, requires_grad=True)
    edge_index = erdos_renyi_graph(nodes, 0.5)  # ~45k edges
    norm = ContraNorm(channels, negatives='non_neighbors',
                      symmetric=symmetric)
    saved, out = saved_bytes(lambda: norm(x, edge_index=edge_index))
    edge_features = 4 * (edge_index.size(1) + nodes) * channels  # bytes
    assert saved < edge_features / 2
    out.square().sum().backward()  # and the backward pass runs
    assert torch.isfinite(x.grad).all()


def test_contra_norm_graphs_do_not_influence_each_other():
    x, batch, edge_index = random_batch(seed=5)
    norm = ContraNorm(6, negatives='non_neighbors', symmetric=True).double()
    out = norm(x, batch, edge_index=edge_index)
    x2 = x.clone()
    x2[batch == 2] += torch.randn_like(x2[batch == 2])
    out2 = norm(x2, batch, edge_index=edge_index)
    assert torch.allclose(out[batch != 2], out2[batch != 2], atol=1e-12)
    assert not torch.allclose(out[batch == 2], out2[batch == 2])


def test_contra_norm_nodes_without_negatives():
    # Star graph: the centre neighbours everybody, so it has no negatives and
    # is nobody's negative; a lone node has none either.
    edge_index = torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]])
    edge_index = torch.cat([edge_index, torch.tensor([[4], [4]])], dim=1)
    x = torch.randn(5, 3, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 0, 1])
    norm = ContraNorm(3, negatives='non_neighbors', symmetric=True,
                      layer_norm=False).double()
    out = norm(x, batch, edge_index=edge_index)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, reference(norm, x, batch, edge_index))
    # No negatives: (1 + s) x - s * 0.
    assert torch.allclose(out[[0, 4]], 2.0 * x[[0, 4]])


@pytest.mark.parametrize('negatives,symmetric,learnable', [
    ('all', False, False), ('all', True, True),
    ('non_neighbors', False, True), ('non_neighbors', True, False),
])
def test_contra_norm_gradcheck(negatives, symmetric, learnable):
    x, batch, edge_index = random_batch(sizes=(4, 3), channels=3, seed=1)
    norm = ContraNorm(3, scale=0.8, negatives=negatives, symmetric=symmetric,
                      learnable_scale=learnable,
                      positive_scale=learnable).double()
    x.requires_grad_()
    params = [p for p in norm.parameters()]
    assert torch.autograd.gradcheck(
        lambda x, *p: norm(x, batch, edge_index=edge_index),
        (x, *params))
    assert torch.autograd.gradcheck(
        lambda x, *p: norm(x, edge_index=edge_index), (x, *params))


@pytest.mark.parametrize('negatives', ['all', 'non_neighbors'])
def test_contra_norm_scale_zero_is_layer_norm(negatives):
    x, batch, edge_index = random_batch(dtype=torch.float32)
    norm = ContraNorm(6, scale=0.0, negatives=negatives)
    ln = torch.nn.LayerNorm(6)
    torch.nn.init.normal_(norm.norm.weight)
    ln.load_state_dict(norm.norm.state_dict())
    assert torch.equal(norm(x, batch, edge_index=edge_index), ln(x))


def test_contra_norm_float32_matches_float64():
    x, batch, edge_index = random_batch(sizes=(40, 25), channels=16, p=0.1)
    for symmetric in (False, True):
        norm = ContraNorm(16, negatives='non_neighbors', symmetric=symmetric,
                          temperature=0.2, layer_norm=False)
        out32 = norm(x.float(), batch, edge_index=edge_index)
        out64 = norm.double()(x, batch, edge_index=edge_index)
        assert torch.allclose(out32.double(), out64, atol=1e-4)
        norm.float()


def test_contra_norm_in_pyg_gcn_receives_batch():
    x, batch, edge_index = random_batch(sizes=(6, 8, 5), channels=4,
                                        dtype=torch.float32, seed=2)
    model = GCN(4, 16, num_layers=3, out_channels=3,
                norm=ContraNorm(16, scale=0.5)).eval()
    assert model.supports_norm_batch
    assert str(model.norms[0]) == 'ContraNorm(16, scale=0.5)'
    out = model(x, edge_index, batch=batch, batch_size=3)
    assert out.shape == (19, 3)
    # Graph by graph gives the same output only if PyG passed `batch`.
    for g in range(3):
        mask = batch == g
        start = int(mask.nonzero()[0])
        sub = edge_index[:, mask[edge_index[0]]] - start
        assert torch.allclose(out[mask], model(x[mask], sub), atol=1e-5)


def test_contra_norm_repr():
    assert str(ContraNorm(32)) == 'ContraNorm(32, scale=1.0)'
    assert str(ContraNorm(8, scale=0.5, negatives='non_neighbors',
                          layer_norm=False)) == (
        "ContraNorm(8, scale=0.5, negatives='non_neighbors', "
        "layer_norm=False)")


@pytest.mark.parametrize('kwargs,match', [
    (dict(in_channels=0), 'in_channels'),
    (dict(in_channels=4, scale=-1.0), 'scale'),
    (dict(in_channels=4, temperature=0.0), 'temperature'),
    (dict(in_channels=4, temperature=-2.0), 'temperature'),
    (dict(in_channels=4, negatives='others'), 'negatives'),
    (dict(in_channels=4, positive_scale=True), 'learnable_scale'),
    (dict(in_channels=4, scale=0.0, learnable_scale=True,
          positive_scale=True), 'scale > 0'),
])
def test_contra_norm_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        ContraNorm(**kwargs)
    assert 'ContraNorm' in str(info.value)


def test_contra_norm_bad_inputs():
    norm = ContraNorm(4, negatives='non_neighbors')
    x = torch.randn(5, 4)
    edge_index = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match='needs edge_index'):
        norm(x)
    with pytest.raises(ValueError, match=r'\[num_nodes, 4\]'):
        norm(torch.randn(5, 3), edge_index=edge_index)
    with pytest.raises(ValueError, match=r'\[num_nodes, 4\]'):
        norm(torch.randn(3, 2, 5, 4), edge_index=edge_index)
    with pytest.raises(ValueError, match='batch'):
        norm(x, torch.zeros(4, dtype=torch.long), edge_index=edge_index)
    with pytest.raises(ValueError, match='edge_index'):
        norm(x, edge_index=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match='different graphs'), \
            validate_inputs():  # a value: checked under validate_inputs
        norm(x, torch.tensor([0, 0, 1, 1, 1]),
             edge_index=torch.tensor([[1], [2]]))


@pytest.mark.slow
@pytest.mark.parametrize('negatives', ['all', 'non_neighbors'])
def test_contra_norm_torch_compile(negatives):
    x, batch, edge_index = random_batch(dtype=torch.float32)
    norm = ContraNorm(6, negatives=negatives, symmetric=True)
    compiled = torch.compile(norm)
    x_u, edge_index_u = inputs_for(UNSORTED['random0'], dtype=torch.float32)
    for xb, b, e in [(x[batch == 0], None, edge_index[:, :0]),
                     (x, batch, edge_index),
                     (x_u, UNSORTED['random0'], edge_index_u)]:
        assert torch.allclose(compiled(xb, b, edge_index=e),
                              norm(xb, b, edge_index=e), atol=1e-5)


# --- Non-neighbour pairs built once, fused-kernel head sizes ---

@pytest.mark.parametrize('symmetric', [False, True])
@pytest.mark.parametrize('batched', [False, True])
def test_contra_norm_masked_pairs_equal_edge_index(symmetric, batched,
                                                   monkeypatch):
    from gnorm.nn import contra_norm
    x, batch, edge_index = random_batch()
    b, size = (batch, 4) if batched else (None, None)
    if not batched:
        x, edge_index = x[:5], edge_index[:, (edge_index < 5).all(0)]
    norm = ContraNorm(6, negatives='non_neighbors', symmetric=symmetric,
                      learnable_scale=True).double()
    expected = norm(x, b, size, edge_index=edge_index)
    pairs = contra_norm.masked_pairs(edge_index, x.size(0), b, size)

    def fail(*args):
        raise AssertionError('checked again')
    monkeypatch.setattr(contra_norm, 'check_edge_index', fail)
    monkeypatch.setattr(contra_norm, 'masked_pairs', fail)
    out = norm(x, b, size, edge_index=pairs)  # no check, no rebuild
    assert torch.equal(out, expected)
    assert torch.allclose(out, reference(norm, x, batch if batched else
                                         torch.zeros(5, dtype=torch.long),
                                         edge_index))


@pytest.mark.parametrize('channels', [6, 7, 32])
@pytest.mark.parametrize('negatives,symmetric,batched', [
    ('all', False, False), ('all', False, True),
    ('non_neighbors', False, False), ('non_neighbors', True, True)])
def test_contra_norm_attention_heads_are_multiples_of_8(
        channels, negatives, symmetric, batched, monkeypatch):
    # CUDA's memory-efficient kernel takes float32 heads of 8k only; the
    # anchor column (d + 1) is zero-padded, which changes no output.
    shapes = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        shapes.append((q.shape, k.shape, v.shape))
        return sdpa(q, k, v, *args, **kwargs)
    x, batch, edge_index = random_batch(channels=channels)
    norm = ContraNorm(channels, negatives=negatives,
                      symmetric=symmetric).double()
    b = batch if batched else None
    expected = reference(norm, x, batch if batched else torch.zeros_like(
        batch), edge_index)
    monkeypatch.setattr(F, 'scaled_dot_product_attention', spy)
    out = norm(x, b, edge_index=edge_index)
    assert shapes
    for shape in shapes:
        assert all(len(s) == 4 and s[-1] % 8 == 0 and s[-1] >= channels
                   for s in shape)
    assert torch.allclose(out, expected)


# Non-neighbour negatives at tau = 1e-2 are NaN for this 3-node graph even
# alone (the masked pairs hold all of a row's weight to 1e-16: see the
# precision note of ContraNorm's docstring), so they are checked from 1 on.
@pytest.mark.parametrize('negatives,temperature', [
    *[('all', t) for t in (1e-2, 1.0, 1e3, 1e4)],
    *[('non_neighbors', t) for t in (1.0, 1e3, 1e4)]])
def test_contra_norm_padding_never_leaks(temperature, negatives):
    # A graph of 3 nodes padded to 200 in a dense batch: its output is the
    # one it has alone, at every temperature (the padded keys once leaked
    # at large temperatures: 3.4e-3 at 1e3, 1.1 at 1e4).
    x, batch, edge_index = random_batch(sizes=(3, 200), p=0.05, seed=4)
    norm = ContraNorm(6, temperature=temperature, negatives=negatives,
                      symmetric=True).double()
    out = norm(x, batch, 2, edge_index=edge_index)
    small = batch == 0
    alone = norm(x[small], edge_index=edge_index[:, small[edge_index[0]]])
    assert torch.allclose(out[small], alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize('scale', [0.0, 0.7])
def test_contra_norm_learnable_scale_starts_as_fixed_scale(scale):
    # The documented difference from the authors' ViT code (which computes
    # s x - s x_neg with a learnable scale): gnorm's learnable scale keeps
    # (1 + s) x - s x_neg, so it starts as the fixed-scale layer.
    x, batch, edge_index = random_batch()
    fixed = ContraNorm(6, scale=scale, layer_norm=False).double()
    learnable = ContraNorm(6, scale=scale, learnable_scale=True,
                           layer_norm=False).double()
    assert torch.allclose(learnable(x, batch), fixed(x, batch), atol=1e-12)
    assert 'learnable' in ContraNorm.__doc__ and "authors' ViT" in \
        ContraNorm.__doc__


PEAK_CHILD = r'''
import json, sys, torch
from gnorm.bench import peak_rss_gib
from gnorm.nn import ContraNorm
torch.set_num_threads(1)
n, d = int(sys.argv[1]), 16
def run(n, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, requires_grad=True)
    edge_index = torch.randint(0, n, (2, 10 * n), generator=gen)
    for negatives, symmetric in (('all', False), ('non_neighbors', False),
                                 ('non_neighbors', True)):
        ContraNorm(d, negatives=negatives, symmetric=symmetric)(
            x, edge_index=edge_index).square().sum().backward()
run(200, 1)  # what a first call allocates, before the measurement
base = peak_rss_gib()
run(n, 0)
print(json.dumps(dict(grown=peak_rss_gib() - base)))
'''


def test_contra_norm_never_holds_an_n_by_n_matrix():
    # Forward and backward of every option on 8,000 nodes, alone in a
    # process: its peak memory grows by less than half of one n x n float32
    # matrix (0.24 GiB; the dense formulation grows it by ~1 GiB here).
    from gnorm.bench import run_child
    n = 8000
    grown = run_child(['-c', PEAK_CHILD, str(n)])['grown']
    assert grown < n * n * 4 / 2**30 / 2


def test_normalize_equals_functional_normalize():
    # Values and gradients of F.normalize, rows below eps (and zero rows)
    # included: those are divided by eps, without the projection.
    from gnorm.nn.contra_norm import normalize
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, 5, generator=gen, dtype=torch.float64)
    x[0, 1] = 0.0
    x[1, 2] *= 1e-14
    x.requires_grad_()
    grad = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    out = normalize(x)
    expected = F.normalize(x, dim=-1)
    assert torch.equal(out, expected)
    for eps in (1e-12, 0.5):  # 0.5: some rows clamped, some not
        got = torch.autograd.grad((grad * normalize(x, eps)).sum(), x)[0]
        want = torch.autograd.grad(
            (grad * F.normalize(x, dim=-1, eps=eps)).sum(), x)[0]
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert torch.autograd.gradcheck(lambda x: normalize(x, eps),
                                        (x[2:], ))
