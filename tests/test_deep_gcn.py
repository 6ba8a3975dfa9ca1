import functools

import pytest
import torch
from torch_geometric.utils import to_undirected

from gnorm.models import DeepGCN
from gnorm.models.deep_gcn import (block_diagonal, csr, csr_pattern,
                                   row_normalized, sparse_mm, SparsePair)
from gnorm.nn import ContraNorm, DualContraNorm, IsoBN, PairNorm


def _graph(num_nodes=12, num_features=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, num_features, generator=gen)
    src = torch.arange(num_nodes)
    edge_index = to_undirected(torch.stack([src, (src + 1) % num_nodes]))
    return x, edge_index


class _Recorder(torch.nn.Module):
    r"""A norm that records what the model hands to it."""
    def __init__(self, in_channels):
        super().__init__()
        self.in_channels = in_channels
        self.seen = {}

    def forward(self, x, batch=None, batch_size=None, edge_index=None):
        self.seen = dict(batch=batch, batch_size=batch_size,
                         edge_index=edge_index)
        return x


def test_deep_gcn_shapes_and_repr():
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=4, hidden_channels=8)
    assert str(model) == 'DeepGCN(5, 3, num_layers=4, hidden_channels=8)'
    assert len(model.convs) == 4 and len(model.norms) == 0
    out, hidden = model(x, edge_index, return_hidden=True)
    assert out.shape == (12, 3)
    assert [tuple(h.shape) for h in hidden] == [(12, 8)] * 3 + [(12, 3)]
    assert torch.equal(hidden[-1], out)

    model = DeepGCN(5, 3, num_layers=1)
    assert model(x, edge_index).shape == (12, 3)


@pytest.mark.parametrize('factory,expected', [
    (torch.nn.Identity, 'Identity()'),
    (torch.nn.LayerNorm, 'LayerNorm((8,), eps=1e-05'),
    (functools.partial(PairNorm, mode='PN-SCS'),
     "PairNorm(scale=1.0, mode='PN-SCS')"),
    (functools.partial(ContraNorm, scale=0.5, negatives='non_neighbors'),
     "ContraNorm(8, scale=0.5, negatives='non_neighbors')"),
    (DualContraNorm, 'DualContraNorm(8, scale=1.0)'),
    (IsoBN, None),
])
def test_deep_gcn_norms(factory, expected):
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=3, hidden_channels=8, norm=factory)
    assert len(model.norms) == 2
    if expected is not None:
        assert str(model.norms[0]).startswith(expected.split('(')[0])
        assert expected in str(model)
    out = model(x, edge_index)
    assert out.shape == (12, 3) and torch.isfinite(out).all()
    out.sum().backward()


def test_deep_gcn_hands_inputs_to_norm():
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=3, hidden_channels=8, norm=_Recorder,
                    conv='row')
    batch = torch.zeros(12, dtype=torch.long)
    model(x, edge_index, batch=batch, batch_size=1)
    seen = model.norms[1].seen
    assert seen['batch'] is batch and seen['batch_size'] == 1
    assert seen['edge_index'] is edge_index  # the graph, not the self-loops


def test_deep_gcn_order_and_eval_determinism():
    x, edge_index = _graph()
    torch.manual_seed(0)
    model = DeepGCN(5, 3, num_layers=3, hidden_channels=8,
                    norm=torch.nn.LayerNorm,
                    order=['conv', 'act', 'norm', 'dropout'])
    model.eval()
    assert torch.equal(model(x, edge_index), model(x, edge_index))
    # Without dropout and norm, train and eval mode agree.
    model = DeepGCN(5, 3, num_layers=3, hidden_channels=8,
                    order=['conv', 'act'])
    out_train = model(x, edge_index)
    model.eval()
    assert torch.allclose(out_train, model(x, edge_index))


def test_deep_gcn_row_conv_matches_dense_reference():
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=2, hidden_channels=4, conv='row',
                    dropout=0.0).eval()
    adj = torch.eye(12)
    adj[edge_index[1], edge_index[0]] = 1.0  # row i: the nodes i receives from
    prop = adj / adj.sum(dim=1, keepdim=True)  # D^-1 (A + I)

    def conv(layer, h):
        return prop @ (h @ layer.weight.t()) + layer.bias

    expected = conv(model.convs[1], conv(model.convs[0], x).relu())
    assert torch.allclose(model(x, edge_index), expected, atol=1e-5)

    ei, weight = row_normalized(edge_index, 12)
    assert torch.allclose(torch.zeros(12).scatter_add_(0, ei[1], weight),
                          torch.ones(12))


