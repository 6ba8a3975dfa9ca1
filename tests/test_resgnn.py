r"""gnorm.models.ResGNN (Platonov et al.'s residual GNN), its config
``model=resgnn``, the preset ``experiment=platonov`` and AdamW's parameter
groups."""
import functools
import inspect
import json
import math

import pytest
import torch
from omegaconf import OmegaConf
from torch.func import functional_call
from torch_geometric.utils import to_undirected

from gnorm.models import ResGNN
from gnorm.nn import ContraNorm, PairNorm, SepNorm
from gnorm.train import node_loop, node_setup, train
from gnorm.train.run import train_runs
from conftest import compose_train, saved_bytes

pytestmark = pytest.mark.usefixtures('one_thread')

NORMS = {
    'none': None,
    'layernorm': torch.nn.LayerNorm,
    'contranorm': functools.partial(ContraNorm, scale=0.5,
                                    negatives='non_neighbors'),
}
TINY = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=2',
        'train.epochs=3', 'train.progress=false']


def _graph(num_nodes=12, num_features=5, sparse=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, num_features, generator=gen,
                    dtype=torch.float64)
    if sparse:  # ~8 % non-zero: the input layer takes the sparse path
        x = x * (torch.rand(num_nodes, num_features, generator=gen,
                            dtype=torch.float64) < 0.08)
    src = torch.arange(num_nodes)
    ring = torch.stack([src, (src + 1) % num_nodes])
    chords = torch.randint(0, num_nodes, (2, num_nodes), generator=gen)
    chords = chords[:, chords[0] != chords[1]]  # no self-loops
    # node num_nodes - 1 only on the ring, node 0 with the most neighbours
    return x, to_undirected(torch.cat([ring, chords], dim=1))


def _seeded(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


# ----------------------------------------------- a slow, obvious reference
def _gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _linear(lin, x):
    return x @ lin.weight.T + (0 if lin.bias is None else lin.bias)


def _neighbours(edge_index, num_nodes):
    r"""For each node, the nodes it receives an edge from."""
    into = [[] for _ in range(num_nodes)]
    for j, i in edge_index.T.tolist():
        into[i].append(j)
    return into


def _propagate(model, i, h, edge_index):
    n = h.size(0)
    into = _neighbours(edge_index, n)
    out = torch.zeros_like(h)
    if model.conv == 'none':
        return h
    if model.conv == 'gcn':  # D^-1/2 (A + I) D^-1/2, one self-loop each
        deg = [len(into[v]) + 1 for v in range(n)]
        for v in range(n):
            for u in into[v] + [v]:
                out[v] += h[u] / math.sqrt(deg[u] * deg[v])
        return out
    if model.conv == 'sage':  # [h, mean of the neighbours]
        for v in range(n):
            for u in into[v]:
                out[v] += h[u] / len(into[v])
        return torch.cat([h, out], dim=1)
    att = model.attentions[i]  # gat: per head, a softmax over in-edges
    z = _linear(att.lin, h)
    heads = att.heads
    for v in range(n):
        sources = into[v] + [v]
        for k in range(heads):
            scores = torch.stack([
                torch.nn.functional.leaky_relu(
                    att.att_src.weight[k] @ z[u] + att.att_src.bias[k]
                    + att.att_dst.weight[k] @ z[v], 0.2)
                for u in sources])
            alpha = scores.exp() / scores.exp().sum()
            for a, u in zip(alpha, sources):
                out[v, k::heads] += a * z[u, k::heads]  # channel c: head c % H
    return out


def _norm(norm, h, edge_index):
    if isinstance(norm, torch.nn.Identity):
        return h
    if isinstance(norm, torch.nn.LayerNorm):
        out = torch.empty_like(h)
        for v in range(h.size(0)):
            mean = h[v].mean()
            var = ((h[v] - mean) ** 2).mean()
            out[v] = (h[v] - mean) / torch.sqrt(var + norm.eps) * \
                norm.weight + norm.bias
        return out
    return norm(h, edge_index=edge_index)  # as ContraNorm takes a graph


def _reference(model, x, edge_index, generator=None):
    r"""The model's output; with :obj:`generator`, in training mode: each
    dropout keeps an entry where a uniform number drawn from it (in the
    order of Platonov et al.'s code) is at least :obj:`p`."""
    p = model.dropout

    def drop(h):
        if generator is None:
            return h
        keep = torch.rand(h.shape, generator=generator, dtype=h.dtype) >= p
        return h * keep / (1.0 - p)

    h = _gelu(drop(_linear(model.lin_in, x)))
    for i, ff in enumerate(model.ffs):
        z = _propagate(model, i, _norm(model.norms[i], h, edge_index),
                       edge_index)
        z = _linear(ff.lin2, _gelu(drop(_linear(ff.lin1, z))))
        h = h + drop(z)
    return _linear(model.lin_out, _norm(model.norms[-1], h, edge_index))


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'gat', 'none'])
@pytest.mark.parametrize('norm', list(NORMS))
@pytest.mark.parametrize('sparse', [False, True])
def test_forward_matches_dense_reference(conv, norm, sparse):
    x, edge_index = _graph(sparse=sparse)
    model = ResGNN(5, 3, num_layers=2, hidden_channels=8, conv=conv,
                   norm=NORMS[norm], heads=2, ff_multiplier=1.5).double()
    model.reset_parameters(_seeded([1]))
    with torch.no_grad():  # norms' affine weights away from 1 and 0
        for name, p in model.named_parameters():
            if name.startswith('norms'):
                p.uniform_(0.5, 1.5)
    model.eval()
    out, hidden = model(x, edge_index, return_hidden=True)
    assert out.shape == (12, 3) and len(hidden) == 3
    assert torch.equal(hidden[-1], out)
    assert torch.allclose(out, _reference(model, x, edge_index),
                          atol=1e-10)
    # Training mode: the dropouts where their code has them.
    out = model.train()(x, edge_index, generators=_seeded([5]))
    assert torch.allclose(out, _reference(model, x, edge_index,
                                          _seeded([5])[0]), atol=1e-10)


