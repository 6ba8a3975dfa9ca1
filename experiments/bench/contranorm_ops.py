"""ContraNorm's aten op count per layer-step, before and after the
op-count cut (the GPU step is host-bound: each op is a kernel launch).

A 32-layer DeepGCN step on Cora with ContraNorm was host-bound on the GPU
(experiments/results/gpu_check_cuda.md: ~156 kernel launches per
ContraNorm layer-step). This script counts the aten ops of one forward +
backward of one ContraNorm layer on a small random graph for the settings
a DeepGCN on one graph uses (``batch=None``), for (a) *before*: a frozen
copy of the layer at commit adc147c8 (:func:`_before_forward` below), and
(b) *after*: :class:`gnorm.nn.ContraNorm` as it is now, and checks that
both give the same outputs and input gradients (float64).

The count: every profiler event whose name starts with ``aten::`` (nested
ones counted, as experiments/gpu_check.py counts the CPU's "launches"),
of ``torch.profiler.profile(activities=[ProfilerActivity.CPU])`` around one
forward and one backward pass (the layer's parameters without gradients
before it, as after ``zero_grad(set_to_none=True)``), after a warm-up call.
It depends on the torch version and the code path for the masked pairs,
not on the machine; both paths are counted on the CPU: ``csr``, the
sparse CSR kernels the CPU takes, and ``index``, the index gathers and
scatters that CUDA and torch.compile take.

    python experiments/bench/contranorm_ops.py      # writes experiments/results/contranorm_ops.md
    python experiments/bench/contranorm_ops.py --paths index --out /tmp/ops.md
"""
import argparse
import sys
import warnings
from pathlib import Path
from typing import Dict, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm

from torch_geometric.utils import scatter  # noqa: E402

from gnorm.nn import ContraNorm, contra_norm  # noqa: E402
from gnorm.nn.stacked import layer_norm  # noqa: E402

HEADER = ['setting', 'ops before', 'ops after', 'after / before',
          'outputs agree']
# name: (ContraNorm options, runs, edges given as, counted for the goal)
SETTINGS = {
    'default (all)': (dict(), None, None, True),
    'non_neighbors (pairs, as DeepGCN)': (
        dict(negatives='non_neighbors'), None, 'pairs', True),
    'non_neighbors (edge_index)': (
        dict(negatives='non_neighbors'), None, 'edge_index', False),
    'default (all), 3 runs': (dict(), 3, None, True),
    'non_neighbors (pairs), 3 runs': (
        dict(negatives='non_neighbors'), 3, 'pairs', True),
    'all, symmetric': (dict(symmetric=True), None, None, False),
    'non_neighbors (pairs), symmetric': (
        dict(negatives='non_neighbors', symmetric=True), None, 'pairs',
        False),
    'non_neighbors (pairs), learnable scale, pre_norm': (
        dict(negatives='non_neighbors', learnable_scale=True,
             pre_norm=True), None, 'pairs', False),
}
GOAL = 0.6  # the goal: after <= 60 % of before
PATHS = {'csr': 'the CPU\'s sparse CSR kernels',
         'index': 'index gathers and scatters (the path of CUDA and '
                  'torch.compile)'}


# ------------------------------------------------------------ before
# ContraNorm's forward path at commit adc147c8 (gnorm/nn/contra_norm.py and
# the parts of gnorm/nn/_sparse.py and gnorm/nn/stacked.py it runs), copied
# as it was for one graph or runs of one graph (batch=None, the setting
# measured), so that the comparison stays honest after the layer changes.
# Input checks (shapes only, no aten op) are left out; the one addition is
# `index_edges`, which takes the index path for the masked pairs, as the
# layer did on CUDA.
_HEAD_MULTIPLE = 8


class _Pairs(NamedTuple):
    src: Tensor
    dst: Tensor
    valid: Tensor
    col_valid: Tensor
    dst_order: Tensor
    keep: Optional[Tensor] = None


