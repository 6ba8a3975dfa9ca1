r"""CollapseMonitor: its values are the metrics of the layer outputs
captured by hand; nothing is recorded outside record(); no hook is left
behind, after remove(), an exception or a bad input."""
import csv
import math

import matplotlib
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from conftest import experiment
from gnorm.data import TorchNeighborSampler
from gnorm.metrics import (dirichlet_energy, effective_rank,
                           feature_cosine_similarity, feature_variance, mad,
                           mad_gap, uniformity)
from gnorm.models import DeepGCN
from gnorm.monitor import (METRICS, OPTIONAL_METRICS, CollapseMonitor,
                           read_csv)
from test_metrics_pairs import random_graph, ref_hops, ref_mad

matplotlib.use('Agg')  # the plots are drawn off screen

TOL = dict(rel=1e-4, abs=1e-5)
EVERY = METRICS + OPTIONAL_METRICS


def expected(h, edge_index, batch=None, batch_size=None, samples=256,
             seed=0, metrics=METRICS):
    r"""The public :obj:`metrics` of one captured output, averaged over
    graphs."""
    gen = lambda: torch.Generator().manual_seed(seed)  # noqa: E731
    h = h.detach()
    values = {
        'effective_rank': effective_rank(h, batch, batch_size),
        'cosine_similarity': feature_cosine_similarity(h, batch, batch_size),
        'variance': feature_variance(h, batch, batch_size),  # defaults
        'dirichlet_energy': dirichlet_energy(h, edge_index, batch,
                                             batch_size),
        'dirichlet_energy_normalized': dirichlet_energy(
            h, edge_index, batch, batch_size, normalized=True),
        'mad': mad(h, batch=batch, batch_size=batch_size,
                   max_samples=samples, generator=gen()),
        'mad_gap': mad_gap(h, edge_index, batch, batch_size,
                           max_samples=samples, generator=gen()),
        'uniformity': uniformity(h, batch, batch_size, max_samples=samples,
                                 generator=gen()),
    }
    return {k: float(values[k].double().nanmean()) for k in metrics}


def capture(model, names):
    r"""The outputs of the named modules in one forward pass, by hand."""
    out, handles = {}, []
    modules = dict(model.named_modules())
    for name in names:
        def hook(module, args, output, name=name):
            out[name] = output[0] if isinstance(output, tuple) else output
        handles.append(modules[name].register_forward_hook(hook))
    return out, handles


def by_layer(records, step=None):
    table = {}
    for r in records:
        if step is None or r['step'] == step:
            table.setdefault(r['layer'], {})[r['metric']] = r['value']
    return table


def assert_same(got, want):
    assert set(got) == set(want)
    for metric, value in want.items():
        if math.isnan(value):
            assert math.isnan(got[metric]), metric
        else:
            assert got[metric] == pytest.approx(value, **TOL), metric


def no_hooks(model):
    return all(not m._forward_hooks for m in model.modules())


def graph(n=120, m=240, channels=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, channels, generator=g),
            random_graph(n, m, seed=seed))


@pytest.mark.parametrize('metrics', [None, EVERY])
def test_gcn_8_layers_equal_metrics_of_captured_outputs(metrics):
    r"""The default metrics, or every one: uniformity is asked for."""
    torch.manual_seed(0)
    x, edge_index = graph(n=300, m=330)  # sparse: remote pairs exist
    model = GCN(12, 16, num_layers=8, out_channels=5)
    monitor = CollapseMonitor(model, **({} if metrics is None else
                                        {'metrics': metrics}))
    metrics = metrics or METRICS
    assert 'uniformity' not in METRICS
    assert monitor.layers == [f'convs.{i}' for i in range(8)]
    assert str(monitor) == \
        f'CollapseMonitor(layers=8, metrics={list(metrics)})'
    captured, handles = capture(model, monitor.layers)
    with monitor.record(step=3, edge_index=edge_index):
        model(x, edge_index)
    for h in handles:
        h.remove()
    assert len(monitor.records) == 8 * len(metrics)
    assert {r['step'] for r in monitor.records} == {3}
    assert {r['graphs'] for r in monitor.records} == {1}
    table = by_layer(monitor.records)
    assert list(table) == monitor.layers  # in the model's order
    for name in monitor.layers:  # 256 of the 300 nodes in the pairs
        assert_same(table[name], expected(captured[name], edge_index,
                                          metrics=metrics))
    assert not math.isnan(table['convs.0']['mad_gap'])
    monitor.remove()
    assert no_hooks(model)


def test_variance_is_feature_variance_with_its_default_arguments():
    r"""One name, one meaning: the monitor's variance is what
    feature_variance(h) returns, not a value a factor N apart."""
    x, edge_index = graph(seed=2)
    model = GCN(12, 16, num_layers=2)
    monitor = CollapseMonitor(model, metrics=['variance'])
    captured, handles = capture(model, monitor.layers)
    with monitor.record(0):
        model(x, edge_index)
    for h in handles:
        h.remove()
    for r in monitor.records:
        want = float(feature_variance(captured[r['layer']].detach()))
        assert r['value'] == pytest.approx(want, **TOL)