def test_shapes_and_repr():
    x, edge_index = _graph()
    model = ResGNN(5, 3, num_layers=3, hidden_channels=8)
    assert str(model) == ("ResGNN(5, 3, num_layers=3, hidden_channels=8, "
                          "conv='gcn')")
    assert len(model.norms) == 4 and len(model.ffs) == 3
    assert model(x.float(), edge_index).shape == (12, 3)
    model = ResGNN(5, 3, num_layers=1, hidden_channels=8, conv='gat',
                   heads=4, norm=torch.nn.LayerNorm, runs=2)
    assert str(model).startswith("ResGNN(5, 3, num_layers=1, "
                                 "hidden_channels=8, conv='gat', "
                                 "norm=Stacked(LayerNorm((8,)")
    assert str(model).endswith('heads=4, runs=2)')
    out, hidden = model(x.float(), edge_index, return_hidden=True)
    assert [tuple(h.shape) for h in hidden] == [(2, 12, 8), (2, 12, 3)]
    # The SAGE block's feed-forward network takes [x, mean] (twice wide).
    model = ResGNN(5, 3, num_layers=1, hidden_channels=8, conv='sage',
                   ff_multiplier=2)
    assert model.ffs[0].lin1.weight.shape == (16, 16)


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'gat', 'none'])
def test_gradcheck(conv):
    x, edge_index = _graph(num_nodes=5, num_features=3)
    model = ResGNN(3, 2, num_layers=2, hidden_channels=4, conv=conv,
                   heads=2, norm=torch.nn.LayerNorm).double().eval()
    weight = model.ffs[0].lin1.weight.detach().clone().requires_grad_()

    def f(x, weight):
        return functional_call(model, {'ffs.0.lin1.weight': weight},
                               (x, edge_index))
    assert torch.autograd.gradcheck(f, (x.requires_grad_(), weight))
    # The sparse input path: the input layer's weight gets its gradient.
    x, edge_index = _graph(num_nodes=5, num_features=3, sparse=True)
    x[0, 0] = 1.0  # at least one entry
    assert model.prepare(x, edge_index).entries is not None
    weight = model.lin_in.weight.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda w: functional_call(model, {'lin_in.weight': w},
                                  (x, edge_index)), (weight, ))


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'gat', 'none'])
@pytest.mark.parametrize('norm', ['none', 'layernorm', 'contranorm',
                                  'scales'])