def _masked_pairs(edge_index, num_nodes, compact=True):
    loop = torch.arange(num_nodes, device=edge_index.device)
    key = torch.cat([edge_index[0].long() * num_nodes + edge_index[1],
                     loop * (num_nodes + 1)]).sort().values
    keep = torch.ones_like(key, dtype=torch.bool)
    keep[1:] = key[1:] != key[:-1]
    if compact:
        key, keep = key[keep], None
    src, dst = key.div(num_nodes, rounding_mode='floor'), key % num_nodes
    ones = torch.ones_like(dst) if keep is None else keep.long()
    size = dst.new_full((num_nodes, ), num_nodes)
    valid = size > scatter(ones, dst, 0, dim_size=num_nodes)
    col_valid = size > scatter(ones, src, 0, dim_size=num_nodes)
    return _Pairs(src, dst, valid.unsqueeze(-1), col_valid.unsqueeze(-1),
                  torch.argsort(dst * num_nodes + src), keep)


def _row_pointers(rows, num_rows):
    crow = rows.new_zeros(num_rows + 1)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow


def _csr_pattern(pattern, values, size):
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*[Ss]parse')
        return torch.sparse_csr_tensor(*pattern, values, size)


def _sum_dtype(weight, dense):
    return torch.promote_types(torch.promote_types(weight, dense),
                               torch.float32)


def _spmm(matrix, dense):
    # The old product, on the CPU (where the counts are made): both cast,
    # then addmm into an uninitialised output.
    dtype = _sum_dtype(matrix.dtype, dense.dtype)
    matrix, dense = matrix.to(dtype), dense.to(dtype)
    with torch.autocast('cpu', enabled=False):
        out = dense.new_empty(matrix.size(0), dense.size(1))
        return torch.addmm(out, matrix, dense, beta=0, out=out)


class _IndexEdges:
    def __init__(self, src, dst):
        self.src, self.dst = src, dst

    def dot(self, a, b):
        return (a.index_select(-2, self.src) *
                b.index_select(-2, self.dst)).sum(-1)

    def to_dst(self, w, x):
        return torch.zeros_like(x).index_add_(
            -2, self.dst, w.unsqueeze(-1) * x.index_select(-2, self.src))

    def to_src(self, w, y):
        return torch.zeros_like(y).index_add_(
            -2, self.src, w.unsqueeze(-1) * y.index_select(-2, self.dst))


def _runs(*tensors):
    runs = max(t.size(0) if t.dim() == 3 else 1 for t in tensors)
    return tuple(t.reshape(-1, *t.shape[-2:]).expand(runs, -1, -1)
                 for t in tensors)


class _CSREdges(_IndexEdges):
    def __init__(self, src, dst, dst_order, num_nodes):
        super().__init__(src, dst)
        self.dst_order, self.size = dst_order, (num_nodes, num_nodes)
        self.by_src = (_row_pointers(src, num_nodes), dst)
        self.by_dst = (_row_pointers(dst[dst_order], num_nodes),
                       src[dst_order])

    def dot(self, a, b):
        zeros = a.new_zeros(self.src.numel())
        pattern = _csr_pattern(self.by_src, zeros, self.size)
        out = [torch.sparse.sampled_addmm(pattern, a_r, b_r.t(),
                                          beta=0.0).values()
               for a_r, b_r in zip(*_runs(a, b))]
        return torch.stack(out).view(*a.shape[:-2], -1)

    def to_dst(self, w, x):
        return self._sum(self.by_dst, w.index_select(-1, self.dst_order), x)

    def to_src(self, w, y):
        return self._sum(self.by_src, w, y)

    def _sum(self, pattern, w, x):
        w_runs, x_runs = _runs(w.unsqueeze(-1), x)
        out = [_spmm(_csr_pattern(pattern, w_r.squeeze(-1), self.size), x_r)
               for w_r, x_r in zip(w_runs, x_runs)]
        return torch.stack(out).view_as(x)