def test_deep_gcn_residual():
    x, edge_index = _graph()
    torch.manual_seed(0)
    plain = DeepGCN(5, 3, num_layers=3, hidden_channels=8, dropout=0.0)
    torch.manual_seed(0)
    res = DeepGCN(5, 3, num_layers=3, hidden_channels=8, dropout=0.0,
                  residual=True)
    _, h_plain = plain(x, edge_index, return_hidden=True)
    _, h_res = res(x, edge_index, return_hidden=True)
    assert torch.allclose(h_plain[0], h_res[0])  # widths differ: no skip
    conv = res.convs[1]
    adj = torch.eye(12)
    adj[edge_index[1], edge_index[0]] = 1.0
    deg = adj.sum(dim=1).rsqrt()
    prop = deg.unsqueeze(1) * adj * deg.unsqueeze(0)  # D^-1/2 (A + I) D^-1/2
    expected = (prop @ h_res[0] @ conv.weight.t() + conv.bias).relu() \
        + h_res[0]
    assert torch.allclose(h_res[1], expected, atol=1e-6)
    assert 'residual=True' in str(res)


@pytest.mark.parametrize('fusion', ['concat', 'max', 'gate'])
def test_deep_gcn_fusion(fusion):
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=4, hidden_channels=8, fusion=fusion,
                    norm=torch.nn.LayerNorm)
    assert model.fusion.num_layers == 3
    out = model(x, edge_index)
    assert out.shape == (12, 3)
    out.sum().backward()
    if model.fusion.lin is not None:
        assert model.fusion.lin.weight.grad is not None
    assert f'fusion={fusion!r}' in str(model)


@pytest.mark.parametrize('kwargs,match', [
    (dict(num_layers=0), 'num_layers >= 1'),
    (dict(num_layers=2, conv='cheb'), 'conv='),
    (dict(num_layers=2, order=['conv', 'conv']), 'order='),
    (dict(num_layers=2, order=['norm', 'act']), 'order='),
    (dict(num_layers=2, order=['conv', 'pool']), 'order='),
    (dict(num_layers=2, dropout=1.0), 'dropout='),
    (dict(num_layers=2, fusion='sum'), 'fusion='),
    (dict(num_layers=1, fusion='max'), 'num_layers >= 2'),
])
def test_deep_gcn_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DeepGCN(5, 3, **kwargs)


def test_deep_gcn_reset_parameters():
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=3, norm=ContraNorm, fusion='gate').eval()
    torch.manual_seed(1)
    model.reset_parameters()
    first = model(x, edge_index)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    assert not torch.allclose(first, model(x, edge_index))
    torch.manual_seed(1)
    model.reset_parameters()
    assert torch.allclose(first, model(x, edge_index))


def test_dropout_matches_torch_in_distribution():
    from gnorm.models.deep_gcn import dropout
    torch.manual_seed(0)
    x = torch.randn(400, 250, requires_grad=True)
    out = dropout(x, 0.6)
    kept = out != 0
    assert abs(float(kept.float().mean()) - 0.4) < 0.01
    assert torch.allclose(out[kept], x[kept] / 0.4)
    out.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.4)
    assert dropout(x, 0.6, training=False) is x


def _identity_model(channels, dropout, runs=None):
    r"""One convolution that outputs its (dropped-out) input: a graph
    without edges, row normalisation, identity weight, zero bias."""
    model = DeepGCN(channels, channels, num_layers=1, conv='row',
                    dropout=dropout, runs=runs)
    with torch.no_grad():
        model.convs[0].weight.copy_(torch.eye(channels))
        model.convs[0].bias.zero_()
    return model, torch.empty(2, 0, dtype=torch.long)


