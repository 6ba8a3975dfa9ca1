r"""Sparse products shared by gnorm's layers and models: CSR matrices built
from sorted entries, and the operations along the edges of a graph that
ContraNorm's non-neighbour negatives and the GCN propagation need.

The edge operations exist twice, with the same results: as index gathers
and scatters (:class:`IndexEdges`: any device, and :func:`torch.compile`,
which takes no sparse tensor) and as sparse CSR kernels (:class:`CSREdges`:
eager mode on the CPU, where a gather or scatter along the node dimension
of :obj:`[runs, nodes, d]` inputs runs one index at a time and materialises
an :obj:`[runs, edges, d]` tensor; the CSR kernels do neither).
:func:`edges` picks one."""
import warnings
from typing import Optional, Tuple

import torch
from torch import Tensor


def row_pointers(rows: Tensor, num_rows: int) -> Tensor:
    r"""The CSR row pointers :obj:`[num_rows + 1]` of entries in
    :obj:`rows`, given sorted."""
    crow = rows.new_zeros(num_rows + 1)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow


def csr(rows: Tensor, cols: Tensor, values: Tensor,
        size: Tuple[int, int]) -> Tensor:
    r"""The sparse CSR matrix of :obj:`size` with :obj:`values` at
    (:obj:`rows`, :obj:`cols`), given sorted by row, then column (no
    sorting is done)."""
    return csr_pattern((row_pointers(rows, size[0]), cols), values, size)


