r"""Molecule datasets for graph-level tasks, with the shortest paths a
Graphormer needs computed once per graph.

* ``molhiv``: :class:`ogb.graphproppred.PygGraphPropPredDataset`
  (``ogbg-molhiv``, 41,127 molecules, 9 atom / 3 bond feature columns),
  official scaffold split, binary classification scored by ROC-AUC from
  :class:`ogb.graphproppred.Evaluator`. Files in ``<root>/ogbg_molhiv/``.
* ``zinc``: :class:`torch_geometric.datasets.ZINC`, the 12k subset by
  default (``subset=True``; PyG's own default is the full 250k), one atom
  type and one bond type per atom and bond, regression scored by MAE. Raw
  files in ``<root>/zinc/raw/``.
* ``zinc_fixture``: a smoke-test pair, not a benchmark: trains on the exact
  1,000 ZINC-subset validation graphs and validates and tests on its 1,000
  test graphs (:func:`zinc_fixture`, read from the mirror).

A mirror folder (``GNORM_DATA_MIRROR`` / ``data.mirror``) is read offline:
``<mirror>/ogb_regenerated/ogbg_molhiv/`` is copied into the root, and the
ZINC index files found in ``<mirror>/zinc_partial/index/``; nothing is
downloaded then. :func:`zinc_fixture` reads the exact ZINC-subset val/test
graphs of ``<mirror>/zinc_partial/`` (tests and smoke runs only).

:class:`~gnorm.data.ShortestPaths` is the ``pre_transform``
(:mod:`gnorm.data.paths`); the molhiv and ZINC datasets compute
the paths of all graphs at once when they process
(:func:`~gnorm.data.add_shortest_paths`). Processed files
are named after :obj:`ShortestPaths.LAYOUT`, so that files of another
layout are never read.
"""
import contextlib
import importlib
import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import ZINC
from torch_geometric.io import fs

from gnorm.data._files import copy_file, one_process_first
from gnorm.data.paths import (ShortestPaths, add_shortest_paths,
                              path_edges_many)
from gnorm.errors import ConfigError, DataError

# name -> (feature scheme of gnorm.models.Graphormer, outputs, metric,
#          True if higher is better)
GRAPH_DATASETS = {
    'molhiv': ('ogb', 1, 'rocauc', True),
    'zinc': ('zinc', 1, 'mae', False),
    'zinc_fixture': ('zinc', 1, 'mae', False),
}
# Files PyG's ZINC reads from <root>/zinc/raw/.
ZINC_RAW = ('train.pickle', 'val.pickle', 'test.pickle', 'train.index',
            'val.index', 'test.index')
# The fix named when a graph task lacks its optional dependencies.
GRAPH_EXTRA = ("pip install \"gnorm[graph]\" (in a checkout: pip install "
               "-e \".[graph]\")")


def import_ogb(name: str = 'ogb'):
    r"""Imports module :obj:`name` of ``ogb`` (e.g.
    ``ogb.graphproppred``); raises :class:`DataError` naming the ``[graph]``
    extra that installs it (and RDKit) when ``ogb`` is missing."""
    try:
        importlib.import_module('ogb')  # not cached under name if missing
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or '').split('.')[0] not in ('ogb', 'rdkit'):
            raise
        raise DataError(f"the graph tasks need ogb and RDKit ({e}); "
                        f"{GRAPH_EXTRA}") from None