def _edges(src, dst, like, dst_order=None, index_edges=False):
    if (not index_edges and dst_order is not None
            and like.device.type == 'cpu'
            and like.dtype in (torch.float32, torch.float64)):
        return _CSREdges(src, dst, dst_order, like.size(-2))
    return _IndexEdges(src, dst)


class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ops):
        ctx.save_for_backward(x)
        ctx.ops = ops
        x = x.to(_sum_dtype(x.dtype, x.dtype))
        return ops.dot(x, x)

    @staticmethod
    def backward(ctx, grad):
        x = ctx.saved_tensors[0].to(grad.dtype)
        return ctx.ops.to_src(grad, x) + ctx.ops.to_dst(grad, x), None


class _EdgeSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, x, ops):
        ctx.save_for_backward(w, x)
        ctx.ops = ops
        dtype = _sum_dtype(w.dtype, x.dtype)
        return ops.to_dst(w.to(dtype), x.to(dtype))

    @staticmethod
    def backward(ctx, grad):
        w, x = (t.to(grad.dtype) for t in ctx.saved_tensors)
        grad_w = (ctx.ops.dot(x, grad).sum_to_size(w.shape)
                  if ctx.needs_input_grad[0] else None)
        grad_x = ctx.ops.to_src(w, grad) if ctx.needs_input_grad[1] else None
        return grad_w, grad_x, None


def _sdpa(q, k, v, temperature):
    c = v.size(-1)
    pad = [F.pad(t, (0, -t.size(-1) % _HEAD_MULTIPLE)).unsqueeze(1)
           for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*pad, scale=1.0 / temperature)
    return out.squeeze(1)[..., :c]


def _dense_keys(xn):
    xn_d = xn.reshape(-1, *xn.shape[-2:])
    B, N, d = xn_d.shape
    q = torch.cat([xn_d, xn_d.new_ones(B, N, 1)], dim=-1)
    tail = xn_d.new_zeros(B, N, 1)
    anchor = xn_d.new_zeros(B, 1, d + 1)
    anchor[..., -1] = 1.0
    k = torch.cat([torch.cat([xn_d, tail], dim=-1), anchor], dim=1)
    return q, k


def _attend(q, k, v, temperature):
    B, N, _ = q.shape
    v_d = v.reshape(-1, *v.shape[-2:])
    d = v_d.size(-1)
    v_d = torch.cat([v_d, v_d.new_zeros(B, N, 1)], dim=-1)
    anchor = v_d.new_zeros(B, 1, d + 1)
    anchor[..., -1] = 1.0
    v_d = torch.cat([v_d, anchor], dim=1)
    out = _sdpa(q, k, v_d, temperature)
    return out.view(*v.shape[:-1], d + 1)


def _before_negatives(x, xn, temperature, edge_index, symmetric,
                      index_edges):
    if edge_index is None and not symmetric:
        q, v = (t.reshape(-1, *t.shape[-2:]) for t in (xn, x))
        return _sdpa(q, q, v, temperature).view_as(x)
    d = x.size(-1)
    q, k = _dense_keys(xn)
    out = _attend(q, k, x, temperature)
    a = out[..., d:]
    num, den = out[..., :d], 1.0 - a
    col_den = 1.0 / a - 1.0
    valid = None
    if edge_index is not None:
        pairs = edge_index if isinstance(edge_index, _Pairs) else \
            _masked_pairs(edge_index, x.size(-2), compact=False)
        src, dst = pairs.src, pairs.dst
        valid, col_valid = pairs.valid, pairs.col_valid
        n = x.size(-2)
        ops = _edges(src, dst, x, pairs.dst_order, index_edges)
        w = torch.exp((_EdgeDot.apply(xn, ops) - 1.0) / temperature)
        if pairs.keep is not None:
            w = w * pairs.keep
        row_w = scatter(w, dst, -1, dim_size=n, reduce='sum').unsqueeze(-1)
        row_wx = _EdgeSum.apply(w, x, ops)
        num = num - a * row_wx
        den = den - a * row_w
        col_den = col_den - scatter(w, src, -1, dim_size=n,
                                    reduce='sum').unsqueeze(-1)
        den = torch.where(valid, den, torch.ones_like(den))
        col_den = torch.where(col_valid, col_den, torch.ones_like(col_den))
    x_neg = num / den
    if symmetric:
        v = (x / col_den).to(x.dtype)
        if edge_index is not None:
            v = torch.where(col_valid, v, torch.zeros_like(v))
        out = _attend(q, k, v, temperature)
        col = out[..., :d] / out[..., d:]
        if edge_index is not None:
            col = col - _EdgeSum.apply(w, v, ops)
        x_neg = x_neg + col
    if valid is not None:
        x_neg = torch.where(valid, x_neg, torch.zeros_like(x_neg))
    return x_neg.to(x.dtype)


