import math

import numpy as np
import pytest
import torch

from gnorm.metrics import (
    dirichlet_energy,
    effective_rank,
    feature_cosine_similarity,
    feature_variance,
    uniformity,
)

NODE_METRICS = [effective_rank, feature_cosine_similarity, feature_variance,
                uniformity]


def randn(*shape, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype)


def two_graphs(seed=0):
    x = randn(11, 5, seed=seed)
    batch = torch.tensor([0] * 4 + [1] * 7)
    return x, batch


# Slow, obviously-correct references ########################################


def erank_ref(x):
    sigma = np.linalg.svd(x.numpy(), compute_uv=False)
    p = sigma / sigma.sum()
    return math.exp(-sum(pk * math.log(pk) for pk in p if pk > 0))


def cosine_ref(x):
    n = x.size(0)
    total = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            ni, nj = x[i].norm(), x[j].norm()
            if ni > 0 and nj > 0:
                total += float(x[i] @ x[j] / (ni * nj))
    return 2 * total / (n * (n - 1))


def variance_ref(x):
    n = x.size(0)
    e = torch.ones(n, 1, dtype=x.dtype) / math.sqrt(n)
    return float(((torch.eye(n, dtype=x.dtype) - e @ e.T) @ x).pow(2).sum())


def uniformity_ref(x):
    n = x.size(0)
    total = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dist = x[i] / x[i].norm() - x[j] / x[j].norm()
            total += math.exp(-2 * float(dist @ dist))
    return math.log(total / (n * (n - 1) / 2))


def dirichlet_ref(x, edge_index, normalized):
    deg = [0] * x.size(0)
    for i in edge_index[1].tolist():
        deg[i] += 1
    total = 0.0
    for j, i in edge_index.t().tolist():
        xi, xj = x[i], x[j]
        if normalized:
            xi, xj = xi / math.sqrt(1 + deg[i]), xj / math.sqrt(1 + deg[j])
        total += float((xi - xj).pow(2).sum())
    return total / x.size(0)