@pytest.mark.parametrize('sparse', [False, True])
def test_runs_equal_single_models(conv, norm, sparse):
    r"""ResGNN(runs=3) is three ResGNNs: weights, dropout masks (train
    mode), outputs and gradients of run r are those of a one-run model
    with r's generator."""
    x, edge_index = _graph(num_nodes=15, num_features=20, sparse=sparse)
    seeds = [3, 7, 11]
    factories = ([functools.partial(ContraNorm, scale=s) for s in
                  (0.2, 0.5, 1.0)] if norm == 'scales'
                 else [NORMS[norm]] * 3)
    kwargs = dict(num_layers=2, hidden_channels=8, conv=conv, heads=2,
                  dropout=0.3)
    batched = ResGNN(20, 4, runs=3, norm=factories, **kwargs).double()
    batched.reset_parameters(_seeded(seeds))
    out = batched.train()(x, edge_index, generators=_seeded(seeds))
    assert out.shape == (3, 15, 4)
    out.pow(2).sum().backward()
    grads = dict(batched.named_parameters())
    for r, seed in enumerate(seeds):
        single = ResGNN(20, 4, norm=factories[r], **kwargs).double()
        single.reset_parameters(_seeded([seed]))
        expected = single.train()(x, edge_index, generators=_seeded([seed]))
        assert torch.allclose(out[r], expected, atol=1e-12)
        expected.pow(2).sum().backward()
        for name, p in single.named_parameters():
            if name.startswith('norms'):  # Stacked: param0, param1
                continue
            assert torch.equal(grads[name][r].detach(), p.detach())
            assert torch.allclose(grads[name].grad[r], p.grad, atol=1e-10)
        assert torch.allclose(batched.eval()(x, edge_index)[r],
                              single.eval()(x, edge_index), atol=1e-12)
        batched.train()


class _NeedsMask(torch.nn.Module):
    def __init__(self, in_channels):
        super().__init__()

    def forward(self, x, mask):
        return x


@pytest.mark.parametrize('kwargs,match', [
    (dict(conv='gin'), r"ResGNN got conv='gin'; pass one of gcn, sage, "
                       r"gat, none$"),
    (dict(num_layers=0), r'ResGNN needs num_layers >= 1, got 0$'),
    (dict(num_layers=2.5), r'ResGNN needs num_layers >= 1, got 2.5$'),
    (dict(hidden_channels=0), r'hidden_channels >= 1, got 0$'),
    (dict(dropout=1.0), r'ResGNN got dropout=1.0; pass a probability'),
    (dict(ff_multiplier=0.0), r'ResGNN got ff_multiplier=0.0'),
    (dict(conv='gat', heads=3), r'ResGNN got heads=3; pass a divisor of '
                                r'hidden_channels=8$'),
    (dict(norm='batchnorm'), r"ResGNN got norm='batchnorm'; pass a norm "
                             r"class or factory, or None or 'none'"),
    (dict(norm=42), r'ResGNN got norm=42; pass a norm class or factory$'),
    (dict(norm=lambda: 'layernorm'), r'made str; pass one that makes a '
                                     r'torch.nn.Module$'),
    (dict(norm=SepNorm), r'ResGNN cannot take norm=SepNorm'),
    (dict(norm=_NeedsMask), r'ResGNN cannot take norm=_NeedsMask\(\): its '
                            r'forward needs mask; pass a norm that takes '
                            r'node features$'),
    (dict(norm=functools.partial(ContraNorm, scale='big')),
     r'ResGNN cannot make its norm from'),
    (dict(norm=[PairNorm] * 2, runs=3), r'ResGNN got 2 norm factories; '
                                        r'pass one per run \(runs=3\)$'),
    (dict(runs=0), r'ResGNN got runs=0; pass an integer >= 1 or None$'),
])
def test_errors_are_one_line(kwargs, match):
    kwargs = {'num_layers': 2, 'hidden_channels': 8, **kwargs}
    with pytest.raises(ValueError, match=match) as info:
        ResGNN(5, 3, **kwargs)
    assert '\n' not in str(info.value)


def test_norm_gets_the_graph_and_none_is_identity():
    x, edge_index = _graph()
    x = x.float()
    for norm in (None, 'none'):
        model = ResGNN(5, 3, num_layers=2, hidden_channels=8, norm=norm)
        assert all(isinstance(n, torch.nn.Identity) for n in model.norms)
    seen = []

    class Recorder(torch.nn.Module):
        def forward(self, x, batch=None, edge_index=None):
            seen.append((batch, edge_index))
            return x
    model = ResGNN(5, 3, num_layers=2, hidden_channels=8, norm=Recorder)
    batch = torch.zeros(12, dtype=torch.long)
    model(x, edge_index, batch=batch)
    assert len(seen) == 3  # two blocks and the final norm
    assert all(b is batch and e is edge_index for b, e in seen)