def test_sparse_dropout_draws_only_for_nonzeros():
    torch.manual_seed(0)
    x = torch.zeros(300, 500)
    x.view(-1)[torch.randperm(x.numel())[:6000]] = torch.rand(6000) + 0.1
    model, edge_index = _identity_model(500, 0.6)
    gen = torch.Generator().manual_seed(1)
    out = model.train()(x, edge_index, generators=[gen])
    assert model._input_entries(x) is not None  # the sparse path ran
    kept = out != 0
    assert not bool(kept[x == 0].any())  # zeros stay zero
    assert abs(float(kept.sum()) / 6000 - 0.4) < 0.03
    assert torch.allclose(out[kept], x[kept] / 0.4)
    # exactly the first 6000 numbers of the run's generator decide
    keep = torch.rand(6000, generator=torch.Generator().manual_seed(1)) >= 0.6
    row, col = x.nonzero(as_tuple=True)
    assert torch.equal(kept[row, col], keep)


def test_sparse_input_dropout_in_the_model():
    torch.manual_seed(0)
    x = torch.zeros(50, 40)
    x.view(-1)[torch.randperm(x.numel())[:100]] = 1.0  # 5 % non-zero
    edge_index = torch.randint(0, 50, (2, 200))
    model = DeepGCN(40, 3, num_layers=2, dropout=0.5)
    model.train()
    model(x, edge_index)
    assert model._input_entries(x) is not None  # the sparse path ran
    # Its dropout reaches the output: two calls differ, eval is deterministic.
    assert not torch.equal(model(x, edge_index), model(x, edge_index))
    model.eval()
    assert torch.equal(model(x, edge_index), model(x, edge_index))
    x[x != 0] = 2.0  # an in-place change of the input: its entries found again
    assert torch.equal(model(x, edge_index), model(x.clone(), edge_index))


def test_gcn_conv_is_pyg_gcnconv():
    r"""conv='gcn' is PyG's GCNConv: same weights, same output (a graph
    with a self-loop stored and an isolated node)."""
    from torch_geometric.nn import GCNConv
    x, edge_index = _graph()
    edge_index = torch.cat([edge_index, torch.tensor([[3], [3]])], dim=1)
    x = torch.cat([x, torch.randn(1, 5)])  # node 12: no edges
    model = DeepGCN(5, 4, num_layers=1, dropout=0.0).eval()
    conv = GCNConv(5, 4)
    with torch.no_grad():
        conv.lin.weight.copy_(model.convs[0].weight)
        conv.bias.copy_(torch.randn(4))
        model.convs[0].bias.copy_(conv.bias)
    assert torch.allclose(model(x, edge_index), conv(x, edge_index),
                          atol=1e-6)


@pytest.mark.parametrize('columns', [1, 7, 640])
@pytest.mark.parametrize('dtype', [torch.float, torch.double])
def test_sparse_mm_is_the_dense_product(columns, dtype):
    torch.manual_seed(0)
    dense = torch.randn(30, 20, dtype=dtype) * (torch.rand(30, 20) < 0.2)
    row, col = dense.nonzero(as_tuple=True)
    order = torch.argsort(col * 30 + row)
    pair = SparsePair(csr(row, col, dense[row, col], (30, 20)),
                      csr(col[order], row[order], dense[row, col][order],
                          (20, 30)))
    x = torch.randn(20, columns, dtype=dtype, requires_grad=True)
    out = sparse_mm(pair, x)
    # float32 sums of a few products differ from the dense ones in the last
    # bits (summation order); |out| reaches ~16 here
    atol = 1e-5 if dtype == torch.float else 1e-8
    assert torch.allclose(out, dense @ x, atol=atol)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert torch.allclose(x.grad, dense.t() @ grad, atol=atol)


def test_block_diagonal_pattern_holds_one_copy_per_block():
    torch.manual_seed(0)
    dense = torch.randn(5, 4) * (torch.rand(5, 4) < 0.5)
    row, col = dense.nonzero(as_tuple=True)
    values = torch.cat([dense[row, col], 2 * dense[row, col]])
    blocks = csr_pattern(block_diagonal(row, col, (5, 4), 2), values,
                         (10, 8)).to_dense()
    assert torch.equal(blocks, torch.block_diag(dense, 2 * dense))


# --- The graph derived and checked once per graph ---

def _contra_model(runs=None, dropout=0.0, cached=False):
    norm = functools.partial(ContraNorm, negatives='non_neighbors',
                             symmetric=True)
    return DeepGCN(5, 3, num_layers=4, hidden_channels=8, dropout=dropout,
                   norm=norm, runs=runs, cached=cached)


