r"""Node classification datasets: loading through PyTorch Geometric, offline
copies from a mirror folder, splits, and a synthetic contextual stochastic
block model.

* ``cora``, ``citeseer``: :class:`~torch_geometric.datasets.Planetoid`, raw
  files in ``<root>/planetoid/{Cora,CiteSeer}/raw/``.
* ``chameleon``, ``squirrel``:
  :class:`~torch_geometric.datasets.WikipediaNetwork` with
  ``geom_gcn_preprocess=True``, raw files in
  ``<root>/wikipedia/{chameleon,squirrel}/geom_gcn/raw/``.
* ``chameleon_filtered``, ``squirrel_filtered``, ``minesweeper``,
  ``tolokers``: the graphs of Platonov et al. (ICLR 2023),
  :class:`~gnorm.data.HeterophilousGraphs` (undirected, as
  PyG's ``HeterophilousGraphDataset`` makes them), raw file
  ``<root>/heterophilous/<name>/raw/<name>.npz``. Minesweeper and Tolokers
  are binary and scored by ROC-AUC (their config's ``metric``).
* ``csbm``: :func:`csbm`, synthetic, nothing to download.

A mirror folder has the same layout as ``root``: raw files found there are
copied into ``root`` and nothing is downloaded.

Splits (:func:`split_masks`):

* ``public``: the Planetoid split of Kipf and Welling (20 nodes per class for
  training, 500 validation, 1000 test); cora and citeseer only.
* ``geom_gcn``: the ten Geom-GCN splits shipped with chameleon and squirrel,
  picked by ``split_index``. The files are named ``*_0.6_0.2_<i>.npz`` but
  hold 48 / 32 / 20 % of the nodes for train / val / test.
* ``platonov``: the ten splits of Platonov et al. shipped with their graphs,
  picked by ``split_index``: 50 / 25 / 25 % for minesweeper and tolokers;
  for the filtered graphs the Geom-GCN splits less the removed nodes
  (about 46 / 32 / 22 %).
* ``random``: a stratified 60 / 20 / 20 % split drawn from ``seed``.

Test nodes (``test_set``): ``split``, the split's own test nodes, or
``rest``, every node outside train and validation (what the ContraNorm
authors' code tests on: 2,068 nodes on Cora instead of the public 1,000).
"""
import contextlib
import errno
import hashlib
import io
import math
import sys
from pathlib import Path
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import Planetoid, WikipediaNetwork
from torch_geometric.utils import to_undirected as _to_undirected

from gnorm.data._files import copy_file, one_process_first
from gnorm.data.heterophilous import HeterophilousGraphs
from gnorm.errors import ConfigError, DataError

_PLANETOID = ('x', 'tx', 'allx', 'y', 'ty', 'ally', 'graph', 'test.index')

# name -> (PyG class name, name given to it, raw folder relative to the root)
PYG_DATASETS = {
    'cora': ('Planetoid', 'Cora', 'planetoid/Cora/raw'),
    'citeseer': ('Planetoid', 'CiteSeer', 'planetoid/CiteSeer/raw'),
    'chameleon': ('WikipediaNetwork', 'chameleon',
                  'wikipedia/chameleon/geom_gcn/raw'),
    'squirrel': ('WikipediaNetwork', 'squirrel',
                 'wikipedia/squirrel/geom_gcn/raw'),
    **{name: ('HeterophilousGraphs', name, f'heterophilous/{name}/raw')
       for name in ('chameleon_filtered', 'squirrel_filtered',
                    'minesweeper', 'tolokers')},
}
DATASETS = tuple(PYG_DATASETS) + ('csbm', )
# What writing into a read-only or foreign folder fails with.
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
SPLITS = ('public', 'geom_gcn', 'platonov', 'random')
# The splits stored with the datasets of one PyG class: split -> class.
STORED_SPLITS = {'public': 'Planetoid', 'geom_gcn': 'WikipediaNetwork',
                 'platonov': 'HeterophilousGraphs'}
# The stored splits that hold ten splits, picked by split_index.
INDEXED_SPLITS = ('geom_gcn', 'platonov')
TEST_SETS = ('split', 'rest')


