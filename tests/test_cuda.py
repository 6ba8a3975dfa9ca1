r"""The GPU suite: ``pytest -m cuda`` on a machine with a CUDA device checks
what gnorm computes there, in minutes.

Every test takes the device as a parameter. Its ``cpu`` case runs in the
default suite wherever the code path is the same on both devices (dtype
casts, padding, masks, batched runs, bf16 autocast); its ``cuda`` case is
marked ``cuda`` and skipped without a CUDA device, so ``pytest -m cuda``
selects exactly the GPU cases. References are float64 on the CPU.
"""
import copy
import functools
import json

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_geometric.utils import to_undirected

from gnorm.models import DeepGCN
from gnorm.nn import ContraNorm, DualContraNorm, IsoBN, PairNorm, SepNorm
from gnorm.train import train
from gnorm.train.run import train_runs
from conftest import compose_train, needs_mirror

CUDA = pytest.param('cuda', marks=[
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason='needs a CUDA device (the GPU suite)')])
DEVICES = ['cpu', CUDA]
DTYPES = [torch.float32, torch.bfloat16]
# Largest error against the float64 reference, relative to the output's
# largest entry: float32 keeps ~7 digits, bfloat16 ~3.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2}

pytestmark = pytest.mark.usefixtures('one_thread')

LAYERS = {
    'contranorm': functools.partial(ContraNorm, 16, scale=0.5),
    'contranorm_non_neighbors': functools.partial(
        ContraNorm, 16, scale=0.5, negatives='non_neighbors'),
    'contranorm_symmetric': functools.partial(
        ContraNorm, 16, scale=0.5, negatives='non_neighbors',
        symmetric=True),
    'contranorm_large_tau': functools.partial(ContraNorm, 16,
                                              temperature=1e4),
    'contranorm_small_tau': functools.partial(ContraNorm, 16,
                                              temperature=0.1),
    'contranorm_d': functools.partial(DualContraNorm, 16, scale=0.5),
    'pairnorm': functools.partial(PairNorm, mode='PN'),
    'pairnorm_si': functools.partial(PairNorm, mode='PN-SI'),
    'pairnorm_scs': functools.partial(PairNorm, mode='PN-SCS'),
    'isobn': functools.partial(IsoBN, 16),
    'sepnorm': functools.partial(SepNorm, 16),
}
# Graphs of very different sizes in one batch: the small ones are padded
# the most in a dense batch.
SIZES = (3, 40, 1, 17)


