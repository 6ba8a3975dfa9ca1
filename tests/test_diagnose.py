r"""Why a deep GNN failed: the per-layer gradient norms
(gnorm.monitor.gradients, the CollapseMonitor's and every node run's) and
gnorm.monitor.diagnose, each label on a model built to have that failure
and only that one."""
import math

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
                                    NO_NORMS, UNTRAINABLE,
                                    diagnose_measures)
from gnorm.monitor.gradients import layer_parameters
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
    gradients field holds the first 5 epochs and every 2nd, with the
    weights' norms and each layer's effective rank and cosine."""
    from gnorm.train.run import train_runs
    tiny = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=4',
            'train.epochs=8', 'train.progress=false', 'norm=pairnorm']
    with_ = train_runs([compose_train(*tiny, 'train.grad_every=2')],
                       [str(tmp_path / 'a')])[0]
    without = train_runs([compose_train(*tiny, 'train.grad_every=0')],
                         [str(tmp_path / 'b')])[0]
    assert with_['curve'] == without['curve']
    assert with_['gradients']['epoch'] == [1, 2, 3, 4, 5, 6, 8]
    for key in ('param_norm', 'effective_rank', 'cosine_similarity'):
        assert len(with_['gradients'][key]) == 7
    assert with_['gradients']['effective_rank'][0][0] >= 1
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
    assert found.evidence.name == 'weakest/strongest layer sensitivity'


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
    assert found.missing == ['no gradients recorded', NO_NORMS]
    failed = diagnose({'status': 'failed',
                       'error': 'the training loss became nan at epoch 3'})
    assert failed.label == DIVERGED and failed.missing == []
    assert str(failed) == 'diverged: the training loss became nan at epoch 3'
    stuck = diagnose_measures(losses=[1.1, 1.05, 1.0], num_classes=3)
    assert stuck.label == UNTRAINABLE and 'loss' in stuck.evidence.name


# ------------------------------------------- round 2: units, dead branches,
# the constant predictor, the cause first
class ConvNormStack(torch.nn.Module):
    r"""A user's PyG GCN: GCNConv -> BatchNorm -> ReLU per layer, a linear
    head; the monitor hooks the convolutions, ahead of the norms."""
    def __init__(self, width, hidden, classes, layers):
        super().__init__()
        from torch_geometric.nn import GCNConv
        sizes = [width] + [hidden] * layers
        self.convs = torch.nn.ModuleList(
            GCNConv(a, b) for a, b in zip(sizes, sizes[1:]))
        self.norms = torch.nn.ModuleList(
            torch.nn.BatchNorm1d(hidden) for _ in range(layers))
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index):
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x, edge_index)))
        return self.head(x)


def test_rescaled_input_features_leave_the_label_unchanged():
    r"""Features times 1000 ahead of GCNConv -> BatchNorm: the same function
    and the same Adam steps, so the same label, whereas the output
    gradients' ratio moves 1000-fold."""
    x, edge_index, _ = _graph(n=60, edges=240)
    y = _labels_from_features(x, edge_index)
    found = {}
    for scale in (1.0, 1000.0):
        torch.manual_seed(0)
        model = ConvNormStack(8, 16, 3, 3)
        names = [f'convs.{i}' for i in range(3)] + ['head']
        found[scale] = _train(model, names, scale * x, edge_index, y,
                              epochs=40)
    assert found[1.0].label == found[1000.0].label, (str(found[1.0]),
                                                     str(found[1000.0]))
    one, many = (next(m for m in found[s].measures
                      if m.name.startswith('weakest')) for s in found)
    assert abs(one.value / many.value - 1) < 0.05


