import functools
import math

import networkx as nx
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.utils import from_networkx

from gnorm.data.molecules import ShortestPaths
from gnorm.models import Graphormer
from gnorm.models.token_layout import add_token_layout, layout_of, token_layout
from gnorm.nn import ContraNorm, DualContraNorm, IsoBN, PairNorm, SepNorm

NORMS = {
    'layernorm': None,
    'sepnorm_bn_ln': functools.partial(SepNorm),
    'sepnorm_ln_ln': functools.partial(SepNorm, virtual_norm='layer'),
    'sepnorm_ln_bn': functools.partial(SepNorm, virtual_norm='layer',
                                       token_norm='batch'),
    'sepnorm_bn_bn': functools.partial(SepNorm, token_norm='batch'),
    'contranorm': functools.partial(ContraNorm, scale=0.5,
                                    negatives='non_neighbors'),
    'contranorm_d': functools.partial(DualContraNorm, scale=0.5),
}


def _graph(num_nodes, seed, extra=0):
    r"""A random tree (ZINC features) plus an :obj:`extra`-node path that
    the tree cannot reach."""
    g = nx.random_labeled_tree(num_nodes, seed=seed)
    nx.add_path(g, range(num_nodes, num_nodes + extra))
    g.add_nodes_from(range(num_nodes + extra))
    data = Data(edge_index=from_networkx(g).edge_index,
                num_nodes=num_nodes + extra)
    gen = torch.Generator().manual_seed(seed)
    data.x = torch.randint(0, 28, (data.num_nodes, 1), generator=gen)
    data.edge_attr = torch.randint(1, 4, (data.num_edges, ), generator=gen)
    data.y = torch.randn(1, generator=gen)
    return ShortestPaths()(data)


def _model(norm='layernorm', **kwargs):
    torch.manual_seed(0)
    args = dict(features='zinc', num_layers=2, hidden_channels=16,
                num_heads=2, ffn_channels=16, max_dist=3, norm=NORMS[norm])
    return Graphormer(1, **{**args, **kwargs})


def _run(model, graphs, **kwargs):
    b = Batch.from_data_list(graphs)
    return model(b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge,
                 b.batch, b.num_graphs, **kwargs)


def test_graphormer_repr_and_shape():
    model = Graphormer(1, features='zinc')
    assert str(model) == (
        "Graphormer(1, features='zinc', num_layers=12, hidden_channels=80, "
        "num_heads=8, max_dist=20, norm=LayerNorm((80,), eps=1e-05, "
        "elementwise_affine=True, bias=True))")
    assert 450_000 < sum(p.numel() for p in model.parameters()) < 550_000
    out = _run(model, [_graph(5, 0), _graph(9, 1, extra=2)])
    assert out.shape == (2, 1) and bool(out.isfinite().all())


@pytest.mark.parametrize('norm', list(NORMS))
def test_padding_never_changes_real_tokens(norm):
    model = _model(norm).eval()
    graphs = [_graph(4, 0), _graph(7, 1, extra=1)]
    out, tokens, mask = _run(model, graphs, return_tokens=True)
    padded, ptokens, _ = _run(model, graphs + [_graph(15, 2)],
                              return_tokens=True)
    assert torch.allclose(out, padded[:2], atol=1e-5)
    for g in range(2):
        real = mask[g]
        assert torch.allclose(tokens[g][real], ptokens[g, :real.numel()][real],
                              atol=1e-5)
    assert bool(ptokens.isfinite().all())


@pytest.mark.parametrize('norm', list(NORMS))
def test_batched_equals_one_graph_at_a_time(norm):
    model = _model(norm).eval()
    graphs = [_graph(n, seed, extra=seed % 2) for seed, n in
              enumerate([3, 8, 5, 11])]
    batched = _run(model, graphs)
    single = torch.cat([_run(model, [g]) for g in graphs])
    assert torch.allclose(batched, single, atol=1e-5)