def test_deep_gcn_prepares_the_graph_once(monkeypatch):
    from gnorm.models import deep_gcn
    from gnorm.nn import contra_norm
    x, edge_index = _graph()
    model = _contra_model(cached=True).double()
    x = x.double()
    calls = []
    build = deep_gcn.masked_pairs
    monkeypatch.setattr(deep_gcn, 'masked_pairs',
                        lambda *a: calls.append(1) or build(*a))
    monkeypatch.setattr(contra_norm, 'masked_pairs', None)  # never per layer
    first = model(x, edge_index)
    assert torch.equal(model(x, edge_index), first)
    assert len(calls) == 1  # three norm layers, two calls: built once
    # The layers get the pairs and agree with norms that build them.
    monkeypatch.undo()
    plain = _contra_model().double()
    plain.load_state_dict(model.state_dict())
    plain._takes_pairs = [False] * len(plain.norms)
    assert torch.allclose(plain(x, edge_index), first)


def test_deep_gcn_edge_list_graph_equals_csr():
    x, edge_index = _graph()
    x = torch.where(x > 1.0, x, 0.0).double()  # sparse input: fused path
    for runs in (None, 2):
        model = _contra_model(runs).double().eval()
        graph = model.prepare(x, edge_index, csr=False)
        assert graph.entries is None and graph.pairs is not None
        assert torch.allclose(model(x, graph), model(x, edge_index))


def test_deep_gcn_checks_edge_index_once():
    x, edge_index = _graph()
    model = _contra_model()
    with pytest.raises(ValueError, match=r'DeepGCN.*node indices in'):
        model(x, edge_index + 1)


# --- No cache keyed on a memory address; caches only when asked ---