def test_nothing_recorded_outside_record_and_hooks_return_at_once():
    x, edge_index = graph()
    model = GCN(12, 16, num_layers=3)
    monitor = CollapseMonitor(model, metrics=['effective_rank'])
    calls = []
    original = monitor._measure
    monitor._measure = lambda *a: (calls.append(a[0]), original(*a))[1]
    model(x, edge_index)
    assert monitor.records == [] and calls == []
    with monitor.record(0):
        model(x, edge_index)
    model(x, edge_index)  # after record(): nothing more
    assert len(monitor.records) == 3 and len(calls) == 3
    # A training step outside record() gives the same gradients as without
    # the monitor.
    grads = []
    for attached in (True, False):
        if not attached:
            monitor.remove()
        model.zero_grad()
        model(x, edge_index).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_a_recorded_training_step_trains_as_an_unrecorded_one():
    r"""Recording the training step's own forward pass (train mode,
    gradients on, dropout) changes neither the loss nor the gradients,
    and records the outputs that forward computed."""
    x, edge_index = graph(seed=4)
    steps = []
    for recorded in (True, False):
        torch.manual_seed(0)
        model = GCN(12, 16, num_layers=3, dropout=0.3).train()
        monitor = CollapseMonitor(model, metrics=['variance'])
        captured, handles = capture(model, monitor.layers)
        if recorded:
            with monitor.record(0, edge_index=edge_index):
                loss = model(x, edge_index).square().mean()
        else:
            loss = model(x, edge_index).square().mean()
        loss.backward()
        steps.append((loss.item(), [p.grad for p in model.parameters()]))
        for h in handles:
            h.remove()
        want = {n: float(feature_variance(h.detach()))
                for n, h in captured.items()}
        assert {r['layer']: r['value'] for r in monitor.records} == (
            pytest.approx(want, **TOL) if recorded else {})
    (loss_a, grads_a), (loss_b, grads_b) = steps
    assert loss_a == loss_b
    for a, b in zip(grads_a, grads_b):
        assert torch.equal(a, b)


def test_hooks_are_removed_after_an_exception():
    x, edge_index = graph()
    model = GCN(12, 16, num_layers=2)
    monitor = CollapseMonitor(model)
    with pytest.raises(RuntimeError, match='boom'):
        with monitor.record(0, edge_index=edge_index):
            model(x, edge_index)
            raise RuntimeError('boom')
    assert no_hooks(model) and monitor.records == []
    with pytest.raises(RuntimeError, match='after remove'):
        monitor.record(1)
    with CollapseMonitor(model) as monitor:  # a context manager itself
        assert not no_hooks(model)
    assert no_hooks(model)


def _one_line_and_no_hooks(excinfo, model):
    assert '\n' not in str(excinfo.value)
    assert no_hooks(model)


def test_bad_input_is_one_line_and_leaves_no_hook():
    x, edge_index = graph()

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(12, 4)

        def forward(self, x):
            return self.lin(x)

    with pytest.raises(ValueError, match='no MessagePassing layer') as e:
        CollapseMonitor(Plain())
    _one_line_and_no_hooks(e, Plain())
    with pytest.raises(ValueError, match="no layer 'convs.9'"):
        CollapseMonitor(GCN(12, 16, num_layers=2), layers=['convs.9'])

    model = GCN(12, 16, num_layers=2)
    monitor = CollapseMonitor(model)
    with pytest.raises(ValueError, match='need the graph') as e:
        with monitor.record(0):
            model(x, edge_index)
    _one_line_and_no_hooks(e, model)

    model = GCN(12, 16, num_layers=2)
    with torch.no_grad():
        model.convs[1].lin.weight.fill_(float('nan'))
    monitor = CollapseMonitor(model)
    with pytest.raises(ValueError, match="'convs.1' output non-finite") as e:
        with monitor.record(0, edge_index=edge_index):
            model(x, edge_index)
    _one_line_and_no_hooks(e, model)
    assert monitor.records == []

    class Dense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(12, 4)

        def forward(self, x):
            return self.lin(x.view(4, -1, 12))  # [B, N, C]

    model = Dense()
    monitor = CollapseMonitor(model, layers=['lin'],
                              metrics=['effective_rank'])
    with pytest.raises(ValueError, match=r'shape \[4, 30, 4\]') as e:
        with monitor.record(0):
            model(x)
    _one_line_and_no_hooks(e, model)

    model = GCN(12, 16, num_layers=3)
    monitor = CollapseMonitor(model, layers=['act'],
                              metrics=['variance'])  # shared by all layers
    with pytest.raises(ValueError, match="'act' ran twice") as e:
        with monitor.record(0):
            model(x, edge_index)
    _one_line_and_no_hooks(e, model)


def test_gat_on_neighbor_sampled_batches_measures_the_seed_nodes():
    r"""NeighborLoader-style batches (PyG's NodeLoader with gnorm's
    plain-torch TorchNeighborSampler): node metrics on the seed nodes, the
    Dirichlet energies on all nodes and edges of the sampled subgraph,
    MADGap on the seeds with hop distances in the subgraph."""
    x, edge_index = graph(n=400, m=500, seed=2)
    data = Data(x=x, edge_index=edge_index, y=torch.randint(0, 3, (400, )))
    loader = NodeLoader(data, node_sampler=TorchNeighborSampler(
        data, [4, 4], seed=0), batch_size=40, shuffle=True)
    torch.manual_seed(0)
    model = GAT(12, 16, num_layers=2, out_channels=3, heads=2)
    monitor = CollapseMonitor(model, max_samples=64, metrics=EVERY)
    assert monitor.layers == ['convs.0', 'convs.1']
    for step, batch in enumerate(loader):
        assert batch.batch_size == 40 and batch.n_id.numel() == batch.num_nodes
        assert torch.equal(batch.n_id[:40], batch.input_id)  # seeds first
        captured, handles = capture(model, monitor.layers)
        with monitor.record(step, edge_index=batch.edge_index,
                            num_seed_nodes=batch.batch_size):
            model(batch.x, batch.edge_index)
        for h in handles:
            h.remove()
        table = by_layer(monitor.records, step)
        for name, h in captured.items():
            h = h.detach()
            # (edges of the seeds alone: replaced below)
            want = expected(h[:40], torch.zeros(2, 0, dtype=torch.long),
                            samples=64, metrics=EVERY)
            want['dirichlet_energy'] = float(dirichlet_energy(
                h, batch.edge_index))
            want['dirichlet_energy_normalized'] = float(dirichlet_energy(
                h, batch.edge_index, normalized=True))
            dist = ref_hops(batch.edge_index, batch.num_nodes)
            nodes = range(40)
            want['mad_gap'] = ref_mad(h.double(), dist, 8, math.inf, nodes) - \
                ref_mad(h.double(), dist, 1, 3, nodes)
            assert_same(table[name], want)
        if step == 1:
            break
    assert len(monitor.records) == 2 * 2 * len(EVERY)


