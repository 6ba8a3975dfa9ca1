r"""Why a deep GNN failed: the per-layer gradient norms
(gnorm.monitor.gradients, the CollapseMonitor's and every node run's) and
gnorm.monitor.diagnose, each label on a model built to have that failure
and only that one."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.models import GCN
from torch_geometric.utils import to_undirected

from gnorm.models import DeepGCN, ResGNN
from gnorm.monitor import CollapseMonitor, Gradients, diagnose, find_layers

from gnorm.monitor.diagnosis import (DISAGREE, DIVERGED, OVERFITS,
                                    OVERSMOOTHED, RANK_COLLAPSED, TRAINS,
                                    UNTRAINABLE, diagnose_measures)
from gnorm.monitor.gradients import layer_parameters
from gnorm.train.node import fit
from conftest import compose_train

pytestmark = pytest.mark.usefixtures('one_thread')


def _graph(n=40, edges=160, features=8, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    edge_index = to_undirected(torch.randint(0, n, (2, edges), generator=g))
    y = torch.randint(0, classes, (n, ), generator=g)
    return x, edge_index, y


# ------------------------------------------------------- gradient records
def test_gradient_norms_match_autograd_in_float64():
    r"""The norm of the gradient reaching each layer's output and of its
    parameters' gradient, against autograd on the hidden outputs
    (retain_grad) and the parameters each layer holds, in float64."""
    x, edge_index, y = _graph()
    torch.manual_seed(0)
    model = DeepGCN(8, 3, 4, hidden_channels=16,
                    norm=torch.nn.LayerNorm).double()
    gradients = Gradients(model, find_layers(model))
    with gradients.record(1):
        out, hidden = model(x.double(), edge_index, return_hidden=True)
        for h in hidden:
            h.retain_grad()
        F.cross_entropy(out, y).backward()
    field = gradients.field()
    want = [float(h.grad.norm()) for h in hidden]
    assert field['output_grad_norm'][0] == pytest.approx(want, rel=1e-12)
    own = [[model.convs[i].weight, model.convs[i].bias]
           + ([model.norms[i].weight, model.norms[i].bias] if i < 3 else [])
           for i in range(4)]
    want = [float(torch.cat([p.grad.flatten() for p in ps]).norm())
            for ps in own]
    assert field['param_grad_norm'][0] == pytest.approx(want, rel=1e-12)
    assert [len(ps) for ps in layer_parameters(model, gradients.layers)] \
        == [4, 4, 4, 2]


def test_stacked_runs_record_each_runs_own_gradients():
    r"""A ResGNN of 2 stacked runs records per run the norms that run gets
    alone (the runs' losses are summed: each slice is its own)."""
    x, edge_index, y = _graph()
    seeds = [3, 5]
    batched = ResGNN(8, 3, 3, hidden_channels=16, runs=2, dropout=0.0)
    batched.reset_parameters([torch.Generator().manual_seed(s)
                              for s in seeds])
    together = Gradients(batched, find_layers(batched), runs=2)
    with together.record(1):
        out = batched(x, edge_index)
        sum(F.cross_entropy(o, y) for o in out).backward()
    for r, seed in enumerate(seeds):
        single = ResGNN(8, 3, 3, hidden_channels=16, dropout=0.0)
        single.reset_parameters([torch.Generator().manual_seed(seed)])
        alone = Gradients(single, find_layers(single))
        with alone.record(1):
            F.cross_entropy(single(x, edge_index), y).backward()
        for key in ('output_grad_norm', 'param_grad_norm'):
            assert together.field(r)[key][0] == pytest.approx(
                alone.field()[key][0], rel=1e-4)


def test_hooks_exist_only_inside_a_record():
    r"""Outside record() the model runs untouched: a forward and backward
    pass adds nothing; a record without a backward pass says so in a
    line; an error inside the block removes the hooks."""
    x, edge_index, y = _graph()
    model = GCN(8, 16, 3, 3)
    gradients = Gradients(model, find_layers(model))
    F.cross_entropy(model(x, edge_index), y).backward()
    assert gradients.steps == []
    with pytest.raises(ValueError, match='call loss.backward'):
        with gradients.record(1):
            model(x, edge_index)
    with pytest.raises(RuntimeError, match='boom'):
        with gradients.record(2):
            raise RuntimeError('boom')
    F.cross_entropy(model(x, edge_index), y).backward()
    assert gradients.steps == [] and gradients._outputs == {}


def test_recording_gradients_changes_no_run(tmp_path):
    r"""A node run with gradient records every 2 epochs trains exactly as
    one without (hooks that only read): same curve and weights; its
    gradients field holds epoch 1 and every 2nd."""
    from gnorm.train.run import train_runs
    tiny = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=4',
            'train.epochs=6', 'train.progress=false', 'norm=pairnorm']
    with_ = train_runs([compose_train(*tiny, 'train.grad_every=2')],
                       [str(tmp_path / 'a')])[0]
    without = train_runs([compose_train(*tiny, 'train.grad_every=0')],
                         [str(tmp_path / 'b')])[0]
    assert with_['curve'] == without['curve']
    assert with_['gradients']['epoch'] == [1, 2, 4, 6]
    assert with_['gradients']['layer'] == [1, 2, 3, 4]
    assert 'gradients' not in without
    assert all(v > 0 for v in with_['gradients']['output_grad_norm'][0])