def raw_files(name: str) -> Tuple[str, ...]:
    r"""The raw file names PyG reads for dataset :obj:`name`."""
    kind, pyg_name, _ = PYG_DATASETS[name]
    if kind == 'Planetoid':
        return tuple(f'ind.{pyg_name.lower()}.{ext}' for ext in _PLANETOID)
    if kind == 'HeterophilousGraphs':
        return (f'{pyg_name}.npz', )
    return ('out1_node_feature_label.txt', 'out1_graph_edges.txt') + tuple(
        f'{pyg_name}_split_0.6_0.2_{i}.npz' for i in range(10))


def _describe(name: str) -> str:
    r"""The raw files of :obj:`name`, short enough for one line."""
    kind, pyg_name, _ = PYG_DATASETS[name]
    if kind == 'Planetoid':
        return f'ind.{pyg_name.lower()}.{{{",".join(_PLANETOID)}}}'
    if kind == 'HeterophilousGraphs':
        return f'{pyg_name}.npz'
    return (f'out1_node_feature_label.txt, out1_graph_edges.txt, '
            f'{pyg_name}_split_0.6_0.2_{{0..9}}.npz')


def copy_from_mirror(name: str, root: Union[str, Path],
                     mirror: Union[str, Path]) -> int:
    r"""Copies the raw files of dataset :obj:`name` that :obj:`root` lacks
    from :obj:`mirror` (same layout as :obj:`root`); returns how many were
    copied. Each file is copied to a temporary file of its own first
    (:func:`~gnorm.data._files.copy_file`), so an interrupted copy never
    leaves a truncated raw file behind and processes copying at once do
    not collide."""
    rel = PYG_DATASETS[name][2]
    src, dst = Path(mirror) / rel, Path(root) / rel
    missing = [f for f in raw_files(name) if not (dst / f).is_file()]
    absent = [f for f in missing if not (src / f).is_file()]
    if absent:
        raise DataError(
            f"dataset '{name}': the mirror lacks {len(absent)} raw file(s) "
            f"(e.g. {absent[0]}); put {_describe(name)} into {src}/ or "
            f"point GNORM_DATA_MIRROR / data.mirror to a folder that has "
            f"them")
    dst.mkdir(parents=True, exist_ok=True)
    for f in missing:
        copy_file(src / f, dst / f)
    return len(missing)


@contextlib.contextmanager
def _writing_to(root: Path, mirror: Optional[Path]):
    r"""Turns a permission error on the way into one line naming the
    folder that cannot be written and the fix."""
    try:
        yield
    except OSError as e:
        if e.errno not in _UNWRITABLE:
            raise
        what = ('copies the raw files from the mirror into it' if mirror
                else 'downloads the raw files into it')
        raise DataError(
            f"cannot write to {e.filename or root} ({e.strerror}): "
            f"data.root={root} must be a folder you can write to (gnorm "
            f"{what} and processes them there); pass data.root= another "
            f"folder, e.g. data.root=$HOME/gnorm-data, or fix its "
            f"permissions") from None


def _pyg_dataset(name: str, root: Path, mirror: Optional[Path]) -> Data:
    r"""The single graph of a PyG dataset, its raw files copied from
    :obj:`mirror` or else downloaded by PyG (under a process group, by
    process 0 first: :func:`~gnorm.data._files.one_process_first`)."""
    with _writing_to(root, mirror), one_process_first():
        return _load_pyg_dataset(name, root, mirror)


def _load_pyg_dataset(name: str, root: Path, mirror: Optional[Path],
                      ) -> Data:
    kind, pyg_name, rel = PYG_DATASETS[name]
    if mirror is not None:
        if not mirror.is_dir():
            raise DataError(f"data mirror {mirror} is not a folder; fix "
                            f"GNORM_DATA_MIRROR / data.mirror or unset it "
                            f"to download")
        copy_from_mirror(name, root, mirror)

    missing = [f for f in raw_files(name) if not (root / rel / f).is_file()]
    # PyG's download messages are shown only if the download works, so that
    # a failure reads as one line.
    log = io.StringIO()
    try:
        with (contextlib.redirect_stderr(log) if missing else
              contextlib.nullcontext()):
            dataset = _pyg_class(kind, pyg_name, root)
    except Exception as e:
        missing = [f for f in raw_files(name)
                   if not (root / rel / f).is_file()]
        if isinstance(e, OSError) and e.errno in _UNWRITABLE:
            raise  # _writing_to names the folder
        if not missing:  # not a download problem
            sys.stderr.write(log.getvalue())
            raise
        raise DataError(
            f"dataset '{name}': raw files missing in {root / rel}/ and the "
            f"download failed ({type(e).__name__}); put {_describe(name)} "
            f"there, or set GNORM_DATA_MIRROR to a folder holding "
            f"{rel}/") from None
    sys.stderr.write(log.getvalue())
    return dataset[0]