def test_a_custom_module_with_layers_by_name_and_type():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(12, 16)
            self.blocks = torch.nn.ModuleList(
                [GCNConv(16, 16), SAGEConv(16, 16), GCNConv(16, 16)])
            self.out = torch.nn.Linear(16, 3)

        def forward(self, x, edge_index):
            x = self.inp(x)
            for block in self.blocks:
                x = block(x, edge_index).relu()
            return self.out(x)

    x, edge_index = graph(seed=3)
    model = Net()
    assert CollapseMonitor(model).layers == ['blocks.0', 'blocks.1',
                                             'blocks.2']
    by_type = CollapseMonitor(model, layers=[GCNConv, 'out'])
    assert by_type.layers == ['blocks.0', 'blocks.2', 'out']
    captured, handles = capture(model, by_type.layers)
    with by_type.record(0, edge_index=edge_index):
        model(x, edge_index)
    for h in handles:
        h.remove()
    table = by_layer(by_type.records)
    for name in by_type.layers:
        assert_same(table[name], expected(captured[name], edge_index))
    by_type.remove()


@pytest.mark.parametrize('cls', [GIN, GraphSAGE])
def test_mini_batches_of_graphs_average_per_graph_values(cls):
    graphs = []
    for i, n in enumerate((15, 9, 22)):
        x, edge_index = graph(n=n, m=n + 3, seed=10 + i)
        graphs.append(Data(x=x, edge_index=edge_index))
    b = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    model = cls(12, 16, num_layers=3)
    monitor = CollapseMonitor(model, max_samples=10, metrics=EVERY)
    captured, handles = capture(model, monitor.layers)
    with monitor.record(0, edge_index=b.edge_index, batch=b.batch,
                        batch_size=b.num_graphs + 1):  # one graph empty
        model(b.x, b.edge_index)
    for h in handles:
        h.remove()
    assert {r['graphs'] for r in monitor.records} == {3}
    table = by_layer(monitor.records)
    for name, h in captured.items():
        want = expected(h, b.edge_index, b.batch, 3, samples=10,
                        metrics=EVERY)
        assert_same(table[name], want)


def test_deep_gcn_layer_outputs_are_return_hidden():
    x, edge_index = graph(seed=4)
    torch.manual_seed(0)
    model = DeepGCN(12, 4, num_layers=5, hidden_channels=8,
                    residual=True).eval()
    monitor = CollapseMonitor(model)
    assert monitor.layers == [f'outputs.{i}' for i in range(5)]
    assert 'outputs' not in ' '.join(model.state_dict())
    with monitor.record(0, edge_index=edge_index):
        _, hidden = model(x, edge_index, return_hidden=True)
    table = by_layer(monitor.records)
    for i, h in enumerate(hidden):
        assert_same(table[f'outputs.{i}'], expected(h, edge_index))


@pytest.mark.parametrize('num_layers', [1, 4])
def test_stacked_runs_are_measured_run_by_run(num_layers, tmp_path):
    x, edge_index = graph(n=200, m=220, seed=7)  # sparse: remote pairs
    torch.manual_seed(0)
    model = DeepGCN(12, 4, num_layers=num_layers, hidden_channels=8,
                    runs=3).double().eval()
    monitor = CollapseMonitor(model, metrics=EVERY)
    with torch.no_grad(), monitor.record(2, edge_index=edge_index):
        _, hidden = model(x.double(), edge_index, return_hidden=True)
    assert len(monitor.records) == num_layers * 3 * len(EVERY)
    assert list(monitor.records[0]) == ['step', 'run', 'layer', 'metric',
                                        'value', 'graphs']
    for r in range(3):
        table = by_layer([rec for rec in monitor.records
                          if rec['run'] == r])
        for i, h in enumerate(hidden):
            h = h.expand(3, *h.shape[-2:])  # a layer the runs share
            want = expected(h[r], edge_index,  # the metrics of run r alone
                            metrics=EVERY)
            assert set(table[f'outputs.{i}']) == set(want)
            for metric, value in want.items():
                assert table[f'outputs.{i}'][metric] == pytest.approx(
                    value, rel=1e-9, abs=1e-12, nan_ok=True), metric
        assert monitor.table(run=r).to_dict() == {
            m: {n: values[m] for n, values in table.items()} for m in EVERY}
    monitor.to_csv(tmp_path / 'collapse.csv')
    rows = list(csv.DictReader(open(tmp_path / 'collapse.csv')))
    assert list(rows[0]) == ['step', 'run', 'layer', 'metric', 'value',
                             'graphs']
    assert {row['run'] for row in rows} == {'0', '1', '2'}
    monitor.remove()