# ------------------------------------------------ constructed failures
class Propagate(MessagePassing):
    r"""One GCN propagation without weights: :math:`\hat{A} X`."""
    def forward(self, x, edge_index):
        edge_index, weight = gcn_norm(edge_index, num_nodes=x.size(0))
        return self.propagate(edge_index, x=x, weight=weight)

    def message(self, x_j, weight):
        return weight.unsqueeze(-1) * x_j


class Stack(torch.nn.Module):
    r"""An input projection, then :obj:`middle` (hooked layers), then a
    linear head (hooked: the output)."""
    def __init__(self, middle, features=8, hidden=16, classes=3):
        super().__init__()
        self.lin_in = torch.nn.Linear(features, hidden)
        self.middle = torch.nn.ModuleList(middle)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        x = self.lin_in(x)
        for layer in self.middle:
            x = layer(x, edge_index)
        return self.head(x)


class OneDirection(torch.nn.Module):
    r"""Maps every node onto one direction: a scalar of the node times a
    fixed vector (equal rows would be oversmoothing's limit too: energy
    0)."""
    def __init__(self, width):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.u = torch.nn.Parameter(torch.randn(width, 1, generator=g))
        self.v = torch.nn.Parameter(torch.randn(1, width, generator=g))

    def forward(self, x, edge_index):
        return (x @ self.u) @ self.v


class Tanh(torch.nn.Module):
    def __init__(self, width, scale):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        with torch.no_grad():
            self.lin.weight.mul_(scale)

    def forward(self, x, edge_index):
        return torch.tanh(self.lin(x))