def _pyg_class(kind: str, pyg_name: str, root: Path):
    r"""The PyG dataset of class :obj:`kind` (of :data:`PYG_DATASETS`)
    named :obj:`pyg_name`, in its folder under :obj:`root`."""
    if kind == 'Planetoid':
        return Planetoid(str(root / 'planetoid'), pyg_name)
    if kind == 'HeterophilousGraphs':
        return HeterophilousGraphs(str(root / 'heterophilous'), pyg_name)
    return WikipediaNetwork(str(root / 'wikipedia'), pyg_name,
                            geom_gcn_preprocess=True)


def csbm(num_nodes: int = 1000, num_classes: int = 2, num_features: int = 32,
         signal: float = 1.0, homophily: float = 0.8, avg_degree: float = 5.0,
         graph_seed: int = 0) -> Data:
    r"""Samples a contextual stochastic block model: balanced classes, an
    undirected graph and Gaussian features

    .. math::
        \mathbf{x}_i = \mu \, \mathbf{m}_{y_i} + \boldsymbol{\epsilon}_i,
        \qquad \mathbf{m}_c, \boldsymbol{\epsilon}_i \sim
        \mathcal{N}(\mathbf{0}, \mathbf{I} / d),

    where :math:`\mu` is :obj:`signal`. Node pairs are linked independently,
    with a probability chosen so that a node has :obj:`avg_degree` neighbours
    on average, a fraction :obj:`homophily` of them in its own class.
    Memory is :math:`O(n^2)` bits while sampling, fine up to ~20k nodes.

    Args:
        num_nodes (int, optional): Number of nodes. (default: :obj:`1000`)
        num_classes (int, optional): Number of classes. (default: :obj:`2`)
        num_features (int, optional): Feature size :math:`d`.
            (default: :obj:`32`)
        signal (float, optional): Distance scale :math:`\mu` of the class
            means; :obj:`0` makes the features useless. (default: :obj:`1.0`)
        homophily (float, optional): Expected fraction of edges inside a
            class, in :math:`[0, 1]`. (default: :obj:`0.8`)
        avg_degree (float, optional): Expected degree. (default: :obj:`5.0`)
        graph_seed (int, optional): Seed of the sample, apart from the
            seed of training. (default: :obj:`0`)
    """
    n, k = int(num_nodes), int(num_classes)
    if k < 2 or n < 2 * k:
        raise ConfigError(f"csbm needs num_classes >= 2 and num_nodes >= "
                          f"2 * num_classes, got num_classes={k}, "
                          f"num_nodes={n}")
    if not 0.0 <= homophily <= 1.0:
        raise ConfigError(f"csbm homophily must lie in [0, 1], got "
                          f"{homophily}; pass e.g. dataset.homophily=0.8")
    if num_features < 1 or avg_degree < 0 or signal < 0:
        raise ConfigError(f"csbm needs num_features >= 1, avg_degree >= 0 "
                          f"and signal >= 0, got {num_features}, "
                          f"{avg_degree}, {signal}")
    gen = torch.Generator().manual_seed(int(graph_seed))
    y = (torch.arange(n) % k)[torch.randperm(n, generator=gen)]  # [n]
    same = n / k - 1  # other nodes of the same class, on average
    p_in = avg_degree * homophily / same
    p_out = avg_degree * (1 - homophily) / (n - n / k)
    if p_in > 1 or p_out > 1:
        raise ConfigError(f"csbm avg_degree={avg_degree} is too high for "
                          f"{n} nodes; lower dataset.avg_degree")

    means = torch.randn(k, num_features, generator=gen) / math.sqrt(
        num_features)  # [classes, d]
    noise = torch.randn(n, num_features, generator=gen) / math.sqrt(
        num_features)  # [n, d]
    x = signal * means[y] + noise

    rows, cols = [], []
    for start in range(0, n, 1024):  # upper triangle, 1024 rows at a time
        i = torch.arange(start, min(start + 1024, n))
        prob = torch.where(y[i, None] == y[None, :], p_in, p_out)  # [b, n]
        link = torch.rand(prob.shape, generator=gen) < prob
        link &= torch.arange(n)[None, :] > i[:, None]
        r, c = link.nonzero(as_tuple=True)
        rows.append(i[r])
        cols.append(c)
    edge_index = _to_undirected(torch.stack([torch.cat(rows),
                                             torch.cat(cols)]), num_nodes=n)
    return Data(x=x, edge_index=edge_index, y=y)


