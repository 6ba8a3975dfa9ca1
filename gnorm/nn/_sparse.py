r"""Sparse products shared by gnorm's layers and models: CSR matrices built
from sorted entries, and the operations along the edges of a graph that
ContraNorm's non-neighbour negatives and the GCN propagation need.

The edge operations exist twice, with the same results: as index gathers
and scatters (:class:`IndexEdges`: any device, and :func:`torch.compile`,
which takes no sparse tensor) and as sparse CSR kernels (:class:`CSREdges`:
eager mode on the CPU, where a gather or scatter along the node dimension
of :obj:`[runs, nodes, d]` inputs runs one index at a time and materialises
an :obj:`[runs, edges, d]` tensor; the CSR kernels do neither).
:func:`edges` picks one. :func:`masked_sums` is ContraNorm's step along
its masked pairs (weights and weighted sums) as one autograd node."""
import warnings
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
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
    if weight == dense and weight in (torch.float32, torch.float64):
        return weight  # the common case, without a dispatcher call
    return torch.promote_types(torch.promote_types(weight, dense),
                               torch.float32)


def as_dtype(t: Tensor, dtype: torch.dtype) -> Tensor:
    r""":obj:`t` in :obj:`dtype`: itself, without an op, if it has it."""
    return t if t.dtype == dtype else t.to(dtype)