class _BatchedPaths:
    r"""Mixin of the in-memory datasets of :func:`load_molhiv` and
    :func:`load_zinc`: with :class:`ShortestPaths` as ``pre_transform``,
    :meth:`process` runs the parent's without it and adds the paths of all
    graphs at once where the parent collates them
    (:func:`add_shortest_paths`): the same files as graph by graph, in a
    fraction of the time. ogb collates with ``self.collate``, PyG's
    ZINC with ``self.save``; both are replaced while the parent's
    :meth:`process` runs, and a parent that calls neither is an error."""
    def process(self) -> None:
        if type(self.pre_transform) is not ShortestPaths:
            return super().process()
        transform, self.pre_transform = self.pre_transform, None
        self._collated = 0
        self.collate, self.save = self._collate_paths, self._save_paths
        try:
            super().process()
            collated = self._collated
        finally:
            self.pre_transform = transform
            del self.collate, self.save, self._collated
        if not collated:
            raise RuntimeError(f"{type(self).__name__}.process() did not "
                               f"collate through collate() or save(); the "
                               f"shortest paths were not added")

    def _collate_paths(self, data_list: Sequence[Data]):
        data, slices = type(self).collate(data_list)
        self._collated += 1
        return add_shortest_paths(data, slices), slices

    def _save_paths(self, data_list: Sequence[Data], path: str) -> None:
        # InMemoryDataset.save with the paths added.
        data, slices = self._collate_paths(data_list)
        fs.torch_save((data.to_dict(), slices, data.__class__), path)


@contextlib.contextmanager
def _full_torch_load():
    r"""Lets ogb 1.3.6's :func:`torch.load` (no ``weights_only``) read its
    processed file under torch >= 2.6 while the block runs, without the
    warnings that ogb's own code triggers; the previous environment is
    restored afterwards."""
    key = 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'
    old = os.environ.get(key)
    os.environ[key] = '1'
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='.*(' + key +
                                    '|NumPy array is not writable)')
            yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


# The modules whose tqdm bars show while a dataset is read or processed.
BAR_MODULES = {'molhiv': ('ogb.io.read_graph_raw', 'ogb.io.read_graph_pyg',
                          'ogb.utils.url'),
               'zinc': ('torch_geometric.datasets.zinc', )}


@contextlib.contextmanager
def terminal_bars(modules: Sequence[str]):
    r"""While the block runs, the tqdm bars of :obj:`modules` show only on
    a terminal (tqdm's ``disable=None``): in a log file or a job's output
    every update of a bar is a carriage return and a line of text, tens of
    thousands of them while ogbg-molhiv is processed."""
    patched = []
    for name in modules:
        module = importlib.import_module(name)
        bar = getattr(module, 'tqdm', None)
        if bar is None:
            continue

        def quiet(*args, _bar=bar, **kwargs):
            kwargs.setdefault('disable', None)
            return _bar(*args, **kwargs)
        patched.append((module, bar))
        module.tqdm = quiet
    try:
        yield
    finally:
        for module, bar in patched:
            module.tqdm = bar


def _copy_tree(src: Path, dst: Path) -> None:
    r"""Copies the files of :obj:`src` that :obj:`dst` lacks, each through
    a temporary file of its own (:func:`~gnorm.data._files.copy_file`: no
    truncated file, and processes copying at once do not collide)."""
    for path in sorted(src.rglob('*')):
        target = dst / path.relative_to(src)
        if path.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_file(path, target)


def _mirror(mirror: Union[str, Path, None]) -> Optional[Path]:
    if mirror in (None, ''):
        return None
    mirror = Path(mirror).expanduser().resolve()
    if not mirror.is_dir():
        raise DataError(f"data mirror {mirror} is not a folder; fix "
                        f"GNORM_DATA_MIRROR / data.mirror or unset it to "
                        f"download")
    return mirror


def _molhiv_class():
    r""":class:`ogb.graphproppred.PygGraphPropPredDataset` with its processed
    file named after :obj:`ShortestPaths.LAYOUT` and the paths added in
    batches (:class:`_BatchedPaths`; ogb itself is imported on first use
    only)."""
    base = import_ogb('ogb.graphproppred').PygGraphPropPredDataset
    cls = globals().get('_PathsGraphPropPredDataset')
    if cls is None or cls.__bases__ != (_BatchedPaths, base):
        cls = type('_PathsGraphPropPredDataset', (_BatchedPaths, base), {
            '__module__': __name__,
            'processed_file_names': property(
                lambda self: f'geometric_data_processed_'
                             f'{ShortestPaths.LAYOUT}.pt')})
        globals()['_PathsGraphPropPredDataset'] = cls
    return cls


