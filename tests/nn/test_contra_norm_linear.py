import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import erdos_renyi_graph

from gnorm.nn import ContraNorm, Stacked
from gnorm.nn._nystrom import landmarks, nystrom_negatives
from gnorm.nn.contra_norm import masked_pairs, normalize, pair_edges

OPTIONS = [('all', False), ('all', True), ('non_neighbors', False),
           ('non_neighbors', True)]


def graph(n=40, channels=5, p=0.1, seed=0, dtype=torch.float64):
    """Node features and random directed edges of one graph."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, generator=gen, dtype=dtype)
    torch.manual_seed(seed)
    return x, erdos_renyi_graph(n, p, directed=True)


def dense_negatives(x, kernel, mask, symmetric):
    """X_neg of a dense kernel matrix K (n x n) and its mask M (True where
    node i contrasts with node j): D_r^-1 (M K) X (+ (M K) D_c^-1 X), rows
    and columns without negatives zero."""
    k = kernel * mask
    row, col = k.sum(1, keepdim=True), k.sum(0, keepdim=True)
    out = torch.where(row > 0, k / row.where(row > 0, 1.0), 0.0) @ x
    if symmetric:
        out = out + torch.where(col > 0, k / col.where(col > 0, 1.0), 0.0) @ x
    return out * mask.any(1, keepdim=True)


def dense_mask(n, edge_index, negatives):
    """M: all ones, or zero on the diagonal and at (i, j) for each edge
    j -> i."""
    mask = torch.ones(n, n, dtype=torch.bool)
    if negatives == 'non_neighbors':
        mask[edge_index[1], edge_index[0]] = False
        mask.fill_diagonal_(False)
    return mask


def exact_kernel(x, temperature):
    xn = F.normalize(x, dim=1)
    return torch.exp(xn @ xn.t() / temperature)


def nystrom_kernel(x, temperature, k):
    """The approximate kernel, dense, written out from its definition:
    exp(|u|^2/t) a_i a_j (1 + C W^-1 C^T) around the mean direction u."""
    xn = F.normalize(x, dim=1)
    u = xn.mean(0)
    r, lm = xn - u, landmarks(xn, k) - u
    a = torch.exp(r @ u / temperature)
    c = torch.expm1(r @ lm.t() / temperature)
    w = torch.expm1(lm @ lm.t() / temperature)
    kappa = c @ torch.linalg.solve(w, c.t())
    return math.exp(u @ u / temperature) * a[:, None] * a[None] * (1 + kappa)


def negatives(x, temperature, k, edge_index=None, symmetric=False,
              compact=True):
    """nystrom_negatives of one graph, its pairs built from edge_index
    (repeated pairs dropped, or marked by keep)."""
    xn = normalize(x)
    pairs = ops = None
    if edge_index is not None:
        pairs = masked_pairs(edge_index, x.size(0), compact=compact)
        ops = pair_edges(pairs, x)
    return nystrom_negatives(x, xn, temperature, k, pairs, ops, symmetric)


@pytest.mark.parametrize('negatives_,symmetric', OPTIONS)
@pytest.mark.parametrize('temperature', [1.0, 0.5])
def test_every_node_a_landmark_gives_the_exact_layer(negatives_, symmetric,
                                                     temperature):
    # With k = n, k-means keeps every node as its own landmark and
    # Nystrom reproduces the kernel: the dense masked softmax.
    x, edge_index = graph()
    mask = dense_mask(40, edge_index, negatives_)
    expected = dense_negatives(x, exact_kernel(x, temperature), mask,
                               symmetric)
    out = negatives(x, temperature, 40,
                    edge_index if negatives_ == 'non_neighbors' else None,
                    symmetric)
    assert torch.allclose(out, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize('negatives_,symmetric', OPTIONS)
def test_masked_pairs_use_the_same_approximate_kernel(negatives_, symmetric):
    # k < n: the layer's X_neg is the dense masked softmax of the dense
    # approximate kernel, so the masked pairs carry exactly zero weight;
    # also with repeated edges, as pairs marked by keep.
    x, edge_index = graph(n=50, seed=1)
    edge_index = torch.cat([edge_index, edge_index[:, :7]], dim=1)
    mask = dense_mask(50, edge_index, negatives_)
    edges = edge_index if negatives_ == 'non_neighbors' else None
    for k in (3, 12):
        expected = dense_negatives(x, nystrom_kernel(x, 1.0, k), mask,
                                   symmetric)
        for compact in (True, False):
            out = negatives(x, 1.0, k, edges, symmetric, compact)
            assert torch.allclose(out, expected, rtol=0, atol=1e-9)


def test_error_decreases_as_landmarks_grow():
    x, _ = graph(n=300, channels=8, seed=2)
    expected = dense_negatives(x, exact_kernel(x, 0.5),
                               dense_mask(300, None, 'all'), False)
    spread = (expected - expected.mean(0)).norm()
    errors = [(negatives(x, 0.5, k) - expected).norm() / spread
              for k in (4, 16, 64, 256)]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.05 * errors[0]


@pytest.mark.parametrize('noise', [0.3, 0.1])
def test_smoothed_inputs_keep_their_node_specific_part(noise):
    # Mean cosine 0.994 and 0.999 (smoothed hidden states), float32 as
    # trained: the expansion around the mean direction keeps the small
    # node-specific part of X_neg (measured: 0.2 % and 2 %; the exact
    # layer in float32 itself is off by 0.4 % and 8 % there).
    gen = torch.Generator().manual_seed(3)
    x = 3 * torch.randn(16, generator=gen) + noise * torch.randn(
        400, 16, generator=gen)
    expected = dense_negatives(x.double(), exact_kernel(x.double(), 1.0),
                               dense_mask(400, None, 'all'), False)
    out = negatives(x, 1.0, 32).double()
    error = (out - out.mean(0)) - (expected - expected.mean(0))
    assert error.norm() < 0.05 * (expected - expected.mean(0)).norm()


@pytest.mark.parametrize('negatives_,symmetric', OPTIONS)
def test_gradients(negatives_, symmetric):
    x, edge_index = graph(n=14, channels=3, p=0.2, seed=4)
    x.requires_grad_()
    norm = ContraNorm(3, scale=0.8, negatives=negatives_, symmetric=symmetric,
                      learnable_scale=True, kernel='nystrom',
                      landmarks=5).double()
    assert torch.autograd.gradcheck(
        lambda x, s: norm(x, edge_index=edge_index), (x, norm.scale_param))


@pytest.mark.parametrize('negatives_,symmetric', OPTIONS)
def test_stacked_runs_equal_each_run_alone(negatives_, symmetric):
    x, edge_index = graph(n=60, seed=5)
    runs = torch.stack([x, 2 * x.flip(0), x + 1])
    norms = [ContraNorm(5, scale=s, negatives=negatives_, symmetric=symmetric,
                        kernel='nystrom', landmarks=8).double()
             for s in (0.5, 1.0, 0.0)]
    pairs = masked_pairs(edge_index, 60)
    for edges in (edge_index, pairs):
        out = Stacked(norms)(runs, edge_index=edges)
        for r, norm in enumerate(norms):
            assert torch.allclose(out[r], norm(runs[r], edge_index=edges),
                                  rtol=0, atol=1e-12)


@pytest.mark.parametrize('negatives_,symmetric', OPTIONS)
def test_batch_equals_one_graph_at_a_time(negatives_, symmetric):
    # Graphs of 30 and 25 nodes get Nystrom (k = 6), the small ones the
    # exact kernel; graph ids in any order.
    sizes = (30, 4, 25, 6)
    gen = torch.Generator().manual_seed(6)
    batch = torch.cat([torch.full((n, ), g) for g, n in enumerate(sizes)])
    batch = batch[torch.randperm(batch.numel(), generator=gen)]
    n = batch.numel()
    x = torch.randn(n, 5, generator=gen, dtype=torch.float64)
    same = (batch[:, None] == batch[None, :]).fill_diagonal_(False)
    edge_index = (same & (torch.rand(n, n, generator=gen) < 0.2)
                  ).nonzero().t()
    norm = ContraNorm(5, scale=0.7, negatives=negatives_, symmetric=symmetric,
                      kernel='nystrom', landmarks=6).double()
    expected = torch.empty_like(x)
    for g in range(len(sizes)):
        nodes = (batch == g).nonzero().view(-1)
        local = torch.full_like(batch, -1)
        local[nodes] = torch.arange(nodes.numel())
        sub = local[edge_index[:, batch[edge_index[1]] == g]]
        expected[nodes] = norm(x[nodes], edge_index=sub)
    for edges in (edge_index, masked_pairs(edge_index, n, batch),
                  masked_pairs(edge_index, n, batch, compact=False)):
        out = norm(x, batch, edge_index=edges)
        assert torch.allclose(out, expected, rtol=0, atol=1e-12)
    runs = norm(torch.stack([x, -x]), batch, edge_index=edge_index)
    assert torch.allclose(runs[0], expected, rtol=0, atol=1e-12)


def test_graphs_of_at_most_k_nodes_are_exact():
    x, edge_index = graph(n=20)
    exact = ContraNorm(5, negatives='non_neighbors').double()
    approx = ContraNorm(5, negatives='non_neighbors', kernel='nystrom',
                        landmarks=20).double()
    assert torch.equal(approx(x, edge_index=edge_index),
                       exact(x, edge_index=edge_index))


def test_deterministic_whatever_the_random_state():
    x, edge_index = graph(n=200, channels=16, dtype=torch.float32)
    norm = ContraNorm(16, negatives='non_neighbors', kernel='nystrom',
                      landmarks=16)
    torch.manual_seed(1)
    first = norm(x, edge_index=edge_index)
    norm.eval()
    torch.manual_seed(2)
    torch.rand(10)
    assert torch.equal(norm(x, edge_index=edge_index), first)


def test_repr():
    assert str(ContraNorm(64, kernel='nystrom', landmarks=128)) == \
        "ContraNorm(64, scale=1.0, kernel='nystrom', landmarks=128)"
    assert str(ContraNorm(64, landmarks=32)) == 'ContraNorm(64, scale=1.0)'


@pytest.mark.parametrize('kwargs,match', [
    (dict(kernel='nystrom', landmarks=0), 'landmarks must be an int >= 1'),
    (dict(kernel='nystrom', landmarks=-3), 'landmarks must be an int >= 1'),
    (dict(kernel='nystrom', landmarks=2.5), 'landmarks must be an int >= 1'),
    (dict(kernel='nystrom', landmarks='8'), 'landmarks must be an int >= 1'),
    (dict(kernel='nystrom', landmarks=True), 'landmarks must be an int >= 1'),
    (dict(kernel='nystrum'), "unknown kernel='nystrum'"),
    (dict(kernel='nystrom', temperature=0.05), 'needs temperature >= 0.1'),
])
def test_bad_arguments_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        ContraNorm(8, **kwargs)
    message = str(info.value)
    assert message.startswith('ContraNorm: ') and '\n' not in message
