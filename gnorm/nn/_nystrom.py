r"""The Nyström approximation of ContraNorm's negatives
(:obj:`kernel="nystrom"` of :class:`gnorm.nn.ContraNorm`), for one graph
or runs of one graph :obj:`[(runs,) n, d]`, in :math:`O(n k (d + k) +
|\mathcal{E}| k)` time and :math:`O(n (k + d))` memory.

The kernel :math:`K_{ij} = e^{\hat{x}_i^\top \hat{x}_j / \tau}` is
expanded around the mean direction :math:`u = \frac{1}{n}\sum_i
\hat{x}_i`: with :math:`r_i = \hat{x}_i - u` and :math:`a_i = e^{u^\top
r_i / \tau}`,

.. math::
    K_{ij} = e^{\lVert u \rVert^2 / \tau} \, a_i a_j \,
    \big(1 + \kappa(r_i, r_j)\big), \qquad
    \kappa(r, r') = e^{r^\top r' / \tau} - 1,

exactly; the constant :math:`1` is summed exactly (:math:`O(n d)`) and
only :math:`\kappa`, a positive definite kernel that holds the
node-specific part, is approximated, by Nyström on :math:`k` landmarks
:math:`\ell` (:math:`\tilde{\kappa} = C W^{-1} C^\top`,
:math:`C_{ij} = \kappa(r_i, \ell_j)`, :math:`W = \kappa(\ell, \ell)`, the
:math:`k \times k` system solved in float64 with a jitter of
:math:`10^3` machine epsilons of the input's type, relative to the mean
diagonal). :math:`\kappa` is computed with :func:`torch.expm1`, so the
small similarities of smoothed inputs keep their relative precision.
The landmarks are :func:`landmarks`: k-means centroids.
"""
import functools
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from gnorm.nn._sparse import IndexEdges, as_dtype, edge_dot, edge_sum

# Lloyd steps of the landmarks' k-means, and the nodes it runs on per
# landmark (a fixed sample of the graph's nodes; all of them when fewer).
KMEANS_STEPS = 2
SAMPLE_PER_LANDMARK = 32
# The seed of the fixed order in which nodes enter the sample.
SEED = 0
# Jitter of the landmark system, in machine epsilons of the input's type
# (relative to W's mean diagonal).
JITTER_EPS = 1e3


