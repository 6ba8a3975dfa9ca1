r"""MAD, MADGap and the Dirichlet energies against slow references written
from the papers' formulas, in float64."""
import math
from collections import deque

import pytest
import torch

from gnorm.metrics import (dirichlet_energy, hop_distances, mad, mad_gap,
                           uniformity)
from gnorm.metrics.pairs import draw_pairs


def random_graph(n, m, seed=0):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, m), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return torch.cat([edge_index, edge_index.flip(0)], 1)  # undirected


def ref_hops(edge_index, n):
    r"""Breadth-first search from every node, edges in both directions;
    unreachable: inf."""
    nbrs = [set() for _ in range(n)]
    for a, b in edge_index.t().tolist():
        nbrs[a].add(b)
        nbrs[b].add(a)
    dist = [[math.inf] * n for _ in range(n)]
    for s in range(n):
        dist[s][s] = 0
        todo = deque([s])
        while todo:
            a = todo.popleft()
            for b in nbrs[a]:
                if dist[s][b] == math.inf:
                    dist[s][b] = dist[s][a] + 1
                    todo.append(b)
    return dist


def ref_mad(x, dist=None, low=0, high=math.inf, nodes=None):
    r"""Chen et al. (2020), Eqs. 1-4, with loops: per row the mean of the
    nonzero masked cosine distances, then the mean of the nonzero rows."""
    nodes = range(x.size(0)) if nodes is None else nodes
    row_means, any_pair = [], False
    for i in nodes:
        ds = []
        for j in nodes:
            if i == j or (dist is not None
                          and not low <= dist[i][j] <= high):
                continue
            any_pair = True
            ni, nj = x[i].norm(), x[j].norm()
            cos = float(x[i] @ x[j] / (ni * nj)) if ni * nj > 0 else 0.0
            if 1 - cos > 1e-12:
                ds.append(1 - cos)
        row_means.append(sum(ds) / len(ds) if ds else 0.0)
    nonzero = [r for r in row_means if r > 0]
    if not any_pair:
        return math.nan
    return sum(nonzero) / len(nonzero) if nonzero else 0.0


def test_hop_distances_equal_breadth_first_search():
    n = 40
    edge_index = random_graph(n, 45, seed=1)
    ref = ref_hops(edge_index, n)
    out = hop_distances(edge_index, n, torch.arange(n), max_hops=5)
    expected = [[min(d, 6) for d in row] for row in ref]
    assert out.tolist() == expected
    sources = torch.tensor([3, 0, 17])
    assert hop_distances(edge_index, n, sources, 5).tolist() == \
        [expected[3], expected[0], expected[17]]


@pytest.mark.parametrize('hops', [None, (1, 3), (1, 1), (8, None),
                                  (2, None)])
def test_mad_equals_reference(hops):
    n = 35
    x = torch.randn(n, 6, dtype=torch.float64)
    x[4] = 0  # a zero row: distance 1 to every row
    x[7] = 3 * x[8]  # a pair at zero distance: left out
    edge_index = random_graph(n, 35, seed=2)
    dist = ref_hops(edge_index, n)
    low, high = (0, math.inf) if hops is None else \
        (hops[0], math.inf if hops[1] is None else hops[1])
    expected = ref_mad(x, dist if hops else None, low, high)
    out = mad(x, edge_index, hops=hops)
    assert out.dtype == torch.float64 and out.dim() == 0
    if math.isnan(expected):
        assert torch.isnan(out)
    else:
        assert float(out) == pytest.approx(expected, abs=1e-12)


def test_mad_gap_equals_reference_and_paper_defaults():
    n = 60
    x = torch.randn(n, 5, dtype=torch.float64)
    edge_index = random_graph(n, 40, seed=3)  # sparse: far and unreachable
    dist = ref_hops(edge_index, n)
    expected = ref_mad(x, dist, 8, math.inf) - ref_mad(x, dist, 1, 3)
    assert float(mad_gap(x, edge_index)) == pytest.approx(expected, abs=1e-12)
    expected = ref_mad(x, dist, 5, math.inf) - ref_mad(x, dist, 1, 2)
    out = mad_gap(x, edge_index, neighbor_hops=2, remote_hops=5)
    assert float(out) == pytest.approx(expected, abs=1e-12)


def test_mad_limits_smooth_and_no_pairs():
    x = torch.ones(10, 3, dtype=torch.float64) * torch.arange(1., 11.)[:, None]
    assert float(mad(x)) == 0.0  # all rows point the same way
    edge_index = torch.tensor([[0, 1], [1, 0]])
    assert torch.isnan(mad(torch.randn(10, 3), edge_index, hops=(8, None))) \
        .logical_not()  # unreachable nodes are remote
    assert torch.isnan(mad(torch.randn(1, 3)))  # no pair
    two = torch.tensor([[1., 0.], [-1., 0.]])
    assert float(mad(two)) == pytest.approx(2.0)