def test_prepared_graph_equals_the_plain_call():
    x, edge_index = _graph(sparse=True)
    for conv in ('gcn', 'sage', 'gat'):
        model = ResGNN(5, 3, num_layers=2, hidden_channels=8, conv=conv,
                       heads=2, norm=NORMS['contranorm']).double().eval()
        expected = model(x, edge_index)
        for csr in (True, False):
            graph = model.prepare(x, edge_index, csr=csr)
            assert torch.allclose(model(x, graph), expected, atol=1e-12)
        cached = ResGNN(5, 3, num_layers=2, hidden_channels=8, conv=conv,
                        heads=2, cached=True).double().eval()
        cached.load_state_dict(model.state_dict(), strict=False)
        assert torch.equal(cached(x, edge_index), cached(x, edge_index))


# ----------------------------------------------------- configs and training
def test_model_config_defaults_are_resgnns():
    r"""Every key of conf/model/resgnn.yaml has ResGNN's default, but
    ``cached`` (as model=gcn)."""
    cfg = compose_train('model=resgnn')
    params = inspect.signature(ResGNN).parameters
    model = OmegaConf.to_container(cfg.model, resolve=True)
    differ = {k: (v, params[k].default) for k, v in model.items()
              if k not in ('_target_', 'num_layers')
              and v != params[k].default}
    assert differ == {'cached': (True, False)}


def test_preset_is_the_recipe():
    cfg = compose_train('experiment=platonov', 'dataset=chameleon_filtered')
    assert cfg.model._target_ == 'gnorm.models.ResGNN'
    assert (cfg.model.hidden_channels, cfg.model.ff_multiplier,
            cfg.model.dropout, cfg.model.conv) == (512, 1.0, 0.2, 'gcn')
    assert cfg.norm._target_ == 'torch.nn.LayerNorm'
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.weight_decay,
            cfg.train.epochs, cfg.train.eval_every) == ('adamw', 3e-5, 0.0,
                                                        1000, 1)
    assert cfg.select == 'best_val' and cfg.split == 'platonov'
    assert cfg.dataset.normalize_features is False
    node_setup.check_config(cfg)
    cfg = compose_train('experiment=platonov', 'dataset=minesweeper',
                        'model.conv=sage', 'layers=4')
    assert cfg.dataset.metric == 'rocauc' and cfg.model.num_layers == 4
    # Without the preset: Adam, as before.
    assert node_setup.optimizer_name(compose_train('model=resgnn')) == 'adam'
    with pytest.raises(Exception, match="unknown train.optimizer='sgd'"):
        node_setup.check_config(compose_train('train.optimizer=sgd'))


@pytest.mark.parametrize('runs', [None, 3])
def test_adamw_groups_spare_biases_and_norms(runs):
    cfg = compose_train(*TINY, 'experiment=platonov',
                        'model.hidden_channels=8', 'train.weight_decay=0.1')
    model = node_setup.build_model(cfg, 6, 3, runs=[cfg] * runs if runs else None)
    optimizer = node_loop.make_optimizer(model, 'adamw', 3e-5, 0.1)
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, spared = optimizer.param_groups
    assert (decay['weight_decay'], spared['weight_decay']) == (0.1, 0.0)
    ids = {id(p) for p in spared['params']}
    for name, p in model.named_parameters():
        matrix = name.endswith('weight') and not name.startswith('norms')
        assert (id(p) not in ids) == matrix, name
    # the norms' weights and biases, then the biases of the linear layers
    assert len(spared['params']) == 2 * (2 + 1) + 1 + 2 * 2 + 1
    # Adam as before: one group, L2 decay on everything.
    adam = node_loop.make_optimizer(model, 'adam', 0.005, 5e-4)
    assert type(adam) is torch.optim.Adam and len(adam.param_groups) == 1


def _read(path):
    with open(path / 'results.json') as f:
        return json.load(f)