def _sparse_input(num_nodes, channels, gen):
    x = torch.zeros(num_nodes, channels)
    x.view(-1)[torch.randperm(x.numel(), generator=gen)[:x.numel() // 20]] = \
        torch.rand(x.numel() // 20, generator=gen) + 0.1  # 5 % non-zero
    return x


@pytest.mark.parametrize('runs', [None, 2])
def test_new_graphs_and_inputs_of_one_shape_are_not_confused(runs):
    r"""New graphs and inputs of the same shapes, the old ones freed (their
    memory reused), give what a fresh copy of the model gives."""
    gen = torch.Generator().manual_seed(0)
    model = DeepGCN(40, 3, num_layers=3, hidden_channels=8,
                    norm=functools.partial(ContraNorm, scale=0.5),
                    runs=runs).eval()
    for _ in range(10):
        x = _sparse_input(60, 40, gen)
        edge_index = torch.randint(0, 60, (2, 240), generator=gen)
        fresh = DeepGCN(40, 3, num_layers=3, hidden_channels=8,
                        norm=functools.partial(ContraNorm, scale=0.5),
                        runs=runs).eval()
        fresh.load_state_dict(model.state_dict())
        assert torch.equal(model(x, edge_index), fresh(x, edge_index))
        del x, edge_index


def test_cached_reuses_the_first_graph_as_gcnconv_does():
    x, edge_index = _graph()
    model = DeepGCN(5, 3, num_layers=2, dropout=0.0, cached=True).eval()
    first = model(x, edge_index)
    other = torch.stack([edge_index[0], edge_index[0].flip(0)])
    assert torch.equal(model(x, other), first)  # as documented
    with pytest.raises(ValueError, match=r'cached graph has 12 nodes.*'
                                         r'cached=False'):
        model(torch.randn(7, 5), edge_index[:, :4])
    assert not DeepGCN(5, 3, num_layers=2).cached  # off by default


@pytest.mark.parametrize('runs', [None, 2])
def test_prepared_graph_equals_the_uncached_path(runs):
    r"""What the training loop does (prepare once, pass the graph) gives
    what every call preparing its own graph gives, in training (same
    dropout masks) and evaluation."""
    gen = torch.Generator().manual_seed(0)
    x = _sparse_input(60, 40, gen)
    edge_index = torch.randint(0, 60, (2, 240), generator=gen)
    model = DeepGCN(40, 3, num_layers=3, hidden_channels=8, dropout=0.5,
                    norm=functools.partial(ContraNorm, scale=0.5), runs=runs)
    graph = model.prepare(x, edge_index)
    assert graph.entries is not None  # the sparse input path
    for train in (True, False):
        model.train(train)
        seeds = [torch.Generator().manual_seed(r) for r in range(runs or 1)]
        again = [torch.Generator().manual_seed(r) for r in range(runs or 1)]
        assert torch.equal(model(x, graph, generators=seeds),
                           model(x, edge_index, generators=again))
    with pytest.raises(ValueError, match=r'prepared for 60 nodes, got an '
                                         r'input of shape \[60, 20\]'):
        model(x[:, :20], graph)


# --- A prepared graph computes on the input given to forward ---

def _inputs_of_one_shape(kind, gen):
    r"""An input :obj:`x1` to prepare the graph with and another one
    :obj:`x2` of its shape, in float64: masked (fewer non-zeros), perturbed
    (dense), sparse on a dense :obj:`x1`, or :obj:`x1` changed in place."""
    x1 = _sparse_input(60, 40, gen).double()
    if kind == 'masked':  # feature masking: a subset of x1's entries
        return x1, x1 * (torch.rand(x1.shape, generator=gen) < 0.5)
    if kind == 'perturbed':  # noise everywhere: a dense input
        return x1, x1 + 0.1 * torch.randn(x1.shape, generator=gen,
                                          dtype=x1.dtype)
    if kind == 'dense_then_sparse':
        return torch.randn(x1.shape, generator=gen, dtype=x1.dtype), x1
    x2 = x1.clone()  # 'in_place': x1 itself, changed after prepare()
    x2[x2 != 0] = torch.rand(int((x2 != 0).sum()), generator=gen,
                             dtype=x2.dtype)
    return x1, x2


@pytest.mark.parametrize('train', [True, False])
@pytest.mark.parametrize('runs', [None, 2])
@pytest.mark.parametrize('kind', ['masked', 'perturbed', 'dense_then_sparse',
                                  'in_place'])
def test_prepared_graph_computes_on_the_input_given(kind, runs, train):
    r"""forward(x2, prepare(x1)) is forward(x2, prepare(x2)): the first
    layer reads the :obj:`x` given to forward, not the input the graph was
    prepared with (sparse or dense, one or many runs, with dropout)."""
    gen = torch.Generator().manual_seed(0)
    x1, x2 = _inputs_of_one_shape(kind, gen)
    edge_index = torch.randint(0, 60, (2, 240), generator=gen)
    model = DeepGCN(40, 3, num_layers=3, hidden_channels=8, dropout=0.5,
                    norm=functools.partial(ContraNorm, scale=0.5),
                    runs=runs).double().train(train)
    graph = model.prepare(x1, edge_index)
    if kind == 'in_place':
        x1.copy_(x2)
        x2 = x1
    expected = model(x2, model.prepare(x2.clone(), edge_index), generators=[
        torch.Generator().manual_seed(r) for r in range(runs or 1)])
    out = model(x2, graph, generators=[
        torch.Generator().manual_seed(r) for r in range(runs or 1)])
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)


def test_prepared_input_reuses_its_entries(monkeypatch):
    r"""The training loop's calls (the prepared tensor, unchanged) find
    no entries again: the sparse input path costs nothing per call."""
    gen = torch.Generator().manual_seed(0)
    x = _sparse_input(60, 40, gen)
    edge_index = torch.randint(0, 60, (2, 240), generator=gen)
    model = DeepGCN(40, 3, num_layers=2, hidden_channels=8, runs=2)
    graph = model.prepare(x, edge_index)
    assert graph.entries is not None
    monkeypatch.setattr(model, '_input_entries', None)  # never called
    for train in (True, False):
        model.train(train)(x, graph)


def test_prepared_graph_gives_the_input_its_gradient():
    r"""Attribution on a prepared graph: an input that requires a gradient
    (here the prepared tensor itself) gets it."""
    gen = torch.Generator().manual_seed(0)
    x = _sparse_input(60, 40, gen).double()
    edge_index = torch.randint(0, 60, (2, 240), generator=gen)
    model = DeepGCN(40, 3, num_layers=2, hidden_channels=8).double().eval()
    graph = model.prepare(x, edge_index)
    model(x.requires_grad_(), graph).sum().backward()
    dense = x.detach().clone().requires_grad_()
    model(dense, edge_index).sum().backward()
    assert x.grad is not None and torch.allclose(x.grad, dense.grad)