class DeadBranches(torch.nn.Module):
    r"""A pre-norm residual stack whose branches are switched off:
    :math:`x + 0 \cdot f(\mathrm{LN}(x))`. The skip carries every gradient
    past the blocks, and the branches' weights get exactly 0."""
    def __init__(self, width, classes, blocks):
        super().__init__()
        self.lin_in = torch.nn.Linear(width, 16)
        self.blocks = torch.nn.ModuleList(Branch(16) for _ in range(blocks))
        self.head = torch.nn.Linear(16, classes)

    def forward(self, x, edge_index):
        x = self.lin_in(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Branch(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + 0.0 * torch.relu(self.lin(self.norm(x)))


def test_a_residual_stack_with_dead_branches_is_not_healthy():
    x, edge_index, _ = _graph(n=60, edges=240)
    y = _labels_from_features(x, edge_index)
    torch.manual_seed(0)
    model = DeadBranches(8, 3, 8)
    names = ['lin_in'] + [f'blocks.{i}' for i in range(8)] + ['head']
    found = _train(model, names, x, edge_index, y, epochs=30)
    assert found.label not in (TRAINS, OVERFITS), str(found)
    assert found.label == UNTRAINABLE and found.evidence.value == 0
    assert found.onset == 0  # the first recorded step


def test_learning_nothing_is_judged_against_a_constant_predictor():
    r"""Five balanced-ish classes: a loss only 5 % below the constant
    predictor's is no failure where validation beats its majority class
    by 12 points (squirrel's 2-layer GCN); it is where validation sits at
    the majority class. Without a constant predictor, log C, said."""
    losses = [1.6, 1.55, 1.52]
    constant = {'train_loss': 1.6, 'val_score': 0.20}
    learned = diagnose_measures(losses=losses, num_classes=5,
                                val_score=0.32, constant=constant)
    assert learned.label == TRAINS, str(learned)
    stuck = diagnose_measures(losses=losses, num_classes=5, val_score=0.205,
                              constant=constant)
    assert stuck.label == UNTRAINABLE and 'constant' in stuck.evidence.name
    old = diagnose_measures(losses=losses, num_classes=5, val_score=0.32)
    assert 'log C' in old.evidence.name
    assert any('log C' in m for m in old.missing)


def _records(ratio_by_epoch, rank_by_epoch, layers=4):
    r"""Gradient records and a trace: per epoch, layer 1's sensitivity is
    :obj:`ratio` of the others'; the last hidden layer's effective rank
    is :obj:`rank`."""
    epochs = sorted(ratio_by_epoch)
    grads = [[ratio_by_epoch[e]] + [1.0] * (layers - 1) for e in epochs]
    return {'epoch': epochs, 'param_grad_norm': grads,
            'param_norm': [[1.0] * layers for _ in epochs],
            'effective_rank': [[8.0] * (layers - 2)
                               + [rank_by_epoch[e], 2.0] for e in epochs]}


def test_the_label_names_the_failure_that_came_first():
    r"""The representation collapses at epoch 1 while the gradients are
    still fine; they vanish from epoch 2: rank-collapsed, then
    untrainable. The other order gives the other label."""
    rec = _records({1: 0.15, 2: 1e-3 / 2, 3: 1e-6, 10: 1e-7},
                   {1: 1.1, 2: 1.05, 3: 1.02, 10: 1.01})
    collapse = {'effective_rank': [8.0, 8.0, 1.01, 2.0]}
    found = diagnose_measures(collapse, rec, trace=rec, num_classes=2,
                              at=10)
    assert found.label == RANK_COLLAPSED and found.onset == 1, str(found)
    assert [(f.label, f.onset) for f in found.then] == [(UNTRAINABLE, 2)]
    assert str(found).startswith('rank-collapsed at epoch 1 (effective '
                                 'rank of layer 3 1.01, cut 1.5')
    assert '; then untrainable from epoch 2' in str(found)
    late = _records({1: 1e-4, 2: 1e-5, 3: 1e-6, 10: 1e-7},
                    {1: 6.0, 2: 4.0, 3: 1.4, 10: 1.01})
    found = diagnose_measures(collapse, late, trace=late, num_classes=2,
                              at=10)
    assert found.label == UNTRAINABLE and found.onset == 1
    assert [(f.label, f.onset) for f in found.then] == [(RANK_COLLAPSED, 3)]


def test_a_collapse_seen_only_at_the_selected_epoch_began_by_it():
    rec = _records({1: 0.2, 10: 1e-5, 20: 1e-6}, {1: 6.0, 10: 5.0, 20: 5.0})
    del rec['effective_rank']
    found = diagnose_measures({'effective_rank': [8.0, 8.0, 1.1, 2.0]}, rec,
                              num_classes=2, at=40)
    assert found.label == UNTRAINABLE and found.onset == 10
    assert found.then[0].label == RANK_COLLAPSED
    assert 'then rank-collapsed by epoch 40' in str(found)


def test_the_rank_cut_says_what_the_classes_need():
    for classes, cut in ((2, 1.5), (3, 1.5), (7, 1.5)):
        found = diagnose_measures({'effective_rank': [9.0, cut, 2.0]},
                                  num_classes=classes)
        assert found.label == RANK_COLLAPSED and found.evidence.threshold \
            == cut
        assert f'C = {classes} classes need {classes - 1}' in str(found)
        assert diagnose_measures({'effective_rank': [9.0, cut + 0.1, 2.0]},
                                 num_classes=classes).label == TRAINS


def test_a_ranking_run_stores_what_recomputes_its_roc_auc(tmp_path):
    r"""A ROC-AUC run stores each test node's score and label at the
    selected epoch; an outside reader's ROC-AUC of them (scikit-learn's
    definition, written out here) is the run's. It records the constant
    predictor it is judged against, and its collapse field the layers'
    squared row norms."""
    from gnorm.train.run import train_runs
    run = train_runs([compose_train(
        'dataset=csbm', 'dataset.num_nodes=200', 'dataset.num_classes=2',
        'dataset.metric=rocauc', 'layers=2', 'train.epochs=5',
        'train.progress=false')], [str(tmp_path / 'a')])[0]
    stored = run['test_predictions']['scores']
    scores, labels = stored['log_odds'], [int(c) for c in stored['labels']]
    assert len(scores) == run['dataset']['split_sizes'][2]
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    assert wins / (len(pos) * len(neg)) == pytest.approx(
        run['test_metric'], abs=1e-6)
    constant = run['dataset']['constant']
    assert constant['val_score'] == 0.5 and 0 < constant['train_loss'] \
        <= math.log(2) + 1e-9
    assert len(run['collapse']['squared_norm']) == \
        len(run['collapse']['effective_rank'])