@pytest.mark.parametrize('overrides', [
    ['model=resgnn', 'model.hidden_channels=8'],
    ['experiment=platonov', 'model.hidden_channels=8', 'model.conv=sage'],
    ['experiment=platonov', 'model.hidden_channels=8', 'model.conv=gat',
     'model.heads=2', 'norm=contranorm'],
])
def test_train_writes_results(tmp_path, overrides):
    cfg = compose_train(*TINY, *overrides)
    results = train(cfg, output_dir=tmp_path)
    assert results['status'] == 'ok', results.get('error')
    assert _read(tmp_path)['status'] == 'ok'
    assert results['model'].startswith('ResGNN(32, 3, num_layers=2, '
                                       'hidden_channels=8')
    assert results['curve']['epoch'] == [1, 2, 3]
    # The monitor measured the two blocks and the logits.
    assert results['collapse']['layer'] == [1, 2, 3]
    assert (tmp_path / 'metrics.csv').is_file()
    assert (tmp_path / 'collapse.csv').is_file()


def test_runs_train_together_as_alone(tmp_path):
    r"""Two seeds as one model (batch_key groups them) give each seed's
    run alone, AdamW's fused step included."""
    cfgs = [compose_train(*TINY, 'experiment=platonov',
                          'model.hidden_channels=8', 'train.lr=0.01',
                          f'seed={s}') for s in (0, 1)]
    assert node_setup.batch_key(cfgs[0]) == node_setup.batch_key(cfgs[1]) is not None
    alone = [train_runs([c], [str(tmp_path / f'alone{i}')])[0]
             for i, c in enumerate(cfgs)]
    together = train_runs(cfgs, [str(tmp_path / f'batch{i}')
                                 for i in range(2)])
    for a, b in zip(alone, together):
        assert b['batch_runs'] == 2
        assert a['curve']['loss'] == pytest.approx(b['curve']['loss'],
                                                   rel=1e-5)
        assert a['curve']['val_acc'] == b['curve']['val_acc']


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'gat'])
@pytest.mark.parametrize('norm', ['layernorm', 'contranorm'])
def test_memory_estimate_covers_saved_tensors(conv, norm):
    r"""What a run keeps for its backward pass is below the estimate
    (GAT's per-edge tensors included: 20 neighbours per node)."""
    cfg = compose_train('dataset=csbm', 'dataset.num_nodes=200', 'layers=4',
                        'dataset.avg_degree=20', 'experiment=platonov',
                        'model.hidden_channels=16', f'model.conv={conv}',
                        'model.heads=2', f'norm={norm}')
    data = node_setup.load_data(cfg)
    model = node_setup.build_model(cfg, data.num_features,
                             int(data.y.max()) + 1).train()
    saved, _ = saved_bytes(lambda: model(data.x, data.edge_index))
    entries = int((data.x != 0).sum())
    need = node_setup.memory_per_run(cfg, data.num_nodes, entries, data.num_edges)
    assert saved <= need
    cfgs = [cfg] * 4
    assert 1 <= node_setup.max_runs(cfgs, torch.device('cpu')) <= 4