def test_stacked_runs_equal_the_single_models_of_each_run():
    x, edge_index = graph(n=150, m=200, seed=8)
    torch.manual_seed(0)
    runs = DeepGCN(12, 4, num_layers=3, hidden_channels=8, runs=2).eval()
    ones = [DeepGCN(12, 4, num_layers=3, hidden_channels=8).eval()
            for _ in range(2)]
    for r, one in enumerate(ones):  # run r's weights in a model of its own
        one.load_state_dict({k: v[r] for k, v in runs.state_dict().items()})
    monitors = [CollapseMonitor(m, dtype=torch.float64)
                for m in [runs] + ones]
    for monitor, model in zip(monitors, [runs] + ones):
        with torch.no_grad(), monitor.record(0, edge_index=edge_index):
            model(x, edge_index)
    assert all('run' not in rec for m in monitors[1:] for rec in m.records)
    for r in range(2):
        stacked = [{k: v for k, v in rec.items() if k != 'run'}
                   for rec in monitors[0].records if rec['run'] == r]
        alone = monitors[1 + r].records
        assert [(a['layer'], a['metric']) for a in stacked] == \
            [(a['layer'], a['metric']) for a in alone]
        for a, b in zip(stacked, alone):
            assert a['value'] == pytest.approx(b['value'], rel=1e-5,
                                               abs=1e-6, nan_ok=True)


def test_graphormer_layers_are_measured_per_graph_on_their_tokens():
    r"""Each graph's tokens (graph token, then its nodes), its edges
    between node tokens: the metrics per graph, averaged; uniformity of
    its node tokens alone, subsampled above max_samples."""
    from test_graphormer import _graph, _model
    graphs = [_graph(7, seed=1), _graph(5, seed=2, extra=3)]
    b = Batch.from_data_list(graphs)
    model = _model().eval()
    monitor = CollapseMonitor(model, metrics=EVERY, max_samples=6)
    assert monitor.layers == ['layers.0', 'layers.1']
    tokens = {}
    handles = [model.layers[i].register_forward_hook(
        lambda m, a, o, i=i: tokens.__setitem__(i, o[0]))
        for i in range(2)]
    with monitor.record(0):  # batch and edges come from the layers
        model(b.x, b.edge_index, b.edge_attr, b.spd, b.path_edge, b.batch,
              b.num_graphs)
    for h in handles:
        h.remove()
    table = by_layer(monitor.records)
    assert {r['graphs'] for r in monitor.records} == {2}
    for i in range(2):
        h = tokens[i].detach()  # packed: the 2 graph tokens, then the nodes
        own, graph_of, edges, start = [], [], [], 2
        for g, data in enumerate(graphs):  # graph token, then its nodes
            edges.append(data.edge_index + 1 + len(graph_of))
            own += [h[g:g + 1], h[start:start + data.num_nodes]]
            graph_of += [g] * (1 + data.num_nodes)
            start += data.num_nodes
        own, graph_of = torch.cat(own), torch.tensor(graph_of)
        want = expected(own, torch.cat(edges, 1), graph_of, 2, samples=6)
        node = torch.ones_like(graph_of, dtype=torch.bool)
        node[[0, 1 + graphs[0].num_nodes]] = False  # the graph tokens
        want['uniformity'] = float(uniformity(
            own[node], graph_of[node], 2, max_samples=6,
            generator=torch.Generator().manual_seed(0)).nanmean())
        assert_same(table[f'layers.{i}'], want)


def test_the_sample_is_reproducible_and_seeded():
    x, edge_index = graph(n=300, m=330, seed=5)
    model = GCN(12, 16, num_layers=2)
    values = []
    for seed in (0, 0, 1):
        monitor = CollapseMonitor(model, metrics=['mad'], max_samples=50,
                                  seed=seed)
        with monitor.record(0):
            model(x, edge_index)
        monitor.remove()
        values.append([r['value'] for r in monitor.records])
    assert values[0] == values[1] and values[0] != values[2]


def test_outputs_csv_tensorboard_and_plots(tmp_path):
    x, edge_index = graph(seed=6)
    model = GCN(12, 16, num_layers=3)
    monitor = CollapseMonitor(model, metrics=['effective_rank', 'mad'])
    for step in (0, 10, 20):
        with monitor.record(step, edge_index=edge_index):
            model(x, edge_index)
    monitor.remove()
    monitor.to_csv(tmp_path / 'collapse.csv')
    rows = list(csv.DictReader(open(tmp_path / 'collapse.csv')))
    assert list(rows[0]) == ['step', 'layer', 'metric', 'value', 'graphs']
    assert len(rows) == 3 * 3 * 2
    assert rows[0]['layer'] == 'convs.0' and float(rows[0]['value']) > 0
    assert read_csv(tmp_path / 'collapse.csv') == monitor.records

    class Writer:
        def __init__(self):
            self.scalars = []

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, value, step))

        def flush(self):
            pass

    writer = Writer()
    monitor.to_tensorboard(writer)
    assert len(writer.scalars) == 18
    assert {t for t, _, _ in writer.scalars} == {
        f'collapse/{m}/convs.{i}' for m in ('effective_rank', 'mad')
        for i in range(3)}
    live = Writer()  # as each record() ends
    watching = CollapseMonitor(model, metrics=['variance'], writer=live)
    with watching.record(5):
        model(x, edge_index)
    watching.remove()
    assert live.scalars == [(f'collapse/variance/convs.{i}',
                             watching.records[i]['value'], 5)
                            for i in range(3)]
    for kind in ('lines', 'heatmap'):
        monitor.plot(tmp_path / f'{kind}.png', kind=kind)
        assert (tmp_path / f'{kind}.png').stat().st_size > 1000
    with pytest.raises(ValueError, match="kind='lines' or 'heatmap'"):
        monitor.plot(kind='bars')


