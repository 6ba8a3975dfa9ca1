r"""Datasets, one module per kind of data.

* :mod:`gnorm.data.nodes`: node classification on one graph (Planetoid,
  WikipediaNetwork, a synthetic CSBM), offline mirrors, splits.
"""
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
    split_masks,
)

__all__ = [
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
    'split_masks',
]