def _graphs(seed=0):
    r"""Node features :obj:`[sum(SIZES), 16]`, the sorted batch vector and
    undirected random edges inside each graph."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(SIZES), 16, generator=gen, dtype=torch.float64)
    batch = torch.cat([torch.full((n, ), g) for g, n in enumerate(SIZES)])
    edges, start = [], 0
    for n in SIZES:
        if n > 1:
            edges.append(start + torch.randint(0, n, (2, 2 * n),
                                               generator=gen))
        start += n
    return x, batch, to_undirected(torch.cat(edges, dim=1))


def _apply(layer, x, batch, batch_size, edge_index):
    r"""The layer on a batch of graphs, with the edges where it takes
    them (non-neighbour negatives)."""
    if getattr(layer, 'negatives', None) == 'non_neighbors':
        return layer(x, batch, batch_size, edge_index=edge_index)
    return layer(x, batch, batch_size)


def _layer(name, seed=0):
    torch.manual_seed(seed)
    layer = LAYERS[name]()
    for p in layer.parameters():  # affine parameters away from 1 and 0
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    return layer.train()


def _error(out, ref):
    return float((out.double().cpu() - ref).abs().max() /
                 ref.abs().max().clamp(min=1e-12))


@pytest.mark.parametrize('name', list(LAYERS))
@pytest.mark.parametrize('dtype', DTYPES, ids=['fp32', 'bf16'])
@pytest.mark.parametrize('device', DEVICES)
def test_layer_matches_float64_on_the_cpu(device, dtype, name):
    r"""Each layer on :obj:`device` in :obj:`dtype` (a batch of graphs of
    very different sizes, training mode) against itself in float64 on the
    CPU: output and input gradient."""
    x, batch, edge_index = _graphs()
    ref_layer = _layer(name).double()
    layer = copy.deepcopy(ref_layer).to(device, dtype)  # before the
    # reference's forward updates running statistics
    x_ref = x.clone().requires_grad_()
    ref = _apply(ref_layer, x_ref, batch, len(SIZES), edge_index)
    grad_out = torch.randn(ref.shape, dtype=ref.dtype,
                           generator=torch.Generator().manual_seed(7))
    ref.backward(grad_out)

    x_dev = x.to(device, dtype).requires_grad_()
    out = _apply(layer, x_dev, batch.to(device), len(SIZES),
                 edge_index.to(device))
    out.backward(grad_out.to(device, dtype))
    assert out.dtype == dtype and out.device.type == device
    assert _error(out.detach(), ref.detach()) < TOLERANCE[dtype]
    assert _error(x_dev.grad, x_ref.grad) < 2 * TOLERANCE[dtype]


PER_GRAPH = ['contranorm', 'contranorm_non_neighbors',
             'contranorm_symmetric', 'contranorm_large_tau',
             'contranorm_small_tau', 'contranorm_d', 'pairnorm',
             'pairnorm_si', 'pairnorm_scs']


@pytest.mark.parametrize('name', PER_GRAPH)
@pytest.mark.parametrize('dtype', DTYPES, ids=['fp32', 'bf16'])
@pytest.mark.parametrize('device', DEVICES)
def test_padding_never_changes_a_graph(device, dtype, name):
    r"""A graph normalised beside others (padded in the dense batch) gets
    the output it gets alone, on :obj:`device` in :obj:`dtype`: the other
    graphs' nodes carry exactly zero weight at every temperature."""
    x, batch, edge_index = _graphs(seed=1)
    layer = _layer(name).to(device, dtype)
    x, batch, edge_index = (x.to(device, dtype), batch.to(device),
                            edge_index.to(device))
    together = _apply(layer, x, batch, len(SIZES), edge_index)
    start = 0
    for g, n in enumerate(SIZES):
        nodes = slice(start, start + n)
        inside = (edge_index[0] >= start) & (edge_index[0] < start + n)
        alone = _apply(layer, x[nodes], batch.new_zeros(n), 1,
                       edge_index[:, inside] - start)
        tol = TOLERANCE[dtype] * float(alone.detach().abs().max().clamp(min=1))
        assert (together[nodes] - alone).abs().max() <= tol, f'graph {g}'
        start += n


def _fused_backends(device):
    r"""The fused attention kernels of :obj:`device`: flash (and
    memory-efficient on CUDA), never the math kernel that builds the
    :math:`n \times n` matrix."""
    if device == 'cpu':
        return [SDPBackend.FLASH_ATTENTION]
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


@pytest.mark.parametrize('name', ['contranorm', 'contranorm_non_neighbors',
                                  'contranorm_symmetric'])
@pytest.mark.parametrize('dtype', DTYPES, ids=['fp32', 'bf16'])
@pytest.mark.parametrize('device', DEVICES)
def test_contranorm_attention_takes_a_fused_kernel(device, dtype, name):
    r"""ContraNorm's similarity attention (one graph and a padded batch,
    forward and backward) runs with the math kernel forbidden: the shapes
    it hands to scaled_dot_product_attention are ones the fused kernels
    take, so no :math:`n \times n` matrix is built."""
    x, batch, edge_index = _graphs(seed=2)
    layer = _layer(name).to(device, dtype)
    x = x.to(device, dtype).requires_grad_()
    batch, edge_index = batch.to(device), edge_index.to(device)
    with sdpa_kernel(_fused_backends(device)):
        out = _apply(layer, x, batch, len(SIZES), edge_index)  # padded
        out = out + _apply(layer, x, None, None, edge_index)  # one graph
        out.float().square().sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize('device', DEVICES)