def test_the_guide_quotes_the_committed_benchmark():
    r"""docs/monitor.rst's cost table is generated from the committed
    experiments/results/bench_monitor_cpu.jsonl, as is its report."""
    import re
    from pathlib import Path
    bench = experiment('bench/monitor')
    rows = bench.load_rows()
    assert [r['model'] for r in rows] == [
        'DeepGCN, 32 layers, full batch',
        'GAT, 2 layers, neighbour-sampled batches',
        'DeepGCN, 32 layers, full batch (effective_rank, dirichlet_energy '
        'only)']
    assert rows[0]['metrics'] == list(METRICS)
    page = (Path(__file__).resolve().parents[1] / 'docs' / 'monitor.rst'
            ).read_text()
    quoted = re.search(r'\.\. bench-monitor-numbers\n\n(.*?)\n\.\. '
                       r'/bench-monitor-numbers', page, re.S).group(1)
    assert quoted == bench.guide_table(rows)
    assert bench.with_guide_table(page, rows) == page
    command = 'python experiments/bench/monitor.py'
    assert bench.report(rows, command) == bench.OUT.read_text()
    # The guide's reading of the rows.
    deep, gat, two = rows
    for r in rows:  # recording the evaluation every 10th epoch: < 5 %
        assert r['eval_every_10'] < 0.05
    assert gat['every_10'] < 0.05
    for r in (deep, two):  # a forward of its own: more
        assert r['every_10'] > 0.05
        assert 0.03 < r['forward_s'] / (10 * r['train_s']) < 0.05  # ~4 %
        assert r['train_s'] < 2.5 * r['forward_s']  # ~ two forward passes
    costs = deep['metric_s']  # each metric alone
    assert list(costs) == list(METRICS)
    assert max(costs, key=costs.get) == 'effective_rank'  # costs the most


def test_inputs_are_prepared_once_while_they_are_the_same_tensors():
    r"""The graph count, drawn nodes and hop distances are computed at the
    first record() and reused while record() gets the same tensors."""
    x, edge_index = graph(seed=7)
    model = GCN(12, 16, num_layers=2)
    monitor = CollapseMonitor(model)
    prepared = []
    for step, edges in enumerate((edge_index, edge_index, edge_index.clone())):
        with monitor.record(step, edge_index=edges):
            model(x, edges)
        prepared.append(monitor._cache['nodes'])
    assert prepared[0] is prepared[1] is not prepared[2]
    edge_index[0, 0] = 1  # changed in place: prepared again
    with monitor.record(3, edge_index=edge_index):
        model(x, edge_index)
    assert monitor._cache['nodes'] is not prepared[0]
    by_step = [by_layer(monitor.records, s) for s in range(3)]
    assert by_step[0] == by_step[1] == by_step[2]