def _before_forward(norm: ContraNorm, x: Tensor, edge_index=None,
                    index_edges: bool = False) -> Tensor:
    r""":meth:`ContraNorm.forward` of :obj:`norm` (its options and
    parameters) as it was at commit adc147c8, for :obj:`batch=None`."""
    if norm.scale_param is not None or norm.scale > 0:
        xn = F.normalize(x, dim=-1)
        value = xn if norm.pre_norm else x
        x_neg = _before_negatives(
            value, xn, norm.temperature,
            edge_index if norm.negatives == 'non_neighbors' else None,
            norm.symmetric, index_edges)
        s = norm.scale
        if norm.scale_param is not None:
            s = norm.scale_param.unsqueeze(-2)
            if norm.positive_scale:
                s = s.exp()
        x = (1 + s) * value - s * x_neg if norm.identity else \
            value - s * x_neg
    if norm.norm is not None:
        x = layer_norm(x, norm.norm)
    return x


# ------------------------------------------------------------ counting
def aten_ops(step) -> int:
    r"""The number of ``aten::`` profiler events (nested ones counted) that
    :obj:`step()` runs on the CPU."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(e.name.startswith('aten::') for e in prof.events())


def random_graph(n: int = 200, d: int = 64, edges: int = 1000,
                 runs: Optional[int] = None, seed: int = 0,
                 dtype: torch.dtype = torch.float32):
    r"""Node features :obj:`[(runs,) n, d]` and :obj:`edges` random
    directed edges (repeats and self-loops possible)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (n, d) if runs is None else (runs, n, d)
    x = torch.randn(shape, generator=gen, dtype=dtype)
    return x, torch.randint(0, n, (2, edges), generator=gen)


def count_setting(name: str, n: int = 200, d: int = 64,
                  edges: int = 1000, index_edges: bool = False,
                  ) -> Dict[str, object]:
    r"""Op counts before and after of the setting :obj:`name` of
    :data:`SETTINGS` (float32, as trained; :obj:`index_edges`: the masked
    pairs through the index path of CUDA and torch.compile), and whether
    outputs and the gradients of the input and of the parameters agree in
    float64."""
    options, runs, given, _ = SETTINGS[name]
    torch.manual_seed(0)
    norm = ContraNorm(d, scale=0.7, **options)
    if norm.scale_param is not None:  # per-channel scales that differ
        with torch.no_grad():
            norm.scale_param.add_(0.01 * torch.arange(d))

    def inputs(dtype):
        x, edge_index = random_graph(n, d, edges, runs, dtype=dtype)
        if given is None:
            return x, None, None
        if given == 'edge_index':
            return x, edge_index, edge_index
        return (x, _masked_pairs(edge_index, n),
                contra_norm.masked_pairs(edge_index, n))

    def before(x, e):
        return _before_forward(norm, x, e, index_edges)

    def after(x, e):
        with _index_edges(index_edges):
            return norm(x, edge_index=e)

    def step(forward, x, e, grad):
        def run():
            for p in norm.parameters():
                p.grad = None
            x.grad = None
            forward(x, e).backward(grad)
        return run

    x, e_before, e_after = inputs(torch.float32)
    x.requires_grad_()
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    counts = {}
    for key, forward, e in (('before', before, e_before),
                            ('after', after, e_after)):
        step(forward, x, e, grad)()  # warm-up
        counts[key] = aten_ops(step(forward, x, e, grad))

    norm.double()
    x, e_before, e_after = inputs(torch.float64)
    x.requires_grad_()
    results = []
    for forward, e in ((before, e_before), (after, e_after)):
        out = forward(x, e)
        results.append((out, *torch.autograd.grad(
            out, [x, *norm.parameters()], grad.double())))
    agree = all(torch.allclose(a, b, rtol=1e-9, atol=1e-10)
                for a, b in zip(*results))
    return dict(setting=name, before=counts['before'], after=counts['after'],
                ratio=counts['after'] / counts['before'], agree=agree)