def test_runs_equal_single_models_on_the_device(device):
    r"""DeepGCN(runs=3) on :obj:`device` is three one-run models: same
    outputs for the same weights (dropout off)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(30, 12, generator=gen)
    edge_index = to_undirected(torch.randint(0, 30, (2, 80), generator=gen))
    norm = functools.partial(ContraNorm, negatives='non_neighbors')
    seeds = [torch.Generator().manual_seed(s) for s in range(3)]
    model = DeepGCN(12, 4, num_layers=4, hidden_channels=16, dropout=0.0,
                    norm=norm, runs=3)
    model.reset_parameters(seeds)
    out = model.to(device).eval()(x.to(device), edge_index.to(device))
    for r in range(3):
        alone = DeepGCN(12, 4, num_layers=4, hidden_channels=16,
                        dropout=0.0, norm=norm)
        alone.reset_parameters([torch.Generator().manual_seed(r)])
        expected = alone.to(device).eval()(x.to(device),
                                           edge_index.to(device))
        torch.testing.assert_close(out[r], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize('device', DEVICES)
def test_monitor_on_the_device_equals_float64_on_the_cpu(device):
    r"""CollapseMonitor's values of a batch of graphs of very different
    sizes on :obj:`device` (float32) are those of float64 on the CPU:
    every metric, uniformity too, per graph and averaged."""
    from gnorm.monitor import METRICS, CollapseMonitor
    x, batch, edge_index = _graphs(seed=3)
    torch.manual_seed(0)
    model = DeepGCN(16, 4, num_layers=3, hidden_channels=16,
                    dropout=0.0).eval()
    metrics = [*METRICS, 'uniformity']

    def values(dev, dtype):
        m = copy.deepcopy(model).to(dev)
        monitor = CollapseMonitor(m, metrics=metrics, dtype=dtype,
                                  max_samples=8, neighbor_hops=1,
                                  remote_hops=2)
        with torch.no_grad(), monitor.record(
                step=0, edge_index=edge_index.to(dev), batch=batch.to(dev),
                batch_size=len(SIZES)):
            m(x.float().to(dev), edge_index.to(dev))
        return {(r['layer'], r['metric']): r['value']
                for r in monitor.records}

    got = values(device, None)
    want = values('cpu', torch.float64)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5,
                                         nan_ok=True), key


NODE = ['dataset=csbm', 'dataset.num_nodes=200', 'layers=4',
        'norm=contranorm', 'norm.negatives=non_neighbors',
        'train.epochs=4', 'train.progress=false', 'collapse_metrics=false']


def _node_run(tmp_path, name, device, *overrides):
    cfg = compose_train(*NODE, f'device={device}', *overrides)
    return train_runs([cfg], [str(tmp_path / name)])[0]


@pytest.mark.parametrize('device', DEVICES)
def test_node_training_in_bf16_follows_fp32(tmp_path, device):
    r"""A DeepGCN trained under bf16 autocast on :obj:`device` follows its
    fp32 run: same first-epoch loss to bf16's precision, finite curve."""
    fp32 = _node_run(tmp_path, 'fp32', device)
    bf16 = _node_run(tmp_path, 'bf16', device, 'train.precision=bf16')
    assert bf16['status'] == fp32['status'] == 'ok'
    assert bf16['curve']['loss'][0] == pytest.approx(
        fp32['curve']['loss'][0], rel=3e-2)
    assert all(map(torch.isfinite, torch.tensor(bf16['curve']['loss'])))


@pytest.mark.parametrize('device', [pytest.param('cpu', marks=pytest.mark.slow),
                                    CUDA])
def test_compiled_node_training_equals_eager(tmp_path, device):
    r"""``train.compile=true`` computes what eager does (dropout off: the
    compiled step draws its masks from torch's generator)."""
    eager = _node_run(tmp_path, 'eager', device, 'model.dropout=0.0')
    compiled = _node_run(tmp_path, 'compiled', device, 'model.dropout=0.0',
                         'train.compile=true')
    assert compiled['curve']['loss'] == pytest.approx(
        eager['curve']['loss'], rel=1e-4, abs=1e-5)
    assert compiled['best_epoch'] == eager['best_epoch']


# A tiny Graphormer on 120 graphs of the ZINC fixture.
GRAPH = ['dataset=zinc_fixture', 'dataset.limit=120', 'model=graphormer',
         'norm=sepnorm', 'layers=1', 'model.hidden_channels=16',
         'model.num_heads=2', 'model.ffn_channels=16', 'model.max_dist=3',
         'train.epochs=2', 'train.batch_size=40', 'train.warmup_steps=2',
         'train.lr=1e-3', 'train.progress=false']


def _graph_run(tmp_path, name, device, *overrides):
    cfg = compose_train(*GRAPH, f'device={device}',
                        f'data.root={tmp_path / "data"}', *overrides)
    return train(cfg, output_dir=tmp_path / name)


def _comparable(results):
    r"""What two runs of one config must share: the curve without times,
    the selection and the metrics."""
    curve = {k: v for k, v in results['curve'].items() if k != 'time_s'}
    return json.dumps([curve, results['best_epoch'], results['val_metric'],
                       results['test_metric']])


