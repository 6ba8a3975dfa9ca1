r"""The collapse metrics of node features, each a function of :obj:`x`
(and :obj:`edge_index` for the Dirichlet energy) per graph of a batch; see
:mod:`gnorm.metrics`."""
import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import degree, scatter, to_dense_batch

from gnorm.metrics.checks import (check_batch, check_edge_index,
                                   check_inputs, check_x)
from gnorm.metrics.rows import (finish, graph_sum, scaled_rows,
                                 sort_by_graph, subsample, unit_rows,
                                 weighted_graph_sum)

# Largest number of entries of one chunk of pairwise matrices in `uniformity`.
_PAIR_CHUNK = 1 << 24


# Entries of the matrices whose float64 Gram matrices are formed at once:
# a float64 copy of 1 MiB, which stays in a core's cache.
_GRAM_CHUNK = 1 << 17


def effective_rank(x: Tensor, batch: Optional[Tensor] = None,
                   batch_size: Optional[int] = None) -> Tensor:
    r"""Computes the effective rank of the node feature matrix from the
    `"ContraNorm: A Contrastive Learning Perspective on Oversmoothing and
    Beyond" <https://arxiv.org/abs/2303.06562>`_ paper (Definition 3.1,
    after Roy and Vetterli, 2007).

    .. math::
        \mathrm{erank}(\mathbf{X}) = \exp\Big(-\sum_{k=1}^{Q} p_k \log p_k
        \Big), \qquad p_k = \frac{\sigma_k}{\sum_{l=1}^{Q} \sigma_l},

    where :math:`\sigma_1 \geq \dots \geq \sigma_Q \geq 0` are the singular
    values of :math:`\mathbf{X} \in \mathbb{R}^{n \times d}`,
    :math:`Q = \min(n, d)`, and :math:`0 \log 0 = 0`. For a nonzero matrix,
    :math:`1 \leq \mathrm{erank}(\mathbf{X}) \leq \mathrm{rank}(\mathbf{X})`.
    The entropy is undefined for the all-zero matrix (and a graph without
    nodes); its effective rank is defined here as :math:`0`, its rank.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    batch_vec, size = check_inputs('effective_rank', x, batch, batch_size)
    if size == 0:
        return x.new_empty(0)
    x, batch_vec = sort_by_graph(x, batch_vec)
    # Zero padding adds only zero singular values, which add 0 to the entropy.
    dense, _ = to_dense_batch(x, batch_vec, batch_size=size)  # [B, N, d]
    return finish(dense_effective_rank(dense), batch)


def dense_effective_rank(dense: Tensor) -> Tensor:
    r""":func:`effective_rank` of zero-padded graphs :obj:`[..., B, N, d]`,
    :obj:`[..., B]` (:obj:`nan` for a graph with a non-finite entry)."""
    sigma = _singular_values(dense)  # [..., B, min(N, d)], float64
    total = sigma.sum(dim=-1, keepdim=True)  # [..., B, 1]
    p = sigma / torch.where(total > 0, total, torch.ones_like(total))
    entropy = -torch.special.xlogy(p, p).sum(dim=-1)  # [..., B]
    return torch.where(total.squeeze(-1) == 0, torch.zeros_like(entropy),
                       entropy.exp()).to(dense.dtype)


def _singular_values(x: Tensor) -> Tensor:
    r"""The singular values :obj:`[..., min(N, d)]` of matrices :obj:`[...,
    N, d]` in float64, largest first; :obj:`nan` for a matrix with a
    non-finite entry.

    Below float64, they are the square roots of the eigenvalues of the Gram
    matrix of the smaller side, formed in float64: the product of two
    float32 numbers is exact in float64, so only the sums round, at
    float64's precision, far below float32's SVD, whose error is of the
    order of float32's rounding of the largest singular value (tested),
    at about the SVD's cost on a CPU (a matrix product and the eigenvalues
    of a small matrix, where the SVD factors a tall matrix). A float64
    input has no wider type to form its Gram matrix in and takes the SVD.
    """
    if x.dtype == torch.float64:
        finite = (x * 0).sum((-2, -1)) == 0  # nan for nan and inf entries
        sigma = torch.linalg.svdvals(x.nan_to_num(0.0, 0.0, 0.0))
    else:
        gram = _wide_gram(x)  # [..., Q, Q], Q = min(N, d)
        finite = gram.isfinite().flatten(-2).all(-1)
        eig = torch.linalg.eigvalsh(gram.nan_to_num_(0.0, 0.0, 0.0))
        sigma = eig.flip(-1).clamp_(min=0).sqrt_()
    return torch.where(finite.unsqueeze(-1), sigma,
                       torch.full_like(sigma, float('nan')))


def _wide_gram(x: Tensor) -> Tensor:
    r"""The Gram matrices of the smaller side :obj:`[..., Q, Q]` of
    matrices :obj:`x` :obj:`[..., N, d]`, formed in float64 a few at a time
    (the float64 copy of each part stays in the cache)."""
    lead, (n, d) = x.shape[:-2], x.shape[-2:]
    flat = x.reshape(math.prod(lead), n, d)  # also with no entries
    step = max(1, _GRAM_CHUNK // max(1, n * d))  # matrices at a time
    parts = []
    for part in flat.split(step):  # at least one part, maybe empty
        wide = part.double()
        parts.append(wide @ wide.mT if n < d else wide.mT @ wide)
    q = min(n, d)
    return torch.cat(parts).view(*lead, q, q)


def feature_cosine_similarity(x: Tensor, batch: Optional[Tensor] = None,
                              batch_size: Optional[int] = None) -> Tensor:
    r"""Computes the mean pairwise cosine similarity of node features from the
    `"ContraNorm: A Contrastive Learning Perspective on Oversmoothing and
    Beyond" <https://arxiv.org/abs/2303.06562>`_ paper (Appendix C).

    .. math::
        \mathrm{sim}_f = \frac{2}{N(N-1)} \sum_{i < j}
        \frac{\mathbf{h}_i^{\top} \mathbf{h}_j}
        {\|\mathbf{h}_i\|_2 \|\mathbf{h}_j\|_2}
        = \frac{\big\|\sum_i \mathbf{u}_i\big\|_2^2 - \sum_i
        \|\mathbf{u}_i\|_2^2}{N(N-1)},
        \qquad \mathbf{u}_i = \frac{\mathbf{h}_i}{\|\mathbf{h}_i\|_2},

    over the :math:`N` nodes of a graph, evaluated with the right-hand side in
    :math:`\mathcal{O}(N d)`. A zero row has :math:`\mathbf{u}_i = \mathbf{0}`,
    i.e. cosine similarity :math:`0` with every node, and still counts in
    :math:`N`. The value is :obj:`nan` for a graph with fewer than two nodes.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    batch_vec, size = check_inputs('feature_cosine_similarity', x, batch,
                                   batch_size)
    return finish(graph_cosine_similarity(x, batch_vec, size), batch)