def normalize_rows(x: Tensor) -> Tensor:
    r"""Divides each row by its sum (L1 for non-negative features), leaving
    all-zero rows at zero, as the GCN authors' preprocessing does."""
    total = x.sum(dim=-1, keepdim=True)
    return x / torch.where(total != 0, total, torch.ones_like(total))


def check_split(name: str, split: str, split_index: int = 0) -> None:
    r"""Raises :class:`ConfigError` if dataset :obj:`name` has no
    :obj:`split` (or no stored split :obj:`split_index` of
    :data:`INDEXED_SPLITS`; another split takes no index), before anything
    is loaded."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split={split!r}; pass one of "
                          f"{', '.join(SPLITS)}")
    kind = PYG_DATASETS.get(name, ('csbm', ))[0]
    owner = STORED_SPLITS.get(split)
    if owner is not None and kind != owner:
        owners = [n for n, v in PYG_DATASETS.items() if v[0] == owner]
        raise ConfigError(f"dataset '{name}' has no {split} split (only "
                          f"{', '.join(owners[:-1])} and {owners[-1]} do); "
                          f"pass split=random")
    if split in INDEXED_SPLITS and not 0 <= split_index < 10:
        raise ConfigError(f"split_index={split_index} is out of range; pass "
                          f"0..9")
    if split not in INDEXED_SPLITS and split_index != 0:
        indexed = ('platonov' if kind == 'HeterophilousGraphs' else
                   'geom_gcn')
        picks = {'geom_gcn': 'a Geom-GCN split',
                 'platonov': 'one of the Platonov et al. splits'}[indexed]
        kind = 'has one split only' if split == 'public' else \
            'is drawn from the seed'
        raise ConfigError(f"split_index={split_index} picks {picks}, and "
                          f"split={split} {kind}; leave split_index at 0 or "
                          f"pass split={indexed}")


def split_fingerprint(train: Tensor, val: Tensor, test: Tensor) -> str:
    r"""A fingerprint of a split: the first 16 hex digits of the SHA-256 of
    its train, validation and test node indices (sorted, as 64-bit
    integers, each part closed by its length). Two runs trained and tested
    on the same nodes have the same fingerprint; any node moved between
    the parts changes it. Paired comparisons check it
    (:mod:`gnorm.study`).

    Args:
        train (torch.Tensor): The training node mask (boolean, 1-D).
        val (torch.Tensor): The validation node mask.
        test (torch.Tensor): The test node mask.
    """
    digest = hashlib.sha256()
    for mask in (train, val, test):
        index = mask.detach().cpu().reshape(-1).nonzero().reshape(-1)
        digest.update(index.to(torch.int64).numpy().tobytes())
        digest.update(f'|{index.numel()}|'.encode())
    return digest.hexdigest()[:16]


def split_masks(data: Data, split: str, split_index: int = 0, seed: int = 0,
                ) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Train, validation and test node masks of :obj:`data`.

    Args:
        data (torch_geometric.data.Data): The graph, with the masks PyG gives
            it (1-D for ``public``, ``[num_nodes, 10]`` for ``geom_gcn``
            and ``platonov``).
        split (str): ``public``, ``geom_gcn``, ``platonov`` or ``random``
            (stratified 60 / 20 / 20 % drawn from :obj:`seed`).
        split_index (int, optional): Which of the ten ``geom_gcn`` or
            ``platonov`` splits. (default: :obj:`0`)
        seed (int, optional): Seed of the ``random`` split.
            (default: :obj:`0`)
    """
    if split not in SPLITS:
        raise ConfigError(f"unknown split={split!r}; pass one of "
                          f"{', '.join(SPLITS)}")
    if split == 'random':
        gen = torch.Generator().manual_seed(int(seed))
        masks = [torch.zeros(data.num_nodes, dtype=torch.bool)
                 for _ in range(3)]
        for c in data.y.unique():
            idx = (data.y == c).nonzero().view(-1)
            idx = idx[torch.randperm(idx.numel(), generator=gen)]
            n_train = round(0.6 * idx.numel())
            n_val = round(0.2 * idx.numel())
            masks[0][idx[:n_train]] = True
            masks[1][idx[n_train:n_train + n_val]] = True
            masks[2][idx[n_train + n_val:]] = True
        return masks[0], masks[1], masks[2]

    stored = getattr(data, 'train_mask', None)
    want_dim = 1 if split == 'public' else 2
    if stored is None or stored.dim() != want_dim:
        owners = [n for n, v in PYG_DATASETS.items()
                  if v[0] == STORED_SPLITS[split]]
        raise ConfigError(f"this dataset has no {split} split (only "
                          f"{', '.join(owners[:-1])} and {owners[-1]} do); "
                          f"pass split=random or another split")
    if split == 'public':
        return data.train_mask, data.val_mask, data.test_mask
    count = stored.size(1)
    if not 0 <= split_index < count:
        raise ConfigError(f"split_index={split_index} is out of range; pass "
                          f"0..{count - 1}")
    return (data.train_mask[:, split_index], data.val_mask[:, split_index],
            data.test_mask[:, split_index])


