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

:class:`ShortestPaths` is the ``pre_transform``: it stores, per graph, the
shortest-path distance of every ordered node pair and the edges along one
shortest path of every pair (:func:`path_edges`; the sum of the distances,
all hops), so that the model's attention bias is look-ups only. Processed
files are named after :obj:`ShortestPaths.LAYOUT`, so that files of another
layout are never read.
"""
import contextlib
import importlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import ZINC
from torch_geometric.transforms import BaseTransform

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
_INT16_MAX = 32767
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


def shortest_paths(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor,
                                                                 Tensor]:
    r"""Hop distances and first edges of shortest paths of one graph.

    Distances come from :func:`scipy.sparse.csgraph.shortest_path`
    (breadth-first search from every node). Edge :math:`e = (i \to u)`
    starts a shortest path from :math:`i` to :math:`j` when
    :math:`d(u, j) = d(i, j) - 1`; of those, the edge with the smallest id is
    kept. Following these first edges from :math:`i` to :math:`j` gives
    *the* path of the pair (:func:`path_edges`): at every node, the
    smallest-id edge that stays on a shortest path to :math:`j`.

    Args:
        edge_index (torch.Tensor): Directed edges :obj:`[2, num_edges]`.
        num_nodes (int): Number of nodes :math:`n`.

    Returns:
        (torch.Tensor, torch.Tensor): :obj:`dist` :obj:`[n, n]` (int64,
        :obj:`-1` where :math:`j` is unreachable from :math:`i`, :obj:`0`
        on the diagonal) and :obj:`first_edge` :obj:`[n, n]` (int64, the
        id of the first edge of a shortest path from :math:`i` to :math:`j`,
        :obj:`-1` where there is none).
    """
    dist, first = _shortest_paths(edge_index.cpu().numpy(), num_nodes)
    return torch.from_numpy(dist), torch.from_numpy(first)


def _shortest_paths(edge_index: np.ndarray,
                    n: int) -> Tuple[np.ndarray, np.ndarray]:
    r""":func:`shortest_paths` on numpy arrays."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import shortest_path
    src, dst = edge_index
    num_edges = src.size
    adj = csr_array((np.ones(num_edges), (src, dst)), shape=(n, n))
    dist = shortest_path(adj, directed=True, unweighted=True)  # [n, n]
    dist = np.where(np.isinf(dist), -1, dist).astype(np.int64)

    # Candidate (edge e = i -> u, target j) where d(u, j) = d(i, j) - 1.
    ok = (dist[dst] >= 0) & (dist[dst] == dist[src] - 1)  # [E, n]
    edge_id, target = ok.nonzero()  # ascending edge ids
    first = np.full(n * n, num_edges, dtype=np.int64)
    np.minimum.at(first, src[edge_id] * n + target, edge_id)  # i * n + j
    first[first == num_edges] = -1
    return dist, first.reshape(n, n)  # [n, n], [n, n]