def test_a_gps_layer_stack_by_type_with_batches_of_graphs():
    r"""PyG's GPSConv (local MessagePassing + global attention) is a plain
    Module: 'auto' finds the convolutions inside it, layers=[GPSConv] the
    blocks' outputs."""
    from torch_geometric.nn import GINConv, GPSConv

    class GPS(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([
                GPSConv(12, GINConv(torch.nn.Linear(12, 12)), heads=2)
                for _ in range(3)])

        def forward(self, x, edge_index, batch):
            for layer in self.layers:
                x = layer(x, edge_index, batch)
            return x

    b = Batch.from_data_list([Data(*graph(n=n, m=n, seed=20 + n))
                              for n in (10, 14)])
    torch.manual_seed(0)
    model = GPS().eval()
    assert CollapseMonitor(model).layers == [
        f'layers.{i}.conv' for i in range(3)]
    monitor = CollapseMonitor(model, layers=[GPSConv])
    assert monitor.layers == ['layers.0', 'layers.1', 'layers.2']
    captured, handles = capture(model, monitor.layers)
    with torch.no_grad(), monitor.record(0, edge_index=b.edge_index,
                                         batch=b.batch, batch_size=2):
        model(b.x, b.edge_index, b.batch)
    for h in handles:
        h.remove()
    table = by_layer(monitor.records)
    for name, h in captured.items():
        assert_same(table[name], expected(h, b.edge_index, b.batch, 2))


@pytest.mark.parametrize('kind', ['lines', 'heatmap'])
def test_a_metric_without_finite_values_says_so_in_its_panel(kind):
    from gnorm.monitor.plot import plot_records
    records = [{'step': s, 'layer': f'convs.{i}', 'metric': m,
                'value': float('nan') if m == 'mad_gap' else 1.0 + i + s,
                'graphs': 1}
               for s in (0, 10) for i in range(3)
               for m in ('mad', 'mad_gap')]
    fig = plot_records(records, ['convs.0', 'convs.1', 'convs.2'],
                       ['mad', 'mad_gap'], kind=kind)
    mad, gap = fig.axes[:2]
    assert gap.get_title() == 'mad_gap'
    assert [t.get_text() for t in gap.texts] == [
        'no finite value recorded\n(e.g. mad_gap of a graph\nwithout '
        'remote pairs)']
    assert list(mad.texts) == []


def test_a_nonfinite_output_raises_or_gives_nan_values():
    x, edge_index = graph(seed=9)
    model = GCN(12, 16, num_layers=2)
    with torch.no_grad():
        model.convs[1].lin.weight[0, 0] = math.inf
    monitor = CollapseMonitor(model, metrics=['variance', 'mad'])
    with pytest.raises(ValueError, match="layer 'convs.1' output "
                                         "non-finite values at step 0"):
        with monitor.record(0, edge_index=edge_index):
            model(x, edge_index)
    monitor = CollapseMonitor(model, metrics=['variance', 'mad'],
                              nonfinite='nan')
    with monitor.record(0, edge_index=edge_index):
        model(x, edge_index)
    table = by_layer(monitor.records)
    assert all(math.isfinite(v) for v in table['convs.0'].values())
    assert all(math.isnan(v) for v in table['convs.1'].values())
    with pytest.raises(ValueError, match="nonfinite='raise' or 'nan'"):
        CollapseMonitor(model, nonfinite='skip')


def test_a_huge_finite_output_is_measured_not_refused():
    r"""Entries near the largest float32 are finite: no overflow in the
    check that flags nan and inf outputs."""
    x = graph(seed=4)[0].abs()
    model = torch.nn.Sequential(torch.nn.Linear(12, 8, bias=False))
    with torch.no_grad():  # positive entries: their sum overflows float32
        model[0].weight.abs_().mul_(1e37 / 4)
    monitor = CollapseMonitor(model, layers=['0'],
                              metrics=['cosine_similarity'])
    with monitor.record(0):
        h = model(x)
    assert torch.isfinite(h).all() and torch.isinf(h.detach().sum())
    want = float(feature_cosine_similarity(h.detach()))
    assert monitor.records[0]['value'] == pytest.approx(want, **TOL)


def test_dirichlet_energies_of_directed_repeated_and_self_loop_edges():
    r"""The monitor measures each pair of nodes once, weighted by its
    count of edges: the energies of dirichlet_energy (edge by edge) for
    directed, repeated, reversed and self-loop edges, graph by graph."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(20, 6, generator=g, dtype=torch.float64)
    batch = torch.tensor([0] * 12 + [1] * 8)
    edge_index = torch.tensor([[0, 1, 1, 5, 5, 3, 4, 12, 13, 19, 19, 7],
                               [1, 0, 0, 5, 2, 3, 11, 13, 12, 18, 18, 2]])
    model = torch.nn.Sequential(torch.nn.Linear(6, 5).double())
    metrics = ['dirichlet_energy', 'dirichlet_energy_normalized']
    monitor = CollapseMonitor(model, layers=['0'], metrics=metrics)
    with monitor.record(0, edge_index=edge_index, batch=batch):
        h = model(x).detach()
    for r, normalized in zip(monitor.records, (False, True)):
        want = dirichlet_energy(h, edge_index, batch, normalized=normalized)
        assert r['value'] == pytest.approx(float(want.mean()), rel=1e-12)


def test_the_cora_figure_and_its_sentence_come_from_the_committed_records(
        tmp_path):
    r"""experiments/results/monitor_cora.csv: both models at the recorded
    epochs, every layer and metric; the figure drawn from it
    (plot_compare: a row per metric, a column per epoch) shows its values
    (line by line, a line per model), and docs/monitor.rst quotes the
    sentence the script writes from it."""
    import re
    from pathlib import Path
    script = experiment('monitor_cora')
    rows = read_csv(script.OUT)
    collapse = [r for r in rows if r['metric'] != 'val_acc']
    assert len(collapse) == len(script.MODELS) * len(script.STEPS) * 32 * \
        len(METRICS)
    assert {r['step'] for r in rows} == set(script.STEPS)
    fig = script.plot(rows, tmp_path / 'monitor_cora.png')
    assert (tmp_path / 'monitor_cora.png').stat().st_size > 10000
    steps = len(script.STEPS)
    assert len(fig.axes) == steps * len(METRICS)  # [metric, epoch]
    layers = [f'convs.{i}' for i in range(32)]
    for i, metric in enumerate(METRICS):
        for j, step in enumerate(script.STEPS):
            drawn = [list(line.get_ydata())
                     for line in fig.axes[steps * i + j].lines]
            want = [[next(r['value'] for r in collapse if r['model'] == model
                          and r['metric'] == metric and r['layer'] == n
                          and r['step'] == step) for n in layers]
                    for model in script.MODELS]
            assert drawn == want, (metric, step)
    page = (Path(__file__).resolve().parents[1] / 'docs' / 'monitor.rst'
            ).read_text()
    quoted = re.search(r'\.\. monitor-cora-numbers\n\n(.*?)\n\n\.\. '
                       r'/monitor-cora-numbers', page, re.S).group(1)
    assert ' '.join(quoted.split()) == script.guide_sentence(rows)


def two_steps(norm=None, metrics=('effective_rank', 'cosine_similarity',
                                  'variance')):
    r"""A monitor of PyG's 4-layer GCN recorded at steps 0 and 10."""
    x, edge_index = graph(seed=8)
    torch.manual_seed(0)
    model = GCN(12, 16, num_layers=4, norm=norm)
    monitor = CollapseMonitor(model, metrics=metrics)
    for step in (0, 10):
        with torch.no_grad(), monitor.record(step, edge_index=edge_index):
            model(x, edge_index)
        torch.nn.init.normal_(model.convs[1].lin.weight)  # steps differ
    monitor.remove()
    return monitor


def test_the_records_as_a_table_without_pandas(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'pandas', None)  # as if not installed
    monitor = two_steps()
    layers = [f'convs.{i}' for i in range(4)]
    table = monitor.table()  # the last step, every metric
    assert table.layers == layers and table.columns == list(monitor.metrics)
    assert table.to_dict() == {m: {n: v[m] for n, v in by_layer(
        monitor.records, 10).items()} for m in monitor.metrics}
    assert table.rows[0] == {'layer': 'convs.0', **by_layer(
        monitor.records, 10)['convs.0']}
    assert repr(table) == 'Table(4 layers x 3 columns, step 10)'
    text = str(table).splitlines()
    assert text[0].split() == ['step', '10', *monitor.metrics]
    assert text[1].split()[0] == 'convs.0' and len(text) == 5
    assert text[1].split()[1] == format(table.values[0][0], '.4g')
    markdown = monitor.table(step=0).to_markdown(fmt='.2f').splitlines()
    assert markdown[0] == '| step 0 | effective_rank | cosine_similarity ' \
        '| variance |'
    assert markdown[1] == '| --- | ---: | ---: | ---: |'
    assert markdown[2] == '| convs.0 | ' + ' | '.join(
        f'{by_layer(monitor.records, 0)["convs.0"][m]:.2f}'
        for m in monitor.metrics) + ' |'
    by_step = monitor.table('effective_rank')  # one metric, every step
    assert by_step.columns == [0, 10] and by_step.corner == 'effective_rank'
    assert by_step.values[2] == [by_layer(monitor.records, s)['convs.2'][
        'effective_rank'] for s in (0, 10)]
    two = monitor.table(['variance', 'effective_rank'], step=0)
    assert two.columns == ['variance', 'effective_rank']
    from gnorm.monitor import Table
    assert str(Table(['a'], ['m'], [[-1e-9]])).split()[-1] == '-1e-09'
    assert Table(['a'], ['m'], [[-1e-9]]).to_text('.3f').split()[-1] == \
        '0.000'  # no -0.000
    with pytest.raises(ValueError, match='nothing recorded at step 5; the '
                       'steps: 0, 10'):
        monitor.table(step=5)
    with pytest.raises(ValueError, match="no metric 'mad' recorded"):
        monitor.table('mad')
    with pytest.raises(ImportError) as e:
        monitor.to_pandas()
    assert 'pip install pandas' in str(e.value) and '\n' not in str(e.value)


def test_to_pandas_is_the_records():
    pandas = pytest.importorskip('pandas')
    monitor = two_steps()
    frame = monitor.to_pandas()
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame.columns) == ['step', 'layer', 'metric', 'value',
                                   'graphs']
    assert frame.to_dict('records') == monitor.records