def _train(model, layers, x, edge_index, y, epochs=30, train=None,
           lr=0.01):
    r"""Adam on the :obj:`train` nodes (all), the monitor recording the
    collapse metrics and gradients of every epoch; the diagnosis of the
    last, with the scores on the training and the other nodes."""
    torch.manual_seed(0)
    train = torch.ones_like(y, dtype=torch.bool) if train is None else train
    monitor = CollapseMonitor(model, layers=layers, gradients=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for epoch in range(epochs):
        optimizer.zero_grad()
        with monitor.record(epoch, edge_index=edge_index):
            out = model(x, edge_index)
            loss = F.cross_entropy(out[train], y[train])
            loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        right = (model(x, edge_index).argmax(-1) == y).float()
    scores = float(right[train].mean()), float(right[~train].mean()) \
        if (~train).any() else float(right[train].mean())
    return monitor.diagnose(losses=losses, num_classes=int(y.max()) + 1,
                            train_score=scores[0], val_score=scores[1])


def _labels_from_features(x, edge_index):
    r"""Labels a 2-layer GCN can learn: the class of the propagated first
    features' sign pattern."""
    h = Propagate()(x, edge_index)
    return (h[:, 0] > 0).long() + (h[:, 1] > 0).long()


def test_a_healthy_two_layer_gcn_trains():
    x, edge_index, _ = _graph()
    y = _labels_from_features(x, edge_index)
    train = torch.arange(40) % 2 == 0
    model = GCN(8, 16, 2, 3)
    found = _train(model, 'auto', x, edge_index, y, epochs=100,
                   train=train)
    assert found.label == TRAINS, str(found)


def test_many_propagations_without_weights_oversmooth():
    x, edge_index, y = _graph()
    model = Stack([Propagate() for _ in range(24)])
    names = [f'middle.{i}' for i in range(24)] + ['head']
    found = _train(model, names, x, edge_index, y)
    assert found.label == OVERSMOOTHED, str(found)
    assert found.evidence.value < 1e-2 and found.evidence.layer == 24
    assert found.evidence.name == 'normalised energy ratio'  # GCN's limit


def test_equal_rows_after_a_row_norm_oversmooth_by_rusch_energy():
    r"""Propagations each followed by a row-wise LayerNorm: the rows
    become equal, which the unnormalised energy sees (0) and the
    degree-normalised one does not."""
    x, edge_index, y = _graph()

    class Smooth(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.propagate, self.norm = Propagate(), torch.nn.LayerNorm(16)

        def forward(self, x, edge_index):
            return self.norm(self.propagate(x, edge_index))

    model = Stack([Smooth() for _ in range(24)])
    found = _train(model, [f'middle.{i}' for i in range(24)] + ['head'],
                   x, edge_index, y, epochs=5)
    assert found.label == OVERSMOOTHED, str(found)
    assert found.evidence.name == 'energy ratio'


def test_a_deep_stack_with_a_tiny_initialisation_is_untrainable():
    x, edge_index, y = _graph()
    torch.manual_seed(0)
    model = Stack([Tanh(16, 0.05) for _ in range(10)])
    names = [f'middle.{i}' for i in range(10)] + ['head']
    found = _train(model, names, x, edge_index, y, epochs=5)
    assert found.label == UNTRAINABLE, str(found)
    assert found.evidence.name == 'first/last gradient'


def test_a_layer_mapping_every_node_onto_one_direction_is_rank_collapsed():
    x, edge_index, y = _graph()
    torch.manual_seed(0)
    model = Stack([Tanh(16, 1.0), OneDirection(16)])
    found = _train(model, ['middle.0', 'middle.1', 'head'], x, edge_index,
                   y, epochs=5)
    assert found.label == RANK_COLLAPSED, str(found)
    energies = [m for m in found.measures if 'energy' in m.name]
    assert energies and not any(m.holds for m in energies)


def test_a_model_memorising_random_labels_overfits():
    x, edge_index, _ = _graph(n=60, edges=40)
    y = torch.randint(0, 3, (60, ), generator=torch.Generator()
                      .manual_seed(1))
    train = torch.arange(60) % 2 == 0
    torch.manual_seed(0)
    model = Stack([Tanh(64, 1.0)], hidden=64)
    found = _train(model, ['middle.0', 'head'], x, edge_index, y,
                   epochs=300, train=train)
    assert found.label == OVERFITS, str(found)


def test_smooth_components_that_keep_their_rank_disagree():
    r"""Three cliques, propagated: every node becomes its component's
    vector, so the energy falls to 0 from the input projection's (the
    first layer) while the effective rank keeps three directions. The
    label says the measures disagree."""
    cliques = [torch.combinations(torch.arange(10) + 10 * c).t()
               for c in range(3)]
    edge_index = to_undirected(torch.cat(cliques, 1))
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(30) // 10
    model = Stack([Propagate() for _ in range(12)])
    found = _train(model, ['lin_in'] + [f'middle.{i}' for i in range(12)]
                   + ['head'], x, edge_index, y, epochs=5)
    assert found.label == DISAGREE, str(found)
    assert found.evidence.value >= 2


def test_a_run_says_what_it_could_not_read_and_when_it_diverged():
    found = diagnose_measures({'effective_rank': [3.0, 2.5, 2.0],
                               'dirichlet_energy_normalized': [1, .5, .2]})
    assert found.label == TRAINS
    assert found.missing == ['no gradients recorded']
    failed = diagnose({'status': 'failed',
                       'error': 'the training loss became nan at epoch 3'})
    assert failed.label == DIVERGED and failed.missing == []
    assert str(failed) == 'diverged: the training loss became nan at epoch 3'
    stuck = diagnose_measures(losses=[1.1, 1.05, 1.0], num_classes=3)
    assert stuck.label == UNTRAINABLE and 'loss' in stuck.evidence.name