def __getattr__(name: str):
    # Lets pickle find the lazily made dataset class (spawned workers).
    if name == '_PathsGraphPropPredDataset':
        return _molhiv_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _PathsZINC(_BatchedPaths, ZINC):
    r""":class:`torch_geometric.datasets.ZINC` with its processed files in a
    folder named after :obj:`ShortestPaths.LAYOUT` and the paths added in
    batches (:class:`_BatchedPaths`)."""
    @property
    def processed_dir(self) -> str:
        return f'{super().processed_dir}_{ShortestPaths.LAYOUT}'


def load_molhiv(root: Union[str, Path] = 'data',
                mirror: Union[str, Path, None] = None):
    r"""ogbg-molhiv with :class:`ShortestPaths` and its scaffold split.

    Returns:
        (dataset, dict): The :class:`PygGraphPropPredDataset` and the split
        (``train`` / ``valid`` / ``test`` index tensors).
    """
    dataset_class = _molhiv_class()
    root = Path(root).expanduser().resolve()
    mirror = _mirror(mirror)
    if mirror is not None:
        src = mirror / 'ogb_regenerated' / 'ogbg_molhiv'
        if not (src / 'raw').is_dir():
            raise DataError(f"dataset 'molhiv': the mirror lacks {src}/raw/; "
                            f"put OGB's ogbg_molhiv folder (raw/, split/, "
                            f"RELEASE_v1.txt) there or unset "
                            f"GNORM_DATA_MIRROR to download")
        _copy_tree(src, root / 'ogbg_molhiv')
    try:
        with _full_torch_load(), terminal_bars(BAR_MODULES['molhiv']):
            dataset = dataset_class('ogbg-molhiv', root=str(root),
                                              pre_transform=ShortestPaths())
    except (OSError, ConnectionError) as e:
        raise DataError(f"dataset 'molhiv': cannot read or download "
                        f"{root}/ogbg_molhiv ({type(e).__name__}); put OGB's "
                        f"ogbg_molhiv folder there or set GNORM_DATA_MIRROR "
                        f"to a folder holding ogb_regenerated/ogbg_molhiv/"
                        ) from None
    return dataset, dataset.get_idx_split()


def load_zinc(root: Union[str, Path] = 'data',
              mirror: Union[str, Path, None] = None, subset: bool = True,
              ) -> Dict[str, 'torch_geometric.datasets.ZINC']:
    r"""ZINC with :class:`ShortestPaths`: the 12k subset (default) or, with
    :obj:`subset=False`, the full 250k. Offline (with a :obj:`mirror`), a
    missing raw file raises :class:`DataError` naming the files and the
    folder to put them in.

    Returns:
        dict: ``train`` / ``valid`` / ``test``
        :class:`torch_geometric.datasets.ZINC` datasets.
    """
    root = Path(root).expanduser().resolve() / 'zinc'
    raw = root / 'raw'
    mirror = _mirror(mirror)
    if mirror is not None:
        index = mirror / 'zinc_partial' / 'index'
        if index.is_dir():
            _copy_tree(index, raw)
        missing = [f for f in ZINC_RAW if not (raw / f).is_file()]
        if missing:
            raise DataError(f"dataset 'zinc': missing {', '.join(missing)} "
                            f"in {raw}/ (offline: the mirror {mirror} has "
                            f"no copy); put ZINC's files there (molecules.zip"
                            f" of benchmarking-gnns) or unset "
                            f"GNORM_DATA_MIRROR to let PyG download them")
    try:
        with terminal_bars(BAR_MODULES['zinc']):
            return {name: _PathsZINC(str(root), subset=subset, split=split,
                                     pre_transform=ShortestPaths())
                    for name, split in (('train', 'train'), ('valid', 'val'),
                                        ('test', 'test'))}
    except (OSError, ConnectionError) as e:
        missing = [f for f in ZINC_RAW if not (raw / f).is_file()]
        raise DataError(f"dataset 'zinc': missing {', '.join(missing)} in "
                        f"{raw}/ and the download failed ({type(e).__name__})"
                        f"; put the files there or set GNORM_DATA_MIRROR"
                        ) from None