# ------------------------------------ Luo et al.'s post-norm block (block=post)
def _post_reference(model, x, edge_index):
    r"""The post-norm blocks of :obj:`model` (one run, no dropout) built
    from PyG's GCNConv / SAGEConv and torch's Linear and BatchNorm1d with
    :obj:`model`'s weights, as Luo et al.'s code stacks them; the graph
    gets self-loops first, as theirs does."""
    from torch_geometric.nn import GCNConv, SAGEConv
    from torch_geometric.utils import add_self_loops, remove_self_loops
    edge_index, _ = add_self_loops(remove_self_loops(edge_index)[0],
                                   num_nodes=x.size(0))
    h = x
    for i, norm in enumerate(model.norms):
        fan_in = h.size(-1)
        if model.conv == 'gcn':
            conv = GCNConv(fan_in, model.hidden_channels).double()
            conv.lin.weight.data.copy_(model.convs[i].weight)
            conv.bias.data.copy_(model.conv_bias[i])
            out = conv(h, edge_index)
        elif model.conv == 'sage':
            conv = SAGEConv(fan_in, model.hidden_channels).double()
            conv.lin_l.weight.data.copy_(model.convs[i].weight)
            conv.lin_l.bias.data.copy_(model.convs[i].bias)
            conv.lin_r.weight.data.copy_(model.roots[i].weight)
            out = conv(h, edge_index)
        else:
            out = 0
        if i < len(model.skips):
            out = out + _linear(model.skips[i], h)
        elif model.skip == 'identity':
            out = out + h
        h = torch.relu(norm(out))
    return _linear(model.lin_out, h)


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'none'])
@pytest.mark.parametrize('skip', ['linear', 'identity', 'none'])
def test_post_block_matches_pyg_convs(conv, skip):
    r"""block='post' is Luo et al.'s stack of PyG convolutions plus skips,
    BatchNorm, ReLU: in training mode (batch statistics) and in
    evaluation mode (the running statistics that training left)."""
    if conv == 'none' and skip == 'none':
        return
    x, edge_index = _graph(num_nodes=14, num_features=5)
    model = ResGNN(5, 3, num_layers=3, hidden_channels=6, conv=conv,
                   dropout=0.0, block='post', skip=skip,
                   norm=torch.nn.BatchNorm1d).double()
    twin = ResGNN(5, 3, num_layers=3, hidden_channels=6, conv=conv,
                  dropout=0.0, block='post', skip=skip,
                  norm=torch.nn.BatchNorm1d).double()
    twin.load_state_dict(model.state_dict())
    out = model.train()(x, edge_index)
    expected = _post_reference(twin.train(), x, edge_index)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(model.eval()(x, edge_index),
                          _post_reference(twin.eval(), x, edge_index),
                          atol=1e-12)


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'none'])
def test_post_block_gradcheck(conv):
    x, edge_index = _graph(num_nodes=6, num_features=3)
    model = ResGNN(3, 2, num_layers=2, hidden_channels=4, conv=conv,
                   block='post', dropout=0.0,  # batch statistics, no masks
                   norm=torch.nn.BatchNorm1d).double().train()
    name = 'convs.1.weight' if conv != 'none' else 'skips.1.weight'
    weight = dict(model.named_parameters())[name].detach().clone()

    def f(x, weight):
        return functional_call(model, {name: weight}, (x, edge_index))
    assert torch.autograd.gradcheck(
        f, (x.requires_grad_(), weight.requires_grad_()))


@pytest.mark.parametrize('conv', ['gcn', 'sage', 'gcn-linear-init'])
@pytest.mark.parametrize('norm', ['batchnorm', 'layernorm', 'contranorm',
                                  'none'])
def test_post_block_runs_equal_single_models(conv, norm):
    r"""ResGNN(block='post', runs=3) is three one-run models: outputs,
    gradients and the BatchNorm running statistics of run r are those of
    run r alone, in training (dropout masks from r's generator) and in
    evaluation."""
    x, edge_index = _graph(num_nodes=15, num_features=9)
    seeds = [3, 7, 11]
    factory = {**NORMS, 'batchnorm': torch.nn.BatchNorm1d}[norm]
    conv, _, init = conv.partition('-')
    kwargs = dict(num_layers=3, hidden_channels=8, conv=conv, dropout=0.3,
                  block='post', conv_init='linear' if init else 'glorot')
    batched = ResGNN(9, 2, runs=3, norm=[factory] * 3, **kwargs).double()
    batched.reset_parameters(_seeded(seeds))
    out = batched.train()(x, edge_index, generators=_seeded(seeds))
    out.pow(2).sum().backward()
    grads = dict(batched.named_parameters())
    buffers = dict(batched.named_buffers())
    for r, seed in enumerate(seeds):
        single = ResGNN(9, 2, norm=factory, **kwargs).double()
        single.reset_parameters(_seeded([seed]))
        expected = single.train()(x, edge_index, generators=_seeded([seed]))
        assert torch.allclose(out[r], expected, atol=1e-12)
        expected.pow(2).sum().backward()
        for name, p in single.named_parameters():
            if name.startswith('norms'):
                continue
            assert torch.equal(grads[name][r].detach(), p.detach()), name
            assert torch.allclose(grads[name].grad[r], p.grad, atol=1e-10)
        if norm == 'batchnorm':  # Stacked keeps the runs' statistics,
            for i, bn in enumerate(single.norms):  # buffer k: bn's k-th
                for k, (name, b) in enumerate(bn.named_buffers()):
                    stacked = buffers[f'norms.{i}.buffer{k}']
                    assert torch.allclose(stacked[r].double(), b.double(),
                                          atol=1e-12), name
        assert torch.allclose(batched.eval()(x, edge_index)[r],
                              single.eval()(x, edge_index), atol=1e-12)
        batched.train()