@pytest.mark.parametrize('norm', list(NORMS))
def test_size_groups_equal_one_graph_at_a_time(norm):
    # More graphs than ATTENTION_CHUNK: the CPU attention runs in groups of
    # similar-size graphs, each with its own padding.
    from gnorm.models.graphormer_attention import ATTENTION_CHUNK
    model = _model(norm).eval()
    sizes = [(3 * seed) % 17 + 1 for seed in range(ATTENTION_CHUNK + 9)]
    graphs = [_graph(n, seed, extra=seed % 2) for seed, n in enumerate(sizes)]
    batched, tokens, mask = _run(model, graphs, return_tokens=True)
    single = torch.cat([_run(model, [g]) for g in graphs])
    assert torch.allclose(batched, single, atol=1e-5)
    _, one, _ = _run(model, graphs[5:6], return_tokens=True)
    assert torch.allclose(tokens[5][mask[5]], one[0], atol=1e-5)


def test_padded_heads_equal_unpadded_math():
    # head dim 10 (hidden 80, 8 heads) is padded to 16 with scale 1/sqrt(10).
    model = Graphormer(1, features='zinc', num_layers=1, dropout=0.0,
                       input_dropout=0.0, attention_dropout=0.0).eval()
    layer = model.layers[0]
    assert (layer.head_dim, layer.padded_dim) == (10, 16)
    x = torch.randn(3, 6, 80)
    bias = torch.randn(3, 8, 6, 6)
    bias[:, :, :, 4:] = float('-inf')  # padded keys
    q, k, v = layer.qkv(x).view(3, 6, 3, 8, 10).permute(2, 0, 3, 1, 4)
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(10) + bias,
                            dim=-1)  # [3, heads, 6, 6]
    expected = layer.out((weights @ v).transpose(1, 2).reshape(3, 6, 80))
    for pad in (True, False):  # padded (the default) or not
        assert torch.allclose(layer.attention(x, bias, pad=pad), expected,
                              atol=1e-5)

    unpadded = Graphormer(1, features='zinc', num_layers=1, head_multiple=1)
    unpadded.load_state_dict(model.state_dict())
    assert unpadded.layers[0].padded_dim == 10
    g = [_graph(6, 0), _graph(3, 1)]
    assert torch.allclose(_run(model, g), _run(unpadded.eval(), g),
                          atol=1e-5)


def test_attention_bias_as_documented():
    model = _model(max_dist=2, max_spd=3)
    graphs = [_graph(7, 0, extra=2), _graph(4, 1)]
    b = Batch.from_data_list(graphs)
    all_hops = token_layout(b.edge_index, b.spd, b.path_edge, b.batch, 2)
    kept_hops = token_layout(b.edge_index, b.spd, b.path_edge, b.batch, 2,
                             max_dist=2)
    assert kept_hops['path_hop'].numel() < all_hops['path_hop'].numel()
    with torch.no_grad():
        bias = model.attention_bias(b.spd, b.edge_attr, all_hops)
        assert torch.equal(bias, model.attention_bias(b.spd, b.edge_attr,
                                                      kept_hops))
        assert bias.shape == (2, 2, 10, 10)
        t = model.virtual_distance
        spd_w, hop_w = model.spd_encoder.weight, model.hop_weight
        for gi, g in enumerate(graphs):
            n = g.num_nodes
            # Graph token row and column: the virtual distance.
            assert torch.equal(bias[gi, :, 0, :n + 1],
                               t.view(2, 1).expand(2, n + 1))
            assert torch.equal(bias[gi, :, :n + 1, 0],
                               t.view(2, 1).expand(2, n + 1))
            # Padded keys: -inf.
            assert bool((bias[gi, :, :, n + 1:] == float('-inf')).all())
            nxg = nx.Graph(g.edge_index.t().tolist())
            nxg.add_nodes_from(range(n))
            ids = {(int(u), int(v)): e
                   for e, (u, v) in enumerate(g.edge_index.t())}
            edge = model.bond_encoder(g.edge_attr)  # [E, heads]
            for i in range(n):
                for j in range(n):
                    got = bias[gi, :, 1 + i, 1 + j]
                    if not nx.has_path(nxg, i, j):  # own index, no edge term
                        assert torch.allclose(got, spd_w[4])
                        continue
                    path = nx.shortest_path(nxg, i, j)
                    d = len(path) - 1
                    expected = spd_w[min(d, 3)].clone()
                    hops = [ids[u, v] for u, v in zip(path, path[1:])][:2]
                    for k, e in enumerate(hops):
                        expected += edge[e] @ hop_w[k] / min(max(d, 1), 2)
                    assert torch.allclose(got, expected, atol=1e-6)