def test_mad_batched_equals_per_graph():
    xs = [torch.randn(n, 4, dtype=torch.float64) for n in (12, 7, 20)]
    eis = [random_graph(n, n, seed=n) for n in (12, 7, 20)]
    offsets = [0, 12, 19]
    x = torch.cat(xs)
    edge_index = torch.cat([e + o for e, o in zip(eis, offsets)], 1)
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor([12, 7, 20]))
    perm = torch.randperm(39)  # an unsorted batch
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(39)
    for fn, kwargs in ((mad, {}), (mad, {'hops': (1, 2)}), (mad_gap, {})):
        out = fn(x[perm], inv[edge_index], batch=batch[perm], batch_size=4,
                 **kwargs)
        assert out.shape == (4, ) and torch.isnan(out[3])
        for g in range(3):
            one = fn(xs[g], eis[g], **kwargs)
            torch.testing.assert_close(out[g], one, equal_nan=True)


def test_subsampled_mad_is_the_reference_on_the_drawn_nodes():
    r"""Above max_samples the pairs are those of the drawn nodes (the
    uniformity rule, reproducible with a generator), their hop distances
    those of the whole graph."""
    n, k = 50, 20
    x = torch.randn(n, 4, dtype=torch.float64)
    edge_index = random_graph(n, 60, seed=4)
    dist = ref_hops(edge_index, n)
    pairs = draw_pairs(n, torch.zeros(n, dtype=torch.long), 1, k,
                       torch.Generator().manual_seed(5))
    nodes = pairs.index.tolist()
    assert len(nodes) == k == len(set(nodes))
    # The same nodes as uniformity draws with the same generator.
    torch.testing.assert_close(
        uniformity(x[nodes]),
        uniformity(x, max_samples=k,
                   generator=torch.Generator().manual_seed(5)))
    for hops, (low, high) in ((None, (0, math.inf)), ((1, 3), (1, 3))):
        out = mad(x, edge_index, hops=hops, max_samples=k,
                  generator=torch.Generator().manual_seed(5))
        expected = ref_mad(x, dist if hops else None, low, high, nodes)
        assert float(out) == pytest.approx(expected, abs=1e-12)
    seeded = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    assert float(mad(x, max_samples=k, generator=seeded())) == \
        float(mad(x, max_samples=k, generator=seeded()))


def test_mad_refuses_bad_input_in_one_line():
    x = torch.randn(5, 3)
    with pytest.raises(ValueError, match="'mad' needs 'edge_index'"):
        mad(x, hops=(1, 3))
    with pytest.raises(ValueError, match="'hops' as"):
        mad(x, torch.zeros(2, 0, dtype=torch.long), hops=(3, 1))
    with pytest.raises(ValueError, match="max_samples"):
        mad(x, max_samples=1)
    with pytest.raises(ValueError, match="neighbor_hops < remote_hops"):
        mad_gap(x, torch.zeros(2, 0, dtype=torch.long), neighbor_hops=8,
                remote_hops=8)


def test_dirichlet_energy_is_rusch_et_al_and_cai_wang():
    r"""Unnormalised: Rusch et al. (2023), 1/v sum_i sum_{j in N_i}
    ||x_i - x_j||^2; normalised: (2/N) tr(X^T (I - D~^-1/2 A~ D~^-1/2) X)
    of Cai and Wang (2020), for an undirected graph stored both ways."""
    n = 25
    x = torch.randn(n, 4, dtype=torch.float64)
    edge_index = random_graph(n, 40, seed=6).unique(dim=1)
    adj = torch.zeros(n, n, dtype=torch.float64)
    adj[edge_index[1], edge_index[0]] = 1
    nbrs = [adj[i].nonzero().flatten().tolist() for i in range(n)]
    rusch = sum(float((x[i] - x[j]).pow(2).sum()) for i in range(n)
                for j in nbrs[i]) / n
    assert float(dirichlet_energy(x, edge_index)) == pytest.approx(rusch)
    a_tilde = adj + torch.eye(n, dtype=torch.float64)
    d = a_tilde.sum(1).rsqrt()
    laplacian = torch.eye(n, dtype=torch.float64) - \
        d[:, None] * a_tilde * d[None, :]
    cai_wang = float(torch.trace(x.t() @ laplacian @ x))
    out = dirichlet_energy(x, edge_index, normalized=True)
    assert float(out) == pytest.approx(2 * cai_wang / n)