def test_onset_is_the_first_layer_come_that_far_to_collapse():
    r"""By hand: effective rank falls to 1, cosine similarity rises to 1;
    fraction 0.5 of the first layer's distance."""
    model = GCN(4, 4, num_layers=4)
    monitor = CollapseMonitor(model, metrics=['effective_rank',
                                              'cosine_similarity', 'mad_gap'])
    monitor.remove()
    values = {  # step: (effective rank, cosine similarity, MADGap) by layer
        0: ([9.0, 7.0, 4.0, 2.0], [0.2, 0.5, 0.7, 0.95],
            [0.4, 0.3, 0.1, 0.0]),
        1: ([9.0, 8.0, 6.0, 5.0], [0.2, 0.3, 0.55, 0.6],
            [-0.1, -0.2, -0.3, -0.3]),
        2: ([math.nan, 1.0, 1.0, 1.0], [0.0, 0.6, 0.7, 0.8],
            [0.4, math.nan, 0.19, 0.1]),
    }
    monitor.records = [
        {'step': step, 'layer': f'convs.{i}', 'metric': metric,
         'value': column[i], 'graphs': 1}
        for step, columns in values.items()
        for metric, column in zip(monitor.metrics, columns)
        for i in range(4)]
    # rank - 1: 8, 6, 3, 1 (below 4: convs.2); 8, 7, 5, 4 (none below 4)
    assert monitor.onset('effective_rank') == {0: 'convs.2', 1: None,
                                               2: None}  # nan first layer
    # 1 - cos: 0.8, 0.5, 0.3, 0.05 (below 0.4: convs.2); 0.8, 0.7, 0.45,
    # 0.4 (none below 0.4); 1, 0.4, 0.3, 0.2 (below 0.5: convs.1)
    assert monitor.onset('cosine_similarity') == {0: 'convs.2', 1: None,
                                                  2: 'convs.1'}
    # only the output layer (convs.3, the logits) comes that close: no
    # onset, unless the output layer is asked for
    assert monitor.onset('cosine_similarity', fraction=0.1) == {
        0: None, 1: None, 2: None}
    assert monitor.onset('cosine_similarity', fraction=0.1, output=True) == {
        0: 'convs.3', 1: None, 2: None}
    # MADGap: below 0.2 from convs.2 (nan skipped); the first layer at or
    # below 0 has no onset
    assert monitor.onset('mad_gap') == {0: 'convs.2', 1: None, 2: 'convs.2'}
    with pytest.raises(ValueError, match='a fraction between 0 and 1'):
        monitor.onset('mad_gap', fraction=1.5)
    with pytest.raises(ValueError, match="no 'variance' recorded"):
        monitor.onset('variance')