def test_sepnorm_sends_graph_token_to_virtual_norm():
    model = _model('sepnorm_bn_ln')
    graphs = [_graph(4, 0), _graph(6, 1), _graph(3, 2)]
    seen = {}

    def hook(name):
        def fn(module, inputs, output):
            seen[name] = inputs[0].detach()
        return fn

    norm = model.layers[0].norm1
    norm.norm_virtual.register_forward_hook(hook('virtual'))
    norm.norm_token.register_forward_hook(hook('token'))
    captured = {}
    model.layers[0].register_forward_pre_hook(
        lambda m, args: captured.update(x=args[0].detach()))
    _run(model, graphs)
    # The input of layer 0: the packed tokens [1 run, 3 + 13, 16], the
    # graph tokens first, then the nodes.
    (x, ) = captured['x']
    assert x.shape == (3 + 13, 16)
    assert torch.equal(seen['virtual'], x[:3])  # the graph tokens only
    assert torch.equal(seen['token'], x[3:])  # valid node tokens, no padding
    assert isinstance(norm.norm_virtual, torch.nn.BatchNorm1d)


@pytest.mark.parametrize('norm', ['sepnorm_bn_ln', 'sepnorm_ln_bn',
                                  'sepnorm_bn_bn'])
def test_batchnorm_variants_train_vs_eval(norm):
    model = _model(norm, dropout=0.0, input_dropout=0.0,
                   attention_dropout=0.0)
    a, b, c = _graph(4, 0), _graph(6, 1), _graph(9, 2)
    # Training: batch statistics, so a graph's output depends on its mates.
    model.train()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    before = [m.running_mean.clone() for m in bns]
    first = _run(model, [a, b])[0]
    assert not torch.allclose(first, _run(model, [a, c])[0], atol=1e-4)
    assert all(not torch.equal(m.running_mean, r)
               for m, r in zip(bns, before))
    # Evaluation: running statistics, fixed, the same for any mates.
    model.eval()
    frozen = [m.running_mean.clone() for m in bns]
    assert torch.allclose(_run(model, [a, b])[0], _run(model, [a, c])[0],
                          atol=1e-5)
    assert all(torch.equal(m.running_mean, r) for m, r in zip(bns, frozen))


def test_gradcheck_float64():
    model = _model('sepnorm_bn_ln', num_layers=1, hidden_channels=4,
                   ffn_channels=4, dropout=0.0, input_dropout=0.0,
                   attention_dropout=0.0, max_dist=2).double()
    b = Batch.from_data_list([_graph(3, 0, extra=1), _graph(4, 1)])
    args = (b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge, b.batch, 2)
    names = ('hop_weight', 'virtual_distance', 'graph_token')

    def fn(*params):
        return torch.func.functional_call(model, dict(zip(names, params)),
                                          args)

    params = tuple(getattr(model, n).detach().clone().requires_grad_()
                   for n in names)
    assert torch.autograd.gradcheck(fn, params)