def zinc_fixture(mirror: Union[str, Path], split: str = 'val',
                 limit: Optional[int] = None) -> List[Data]:
    r"""The exact 1,000 ZINC-subset :obj:`split` (``val`` or ``test``)
    graphs (the first :obj:`limit` of them if given) of
    ``<mirror>/zinc_partial/subset_<split>_graphs.npz``, as PyG's
    ZINC stores them (``x`` :obj:`[n, 1]` atom types, ``edge_attr``
    :obj:`[E]` bond types, ``y`` :obj:`[1]`), with :class:`ShortestPaths`.
    For tests and smoke runs: the ZINC training graphs are not there."""
    path = Path(mirror) / 'zinc_partial' / f'subset_{split}_graphs.npz'
    if not path.is_file():
        raise DataError(f"ZINC fixture {path} not found; set "
                        f"GNORM_DATA_MIRROR to the shared data folder")
    arrays = np.load(path)
    nodes, edges = arrays['node_ptr'], arrays['edge_ptr']
    atom = torch.from_numpy(arrays['atom_type'])
    edge_index = torch.from_numpy(arrays['edge_index'])
    bond = torch.from_numpy(arrays['bond_type'])
    y = torch.from_numpy(arrays['y'])
    graphs = [Data(x=atom[nodes[g]:nodes[g + 1]].view(-1, 1),
                   edge_index=edge_index[:, edges[g]:edges[g + 1]],
                   edge_attr=bond[edges[g]:edges[g + 1]], y=y[g:g + 1])
              for g in range(len(nodes) - 1)[:limit]]
    paths = path_edges_many([g.edge_index for g in graphs],
                            [g.num_nodes for g in graphs])
    for g, (dist, edges) in zip(graphs, paths):  # as ShortestPaths stores
        g.spd, g.path_edge = dist.short(), edges.short()
    return graphs


def graph_sizes(graphs) -> Tensor:
    r"""Number of nodes of every graph of :obj:`graphs` (a PyG in-memory
    dataset or a view of one, read from its slices without loading the
    graphs; or any sequence of :class:`Data`), int64."""
    slices = getattr(graphs, 'slices', None)
    if slices is not None and 'x' in slices:
        counts = slices['x'].diff()  # [graphs in the whole dataset]
        return counts[torch.as_tensor(list(graphs.indices()))]
    return torch.tensor([g.num_nodes for g in graphs], dtype=torch.long)


def load_graph_dataset(name: str, root: Union[str, Path] = 'data',
                       mirror: Union[str, Path, None] = None,
                       subset: bool = True, limit: Optional[int] = None,
                       ) -> Dict[str, object]:
    r"""The ``train`` / ``valid`` / ``test`` graphs of dataset :obj:`name`
    (one of :obj:`GRAPH_DATASETS`); :obj:`subset` is for ``zinc``,
    :obj:`limit` (graphs per split) for ``zinc_fixture`` only. Under a
    process group (``torchrun``), process 0 copies and processes the
    files into :obj:`root` first, and the others then read them
    (:func:`~gnorm.data._files.one_process_first`)."""
    if name not in GRAPH_DATASETS:
        raise ConfigError(f"unknown graph dataset {name!r}; pass one of "
                          f"{', '.join(GRAPH_DATASETS)}")
    if name == 'zinc':
        with one_process_first():
            return load_zinc(root, mirror, subset)
    if name == 'zinc_fixture':
        mirror = _mirror(mirror)
        if mirror is None:
            raise DataError("dataset 'zinc_fixture' is read from the mirror; "
                            "set GNORM_DATA_MIRROR to the shared data folder")
        test = zinc_fixture(mirror, 'test', limit)
        return {'train': zinc_fixture(mirror, 'val', limit), 'valid': test,
                'test': test}
    with one_process_first():
        dataset, split = load_molhiv(root, mirror)
    return {k: dataset[split[k]] for k in ('train', 'valid', 'test')}