def csr_pattern(pattern: Tuple[Tensor, Tensor], values: Tensor,
                size: Tuple[int, int]) -> Tensor:
    r"""The sparse CSR matrix of :obj:`size` with :obj:`values` in the
    :obj:`pattern` (row pointers, columns)."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*[Ss]parse')
        return torch.sparse_csr_tensor(*pattern, values, size)


def block_diagonal(rows: Tensor, cols: Tensor, size: Tuple[int, int],
                   blocks: int) -> Tuple[Tensor, Tensor]:
    r"""The pattern (row pointers, columns) of the block-diagonal matrix of
    :obj:`blocks` copies of the :obj:`size` pattern (:obj:`rows`,
    :obj:`cols`, sorted by row, then column), sorted the same way."""
    block = torch.arange(blocks, device=rows.device).repeat_interleave(
        rows.numel())
    rows = block * size[0] + rows.repeat(blocks)
    return (row_pointers(rows, blocks * size[0]),
            block * size[1] + cols.repeat(blocks))


def sum_dtype(weight: torch.dtype, dense: torch.dtype) -> torch.dtype:
    r"""The floating-point type in which gnorm's sparse products and edge
    sums run for weights and dense inputs of these types, on every device
    and under autocast alike: the wider of the two, at least float32 (a sum
    over many neighbours loses too much in bfloat16, and the CPU has no
    bfloat16 sparse product). Their outputs have this type."""
    return torch.promote_types(torch.promote_types(weight, dense),
                               torch.float32)


def spmm(matrix: Tensor, dense: Tensor) -> Tensor:
    r""":obj:`matrix @ dense` for a sparse CSR :obj:`matrix` and a dense
    2-D :obj:`dense`, both cast to :func:`sum_dtype` first (autocast off)."""
    dtype = sum_dtype(matrix.dtype, dense.dtype)
    matrix, dense = matrix.to(dtype), dense.to(dtype)
    with torch.autocast(dense.device.type, enabled=False):
        if dense.device.type != 'cpu':
            return matrix @ dense
        # On the CPU, addmm into an uninitialised output (beta=0: never
        # read) is the same product as matrix @ dense, 1.1-5x faster
        # (measured for 7-640 columns: matrix @ dense also zero-fills and
        # copies its output).
        out = dense.new_empty(matrix.size(0), dense.size(1))
        return torch.addmm(out, matrix, dense, beta=0, out=out)


class IndexEdges:
    r"""The edges :obj:`src[e]` :math:`\to` :obj:`dst[e]` of a graph, for
    inputs :obj:`[(runs,) nodes, d]` and edge weights :obj:`[(runs,)
    edges]`, by index gathers and scatters along the node dimension."""
    def __init__(self, src: Tensor, dst: Tensor):
        self.src, self.dst = src, dst

    def dot(self, a: Tensor, b: Tensor) -> Tensor:
        r""":math:`a_{s_e}^\top b_{d_e}` for every edge,
        :obj:`[(runs,) edges]`."""
        return (a.index_select(-2, self.src) *
                b.index_select(-2, self.dst)).sum(-1)

    def to_dst(self, w: Tensor, x: Tensor) -> Tensor:
        r""":math:`\sum_{e: d_e = i} w_e x_{s_e}` at every node :math:`i`."""
        return torch.zeros_like(x).index_add_(
            -2, self.dst, w.unsqueeze(-1) * x.index_select(-2, self.src))

    def to_src(self, w: Tensor, y: Tensor) -> Tensor:
        r""":math:`\sum_{e: s_e = j} w_e y_{d_e}` at every node :math:`j`."""
        return torch.zeros_like(y).index_add_(
            -2, self.src, w.unsqueeze(-1) * y.index_select(-2, self.dst))


class CSREdges(IndexEdges):
    r""":class:`IndexEdges` by sparse CSR kernels, one product per run:
    the edges sorted by :obj:`src`, then :obj:`dst`, and :obj:`dst_order`
    sorting them by :obj:`dst`, then :obj:`src`. Inputs of type float32 or
    float64, on the CPU."""
    def __init__(self, src: Tensor, dst: Tensor, dst_order: Tensor,
                 num_nodes: int):
        super().__init__(src, dst)
        self.dst_order, self.size = dst_order, (num_nodes, num_nodes)
        self.by_src = (row_pointers(src, num_nodes), dst)
        self.by_dst = (row_pointers(dst[dst_order], num_nodes),
                       src[dst_order])

    def dot(self, a: Tensor, b: Tensor) -> Tensor:
        zeros = a.new_zeros(self.src.numel())
        pattern = csr_pattern(self.by_src, zeros, self.size)
        out = [torch.sparse.sampled_addmm(pattern, a_r, b_r.t(),
                                          beta=0.0).values()
               for a_r, b_r in zip(*_runs(a, b))]
        return torch.stack(out).view(*a.shape[:-2], -1)

    def to_dst(self, w: Tensor, x: Tensor) -> Tensor:
        return self._sum(self.by_dst, w.index_select(-1, self.dst_order), x)

    def to_src(self, w: Tensor, y: Tensor) -> Tensor:
        return self._sum(self.by_src, w, y)

    def _sum(self, pattern: Tuple[Tensor, Tensor], w: Tensor,
             x: Tensor) -> Tensor:
        w_runs, x_runs = _runs(w.unsqueeze(-1), x)
        out = [spmm(csr_pattern(pattern, w_r.squeeze(-1), self.size), x_r)
               for w_r, x_r in zip(w_runs, x_runs)]
        return torch.stack(out).view_as(x)


def _runs(*tensors: Tensor) -> Tuple[Tensor, ...]:
    r"""The tensors :obj:`[(runs,) rows, cols]` as :obj:`[runs, rows,
    cols]`, broadcast to the same number of runs."""
    runs = max(t.size(0) if t.dim() == 3 else 1 for t in tensors)
    return tuple(t.reshape(-1, *t.shape[-2:]).expand(runs, -1, -1)
                 for t in tensors)


def edges(src: Tensor, dst: Tensor, like: Tensor,
          dst_order: Optional[Tensor] = None) -> IndexEdges:
    r"""The edge operations for inputs like :obj:`like`: sparse CSR kernels
    in eager mode on the CPU for float32/float64 when :obj:`dst_order` is
    given (the edges sorted by :obj:`src`, then :obj:`dst`), index gathers
    and scatters otherwise."""
    if (dst_order is not None and like.device.type == 'cpu'
            and like.dtype in (torch.float32, torch.float64)
            and not torch.compiler.is_compiling()):
        return CSREdges(src, dst, dst_order, like.size(-2))
    return IndexEdges(src, dst)


# The inputs are saved in their own type (e.g. bfloat16) and cast to
# sum_dtype where used; autograd casts each gradient back to its input's type.
class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, ops: IndexEdges) -> Tensor:
        ctx.save_for_backward(x)
        ctx.ops = ops
        x = x.to(sum_dtype(x.dtype, x.dtype))
        return ops.dot(x, x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x = ctx.saved_tensors[0].to(grad.dtype)
        return ctx.ops.to_src(grad, x) + ctx.ops.to_dst(grad, x), None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w: Tensor, x: Tensor, ops: IndexEdges) -> Tensor:
        ctx.save_for_backward(w, x)
        ctx.ops = ops
        dtype = sum_dtype(w.dtype, x.dtype)
        return ops.to_dst(w.to(dtype), x.to(dtype))

    @staticmethod
    def backward(ctx, grad: Tensor):
        w, x = (t.to(grad.dtype) for t in ctx.saved_tensors)
        grad_w = grad_x = None
        if ctx.needs_input_grad[0]:
            grad_w = ctx.ops.dot(x, grad).sum_to_size(w.shape)
        if ctx.needs_input_grad[1]:
            grad_x = ctx.ops.to_src(w, grad)
        return grad_w, grad_x, None


def edge_dot(x: Tensor, ops: IndexEdges) -> Tensor:
    r""":math:`x_{s_e}^\top x_{d_e}` for every edge of :obj:`ops`,
    :obj:`[(runs,) edges]`, in :func:`sum_dtype`; the backward pass keeps only :obj:`x` (no
    :obj:`[edges, d]` tensor)."""
    return _EdgeDot.apply(x, ops)


def edge_sum(w: Tensor, x: Tensor, ops: IndexEdges) -> Tensor:
    r""":math:`\sum_{e: d_e = i} w_e x_{s_e}` at every node :math:`i` for
    the edges of :obj:`ops` and weights :obj:`w` :obj:`[(runs,) edges]`,
    in :func:`sum_dtype`; the backward pass keeps only :obj:`w` and :obj:`x` (no :obj:`[edges,
    d]` tensor)."""
    return _EdgeSum.apply(w, x, ops)