@needs_mirror
@pytest.mark.parametrize('device', DEVICES)
def test_graph_training_in_bf16(tmp_path, device):
    r"""The Graphormer trains under bf16 autocast on :obj:`device` (the
    path every GPU run takes) and stays near its fp32 run."""
    fp32 = _graph_run(tmp_path, 'fp32', device)
    bf16 = _graph_run(tmp_path, 'bf16', device, 'train.precision=bf16')
    assert bf16['status'] == 'ok'
    assert bf16['curve']['loss'][0] == pytest.approx(
        fp32['curve']['loss'][0], rel=5e-2)


@needs_mirror
@pytest.mark.parametrize('device', [pytest.param('cpu', marks=pytest.mark.slow),
                                    CUDA])
def test_compiled_graph_training_equals_eager(tmp_path, device):
    r"""``train.compile=true`` trains the Graphormer through one compiled
    graph (fullgraph, symbolic sizes: the batches of every size share it)
    and, without dropout (the compiled graph draws its own masks), gives
    the eager run's curve."""
    no_dropout = ('model.dropout=0.0', 'model.input_dropout=0.0',
                  'model.attention_dropout=0.0', 'train.precision=fp32')
    eager = _graph_run(tmp_path, 'eager', device, *no_dropout)
    compiled = _graph_run(tmp_path, 'compiled', device, *no_dropout,
                          'train.compile=true')
    for key in ('loss', 'val_metric', 'test_metric'):
        assert compiled['curve'][key] == pytest.approx(
            eager['curve'][key], rel=1e-4, abs=1e-5)


@needs_mirror
@pytest.mark.parametrize('device', DEVICES)
def test_deterministic_runs_repeat_bitwise(tmp_path, device):
    r"""With ``train.deterministic=true`` two runs of one config give the
    same curve, selection and metrics bit for bit: node (DeepGCN with
    ContraNorm's attention) and graph (Graphormer, whose attention backward
    is where fused GPU kernels are nondeterministic) training."""
    node = [_node_run(tmp_path, f'node{i}', device,
                      'train.deterministic=true') for i in range(2)]
    assert node[0]['curve'] == node[1]['curve']
    graph = [_graph_run(tmp_path, f'graph{i}', device,
                        'train.deterministic=true') for i in range(2)]
    assert _comparable(graph[0]) == _comparable(graph[1])


@needs_mirror
@pytest.mark.parametrize('device', DEVICES)
def test_graph_loop_with_workers_equals_in_process(tmp_path, device):
    r"""Collating in two worker processes (and, on CUDA, copying from
    pinned memory without blocking) trains what in-process collation
    trains."""
    main = _graph_run(tmp_path, 'main', device, 'train.deterministic=true')
    workers = _graph_run(tmp_path, 'workers', device,
                         'train.num_workers=2',
                         'train.deterministic=true')
    assert _comparable(workers) == _comparable(main)


@needs_mirror
@pytest.mark.parametrize('device', DEVICES)
def test_a_graph_seed_alone_equals_the_seed_among_others(tmp_path, device):
    r"""With ``train.data_seed`` the seeds train as one StackedGraphormer
    on :obj:`device` (on CUDA: the fused attention kernels without dropout,
    each run's dropout masks from its own generator on the device), and
    each run gives its curve alone."""
    seeds = (0, 1)
    cfgs = [compose_train(*GRAPH, f'device={device}', 'train.data_seed=3',
                          f'data.root={tmp_path / "data"}',
                          'train.precision=fp32', f'seed={s}')
            for s in seeds]
    together = train_runs(cfgs, [str(tmp_path / f'together{s}')
                                 for s in seeds])
    for s, cfg, b in zip(seeds, cfgs, together):
        (a, ) = train_runs([cfg], [str(tmp_path / f'alone{s}')])
        assert b['batch_runs'] == 2
        for key in ('loss', 'val_metric', 'test_metric'):
            assert b['curve'][key] == pytest.approx(a['curve'][key],
                                                    rel=1e-4, abs=1e-5)


# --- the node step as CUDA graphs (train.cuda_graph) ------------------------

def _recorded(fn):
    r"""A stand-in for :func:`gnorm.train.graphed.cuda_capture` on the CPU:
    it runs :obj:`fn` at capture (where a CUDA graph would only record it)
    and skips the first replay, so the work runs exactly once per epoch as
    with a real graph; each later replay runs :obj:`fn` again into the
    captured output."""
    output, first = fn(), [True]

    def replay():
        if first[0]:
            first[0] = False
            return
        output.copy_(fn())
    return replay, output