def path_edges(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""Hop distances and the edges along one shortest path of every ordered
    node pair of a graph, flat.

    The path of :math:`(i, j)` follows the first edges of
    :func:`shortest_paths` from :math:`i` until :math:`j` (at every node,
    the smallest-id edge that stays on a shortest path to :math:`j`); the
    pairs come in row-major order, the edges of a pair in hop order, so
    pair :math:`(i, j)` owns the :math:`\max(d(i, j), 0)` entries after
    those of the pairs before it.

    Returns:
        (torch.Tensor, torch.Tensor): :obj:`dist` :obj:`[n * n]` (int64,
        :obj:`-1` unreachable) and :obj:`edges` :obj:`[sum of the
        distances]` (int64 local edge ids).
    """
    dist, edges = _path_edges(edge_index.cpu().numpy(), num_nodes)
    return torch.from_numpy(dist), torch.from_numpy(edges)


def _path_edges(edge_index: np.ndarray,
                n: int) -> Tuple[np.ndarray, np.ndarray]:
    r""":func:`path_edges` on numpy arrays."""
    dist, first = _shortest_paths(edge_index, n)
    dist, first = dist.reshape(-1), first.reshape(-1)  # [n * n]
    hops = max(int(dist.max(initial=0)), 0)
    target = np.tile(np.arange(n), n)  # [n * n]: j of pair i * n + j
    cur = np.arange(n * n)  # pair (node on the path, j), row-major
    steps = np.empty((n * n, hops), dtype=np.int64)  # [n * n, hops]
    for k in range(hops):  # all pairs at once, one hop per step
        edge = first[cur]  # [n * n], -1 once j is reached
        steps[:, k] = edge
        cur = np.where(edge >= 0, edge_index[1][edge] * n + target, cur)
    on_path = np.arange(hops) < dist[:, None]  # [n * n, hops]
    return dist, steps[on_path]  # pair-major, hop order


class ShortestPaths(BaseTransform):
    r"""Stores the shortest paths of a graph for a Graphormer (see
    :func:`path_edges`): ``spd``, the hop distance of every ordered node
    pair, flat :obj:`[num_nodes * num_nodes]` in row-major order (pair
    :math:`(i, j)` at :math:`i n + j`, :obj:`-1` where unreachable), and
    ``path_edge``, the local ids of the edges along the path of every pair,
    pair after pair, :obj:`[sum of the distances]`. Both are int16, so that
    PyG's collation only concatenates them; :class:`gnorm.models.Graphormer`
    turns them into its attention bias with look-ups, no walk.

    :obj:`LAYOUT` names this layout in the processed files of
    :func:`load_molhiv` and :func:`load_zinc`, so that files written with
    another one are never read."""
    LAYOUT = 'paths2'

    def forward(self, data: Data) -> Data:
        n, num_edges = data.num_nodes, data.edge_index.size(1)
        if max(n, num_edges) > _INT16_MAX:
            raise ValueError(f"ShortestPaths stores int16 ids; got a graph "
                             f"with {n} nodes and {num_edges} edges (max "
                             f"{_INT16_MAX})")
        dist, edges = _path_edges(data.edge_index.numpy(), n)
        data.spd = torch.from_numpy(dist.astype(np.int16))  # [n * n]
        data.path_edge = torch.from_numpy(edges.astype(np.int16))  # [paths]
        return data


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


def _copy_tree(src: Path, dst: Path) -> None:
    r"""Copies the files of :obj:`src` that :obj:`dst` lacks (through a
    temporary name, so an interrupted copy leaves no truncated file)."""
    for path in sorted(src.rglob('*')):
        target = dst / path.relative_to(src)
        if path.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f'.{target.name}.tmp')
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)


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
    file named after :obj:`ShortestPaths.LAYOUT` (ogb itself is imported on
    first use only)."""
    base = import_ogb('ogb.graphproppred').PygGraphPropPredDataset
    cls = globals().get('_PathsGraphPropPredDataset')
    if cls is None or cls.__bases__ != (base, ):
        cls = type('_PathsGraphPropPredDataset', (base, ), {
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


class _PathsZINC(ZINC):
    r""":class:`torch_geometric.datasets.ZINC` with its processed files in a
    folder named after :obj:`ShortestPaths.LAYOUT`."""
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
        with _full_torch_load():
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
    transform = ShortestPaths()
    return [transform(Data(x=atom[nodes[g]:nodes[g + 1]].view(-1, 1),
                           edge_index=edge_index[:, edges[g]:edges[g + 1]],
                           edge_attr=bond[edges[g]:edges[g + 1]],
                           y=y[g:g + 1]))
            for g in range(len(nodes) - 1)[:limit]]


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
    :obj:`limit` (graphs per split) for ``zinc_fixture`` only."""
    if name not in GRAPH_DATASETS:
        raise ConfigError(f"unknown graph dataset {name!r}; pass one of "
                          f"{', '.join(GRAPH_DATASETS)}")
    if name == 'zinc':
        return load_zinc(root, mirror, subset)
    if name == 'zinc_fixture':
        mirror = _mirror(mirror)
        if mirror is None:
            raise DataError("dataset 'zinc_fixture' is read from the mirror; "
                            "set GNORM_DATA_MIRROR to the shared data folder")
        test = zinc_fixture(mirror, 'test', limit)
        return {'train': zinc_fixture(mirror, 'val', limit), 'valid': test,
                'test': test}
    dataset, split = load_molhiv(root, mirror)
    return {k: dataset[split[k]] for k in ('train', 'valid', 'test')}