@functools.lru_cache(maxsize=32)
def _order(n: int) -> Tensor:
    r"""A fixed permutation of :obj:`n` nodes (its own generator, seeded
    with :obj:`SEED`: the same for every call, whatever the global random
    state), on the CPU."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(SEED))


def landmarks(xn: Tensor, k: int, steps: Optional[int] = None,
              sample: Optional[int] = None) -> Tensor:
    r"""The :obj:`k` landmarks :obj:`[(runs,) k, d]` of the rows
    :obj:`xn` :obj:`[(runs,) n, d]` (:math:`k \leq n`): the centroids of
    :obj:`steps` Lloyd steps of k-means (:obj:`KMEANS_STEPS` by default) on
    a sample of :obj:`sample` nodes (:obj:`SAMPLE_PER_LANDMARK` times
    :math:`k` by default; all when fewer), started at its first :obj:`k`.
    Sample and start are the first nodes of a fixed-seed permutation
    (:func:`_order`), so the landmarks are a function of :obj:`xn` alone:
    no global random state, the same in every call and mode, and each run
    of :obj:`[runs, n, d]` gets the landmarks it gets alone. Assignments
    are taken without gradient; the centroids, means of rows of :obj:`xn`,
    carry it (the gradient of the function computed, wherever no
    assignment ties)."""
    n, d = xn.shape[-2:]
    steps = KMEANS_STEPS if steps is None else steps
    size = min(n, SAMPLE_PER_LANDMARK * k if sample is None else sample)
    order = _order(n)[:max(size, k)].to(xn.device)
    points = xn.index_select(-2, order)  # [(runs,) s, d]
    centres = points[..., :k, :]  # [(runs,) k, d]
    for _ in range(steps):
        with torch.no_grad():
            dist = (centres * centres).sum(-1).unsqueeze(-2) \
                - 2 * points @ centres.transpose(-1, -2)  # [(runs,) s, k]
            assign = dist.argmin(-1)  # [(runs,) s]
            count = torch.zeros(centres.shape[:-1], dtype=points.dtype,
                                device=points.device).scatter_add_(
                -1, assign, torch.ones_like(assign, dtype=points.dtype))
            count = count.unsqueeze(-1)  # [(runs,) k, 1]
        sums = torch.zeros_like(centres).scatter_add(
            -2, assign.unsqueeze(-1).expand(*assign.shape, d), points)
        centres = torch.where(count > 0, sums / count.clamp_min(1.0),
                              centres)
    return centres


def _solver(lm: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    r"""The Cholesky factor :obj:`[(runs,) k, k]` (float64) of the
    landmarks' kernel :math:`W = \kappa(\ell, \ell)` plus its jitter."""
    lm = lm.double()
    w = torch.expm1(lm @ (lm * scale).transpose(-1, -2))  # [(runs,) k, k]
    diag = w.diagonal(dim1=-2, dim2=-1)
    jitter = JITTER_EPS * torch.finfo(dtype).eps * \
        diag.mean(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
    w = w + torch.diag_embed(jitter.expand_as(diag))
    return torch.linalg.cholesky(w)


def _solve(chol: Tensor, rhs: Tensor) -> Tensor:
    r""":math:`W^{-1}` :obj:`rhs` in float64, back in :obj:`rhs`'s type."""
    return torch.cholesky_solve(rhs.double(), chol).to(rhs.dtype)


def nystrom_negatives(
    x: Tensor,
    xn: Tensor,
    temperature: float,
    k: int,
    pairs=None,
    ops: Optional[IndexEdges] = None,
    symmetric: bool = False,
) -> Tensor:
    r""":math:`\mathbf{X}_{\text{neg}}` of
    :func:`gnorm.nn.contra_norm.contrastive_negatives` for one graph (or
    runs of one graph, :obj:`[(runs,) n, d]`, each on its own landmarks)
    with the kernel approximated as in this module's head, on :obj:`k`
    landmarks (:math:`k < n`). With :obj:`pairs` (a
    :class:`~gnorm.nn.contra_norm.MaskedPairs`) and their edge operations
    :obj:`ops`, the masked pairs' terms of the *same* approximate kernel
    are subtracted along the pairs, so that the approximate kernel is
    exactly zero where the mask is. A denominator is clamped at the least
    value the exact one can take (its number of negatives times the
    smallest kernel value), so it stays positive."""
    scale = 1.0 / temperature
    n, d = x.shape[-2:]
    u = xn.mean(-2, keepdim=True)  # [(runs,) 1, d]: the mean direction
    r = xn - u  # [(runs,) n, d]
    lm = landmarks(xn, k) - u  # [(runs,) k, d]
    s = (r * u).sum(-1, keepdim=True) * scale  # [(runs,) n, 1]: u.r_i / tau
    shift = s.detach().amax(-2, keepdim=True)
    a = torch.exp(s - shift)  # a_i, scaled by a constant that cancels
    c = torch.expm1(r @ (lm * scale).transpose(-1, -2))  # [(runs,) n, k]
    chol = _solver(lm, scale, x.dtype)

    def kernel_product(v: Tensor) -> Tensor:
        # sum_j (1 + kappa~_ij) v_j: [(runs,) n, c]
        return c @ _solve(chol, c.transpose(-1, -2) @ v) + \
            v.sum(-2, keepdim=True)

    ones = torch.ones_like(x[..., :1])
    v = torch.cat([a * x, a], dim=-1)  # [(runs,) n, d + 1]
    full = out = kernel_product(v)  # sum_j a_j k_ij [x_j, 1]

    # The least value a denominator can take, per negative:
    # a_j k_ij = exp(x_i.x_j / tau - |u|^2 / tau - s_i - shift).
    least = torch.exp(-(1.0 + (u * u).sum(-1, keepdim=True)) * scale
                      - s - shift)  # [(runs,) n, 1]
    count = col_count = ones * n
    valid = col_valid = None
    if pairs is not None:
        # k_e = 1 + kappa~(r_i, r_j) = 1 + g_i . g_j of each masked pair
        # j -> i, g = C L^-T (W = L L^T): O(n k^2 + |E| k).
        eye = torch.eye(k, dtype=chol.dtype, device=chol.device)
        inverse = torch.linalg.solve_triangular(chol, eye, upper=False)
        g = c @ inverse.to(c.dtype).transpose(-1, -2)  # [(runs,) n, k]
        k_e = edge_dot(g, ops) + 1.0  # [(runs,) pairs]
        mask = torch.ones_like(pairs.dst, dtype=x.dtype)
        if pairs.keep is not None:
            k_e = k_e * pairs.keep
            mask = pairs.keep.to(x.dtype)
        out = out - as_dtype(edge_sum(k_e, v, ops), out.dtype)
        count = count - scatter(mask, pairs.dst, 0, dim_size=n).unsqueeze(-1)
        col_count = col_count - scatter(mask, pairs.src, 0,
                                        dim_size=n).unsqueeze(-1)
        valid, col_valid = pairs.valid, pairs.col_valid
    num, den = out.split([d, 1], dim=-1)
    den = torch.maximum(den, count * least)
    if valid is not None:  # rows without negatives: divided by 1, zeroed
        den = den + valid.logical_not()
    x_neg = num / den

    if symmetric:
        # Column sums sum_i a_i k_ij: the full row sums (kappa~ is
        # symmetric), less the masked pairs' column terms.
        col_den = full[..., d:]
        if pairs is not None:
            a_dst = a.squeeze(-1).index_select(-1, pairs.dst)
            col_den = col_den - scatter(
                as_dtype(k_e * a_dst, x.dtype), pairs.src, -1,
                dim_size=n).unsqueeze(-1)
        col_den = torch.maximum(col_den, col_count * least)
        if col_valid is not None:
            col_den = torch.where(col_valid, col_den, 1.0)
        w = x / col_den
        if col_valid is not None:
            w = torch.where(col_valid, w, 0.0)
        col = kernel_product(w)
        if pairs is not None:
            col = col - as_dtype(edge_sum(k_e, w, ops), col.dtype)
        x_neg = x_neg + a * col
    if valid is not None:
        x_neg = x_neg * valid
    return as_dtype(x_neg, x.dtype)