class _index_edges:
    r"""Makes :class:`ContraNorm` take the index gathers and scatters for
    the masked pairs (the path of CUDA and torch.compile) in the block,
    if :obj:`enabled`."""
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        if self.enabled:
            self.saved = contra_norm.pair_edges
            contra_norm.pair_edges = lambda pairs, like: \
                self.saved(pairs, like, csr=False)

    def __exit__(self, *exc):
        if self.enabled:
            contra_norm.pair_edges = self.saved


# ------------------------------------------------------------ report
def report(tables: Dict[str, list], args) -> list:
    r"""The Markdown lines of the rows of :func:`count_setting`, one table
    per path of the masked pairs."""
    lines = [
        '# ContraNorm: aten ops per layer-step, before and after the '
        'op-count cut',
        '',
        f'* command: `python experiments/bench/contranorm_ops.py '
        f'--paths {" ".join(tables)}`; torch {torch.__version__}',
        f'* one forward + backward of one ContraNorm layer (scale 0.7, '
        f'LayerNorm on), n = {args.n} nodes, d = {args.d} channels, '
        f'{args.edges} random directed edges, float32, batch=None',
        '* ops: every `aten::` event of torch.profiler (CPU activity), '
        'nested ones counted; the counts do not depend on the machine, '
        'only on the torch version and the code path',
        '* before: the layer at commit adc147c8 (a frozen copy in the '
        'script); after: gnorm.nn.ContraNorm now; outputs agree: outputs '
        'and the gradients of the input and the parameters allclose in '
        'float64',
        f'* goal: after / before <= {GOAL} for the settings '
        'marked *',
    ]
    for path, rows in tables.items():
        lines += ['', f'## Masked pairs through {PATHS[path]}', '',
                  '| ' + ' | '.join(HEADER) + ' |',
                  '|' + '---|' * len(HEADER)]
        for r in rows:
            goal = ' *' if SETTINGS[r['setting']][3] else ''
            lines.append(f"| {r['setting']}{goal} | {r['before']} | "
                         f"{r['after']} | {r['ratio']:.2f} | {r['agree']} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--n', type=int, default=200)
    parser.add_argument('--d', type=int, default=64)
    parser.add_argument('--edges', type=int, default=1000)
    parser.add_argument('--paths', nargs='+', choices=list(PATHS),
                        default=list(PATHS),
                        help='the code paths of the masked pairs to count')
    parser.add_argument('--out', default=str(
        ROOT / 'experiments' / 'results' / 'contranorm_ops.md'))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    tables = {path: [count_setting(name, args.n, args.d, args.edges,
                                   path == 'index') for name in SETTINGS]
              for path in args.paths}
    lines = report(tables, args)
    print('\n'.join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text('\n'.join(lines) + '\n')
    failed = [r['setting'] for rows in tables.values() for r in rows
              if not r['agree']]
    if failed:
        sys.exit(f'outputs differ: {failed}')


if __name__ == '__main__':
    main()