def _fit_runs(device, cuda_graph, *overrides, epochs=8):
    from gnorm.train.node import load_runs
    from gnorm.train.node_loop import fit
    from gnorm.train.node_setup import build_model
    cfgs = [compose_train(*NODE, f'device={device}', 'model.dropout=0.3',
                          'train.eval_every=2', f'seed={s}', *overrides)
            for s in (0, 1)]
    data = load_runs(cfgs, torch.device('cpu'))
    model = build_model(cfgs[0], data.num_features, int(data.y.max()) + 1,
                        runs=cfgs)
    model.reset_parameters([torch.Generator().manual_seed(c.seed)
                            for c in cfgs])
    data, model = data.to(device), model.to(device)
    generators = [torch.Generator(device).manual_seed(c.seed) for c in cfgs]
    results = [{}, {}]
    best = fit(model, data, results, epochs, 0.01, 5e-4, generators,
               progress=False, eval_every=2, cuda_graph=cuda_graph)
    return results, best


@pytest.mark.parametrize('device', DEVICES)
def test_graphed_node_training_equals_eager(device, monkeypatch):
    r"""``train.cuda_graph``: two runs as one model, with dropout (each
    run's generator registered with the graphs) and an evaluation every
    other epoch, train as the eager step does through the warm-up epochs,
    the capture and the replays: same curves, same best epochs, same
    weights. On the CPU a stand-in capture (:func:`_recorded`) runs the
    step's logic; CUDA captures real graphs."""
    if device == 'cpu':
        from gnorm.train import graphed
        monkeypatch.setattr(graphed, 'cuda_capture',
                            lambda generators=None: _recorded)
    eager, eager_best = _fit_runs(device, False)
    graphs, graphs_best = _fit_runs(device, True)
    for a, b in zip(eager, graphs):
        assert b['best_epoch'] == a['best_epoch']
        for key, values in a['curve'].items():
            assert b['curve'][key] == pytest.approx(
                values, rel=1e-4, abs=1e-5, nan_ok=True), key
    for key, value in eager_best.items():
        torch.testing.assert_close(graphs_best[key], value, rtol=1e-4,
                                   atol=1e-5)


def test_graphed_step_reads_alive_and_skips_evaluation_at_each_replay():
    r"""After the capture, each replay reads the ``alive`` of its epoch
    (copied into the captured input), returns outputs that the next
    replay does not overwrite, and an epoch without evaluation gets NaN
    metrics without running the evaluation."""
    from gnorm.train.graphed import GraphedStep
    from gnorm.train.node_loop import Step

    class Counting:
        data = type('Data', (), {'x': torch.zeros(1)})()
        generators, evaluations, records = None, 0, []

        def train(self, optimizer, alive):
            return alive.float() * 2

        def evaluate(self):
            Counting.evaluations += 1
            return torch.full((2, 4), float(Counting.evaluations))

        skipped = staticmethod(Step.skipped)

        def __call__(self, optimizer, alive, evaluate=True, record=None):
            Counting.records.append(record)
            losses = self.train(optimizer, alive)
            return losses, (self.evaluate() if evaluate
                            else self.skipped(losses))

    step = GraphedStep(Counting(), warmup=1, capture=_recorded)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1)
    step(optimizer, torch.tensor([True, True]), record='epoch 1')  # eager
    losses, metrics = step(optimizer, torch.tensor([True, False]),
                           record='epoch 2')
    assert Counting.records == ['epoch 1']
    assert losses.tolist() == [2.0, 0.0]                  # captured
    kept = losses
    losses, metrics = step(optimizer, torch.tensor([False, True]),
                           evaluate=False)
    assert losses.tolist() == [0.0, 2.0] and kept.tolist() == [2.0, 0.0]
    assert torch.isnan(metrics).all() and Counting.evaluations == 2
    losses, metrics = step(optimizer, torch.tensor([True, True]))
    assert losses.tolist() == [2.0, 2.0] and metrics[0, 0] == 3.0


def test_cuda_graph_needs_cuda_and_excludes_compile(tmp_path):
    r"""Bad input, one line: ``train.cuda_graph`` on the CPU, or with
    ``train.compile``."""
    from gnorm.errors import ConfigError
    with pytest.raises(ConfigError, match='train.cuda_graph=true needs a '
                       'CUDA device, got device=cpu'):
        _node_run(tmp_path, 'cpu', 'cpu', 'train.cuda_graph=true')
    with pytest.raises(ConfigError, match='train.cuda_graph and '
                       'train.compile are two ways'):
        _node_run(tmp_path, 'both', 'cpu', 'train.cuda_graph=true',
                  'train.compile=true')