def spmm(matrix: Tensor, dense: Tensor) -> Tensor:
    r""":obj:`matrix @ dense` for a sparse CSR :obj:`matrix` and a dense
    2-D :obj:`dense`, both cast to :func:`sum_dtype` first (autocast off)."""
    dtype = sum_dtype(matrix.dtype, dense.dtype)
    matrix, dense = as_dtype(matrix, dtype), as_dtype(dense, dtype)
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
    edges]`, by index gathers and scatters along the node dimension.

    :meth:`sampled` gives values along the edges in the form the sums
    (:meth:`to_dst`, :meth:`to_src`) take best, here the weights
    themselves; :meth:`values` turns that form into the weights."""
    def __init__(self, src: Tensor, dst: Tensor):
        self.src, self.dst = src, dst

    def sampled(self, a: Tensor, b: Tensor, start: float = 0.0,
                alpha: float = 1.0) -> Tensor:
        r""":math:`\text{start} + \alpha \, a_{s_e}^\top b_{d_e}` for
        every edge."""
        # (not linalg.vecdot, which autocast runs in bfloat16)
        out = (a.index_select(-2, self.src) *
               b.index_select(-2, self.dst)).sum(-1)
        if alpha != 1.0:
            out = out.mul_(alpha)
        return out if start == 0.0 else out.add_(start)

    @staticmethod
    def values(w: Tensor) -> Tensor:
        r"""The weights :obj:`[(runs,) edges]` of :meth:`sampled`'s form."""
        return w

    def dot(self, a: Tensor, b: Tensor) -> Tensor:
        r""":math:`a_{s_e}^\top b_{d_e}` for every edge,
        :obj:`[(runs,) edges]`."""
        return self.values(self.sampled(a, b))

    def to_dst(self, w: Tensor, x: Tensor) -> Tensor:
        r""":math:`\sum_{e: d_e = i} w_e x_{s_e}` at every node :math:`i`."""
        return torch.zeros_like(x).index_add_(
            -2, self.dst, w.unsqueeze(-1) * x.index_select(-2, self.src))

    def to_src(self, w: Tensor, y: Tensor) -> Tensor:
        r""":math:`\sum_{e: s_e = j} w_e y_{d_e}` at every node :math:`j`."""
        return torch.zeros_like(y).index_add_(
            -2, self.src, w.unsqueeze(-1) * y.index_select(-2, self.dst))

    def to_both(self, w: Tensor, x: Tensor) -> Tensor:
        r""":meth:`to_src` plus :meth:`to_dst` of :obj:`w` and :obj:`x`:
        one gather and one scatter along the edges both ways."""
        ends = torch.cat([self.src, self.dst])
        starts = torch.cat([self.dst, self.src])
        w = torch.cat([w, w], dim=-1).unsqueeze(-1)
        return torch.zeros_like(x).index_add_(
            -2, ends, w * x.index_select(-2, starts))


class CSREdges(IndexEdges):
    r""":class:`IndexEdges` by sparse CSR kernels: the edges sorted by
    :obj:`src`, then :obj:`dst`, and :obj:`dst_order` sorting them by
    :obj:`dst`, then :obj:`src`; their two CSR :obj:`patterns`
    (:func:`csr_patterns`) are derived here unless given. Inputs of type
    float32 or float64, on the CPU. :meth:`sampled` is one batched kernel
    for all runs and gives a CSR matrix :obj:`[(runs,) nodes, nodes]`
    (rows :obj:`src`), which :meth:`to_src` multiplies as it is; the sums
    are one sparse product per run (the CPU has no batched one)."""
    def __init__(self, src: Tensor, dst: Tensor, dst_order: Tensor,
                 num_nodes: int,
                 patterns: Optional[Tuple[Tuple[Tensor, Tensor],
                                          Tuple[Tensor, Tensor]]] = None):
        super().__init__(src, dst)
        self.dst_order, self.size = dst_order, (num_nodes, num_nodes)
        if patterns is None:
            patterns = csr_patterns(src, dst, dst_order, num_nodes)
        self.by_src, self.by_dst = patterns

    def _matrix(self, pattern: Tuple[Tensor, Tensor],
                values: Tensor) -> Tensor:
        r"""The CSR matrix :obj:`[(runs,) nodes, nodes]` of
        :obj:`pattern` with :obj:`values` :obj:`[(runs,) edges]`, every run
        sharing the pattern (expanded, not copied)."""
        rows, cols = pattern
        lead = values.shape[:-1]
        if lead:
            rows, cols = rows.expand(*lead, -1), cols.expand(*lead, -1)
        return csr_pattern((rows, cols), values, (*lead, *self.size))

    def sampled(self, a: Tensor, b: Tensor, start: float = 0.0,
                alpha: float = 1.0) -> Tensor:
        if a.shape != b.shape:
            a, b = torch.broadcast_tensors(a, b)
        values = a.new_full((*a.shape[:-2], self.src.numel()), start)
        return torch.sparse.sampled_addmm(
            self._matrix(self.by_src, values), a, b.transpose(-1, -2),
            beta=1.0, alpha=alpha)

    @staticmethod
    def values(w: Tensor) -> Tensor:
        return w.values() if w.layout == torch.sparse_csr else w

    def to_dst(self, w: Tensor, x: Tensor) -> Tensor:
        return self._sum(self.by_dst,
                         self.values(w).index_select(-1, self.dst_order), x)

    def to_src(self, w: Tensor, y: Tensor) -> Tensor:
        if w.layout == torch.sparse_csr and w.dim() == 2 and y.dim() == 2:
            return spmm(w, y)  # one run: the matrix as it is
        return self._sum(self.by_src, self.values(w), y)

    def to_both(self, w: Tensor, x: Tensor) -> Tensor:
        return self.to_src(w, x) + self.to_dst(w, x)

    def _sum(self, pattern: Tuple[Tensor, Tensor], w: Tensor,
             x: Tensor) -> Tensor:
        if w.dim() == 1 and x.dim() == 2:  # one run
            return spmm(csr_pattern(pattern, w, self.size), x)
        w_runs, x_runs = _runs(w.unsqueeze(-1), x)
        out = [spmm(csr_pattern(pattern, w_r.squeeze(-1), self.size), x_r)
               for w_r, x_r in zip(w_runs, x_runs)]
        return torch.stack(out).view_as(x)


def csr_patterns(src: Tensor, dst: Tensor, dst_order: Tensor,
                 num_nodes: int) -> Tuple[Tuple[Tensor, Tensor],
                                          Tuple[Tensor, Tensor]]:
    r"""The CSR patterns (row pointers, columns) of the edges sorted by
    :obj:`src` (rows :obj:`src`), then of their transpose (rows
    :obj:`dst`, in :obj:`dst_order`), as :class:`CSREdges` takes them:
    32-bit indices where they fit, as the CPU's sparse products take them
    (64-bit ones are converted in every product)."""
    index = torch.int32 if max(num_nodes, src.numel()) < 2**31 \
        else torch.int64
    patterns = ((row_pointers(src, num_nodes), dst),
                (row_pointers(dst[dst_order], num_nodes), src[dst_order]))
    return tuple((rows.to(index), cols.to(index)) for rows, cols in patterns)


def _runs(*tensors: Tensor) -> Tuple[Tensor, ...]:
    r"""The tensors :obj:`[(runs,) rows, cols]` as :obj:`[runs, rows,
    cols]`, broadcast to the same number of runs."""
    runs = max(t.size(0) if t.dim() == 3 else 1 for t in tensors)
    return tuple(t.reshape(-1, *t.shape[-2:]).expand(runs, -1, -1)
                 for t in tensors)


def uses_csr(like: Tensor) -> bool:
    r"""Whether :func:`edges` takes the sparse CSR kernels for inputs like
    :obj:`like` (given the edges' order): in eager mode on the CPU for
    float32/float64."""
    return (like.device.type == 'cpu'
            and like.dtype in (torch.float32, torch.float64)
            and not torch.compiler.is_compiling())


def edges(src: Tensor, dst: Tensor, like: Tensor,
          dst_order: Optional[Tensor] = None) -> IndexEdges:
    r"""The edge operations for inputs like :obj:`like`: sparse CSR kernels
    in eager mode on the CPU for float32/float64 when :obj:`dst_order` is
    given (the edges sorted by :obj:`src`, then :obj:`dst`), index gathers
    and scatters otherwise."""
    if dst_order is not None and uses_csr(like):
        return CSREdges(src, dst, dst_order, like.size(-2))
    return IndexEdges(src, dst)


# The inputs are saved in their own type (e.g. bfloat16) and cast to
# sum_dtype where used; autograd casts each gradient back to its input's type.
class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, ops: IndexEdges) -> Tensor:
        ctx.save_for_backward(x)
        ctx.ops = ops
        x = as_dtype(x, sum_dtype(x.dtype, x.dtype))
        return ops.dot(x, x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x = as_dtype(ctx.saved_tensors[0], grad.dtype)
        return ctx.ops.to_both(grad, x), None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w: Tensor, x: Tensor, ops: IndexEdges) -> Tensor:
        ctx.save_for_backward(w, x)
        ctx.ops = ops
        dtype = sum_dtype(w.dtype, x.dtype)
        return ops.to_dst(as_dtype(w, dtype), as_dtype(x, dtype))

    @staticmethod
    def backward(ctx, grad: Tensor):
        w, x = (as_dtype(t, grad.dtype) for t in ctx.saved_tensors)
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


class _MaskedSums(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, v: Tensor, ops: IndexEdges, scale: float,
                keep: Optional[Tensor]):
        dtype = sum_dtype(x.dtype, v.dtype)
        x_s = as_dtype(x, dtype)
        weights = ops.sampled(x_s, x_s, -scale, scale)  # s (x_s . x_d - 1)
        w = ops.values(weights).exp_()  # in place: `weights` holds them
        if keep is not None:
            w = w.mul_(keep)
        ones = F.pad(as_dtype(v, dtype), (0, 1), value=1.0)  # [v, 1]
        ctx.save_for_backward(x, ones, w)
        if weights is not w:  # the sums' own form (not an output)
            ctx.weights = weights
        ctx.ops, ctx.scale = ops, scale
        ctx.set_materialize_grads(False)
        return ops.to_dst(weights, ones), w

    @staticmethod
    def backward(ctx, grad: Optional[Tensor], grad_w: Optional[Tensor]):
        x, ones, w = ctx.saved_tensors
        ops, scale = ctx.ops, ctx.scale
        weights = getattr(ctx, 'weights', w)
        grad_x = grad_v = g = None
        if grad is not None:  # d sums / d w_e = [v, 1]_s . grad_d
            g = ops.sampled(ones, grad, alpha=scale)
            if ctx.needs_input_grad[1]:
                grad_v = ops.to_src(weights, grad)[..., :-1]
        if grad_w is not None:
            if g is None:
                g = grad_w * scale
            else:
                ops.values(g).add_(grad_w, alpha=scale)
        if g is not None and ctx.needs_input_grad[0]:
            ops.values(g).mul_(w)  # in place: d loss / d (x_s . x_d)
            x = as_dtype(x, w.dtype)
            grad_x = ops.to_both(g, x)
        return grad_x, grad_v, None, None, None


def masked_sums(x: Tensor, v: Tensor, ops: IndexEdges, scale: float,
                keep: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    r"""The weights :math:`w_e = \exp(s \, (x_{s_e}^\top x_{d_e} - 1))`
    of the edges of :obj:`ops` (times :obj:`keep`, if given) for
    :math:`s` = :obj:`scale`, and their sums :math:`\sum_{e: d_e = i} w_e
    (v_{s_e}, 1)` at every node :math:`i` (the weighted values and the
    weights): :obj:`([(runs,) nodes, c + 1], [(runs,) edges])`, in
    :func:`sum_dtype`, by one autograd node whose backward pass keeps
    :obj:`x`, :obj:`v` and :obj:`w` only (no :obj:`[edges, c]` tensor)."""
    return _MaskedSums.apply(x, v, ops, scale, keep)