def load_dataset(name: str, root: Union[str, Path] = 'data',
                 mirror: Union[str, Path, None] = None, *, split: str,
                 split_index: int = 0, seed: int = 0, test_set: str = 'split',
                 normalize_features: bool = True, to_undirected: bool = False,
                 **csbm_args) -> Data:
    r"""Loads dataset :obj:`name` as one :class:`~torch_geometric.data.Data`
    graph with 1-D :obj:`train_mask`, :obj:`val_mask`, :obj:`test_mask`.

    Args:
        name (str): One of :obj:`DATASETS`.
        root (str or Path, optional): Folder the PyG datasets live in,
            relative to the working directory. (default: :obj:`"data"`)
        mirror (str or Path, optional): Folder with the same layout to copy
            raw files from instead of downloading them. (default: :obj:`None`)
        split (str): ``public``, ``geom_gcn``, ``platonov`` or ``random``,
            see :func:`split_masks`.
        split_index (int, optional): Which of the ten ``geom_gcn`` or
            ``platonov`` splits. (default: :obj:`0`)
        seed (int, optional): Seed of the ``random`` split.
            (default: :obj:`0`)
        test_set (str, optional): ``split`` (the split's test nodes) or
            ``rest`` (every node outside train and validation).
            (default: :obj:`"split"`)
        normalize_features (bool, optional): Divide each feature row by its
            sum. (default: :obj:`True`)
        to_undirected (bool, optional): Add the reverse of every edge,
            i.e. :math:`\mathbf{A} := \max(\mathbf{A}, \mathbf{A}^\top)`
            (chameleon and squirrel are stored directed).
            (default: :obj:`False`)
        **csbm_args: Arguments of :func:`csbm` (:obj:`name="csbm"` only).
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; pass one of "
                          f"{', '.join(DATASETS)}")
    check_split(name, split, split_index)
    if test_set not in TEST_SETS:
        raise ConfigError(f"unknown test_set={test_set!r}; pass one of "
                          f"{', '.join(TEST_SETS)}")
    if name == 'csbm':
        data = csbm(**csbm_args)
    else:
        if csbm_args:
            raise ConfigError(f"dataset '{name}' takes no option(s) "
                              f"{', '.join(sorted(csbm_args))}")
        root = Path(root).expanduser().resolve()
        mirror = None if mirror in (None, '') else Path(
            mirror).expanduser().resolve()
        data = _pyg_dataset(name, root, mirror)

    train_mask, val_mask, test_mask = split_masks(data, split, split_index,
                                                  seed)
    if test_set == 'rest':
        test_mask = ~(train_mask | val_mask)
    x = normalize_rows(data.x) if normalize_features else data.x
    edge_index = data.edge_index
    if to_undirected:
        edge_index = _to_undirected(edge_index, num_nodes=data.num_nodes)
    return Data(x=x, edge_index=edge_index, y=data.y, train_mask=train_mask,
                val_mask=val_mask, test_mask=test_mask)
