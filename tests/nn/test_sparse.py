import pytest
import torch

from gnorm.nn import contra_norm
from gnorm.nn._sparse import CSREdges, IndexEdges, edge_dot, edge_sum, edges


def _graph(n=30, e=120, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return contra_norm.masked_pairs(torch.randint(0, n, (2, e), generator=gen),
                                    n)


@pytest.mark.parametrize('runs', [None, 3])
def test_csr_edges_equal_index_edges_and_the_loop(runs):
    pairs, n = _graph(), 30
    shape = (n, 4) if runs is None else (runs, n, 4)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    w = torch.rand(shape[:-2] + (pairs.src.numel(), ), dtype=torch.float64,
                   requires_grad=True)
    index = IndexEdges(pairs.src, pairs.dst)
    csr = CSREdges(pairs.src, pairs.dst, pairs.dst_order, n)
    # the slow reference: one edge at a time
    dot = torch.stack([(x[..., s, :] * x[..., d, :]).sum(-1) for s, d in
                       zip(pairs.src.tolist(), pairs.dst.tolist())], -1)
    total = torch.zeros_like(x)
    for e, (s, d) in enumerate(zip(pairs.src.tolist(), pairs.dst.tolist())):
        total[..., d, :] += w[..., e, None] * x[..., s, :]
    for ops in (index, csr):
        torch.testing.assert_close(edge_dot(x, ops), dot)
        torch.testing.assert_close(edge_sum(w, x, ops), total)
    for f in (lambda ops: edge_dot(x, ops).sin().sum(),
              lambda ops: edge_sum(w, x, ops).sin().sum()):
        grads = [torch.autograd.grad(f(ops), (x, w), allow_unused=True)
                 for ops in (index, csr)]
        for a, b in zip(*grads):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(lambda x, w: edge_sum(w, x, csr), (x, w))
    assert torch.autograd.gradcheck(lambda x: edge_dot(x, csr), (x, ))


def test_edges_pick_csr_only_where_it_runs():
    pairs = _graph()
    x = torch.randn(30, 4)
    assert type(edges(pairs.src, pairs.dst, x, pairs.dst_order)) is CSREdges
    assert type(edges(pairs.src, pairs.dst, x)) is IndexEdges  # no order
    assert type(edges(pairs.src, pairs.dst, x.bfloat16(),
                      pairs.dst_order)) is IndexEdges  # no bf16 CSR product


def test_sum_dtype_is_the_wider_type_and_at_least_float32():
    # The one rule for every device (a pure function of two types).
    from gnorm.nn._sparse import sum_dtype
    f16, bf16, f32, f64 = (torch.float16, torch.bfloat16, torch.float32,
                           torch.float64)
    for weight, dense, expected in [
            (f32, bf16, f32), (bf16, f32, f32), (bf16, bf16, f32),
            (f16, f16, f32), (f32, f32, f32), (f64, f32, f64),
            (f32, f64, f64), (f64, bf16, f64)]:
        assert sum_dtype(weight, dense) is expected


@pytest.mark.parametrize('autocast', [False, True])
def test_bfloat16_edge_sums_are_the_sparse_product(autocast):
    # float32 weights, bfloat16 features (what bf16 autocast hands the
    # propagation): the edge list (torch.compile's path; it once failed in
    # index_add_), the CPU kernel and the other devices' kernel
    # (matrix @ dense on the cast operands) give one float32 result, and
    # bfloat16 gradients.
    from gnorm.nn._sparse import csr, spmm, sum_dtype
    pairs, n = _graph(), 30
    gen = torch.Generator().manual_seed(1)
    w = torch.rand(pairs.src.numel(), generator=gen)
    x = torch.randn(n, 5, generator=gen).bfloat16().requires_grad_()
    order = pairs.dst_order
    matrix = csr(pairs.dst[order], pairs.src[order], w[order], (n, n))
    with torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        by_edges = edge_sum(w, x, IndexEdges(pairs.src, pairs.dst))
        by_csr = edge_sum(w, x, CSREdges(pairs.src, pairs.dst, order, n))
        by_spmm = spmm(matrix, x.detach())  # (used inside autograd)
    other_kernel = matrix @ x.detach().to(sum_dtype(w.dtype, x.dtype))
    for out in (by_edges, by_csr, by_spmm):
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, other_kernel)
    by_edges.sum().backward()
    assert x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize('runs', [None, 3])
@pytest.mark.parametrize('duplicates', [False, True])
def test_masked_sums_equal_the_loop(runs, duplicates):
    # w_e = exp(s (x_s . x_d - 1)) and sum_{e: d_e = i} w_e (v_s, 1), by
    # index ops and by CSR kernels, against one edge at a time; repeated
    # pairs (keep) count once; gradients through both outputs.
    from gnorm.nn._sparse import masked_sums
    n, scale = 30, 1.7
    gen = torch.Generator().manual_seed(2)
    edge_index = torch.randint(0, n, (2, 120), generator=gen)
    pairs = contra_norm.masked_pairs(edge_index, n, compact=not duplicates)
    shape = (n, 4) if runs is None else (runs, n, 4)
    x = torch.nn.functional.normalize(  # as ContraNorm's similarities
        torch.randn(shape, generator=gen, dtype=torch.float64), dim=-1)
    v = torch.randn(shape, generator=gen, dtype=torch.float64)
    keep = pairs.keep
    copies = torch.ones(pairs.src.numel(), dtype=torch.bool) if keep is None \
        else keep
    dots = torch.stack([(x[..., s, :] * x[..., d, :]).sum(-1) for s, d in
                        zip(pairs.src.tolist(), pairs.dst.tolist())], -1)
    w = (scale * (dots - 1)).exp() * copies
    ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    total = torch.zeros_like(ones)
    for e, (s, d) in enumerate(zip(pairs.src.tolist(), pairs.dst.tolist())):
        total[..., d, :] += w[..., e, None] * ones[..., s, :]
    ops = [IndexEdges(pairs.src, pairs.dst),
           contra_norm.pair_edges(pairs, x, csr=True)]
    assert type(ops[1]) is CSREdges
    x.requires_grad_(), v.requires_grad_()
    grads = []
    for op in ops:
        sums, weights = masked_sums(x, v, op, scale, keep)
        torch.testing.assert_close(sums, total)
        torch.testing.assert_close(weights, w)
        grads.append(torch.autograd.grad(
            sums.sin().sum() + weights.cos().sum(), (x, v)))
        assert torch.autograd.gradcheck(
            lambda x, v: masked_sums(x, v, op, scale, keep), (x, v))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
