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