def random_edges(num_nodes, num_edges, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(num_nodes, (2, num_edges), generator=gen)


# Shared properties #########################################################


@pytest.mark.parametrize('fn', NODE_METRICS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_one_graph_gives_0_dim_tensor_of_input_dtype(fn, dtype):
    out = fn(randn(9, 4, dtype=dtype))
    assert out.shape == ()
    assert out.dtype == dtype
    assert torch.isfinite(out)


@pytest.mark.parametrize('fn', NODE_METRICS)
def test_batch_equals_per_graph(fn):
    x, batch = two_graphs()
    out = fn(x, batch)
    assert out.shape == (2, )
    torch.testing.assert_close(out[0], fn(x[:4]))
    torch.testing.assert_close(out[1], fn(x[4:]))


@pytest.mark.parametrize('fn', NODE_METRICS)
def test_unsorted_batch_equals_sorted(fn):
    x, batch = two_graphs()
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(fn(x[perm], batch[perm]), fn(x, batch))


@pytest.mark.parametrize('fn,empty', [
    (effective_rank, 0.0),
    (feature_cosine_similarity, math.nan),
    (feature_variance, 0.0),
    (uniformity, math.nan),
])
def test_batch_size_adds_empty_graphs(fn, empty):
    x, batch = two_graphs()
    out = fn(x, batch, batch_size=3)
    assert out.shape == (3, )
    torch.testing.assert_close(out[:2], fn(x, batch))
    torch.testing.assert_close(out[2], torch.tensor(empty, dtype=x.dtype),
                               equal_nan=True)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_effective_rank_of_graphs_without_nodes_is_zero(dtype):
    x, batch = torch.empty(0, 3, dtype=dtype), torch.empty(0, dtype=torch.long)
    out = effective_rank(x, batch, batch_size=2)
    torch.testing.assert_close(out, torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize('fn', NODE_METRICS)
def test_gradcheck(fn):
    x = randn(6, 4, seed=3).requires_grad_()
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    assert torch.autograd.gradcheck(lambda x: fn(x, batch), (x, ))


def test_gradcheck_dirichlet_energy():
    x = randn(6, 4, seed=3).requires_grad_()
    edge_index = random_edges(6, 12)
    assert torch.autograd.gradcheck(
        lambda x: dirichlet_energy(x, edge_index, normalized=True), (x, ))


# Effective rank ############################################################


@pytest.mark.parametrize('n,d', [(10, 3), (20, 20), (7, 5), (4, 9)])
def test_effective_rank_orthonormal_is_full_rank(n, d):
    q, _ = torch.linalg.qr(randn(max(n, d), min(n, d)))
    x = q if n >= d else q.T  # orthonormal columns (or rows if n < d)
    torch.testing.assert_close(effective_rank(x),
                               torch.tensor(float(min(n, d)),
                                            dtype=x.dtype))


@pytest.mark.parametrize('scale', [1e-3, 1.0, 50.0])
def test_effective_rank_rank_one_is_one(scale):
    x = scale * torch.outer(randn(12, seed=1), randn(6, seed=2))
    torch.testing.assert_close(effective_rank(x),
                               torch.tensor(1.0, dtype=x.dtype))


@pytest.mark.parametrize('seed,n,d', [(0, 8, 4), (1, 5, 12), (2, 30, 30)])
def test_effective_rank_matches_numpy(seed, n, d):
    x = randn(n, d, seed=seed) * torch.logspace(0, -2, d, dtype=torch.float64)
    assert effective_rank(x).item() == pytest.approx(erank_ref(x), rel=1e-10)


def test_effective_rank_of_zero_matrix_is_zero():
    assert effective_rank(torch.zeros(5, 3)).item() == 0.0


@pytest.mark.parametrize('n,d', [(400, 16), (12, 40)])  # tall, wide
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_effective_rank_below_float64_is_as_exact_as_its_input(n, d, dtype):
    # Singular values from 1 down to 1e-6: in float32 a Gram matrix loses
    # the small ones (its rounding is eps32 * sigma_1^2, a singular value
    # of 3e-4), one formed in float64 keeps them to float64's rounding.
    k = min(n, d)
    u, _ = torch.linalg.qr(randn(n, k, seed=3))
    v, _ = torch.linalg.qr(randn(d, k, seed=4))
    sigma = torch.logspace(0, -6, k, dtype=torch.float64)
    x = ((u * sigma) @ v.T).to(dtype)  # the input as the metric gets it
    want = erank_ref(x.double())
    got = effective_rank(x)
    assert got.dtype == dtype
    assert got.double().item() == pytest.approx(
        want, rel=1e-6 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize('n,d', [(2708, 32), (20, 64)])
def test_singular_values_below_float64_beat_float32s_svd(n, d):
    from gnorm.metrics.pointwise import _singular_values
    k = min(n, d)
    u, _ = torch.linalg.qr(randn(n, k, seed=5))
    v, _ = torch.linalg.qr(randn(d, k, seed=6))
    x = ((u * torch.logspace(0, -7, k, dtype=torch.float64)) @ v.T).float()
    want = torch.linalg.svdvals(x.double())  # of the float32 matrix
    err = (_singular_values(x).double() - want).abs().max() / want[0]
    err_svd = (torch.linalg.svdvals(x).double() - want).abs().max() / want[0]
    assert err < err_svd / 100


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('bad', [float('nan'), float('inf'), -float('inf')])
def test_effective_rank_of_a_non_finite_graph_is_nan(dtype, bad):
    x, batch = randn(9, 4, dtype=dtype), torch.tensor([0] * 4 + [1] * 5)
    x[6, 2] = bad  # graph 1
    got = effective_rank(x, batch)
    assert got[0].item() == pytest.approx(erank_ref(x[:4].double()))
    assert math.isnan(got[1].item())


def contranorm_step(h, s):
    # Eq. (10) of the ContraNorm paper.
    return (1 + s) * h - s * (h @ h.T) @ h


@pytest.mark.parametrize('seed,n,d,scale', [
    (0, 8, 4, 1.0),
    (1, 16, 16, 0.3),
    (2, 32, 8, 2.0),
    (3, 5, 12, 1.0),
    (4, 10, 6, 0.05),
])
@pytest.mark.parametrize('frac', [1e-2, 0.3, 0.9, 0.999])
def test_proposition_2_increases_effective_rank(seed, n, d, scale, frac):
    # Proposition 2 holds for the step sizes that keep the singular values in
    # their order, 1 + (1 - 3 sigma_max^2) s > 0 (a subset of the paper's
    # range): sigma -> sigma (1 + s - s sigma^2) then grows small singular
    # values relatively more and keeps their order, so the normalised spectrum
    # of H_t is majorised by that of H_b. See the next test for the rest.
    h = randn(n, d, seed=seed) * torch.logspace(0, -1.5, d,
                                                dtype=torch.float64) * scale
    sigma_max = torch.linalg.svdvals(h)[0].item()
    s = frac * (1 / (3 * sigma_max**2 - 1) if 3 * sigma_max**2 > 1 else 100)
    assert s > 0 and 1 + (1 - sigma_max**2) * s > 0  # the paper's condition
    assert effective_rank(contranorm_step(h, s)) > effective_rank(h)


@pytest.mark.parametrize('s,direction', [(10.0, 1), (100.0, 0), (1000.0, -1)])
def test_proposition_2_fails_for_large_steps(s, direction):
    # With sigma = (1, 0.1) every s > 0 meets the paper's condition
    # 1 + (1 - sigma_max^2) s > 0, but the step maps sigma to
    # (1, 0.1 (1 + 0.99 s)): past s = 100 the small value overtakes the large
    # one and the effective rank falls. Lemma B.3 needs the order kept.
    h = torch.diag(torch.tensor([1.0, 0.1], dtype=torch.float64))
    assert 1 + (1 - 1.0**2) * s > 0
    before = effective_rank(h).item()
    after = effective_rank(contranorm_step(h, s)).item()
    if direction == 0:
        assert after == pytest.approx(before, rel=1e-12)
    else:
        assert (after - before) * direction > 1e-3


# Cosine similarity #########################################################


@pytest.mark.parametrize('seed,n,d', [(0, 6, 3), (1, 9, 7), (2, 2, 4)])
def test_cosine_similarity_matches_double_loop(seed, n, d):
    x = randn(n, d, seed=seed) + 0.5
    assert feature_cosine_similarity(x).item() == pytest.approx(
        cosine_ref(x), rel=1e-10, abs=1e-12)


def test_cosine_similarity_zero_rows_count_as_zero():
    x = randn(7, 3)
    x[2] = 0.0
    x[5] = 0.0
    assert feature_cosine_similarity(x).item() == pytest.approx(
        cosine_ref(x), rel=1e-10)


@pytest.mark.parametrize('n', [2, 5, 40])
def test_cosine_similarity_of_parallel_rows_is_one(n):
    scales = torch.linspace(0.5, 3.0, n, dtype=torch.float64).unsqueeze(-1)
    x = scales * randn(1, 8)
    torch.testing.assert_close(feature_cosine_similarity(x),
                               torch.tensor(1.0, dtype=x.dtype))


def test_cosine_similarity_of_opposite_rows_is_minus_one():
    row = randn(1, 5)
    x = torch.cat([row, -2 * row])
    torch.testing.assert_close(feature_cosine_similarity(x),
                               torch.tensor(-1.0, dtype=x.dtype))


def test_cosine_similarity_of_one_node_is_nan():
    assert torch.isnan(feature_cosine_similarity(randn(1, 4)))


# Variance ##################################################################


@pytest.mark.parametrize('seed,n,d', [(0, 6, 3), (1, 9, 7), (2, 1, 4)])
@pytest.mark.parametrize('reduce', ['sum', 'mean'])
def test_variance_matches_projection(seed, n, d, reduce):
    x = randn(n, d, seed=seed) + 3.0
    expected = variance_ref(x) / (n if reduce == 'mean' else 1)
    assert feature_variance(x, reduce=reduce).item() == pytest.approx(
        expected, rel=1e-10, abs=1e-12)


def test_variance_of_identical_rows_is_zero():
    x = randn(1, 6).repeat(5, 1)
    assert feature_variance(x).item() == pytest.approx(0.0, abs=1e-12)


def test_variance_mean_in_batch():
    x, batch = two_graphs()
    out = feature_variance(x, batch, reduce='mean')
    torch.testing.assert_close(out, feature_variance(x, batch, reduce='sum')
                               / torch.tensor([4.0, 7.0], dtype=x.dtype))


def test_variance_default_is_the_mean_over_nodes():
    r"""The default is the per-node mean (what every gnorm record calls
    variance), not the paper's sum: a graph twice as large with the same
    rows has the same default value and twice the sum."""
    x = randn(6, 3, seed=4)
    twice = torch.cat([x, x])
    assert feature_variance(twice).item() == pytest.approx(
        feature_variance(x).item(), rel=1e-12)
    assert feature_variance(x).item() == pytest.approx(
        variance_ref(x) / 6, rel=1e-10)
    assert feature_variance(twice, reduce='sum').item() == pytest.approx(
        2 * feature_variance(x, reduce='sum').item(), rel=1e-12)


# Uniformity ################################################################


@pytest.mark.parametrize('seed,n,d', [(0, 6, 3), (1, 9, 7), (2, 2, 4)])
def test_uniformity_matches_pair_loop(seed, n, d):
    x = randn(n, d, seed=seed)
    assert uniformity(x).item() == pytest.approx(uniformity_ref(x),
                                                 rel=1e-10)


def test_uniformity_bounds():
    row = randn(1, 5)
    parallel = torch.linspace(1, 2, 6, dtype=torch.float64)[:, None] * row
    assert uniformity(parallel).item() == pytest.approx(0.0, abs=1e-12)
    opposite = torch.cat([row, -row])
    assert uniformity(opposite).item() == pytest.approx(-8.0, rel=1e-12)


@pytest.mark.parametrize('fn', [feature_cosine_similarity, uniformity])
@pytest.mark.parametrize('scale', [1e-30, 1e20])
def test_unit_rows_survive_extreme_scales_in_float32(fn, scale):
    # The squared norms of these rows under- or overflow float32.
    x = randn(6, 3, dtype=torch.float32)
    torch.testing.assert_close(fn(x * scale), fn(x))


def test_uniformity_of_one_node_is_nan():
    assert torch.isnan(uniformity(randn(1, 4)))


def test_uniformity_subsamples_large_graphs():
    x = randn(64, 8, seed=4)
    full = uniformity(x, max_samples=64)
    sample = uniformity(x, max_samples=60,
                        generator=torch.Generator().manual_seed(0))
    again = uniformity(x, max_samples=60,
                       generator=torch.Generator().manual_seed(0))
    assert sample.item() != full.item()  # a subset was used
    assert sample.item() == again.item()  # reproducible with the generator
    assert sample.item() == pytest.approx(full.item(), abs=0.1)


def test_uniformity_subsamples_only_large_graphs_in_batch():
    x = torch.cat([randn(64, 8, seed=4), randn(5, 8, seed=5)])
    batch = torch.tensor([0] * 64 + [1] * 5)
    out = uniformity(x, batch, max_samples=60,
                     generator=torch.Generator().manual_seed(0))
    assert out[0].item() == pytest.approx(uniformity(x[:64]).item(), abs=0.1)
    torch.testing.assert_close(out[1], uniformity(x[64:]))


# Dirichlet energy ##########################################################


@pytest.mark.parametrize('seed', [0, 1])
@pytest.mark.parametrize('normalized', [False, True])
def test_dirichlet_energy_matches_edge_loop(seed, normalized):
    x = randn(7, 3, seed=seed)
    edge_index = random_edges(7, 15, seed=seed)
    out = dirichlet_energy(x, edge_index, normalized=normalized)
    assert out.item() == pytest.approx(
        dirichlet_ref(x, edge_index, normalized), rel=1e-10)


def test_dirichlet_energy_counts_each_listed_edge():
    x = torch.tensor([[0.0], [2.0], [5.0]])
    one_way = torch.tensor([[0, 1], [1, 2]])
    both_ways = torch.tensor([[0, 1, 1, 2], [1, 2, 0, 1]])
    assert dirichlet_energy(x, one_way).item() == pytest.approx(13 / 3)
    assert dirichlet_energy(x, both_ways).item() == pytest.approx(26 / 3)


def test_dirichlet_energy_of_constant_features_is_zero():
    x = randn(1, 4).repeat(8, 1)
    edge_index = random_edges(8, 20)
    assert dirichlet_energy(x, edge_index).item() == pytest.approx(0.0,
                                                                   abs=1e-12)
    # Degree normalisation leaves constant features smooth on regular graphs.
    ring = torch.tensor([list(range(8)), [(i + 1) % 8 for i in range(8)]])
    assert dirichlet_energy(x, ring, normalized=True).item() == pytest.approx(
        0.0, abs=1e-12)


@pytest.mark.parametrize('normalized', [False, True])
def test_dirichlet_energy_batch_equals_per_graph(normalized):
    x, batch = two_graphs()
    edges_a = random_edges(4, 6, seed=1)
    edges_b = random_edges(7, 10, seed=2)
    edge_index = torch.cat([edges_a, edges_b + 4], dim=1)
    out = dirichlet_energy(x, edge_index, batch, batch_size=3,
                           normalized=normalized)
    assert out.shape == (3, )
    torch.testing.assert_close(
        out[0], dirichlet_energy(x[:4], edges_a, normalized=normalized))
    torch.testing.assert_close(
        out[1], dirichlet_energy(x[4:], edges_b, normalized=normalized))
    assert out[2].item() == 0.0


# Bad inputs ################################################################


def call(fn, x, **kwargs):
    if fn is dirichlet_energy:
        kwargs.setdefault('edge_index', torch.tensor([[0, 1], [1, 2]]))
    return fn(x, **kwargs)


ALL_METRICS = NODE_METRICS + [dirichlet_energy]
BAD_INPUTS = {
    'x_1d': dict(x=torch.randn(4)),
    'x_3d': dict(x=torch.randn(2, 4, 3)),
    'x_int': dict(x=torch.ones(4, 3, dtype=torch.long)),
    'batch_length': dict(batch=torch.tensor([0, 0, 1])),
    'batch_2d': dict(batch=torch.zeros(4, 1, dtype=torch.long)),
    'batch_float': dict(batch=torch.zeros(4)),
    'batch_negative': dict(batch=torch.tensor([-1, 0, 0, 0])),
    'batch_size_small': dict(batch=torch.tensor([0, 0, 1, 2]), batch_size=2),
    'batch_size_without_batch': dict(batch_size=3),
}


@pytest.mark.parametrize('fn', ALL_METRICS)
@pytest.mark.parametrize('case', list(BAD_INPUTS))
def test_bad_inputs_raise(fn, case):
    kwargs = dict(x=torch.randn(4, 3))
    kwargs.update(BAD_INPUTS[case])
    with pytest.raises(ValueError, match=fn.__name__):
        call(fn, **kwargs)


@pytest.mark.parametrize('edge_index', [
    torch.tensor([[0, 1, 2]]),  # [1, E]
    torch.tensor([[0, 1], [1, 2], [2, 3]]),  # [E, 2] with E = 3
    torch.tensor([0, 1, 2]),  # 1-D
    torch.tensor([[0.0, 1.0], [1.0, 2.0]]),  # float
    torch.tensor([[0, 4], [1, 2]]),  # node 4 does not exist
    torch.tensor([[0, -1], [1, 2]]),  # negative index
])
def test_dirichlet_energy_bad_edge_index_raises(edge_index):
    with pytest.raises(ValueError, match='dirichlet_energy'):
        dirichlet_energy(torch.randn(4, 3), edge_index)


def test_dirichlet_energy_edge_across_graphs_raises():
    batch = torch.tensor([0, 0, 1, 1])
    with pytest.raises(ValueError, match='different graphs'):
        dirichlet_energy(torch.randn(4, 3), torch.tensor([[0], [2]]), batch)


@pytest.mark.parametrize('max_samples', [1, 0, 2.5, True])
def test_uniformity_bad_max_samples_raises(max_samples):
    with pytest.raises(ValueError, match='uniformity'):
        uniformity(torch.randn(4, 3), max_samples=max_samples)


def test_variance_bad_reduce_raises():
    with pytest.raises(ValueError, match='feature_variance'):
        feature_variance(torch.randn(4, 3), reduce='max')
