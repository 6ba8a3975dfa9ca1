r"""Datasets, one module per kind of data.

* :mod:`gnorm.data.nodes`: node classification on one graph (Planetoid,
  WikipediaNetwork, the graphs of Platonov et al., a synthetic CSBM),
  offline mirrors, splits.
* :mod:`gnorm.data.heterophilous`: the graphs of Platonov et al. (ICLR
  2023), filtered Chameleon and Squirrel, Minesweeper, Tolokers, as a PyG
  dataset (:class:`HeterophilousGraphs`).
* :mod:`gnorm.data.leakage`: test nodes of a split with a feature twin
  among its training nodes (duplicate nodes, as in Chameleon and
  Squirrel), and the leakage of each split from the records of runs
  (:func:`leakage_summary`).
* :mod:`gnorm.data.molecules`: graph-level molecule datasets (ogbg-molhiv,
  ZINC) with the shortest paths a Graphormer needs
  (:mod:`gnorm.data.paths`).
* :mod:`gnorm.data.neighbor_sampler`: neighbour-sampled mini-batches in
  plain torch (:class:`TorchNeighborSampler`, for PyG's ``NodeLoader``
  where ``NeighborLoader``'s ``pyg-lib`` or ``torch-sparse`` is missing).
"""
from gnorm.data.heterophilous import HeterophilousGraphs
from gnorm.data.nodes import (
    DATASETS,
    PYG_DATASETS,
    SPLITS,
    TEST_SETS,
    check_split,
    copy_from_mirror,
    csbm,
    load_dataset,
    normalize_rows,
    raw_files,
    split_fingerprint,
    split_masks,
)
from gnorm.data.molecules import (
    GRAPH_DATASETS,
    GRAPH_EXTRA,
    graph_sizes,
    import_ogb,
    load_graph_dataset,
    load_molhiv,
    load_zinc,
    zinc_fixture,
)
from gnorm.data.leakage import leakage, leakage_summary, leaks
from gnorm.data.neighbor_sampler import TorchNeighborSampler
from gnorm.data.paths import (
    ShortestPaths,
    add_shortest_paths,
    path_edges,
    path_edges_many,
    shortest_paths,
)

__all__ = [
    'GRAPH_DATASETS',
    'GRAPH_EXTRA',
    'HeterophilousGraphs',
    'ShortestPaths',
    'TorchNeighborSampler',
    'add_shortest_paths',
    'graph_sizes',
    'leakage',
    'leakage_summary',
    'leaks',
    'import_ogb',
    'load_graph_dataset',
    'load_molhiv',
    'load_zinc',
    'path_edges',
    'path_edges_many',
    'shortest_paths',
    'zinc_fixture',
    'DATASETS',
    'PYG_DATASETS',
    'SPLITS',
    'TEST_SETS',
    'check_split',
    'copy_from_mirror',
    'csbm',
    'load_dataset',
    'normalize_rows',
    'raw_files',
    'split_fingerprint',
    'split_masks',
]