def graph_cosine_similarity(x: Tensor, batch: Tensor, size: int,
                       peak: Optional[Tensor] = None) -> Tensor:
    r""":func:`feature_cosine_similarity` of checked inputs
    :obj:`[..., num_nodes, d]` (leading dimensions: several outputs at
    once), :obj:`[..., size]`, with no value read to the host;
    :obj:`peak`: :func:`row_peaks` of :obj:`x`, if known."""
    y, norm = scaled_rows(x, peak)
    inv = torch.where(norm > 0, 1 / norm, torch.zeros_like(norm))
    u_sum = weighted_graph_sum(inv, y, batch, size)  # [..., B, d]
    # |u_i|^2 is 1 for a nonzero row and 0 for a zero row.
    self_sum = graph_sum((norm > 0).to(x.dtype), batch, size, -1)  # [..., B]
    n = scatter(x.new_ones(batch.numel()), batch, dim=0, dim_size=size,
                reduce='sum')  # [B]
    pairs = n * (n - 1)
    sim = (u_sum.pow(2).sum(dim=-1) - self_sum) / pairs.clamp(min=1)
    return torch.where(n > 1, sim, torch.full_like(sim, float('nan')))


def feature_variance(x: Tensor, batch: Optional[Tensor] = None,
                     batch_size: Optional[int] = None,
                     reduce: str = 'mean') -> Tensor:
    r"""Computes the variance of node features,
    :math:`\mathrm{Var}(\mathbf{H})`, from the `"ContraNorm: A Contrastive
    Learning Perspective on Oversmoothing and Beyond"
    <https://arxiv.org/abs/2303.06562>`_ paper (Proposition 1, defined in the
    proof of Lemma B.1).

    .. math::
        \mathrm{Var}(\mathbf{H}) = \big\|(\mathbf{I} - \mathbf{e}
        \mathbf{e}^{\top})\mathbf{H}\big\|_F^2 = \sum_{i=1}^{N}
        \|\mathbf{h}_i - \bar{\mathbf{h}}\|_2^2,
        \qquad \mathbf{e} = \mathbf{1}/\sqrt{N},\;
        \bar{\mathbf{h}} = \frac{1}{N}\sum_{i=1}^{N} \mathbf{h}_i,

    over the :math:`N` nodes of a graph. The default, :obj:`reduce="mean"`,
    divides it by :math:`N`: the mean squared distance of a row to the mean
    row, which does not grow with the number of nodes and is the
    :obj:`variance` that :class:`gnorm.monitor.CollapseMonitor`,
    ``collapse.csv`` and ``results.json`` record; :obj:`reduce="sum"` is the
    paper's :math:`\mathrm{Var}(\mathbf{H})`, the sum. It is :math:`0` for a
    graph without nodes.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)
        reduce (str, optional): :obj:`"mean"` over the nodes or
            :obj:`"sum"` (the paper's :math:`\mathrm{Var}`).
            (default: :obj:`"mean"`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    check_x('feature_variance', x)
    if reduce not in ('sum', 'mean'):
        raise ValueError(f"'feature_variance' expects 'reduce' to be 'sum' "
                         f"or 'mean' (got {reduce!r})")
    batch_vec, size = check_batch('feature_variance', x, batch, batch_size)
    return finish(graph_variance(x, batch_vec, size, reduce), batch)


def graph_variance(x: Tensor, batch: Tensor, size: int, reduce: str) -> Tensor:
    r""":func:`feature_variance` of checked inputs :obj:`[..., num_nodes,
    d]`, :obj:`[..., size]`."""
    if size == 1:  # one graph: plain means and sums
        centred = x - x.mean(-2, keepdim=True)
    else:
        mean = scatter(x, batch, dim=-2, dim_size=size,
                       reduce='mean')  # [..., B, d]
        centred = x - mean.index_select(-2, batch)
    sq_dist = torch.linalg.vector_norm(centred, dim=-1).square()  # [..., N]
    if size == 1:
        return (sq_dist.mean(-1, keepdim=True) if reduce == 'mean'
                else sq_dist.sum(-1, keepdim=True))
    return scatter(sq_dist, batch, dim=-1, dim_size=size,
                   reduce=reduce)  # [..., B]


def dense_uniformity(dense: Tensor, mask: Tensor) -> Tensor:
    r"""The :func:`uniformity` :obj:`[b]` of the unit rows :obj:`dense`
    :obj:`[b, N, d]` of :obj:`b` graphs, those of :obj:`mask` :obj:`[b, N]`
    valid (:obj:`nan` for fewer than two)."""
    num = dense.size(1)
    sq_norm = dense.pow(2).sum(dim=-1)  # [b, N]
    # Squared distances between rows of one graph: [b, N, N]
    sq_dist = sq_norm.unsqueeze(-1) + sq_norm.unsqueeze(-2) - \
        2 * dense @ dense.transpose(1, 2)
    logits = -2 * sq_dist.clamp(min=0)
    upper = torch.ones(num, num, dtype=torch.bool,
                       device=dense.device).triu(1)
    pair = upper & mask.unsqueeze(-1) & mask.unsqueeze(-2)  # [b, N, N]
    logits = logits.masked_fill(~pair, float('-inf'))
    log_sum = torch.logsumexp(logits.flatten(1), dim=-1)  # [b]
    n = mask.sum(dim=-1).to(dense.dtype)  # [b]
    log_pairs = torch.log((n * (n - 1) / 2).clamp(min=1))
    return torch.where(n > 1, log_sum - log_pairs,
                       torch.full_like(log_sum, float('nan')))


def uniformity(x: Tensor, batch: Optional[Tensor] = None,
               batch_size: Optional[int] = None, max_samples: int = 2048,
               generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Computes the uniformity metric of `"Understanding Contrastive
    Representation Learning through Alignment and Uniformity on the
    Hypersphere" <https://arxiv.org/abs/2005.10242>`_ in the form of Eq. (4) of
    the `"On Separate Normalization in Self-supervised Transformers"
    <https://arxiv.org/abs/2309.12931>`_ paper (with :math:`t = 2`).

    .. math::
        \mathcal{L}_{\mathcal{U}} = \log \frac{2}{N(N-1)} \sum_{n < m}
        \exp\Big(-2 \Big\| \frac{\mathbf{h}_n}{\|\mathbf{h}_n\|_2} -
        \frac{\mathbf{h}_m}{\|\mathbf{h}_m\|_2} \Big\|_2^2\Big)

    over the :math:`N` nodes of a graph, evaluated with :obj:`logsumexp`.
    Lower is more uniform: the value lies in :math:`[-8, 0]`, is :math:`0`
    when all rows point the same way, and tends to :math:`-4` for rows spread
    uniformly on a sphere of growing dimension. A zero row is kept at the
    origin (its distance to every unit row is :math:`1`). A graph with more
    than :obj:`max_samples` nodes is evaluated on a subset of
    :obj:`max_samples` of its nodes drawn uniformly without replacement with
    :obj:`generator`, which bounds the :math:`\mathcal{O}(N^2 d)` cost. The
    value is :obj:`nan` for a graph with fewer than two nodes.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)
        max_samples (int, optional): The largest number of nodes per graph
            used; larger graphs are subsampled. (default: :obj:`2048`)
        generator (torch.Generator, optional): The random number generator
            for the subsampling; the global one if :obj:`None`.
            (default: :obj:`None`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    batch_vec, size = check_inputs('uniformity', x, batch, batch_size,
                                   max_samples)
    if size == 0:
        return x.new_empty(0)
    x, batch_vec = sort_by_graph(x, batch_vec)
    if x.size(0) > 0:
        keep = subsample(batch_vec, size, max_samples, generator)
        if keep is not None:
            x, batch_vec = x[keep], batch_vec[keep]

    u = unit_rows(x)
    dense, mask = to_dense_batch(u, batch_vec, batch_size=size)  # [B, N, d]
    chunk = max(1, _PAIR_CHUNK // max(1, dense.size(1) ** 2))
    out = torch.cat([dense_uniformity(dense[start:start + chunk],
                                    mask[start:start + chunk])
                     for start in range(0, size, chunk)])  # [B]
    return finish(out, batch)


def dirichlet_energy(x: Tensor, edge_index: Tensor,
                     batch: Optional[Tensor] = None,
                     batch_size: Optional[int] = None,
                     normalized: bool = False) -> Tensor:
    r"""Computes the Dirichlet energy of node features on a graph, a measure of
    how smooth (similar across edges) the features are.

    .. math::
        E(\mathbf{X}) = \frac{1}{N} \sum_{(j, i) \in \mathcal{E}}
        \|\mathbf{x}_i - \mathbf{x}_j\|_2^2

    over the :math:`N` nodes and the listed edges :math:`\mathcal{E}` of a
    graph. Every column :obj:`(j, i)` of :obj:`edge_index` counts once, so an
    undirected graph stored with both directions counts each edge twice. With
    :obj:`normalized=True`, the differences are degree-normalised,

    .. math::
        E(\mathbf{X}) = \frac{1}{N} \sum_{(j, i) \in \mathcal{E}}
        \Big\|\frac{\mathbf{x}_i}{\sqrt{1 + d_i}} -
        \frac{\mathbf{x}_j}{\sqrt{1 + d_j}}\Big\|_2^2,

    where :math:`d_i` is the in-degree of node :math:`i` (the number of
    columns of :obj:`edge_index` with target :math:`i`), so that
    :math:`1 + d_i` is the degree after adding self-loops as in GCN. It is
    :math:`0` for a graph without nodes.

    Which definition is which: the unnormalised form is the Dirichlet
    energy of the `"A Survey on Oversmoothing in Graph Neural Networks"
    <https://arxiv.org/abs/2303.10993>`_ paper (Rusch, Bronstein and
    Mishra, 2023,
    :math:`\frac{1}{v} \sum_{i \in \mathcal{V}} \sum_{j \in
    \mathcal{N}_i} \|\mathbf{X}_i - \mathbf{X}_j\|_2^2`): exactly this
    value for an undirected graph stored with both directions. The
    normalised form is the degree-normalised energy of the GCN
    oversmoothing literature (`Cai and Wang, 2020
    <https://arxiv.org/abs/2006.13318>`_; `Zhou et al., 2021
    <https://arxiv.org/abs/2107.02392>`_),
    :math:`\mathrm{tr}(\mathbf{X}^{\top} \tilde{\boldsymbol{\Delta}}
    \mathbf{X})` with :math:`\tilde{\boldsymbol{\Delta}} = \mathbf{I} -
    \tilde{\mathbf{D}}^{-1/2} \tilde{\mathbf{A}}
    \tilde{\mathbf{D}}^{-1/2}`, :math:`\tilde{\mathbf{A}} = \mathbf{A} +
    \mathbf{I}`: for an undirected graph without self-loops stored with
    both directions, the value here is :math:`\frac{2}{N}
    \mathrm{tr}(\mathbf{X}^{\top} \tilde{\boldsymbol{\Delta}}
    \mathbf{X})` (the tests check both identities). The normalised form
    is zero for features proportional to :math:`\sqrt{1 + d_i}`, not only
    for equal rows; Rusch et al. measure with the unnormalised one.

    Args:
        x (torch.Tensor): The node features of shape
            :obj:`[num_nodes, num_features]`.
        edge_index (torch.Tensor): The edge indices of shape
            :obj:`[2, num_edges]`, sources in the first row and targets in the
            second.
        batch (torch.Tensor, optional): The batch vector of shape
            :obj:`[num_nodes]` assigning each node to a graph; one graph if
            :obj:`None`. (default: :obj:`None`)
        batch_size (int, optional): The number of graphs, for graphs without
            nodes at the end of the batch. (default: :obj:`None`)
        normalized (bool, optional): If set to :obj:`True`, uses
            degree-normalised differences. (default: :obj:`False`)

    Returns:
        torch.Tensor: A 0-dim tensor if :obj:`batch` is :obj:`None`, else a
        tensor of shape :obj:`[batch_size]`.
    """
    batch_vec, size = check_inputs('dirichlet_energy', x, batch, batch_size)
    check_edge_index('dirichlet_energy', edge_index, batch_vec)
    src, dst = edge_index[0].long(), edge_index[1].long()
    scale = None
    if normalized:
        deg = degree(dst, num_nodes=x.size(0), dtype=x.dtype)  # [num_nodes]
        scale = (1 + deg).rsqrt()
    n = torch.bincount(batch_vec, minlength=size)  # [B]
    return finish(_dirichlet_energy(x, src, dst, batch_vec, size, n, scale),
                   batch)


def _dirichlet_energy(x: Tensor, src: Tensor, dst: Tensor, batch: Tensor,
                      size: int, num_nodes: Tensor,
                      scale: Optional[Tensor] = None) -> Tensor:
    r""":func:`dirichlet_energy` of checked inputs :obj:`[..., num_nodes,
    d]`, :obj:`[..., size]`: :obj:`num_nodes` per graph, the rows scaled by
    :obj:`scale` (the degree normalisation) if given."""
    if scale is not None:
        x = x * scale.to(x.dtype).unsqueeze(-1)
    diff = x.index_select(-2, dst) - x.index_select(-2, src)  # [..., E, d]
    total = graph_sum(diff.pow(2).sum(dim=-1), batch[dst], size,
                       -1)  # [..., B]
    return total / num_nodes.to(x.dtype).clamp(min=1)