def test_the_onset_is_never_the_output_layer_unless_asked():
    r"""A 2-class DeepGCN's last layer is its logits, of effective rank at
    most 2 however well its hidden layers keep theirs: the onset leaves it
    out (onsets, CollapseMonitor.onset, the plot's marks), unless
    ``output=True``."""
    from gnorm.monitor.onset import onsets
    model = DeepGCN(6, 2, num_layers=4, hidden_channels=16)
    monitor = CollapseMonitor(model, metrics=['effective_rank'])
    layers = monitor.layers
    assert layers == ['outputs.0', 'outputs.1', 'outputs.2', 'outputs.3']
    x, edge_index = torch.randn(30, 6), random_graph(30, 60)
    with monitor.record(0, edge_index=edge_index), torch.no_grad():
        assert model(x, edge_index).shape == (30, 2)  # outputs.3: logits
    monitor.remove()
    assert monitor.records[-1]['value'] <= 2.0  # whatever the layers did
    monitor.records = [
        {'step': 0, 'layer': layer, 'metric': 'effective_rank',
         'value': value, 'graphs': 1}
        for layer, value in zip(layers, [14.0, 13.0, 12.0, 1.9])]
    assert monitor.onset('effective_rank') == {0: None}
    assert monitor.onset('effective_rank', output=True) == {0: 'outputs.3'}
    assert onsets(monitor.records, layers, 'effective_rank') == {0: None}
    fig = monitor.plot(onset=0.5)
    assert not fig.axes[0].collections  # no onset marked
    # a hidden layer that comes that close is the onset either way
    monitor.records[2]['value'] = 5.0
    for output in (False, True):
        assert monitor.onset('effective_rank', output=output) == {
            0: 'outputs.2'}


def test_plot_compare_draws_monitors_on_shared_axes(tmp_path):
    from gnorm.monitor import plot_compare
    monitors = {'none': two_steps(),
                'batchnorm': two_steps(norm='batch_norm')}
    metrics = ['effective_rank', 'variance']
    fig = plot_compare(monitors, metrics=metrics, step=[0, 10],
                       path=tmp_path / 'compare.png', onset=0.5)
    assert (tmp_path / 'compare.png').stat().st_size > 1000
    assert len(fig.axes) == 4  # [metric, step], row by row
    first, marked = fig.axes[0], 0
    for i, metric in enumerate(metrics):
        for j, step in enumerate((0, 10)):
            ax = fig.axes[2 * i + j]
            assert first.get_shared_x_axes().joined(first, ax)
            assert ax.get_shared_y_axes().joined(fig.axes[2 * i], ax)
            assert [line.get_label() for line in ax.lines] == list(monitors)
            for line, monitor in zip(ax.lines, monitors.values()):
                want = by_layer(monitor.records, step)
                assert list(line.get_ydata()) == [
                    want[f'convs.{k}'][metric] for k in range(4)]
            # an onset marker (a triangle and a dotted line) per onset
            onsets = [m.onset(metric)[step] for m in monitors.values()]
            marks = sum(o is not None for o in onsets)
            assert len(ax.collections) == 2 * marks
            marked += marks
    assert marked > 0
    assert fig.axes[0].get_title() == 'step 0'
    assert fig.axes[2].get_yscale() == 'log'  # variance
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ['none', 'batchnorm', 'onset (fraction=0.5)']
    last = plot_compare(monitors)  # the last step, every metric
    assert len(last.axes) == 3 and last.axes[0].get_title() == 'step 10'
    records = {'a': monitors['none'].records}  # records alone do too
    assert len(plot_compare(records, metrics=['variance']).axes) == 1
    with pytest.raises(ValueError, match=r"'none' has no records at step 5 "
                       r"\(its steps: 0, 10\)"):
        plot_compare(monitors, step=5)
    with pytest.raises(ValueError, match="no 'mad' recorded"):
        plot_compare(monitors, metrics=['mad'])


def test_the_metrics_of_a_full_collapse():
    r"""Every node the same vector, doubled at each layer, on a ring with a
    hub (degrees 2 to 8): each metric at its COLLAPSED value, but the
    normalised Dirichlet energy, the squared norm of the row times a
    constant of the graph, rises with it; all-zero rows: effective rank 0,
    cosine similarity 0, MAD 1."""
    from torch_geometric.utils import to_undirected

    from gnorm.monitor import COLLAPSED

    class Twice(torch.nn.Module):  # every row: twice the mean row
        def forward(self, x):
            return 2 * x.mean(0, keepdim=True).expand_as(x)

    ring = torch.arange(40)
    edge_index = to_undirected(torch.cat([
        torch.stack([ring, (ring + 1) % 40]),
        torch.tensor([[0] * 6, list(range(2, 8))])], 1))
    model = torch.nn.Sequential(Twice(), Twice(), Twice())
    g = torch.Generator().manual_seed(0)
    row = torch.randn(1, 16, generator=g)
    for dtype, noise in ((torch.float32, 1e-6), (torch.float64, 1e-14)):
        monitor = CollapseMonitor(model, layers=[Twice], metrics=EVERY)
        with monitor.record(0, edge_index=edge_index):
            model(row.to(dtype).expand(40, 16))
        monitor.remove()
        table = by_layer(monitor.records)
        deg = torch.bincount(edge_index[1], minlength=40).double()
        scale = (1 + deg).rsqrt()
        graph_constant = float((scale[edge_index[1]] - scale[
            edge_index[0]]).square().sum() / 40)
        for i, layer in enumerate(['0', '1', '2']):
            norm = float(row.double().square().sum()) * 4 ** (i + 1)
            for metric, (value, _) in COLLAPSED.items():
                got = table[layer][metric]
                if metric == 'dirichlet_energy_normalized':
                    assert got == pytest.approx(graph_constant * norm,
                                                rel=1e-5)
                elif metric == 'variance':  # rounding of the mean row
                    assert 0 <= got < noise * norm
                else:
                    assert got == pytest.approx(value, abs=noise), metric
    zero = CollapseMonitor(model, layers=[Twice])
    with zero.record(0, edge_index=edge_index):
        model(torch.zeros(40, 16))
    zero.remove()
    assert by_layer(zero.records)['2'] == {
        'effective_rank': 0.0, 'cosine_similarity': 0.0, 'variance': 0.0,
        'dirichlet_energy': 0.0, 'dirichlet_energy_normalized': 0.0,
        'mad': 1.0, 'mad_gap': 0.0}