@pytest.mark.parametrize('kwargs, match', [
    (dict(max_dist=0), 'max_dist >= 1'),
    (dict(features='qm9'), "features='qm9'"),
    (dict(num_heads=3), 'must divide'),
    (dict(norm=functools.partial(PairNorm)), 'PairNorm'),
    (dict(norm=functools.partial(IsoBN)), 'IsoBN'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Graphormer(1, **{'hidden_channels': 16, **kwargs})


def test_single_node_graphs_give_no_nan():
    # Mostly padding: every query row still sees the graph token.
    model = _model()
    out = _run(model, [_graph(1, 0), _graph(12, 1), _graph(1, 2)])
    out.sum().backward()
    assert bool(out.isfinite().all())
    assert all(bool(p.grad.isfinite().all()) for p in model.parameters()
               if p.grad is not None)


@pytest.mark.parametrize('p', [0.1, 0.5])
def test_cpu_dropout_rate_scale_and_seed(p):
    r"""The explicit kernels' dropout (cheap masks) and the fused one
    (F.dropout): the rate, the scale of kept entries, the seed."""
    from gnorm.models.graphormer_attention import dropout as _dropout
    x = torch.ones(200_000, dtype=torch.float64)
    for fused in (False, True):
        torch.manual_seed(0)
        out = _dropout(x, p, True, fused)
        kept = out != 0
        assert abs(float(kept.double().mean()) - (1 - p)) < 0.005
        assert torch.allclose(out[kept], torch.full_like(out[kept],
                                                         1 / (1 - p)))
        torch.manual_seed(0)
        assert torch.equal(_dropout(x, p, True, fused), out)  # seeded
        assert _dropout(x, p, False, fused) is x  # evaluation: identity


@pytest.mark.parametrize('norm', ['layernorm', 'sepnorm_bn_ln', 'contranorm'])
def test_fused_and_explicit_kernels_compute_the_same(norm):
    r"""The fused kernels (one scaled_dot_product_attention call for the
    batch, the default on CUDA) and the explicit ones (attention written
    out per group of similar-size graphs, the default on the CPU) give the
    same outputs and gradients, so the CPU tests cover the GPU's path: 40
    graphs of 1-12 nodes (more than one group), training mode without
    dropout."""
    graphs = [_graph(1 + (7 * s) % 12, s, extra=s % 3) for s in range(40)]
    outs = {}
    for kernels in ('fused', 'explicit'):
        model = _model(norm, dropout=0.0, input_dropout=0.0,
                       attention_dropout=0.0, kernels=kernels).double()
        out = _run(model, graphs)
        out.square().sum().backward()
        outs[kernels] = (out, [p.grad for p in model.parameters()])
    (fused, grads), (explicit, grads_explicit) = outs.values()
    torch.testing.assert_close(fused, explicit)
    for g, h in zip(grads, grads_explicit):
        torch.testing.assert_close(g, h)


def test_fused_dropout_keeps_the_rate():
    r"""Both kernels drop about the same share of attention weights and
    tokens: outputs in training mode differ from eval by a similar
    amount."""
    graphs = [_graph(8, s) for s in range(40)]
    spread = {}
    for kernels in ('fused', 'explicit'):
        model = _model(kernels=kernels, dropout=0.3, input_dropout=0.3,
                       attention_dropout=0.3)
        with torch.no_grad():
            ref = _run(model.eval(), graphs)
            spread[kernels] = (_run(model.train(), graphs) - ref).std()
    assert 0.5 < spread['fused'] / spread['explicit'] < 2.0


def _layout_batch(graphs, max_dist):
    b = Batch.from_data_list(graphs)
    return b, token_layout(b.edge_index, b.spd, b.path_edge, b.batch,
                           b.num_graphs, max_dist)


@pytest.mark.parametrize('norm', ['layernorm', 'sepnorm_bn_ln'])
def test_forward_with_a_layout_compiles_in_one_graph_for_every_shape(norm):
    r"""With the layout computed ahead, the forward pass reads no value of
    the batch on the host: ``torch.compile(fullgraph=True)`` traces it
    without a graph break, and batches of other sizes (graphs, tokens,
    pairs, path hops) reuse the one graph (symbolic sizes). The compiled
    outputs and float64 gradients equal the eager ones."""
    compiles = []

    def backend(gm, example_inputs):  # counts graphs, runs them as traced
        compiles.append(gm)
        return gm.forward

    model = _model(norm, dropout=0.0, input_dropout=0.0,
                   attention_dropout=0.0).double()
    compiled = torch.compile(model, backend=backend, fullgraph=True,
                             dynamic=True)
    for sizes in ([3, 8, 5], [4, 11, 2, 6], [9, 7, 12, 3, 5]):
        graphs = [_graph(n, seed, extra=seed % 2) for seed, n in
                  enumerate(sizes)]
        b, layout = _layout_batch(graphs, model.max_dist)
        args = (b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge)
        grads = []
        for fn in (model, compiled):
            model.zero_grad()
            out = fn(*args, layout=layout)
            out.square().sum().backward()
            grads.append((out.detach(), [p.grad.clone() for p in
                                         model.parameters()]))
        (eager, eager_grads), (traced, traced_grads) = grads
        torch.testing.assert_close(traced, eager)
        for g, h in zip(traced_grads, eager_grads):
            torch.testing.assert_close(g, h)
    assert len(compiles) == 1


def test_fused_attention_bias_is_aligned_for_every_batch_size():
    r"""With the fused kernels every stride of the bias handed to
    ``scaled_dot_product_attention`` is a multiple of 8 elements (the
    memory-efficient GPU kernel's alignment) for every batch: in the
    compiled graph, where the token count is a symbolic size, the
    alignment is statically known, so the compiler neither pads the bias
    nor guards on the batch (unaligned biases broke compiled training on
    an H200: experiments/results/gpu_check_cuda.md)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    masks = []

    def backend(gm, example_inputs):  # the bias of every attention call
        masks.extend(node.kwargs['attn_mask'].meta['example_value']
                     for node in gm.graph.nodes
                     if node.target is F.scaled_dot_product_attention)
        return gm.forward

    model = _model(kernels='fused', dropout=0.0, input_dropout=0.0,
                   attention_dropout=0.0)
    compiled = torch.compile(model, backend=backend, fullgraph=True,
                             dynamic=True)
    for sizes in ([3, 8, 5], [4, 11, 2, 6]):  # 9 and 12 tokens: padded
        b, layout = _layout_batch([_graph(n, s) for s, n in enumerate(sizes)],
                                  model.max_dist)
        compiled(b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge,
                 layout=layout)
        ctx = model.layer_context(model.pair_bias(b.spd, b.edge_attr, layout),
                                  layout)
        (bias, ) = ctx.bias
        assert bias.shape[-1] % 8 == 0 and bias.is_contiguous()
    assert len(masks) == model.num_layers  # one graph for both batches
    for mask in masks:
        assert all(statically_known_true(s % 8 == 0)
                   for s in mask.stride()[:-1])


def test_layout_refuses_structure_of_other_graphs():
    b = Batch.from_data_list([_graph(4, 0), _graph(6, 1)])
    with pytest.raises(ValueError, match='spd holds 52 pairs.* have 32 '):
        token_layout(b.edge_index, b.spd, b.path_edge, b.batch[:-2], 2)
    with pytest.raises(ValueError, match='path_edge holds'):
        token_layout(b.edge_index, b.spd, b.path_edge[1:], b.batch, 2)


def test_layout_ahead_equals_layout_inside():
    model = _model('sepnorm_bn_ln').eval()
    graphs = [_graph(n, seed, extra=seed % 3) for seed, n in
              enumerate([5, 1, 9, 4])]
    b, layout = _layout_batch(graphs, model.max_dist)
    inside = _run(model, graphs)
    ahead = model(b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge,
                  layout=layout)
    assert torch.equal(inside, ahead)



def test_a_layout_of_fewer_hops_than_the_model_reads_is_refused():
    # A layout keeps the first max_dist hops of every path: one built with
    # a smaller max_dist than the model's would silently drop hops.
    model = _model(max_dist=3).eval()
    graphs = [_graph(9, 0), _graph(7, 1, extra=3)]  # paths of > 3 hops
    b = Batch.from_data_list(graphs)
    args = (b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge)
    for built in (1, 2):
        layout = token_layout(b.edge_index, b.spd, b.path_edge, b.batch, 2,
                              max_dist=built)
        with pytest.raises(ValueError, match=f'max_dist=3 got a token layout '
                                             f'built with max_dist={built} '):
            model(*args, layout=layout)
    # As many hops or more (None: all) give the model's own output.
    expected = _run(model, graphs)
    for built in (3, 5, None):
        layout = token_layout(b.edge_index, b.spd, b.path_edge, b.batch, 2,
                              max_dist=built)
        assert torch.equal(model(*args, layout=layout), expected)
    # A PyG batch records the max_dist of the layout stored on it.
    assert layout_of(add_token_layout(b, 2))['max_dist'] == 2
    with pytest.raises(ValueError, match='built with max_dist=2 '):
        model(*args, layout=layout_of(b))
    unrecorded = {k: v for k, v in layout.items() if k != 'max_dist'}
    with pytest.raises(ValueError, match='records no max_dist'):
        model(*args, layout=unrecorded)


def test_batchnorm_over_graph_tokens_cancels_what_every_graph_shares():
    r"""SepNorm with BatchNorm on the graph token (training mode, no
    dropout, float64): a batch norm over the graph tokens cancels anything
    added equally to every graph's token, so the graph token, the last
    layer's ``out.bias`` and ``ffn2.bias`` (added to every graph token after
    the last attention) and layer 0's first virtual BatchNorm weight (it
    scales the normalised identical rows, zeros) have a true gradient of
    zero: what they get is rounding. The norm parameters of the node tokens
    after the last attention get an exact zero (the readout reads the graph
    tokens only). With input dropout each graph's token differs and the
    graph token learns."""
    graphs = [_graph(n, s, extra=s % 2) for s, n in enumerate([3, 8, 5, 11])]
    grads = {}
    for p in (0.0, 0.1):
        model = _model('sepnorm_bn_ln', num_layers=3, dropout=0.0,
                       attention_dropout=0.0, input_dropout=p).double()
        torch.manual_seed(1)
        out = _run(model.train(), graphs)
        (out - torch.randn_like(out)).square().sum().backward()
        grads[p] = {n: float(q.grad.abs().max())
                    for n, q in model.named_parameters()}
    rounding = {'graph_token', 'layers.2.out.bias', 'layers.2.ffn2.bias',
                'layers.0.norm1.norm_virtual.weight'}
    unused = {f'{site}.norm_token.{w}' for site in ('layers.2.norm2',
                                                     'final_norm')
              for w in ('weight', 'bias')}
    assert {n for n, g in grads[0.0].items() if g < 1e-12} == \
        rounding | unused
    assert all(grads[0.0][n] == 0.0 for n in unused)
    assert min(g for n, g in grads[0.0].items()
               if n not in rounding | unused) > 1e-7
    assert grads[0.1]['graph_token'] > 1e-7


@pytest.mark.slow
def test_inductor_compiled_forward_equals_eager():
    model = _model('sepnorm_bn_ln', dropout=0.0, input_dropout=0.0,
                   attention_dropout=0.0)
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for sizes in ([3, 8, 5], [4, 11, 2, 6]):
        b, layout = _layout_batch([_graph(n, s) for s, n in enumerate(sizes)],
                                  model.max_dist)
        args = (b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge)
        torch.testing.assert_close(compiled(*args, layout=layout),
                                   model(*args, layout=layout),
                                   rtol=1e-4, atol=1e-5)


def test_group_biases_are_the_dense_bias_of_their_graphs():
    # Each pair's bias goes straight to its attention group: a group's
    # bias is the batch's dense bias at its graphs, cut to its own width.
    from gnorm.models.graphormer_attention import ATTENTION_CHUNK
    model = _model('layernorm')
    sizes = [(5 * seed) % 19 + 1 for seed in range(2 * ATTENTION_CHUNK + 3)]
    b, layout = _layout_batch([_graph(n, seed, extra=seed % 3)
                               for seed, n in enumerate(sizes)], max_dist=3)
    dense = model.attention_bias(b.spd, b.edge_attr, layout)
    ctx = model.layer_context(model.pair_bias(b.spd, b.edge_attr, layout),
                              layout)
    assert len(ctx.groups.shapes) == 3
    _, order = torch.sort(layout['mask'].sum(1), stable=True)
    for idx, (Bg, Tg), bias in zip(order.split(ATTENTION_CHUNK),
                                   ctx.groups.shapes, ctx.bias):
        assert bias.is_contiguous() and bias.shape == (Bg, 2, Tg, Tg)
        assert torch.equal(bias, dense[idx][:, :, :Tg, :Tg])
