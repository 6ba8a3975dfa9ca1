r"""Collapse metrics for node representations.

All metrics take a node feature matrix :obj:`x` of shape
:obj:`[num_nodes, num_features]` and an optional :obj:`batch` vector that
assigns each node to a graph. They return a 0-dim tensor when :obj:`batch` is
:obj:`None` (one graph) and a :obj:`[batch_size]` tensor otherwise, computed in
the dtype of :obj:`x`.

* :func:`effective_rank`: entropy of the normalised singular values
  (dimensional collapse), ContraNorm Def. 3.1.
* :func:`feature_cosine_similarity`: mean pairwise cosine similarity of node
  features, ContraNorm App. C.
* :func:`feature_variance`: :math:`\mathrm{Var}(\mathbf{H}) / N`, the mean
  squared distance of node features from their mean (complete collapse),
  ContraNorm App. B (:obj:`reduce="sum"`: the paper's sum).
* :func:`uniformity`: the uniformity metric of Wang and Isola (2020) as used in
  SepNorm Eq. 4.
* :func:`dirichlet_energy`: squared feature differences along edges
  (Rusch et al., 2023), or degree-normalised (Cai and Wang, 2020).
* :func:`mad`, :func:`mad_gap`: mean average cosine distance of node pairs
  (all, neighbours, remote nodes) of Chen et al. (2020)
  (:mod:`gnorm.metrics.pairs`).

Modules: :mod:`~gnorm.metrics.pointwise` (the metrics above but MAD),
:mod:`~gnorm.metrics.pairs` (MAD, MADGap, hop distances),
:mod:`~gnorm.metrics.rows` (rows and graphs, shared) and
:mod:`~gnorm.metrics.checks` (input checks).
"""
from gnorm.metrics.pairs import hop_distances, mad, mad_gap
from gnorm.metrics.pointwise import (dirichlet_energy, effective_rank,
                                     feature_cosine_similarity,
                                     feature_variance, uniformity)

__all__ = ['effective_rank', 'feature_cosine_similarity', 'feature_variance',
           'uniformity', 'dirichlet_energy', 'mad', 'mad_gap', 'hop_distances']