@pytest.mark.parametrize('kwargs,match', [
    (dict(block='side'), r"ResGNN got block='side'; pass one of pre, post$"),
    (dict(block='post', skip='dense'), r"ResGNN got skip='dense'; pass one "
                                       r"of linear, identity, none$"),
    (dict(block='post', conv='gat'), r"block='post'\) takes conv='gcn', "
                                     r"'sage' or 'none', got 'gat'$"),
    (dict(block='post', conv='none', skip='none'), r"maps nothing; pass "
                                                   r"skip='linear'"),
    (dict(block='post', conv_init='xavier'), r"ResGNN got "
     r"conv_init='xavier'; pass one of glorot, linear$"),
    (dict(block='pre', conv_init='linear'), r"conv_init='linear' sets the "
     r"GCN convolution of the post-norm block; pass block='post'"),
])
def test_post_block_errors_are_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        ResGNN(5, 3, num_layers=2, hidden_channels=8, **kwargs)
    assert '\n' not in str(info.value)


def test_conv_init_draws_as_its_layer_and_computes_the_same_function():
    r"""conv_init='linear' draws each GCN convolution's weight and bias
    from torch.nn.Linear's U(+-1/sqrt(c_in)) (the bias added after the
    propagation), 'glorot' from Glorot's bound with a zero bias (PyG's
    GCNConv); with the same parameters, both are the same function."""
    x, edge_index = _graph(num_nodes=15, num_features=9)
    kwargs = dict(num_layers=3, hidden_channels=64, block='post',
                  dropout=0.0)
    models = {init: ResGNN(9, 2, conv_init=init, **kwargs).double()
              for init in ('glorot', 'linear')}
    for init, model in models.items():
        model.reset_parameters(_seeded([5]))
        for conv, bias in zip(model.convs, model.conv_bias):
            c_in, c_out = conv.in_channels, conv.out_channels
            bound = (math.sqrt(6.0 / (c_in + c_out)) if init == 'glorot'
                     else 1.0 / math.sqrt(c_in))
            w = conv.weight.abs().max().item()
            assert 0.9 * bound < w <= bound, (init, w, bound)
            assert conv.bias is None
            if init == 'glorot':
                assert not bias.any()
            else:
                assert 0.5 * bound < bias.abs().max().item() <= bound
    models['glorot'].load_state_dict(models['linear'].state_dict())
    assert torch.allclose(models['glorot'].eval()(x, edge_index),
                          models['linear'].eval()(x, edge_index),
                          atol=1e-12)
    assert "conv_init='linear'" in repr(models['linear'])
    cfg = compose_train('experiment=luo', 'model.conv_init=linear')
    assert node_setup.build_model(cfg, 7, 2).conv_init == 'linear'


def test_luo_preset_is_their_minesweeper_recipe():
    cfg = compose_train('experiment=luo', 'dataset=minesweeper')
    assert cfg.model._target_ == 'gnorm.models.ResGNN'
    assert (cfg.model.block, cfg.model.skip, cfg.model.conv,
            cfg.model.hidden_channels, cfg.model.dropout, cfg.layers) == \
        ('post', 'linear', 'gcn', 64, 0.2, 12)
    assert cfg.norm._target_ == 'torch.nn.BatchNorm1d'
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.weight_decay,
            cfg.train.epochs, cfg.train.eval_every) == ('adam', 0.01, 0.0,
                                                        2000, 1)
    assert cfg.select == 'best_val' and cfg.split == 'platonov'
    assert cfg.dataset.metric == 'rocauc'
    node_setup.check_config(cfg)
    model = node_setup.build_model(cfg, 7, 2)
    assert len(model.norms) == 12 and len(model.skips) == 12
    assert isinstance(model.norms[0], torch.nn.BatchNorm1d)


def test_post_block_trains_a_node_run(tmp_path):
    results = train(compose_train(*TINY, 'experiment=luo', 'layers=3',
                                  'train.epochs=3', 'train.progress=false'),
                    output_dir=tmp_path)
    assert results['status'] == 'ok'
    assert "block='post'" in results['model']
    assert results['collapse']['layer'] == [1, 2, 3, 4]
