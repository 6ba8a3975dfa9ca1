r"""Leakage of a split through duplicate nodes: test nodes whose exact
feature vector some training node has too. Platonov et al. ("A critical
look at the evaluation of GNNs under heterophily: are we really making
progress?", ICLR 2023) found Chameleon and Squirrel full of such twins,
often with the same label and the same neighbours, so that a model may
score on test nodes by recalling their training copies.
:func:`leakage` counts them for one split, on the graph a run trains on;
every node run records it (``results.json``: ``dataset.leakage``) and
:func:`report` says it once per process and split: a warning line when
the split leaks (:data:`WARN_SHARE` of its test nodes or more have a
duplicate in training: the same features, label and neighbours), an info
line for fewer. :func:`leakage_summary` lists the leakage of each split
from the records of runs."""
import logging
from typing import Any, Dict, Iterable, List, NamedTuple, Set, Tuple

import torch
from torch import Tensor

from gnorm.data.nodes import INDEXED_SPLITS

log = logging.getLogger(__name__)

# A split leaks when at least this share of its test nodes has a duplicate
# among its training nodes: a twin of the same features, label and
# neighbours, which a graph network cannot tell from the test node. At 3 %
# a model that recalls every twin gains up to 3 points of test accuracy;
# a few duplicates under it (chameleon_filtered's split 0 keeps 2 of 194)
# are reported as an info line. (A feature twin alone is no leak where
# features are coarse: every one of Minesweeper's test nodes has one.)
WARN_SHARE = 0.03
# The variant of a dataset without its duplicate nodes (Platonov et al.),
# named by the warning of a split that leaks.
VARIANTS = {'chameleon': 'chameleon_filtered',
            'squirrel': 'squirrel_filtered'}
# What :func:`report` has said in this process: (dataset, split,
# fingerprint, counts), each once however many runs train on the split.
_REPORTED: Set[Tuple[Any, ...]] = set()


class SplitLeakage(NamedTuple):
    r"""A row of :func:`leakage_summary`: the :obj:`dataset`, the
    :obj:`split` (:func:`split_label`), its :obj:`test` nodes and of those
    the ones with a duplicate in training (:obj:`same_neighbours`)."""
    dataset: str
    split: str
    test: int
    same_neighbours: int


def _groups(rows: Tensor) -> Tensor:
    r"""A group id per row of :obj:`rows`: equal rows, equal ids."""
    return torch.unique(rows, dim=0, return_inverse=True)[1]


def _neighbourhoods(edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""A group id per node: nodes with the same set of neighbours (the
    sources of the edges into it, duplicates counted once) share one."""
    src, dst = edge_index.cpu()
    key = torch.unique(dst * num_nodes + src)  # sorted by node, then source
    dst, src = key // num_nodes, key % num_nodes
    counts = torch.bincount(dst, minlength=num_nodes)
    width = int(counts.max()) if counts.numel() and dst.numel() else 0
    table = torch.full((num_nodes, max(width, 1)), -1, dtype=torch.long)
    start = torch.cumsum(counts, 0) - counts
    table[dst, torch.arange(dst.numel()) - start[dst]] = src
    return _groups(table)  # [num_nodes]: rows of sorted neighbours, -1 padded


def leakage(data, train_mask: Tensor, test_mask: Tensor
            ) -> Dict[str, int]:
    r"""How a split leaks through duplicate nodes of :obj:`data` (its
    ``x``, ``y`` and ``edge_index``): ``test`` (the test nodes),
    ``duplicated_in_train`` (test nodes with a training node of exactly
    the same feature vector), ``same_label`` (of those, test nodes with
    such a training twin of their own label) and ``same_neighbours`` (of
    those, test nodes with such a twin of their own label and the same
    set of neighbours).

    A node's neighbours are the sources of the edges into it in
    :obj:`data.edge_index`, the nodes a graph convolution averages it
    with; a run of :mod:`gnorm.train` passes the graph it trains on, the
    dataset's edges after ``dataset.to_undirected`` (Platonov et al.'s
    graphs come with both directions). One definition, so the counts of
    two graphs differ only where their edges do: Chameleon's Geom-GCN
    split 0 has 42 such test nodes as stored (directed, the default
    config) and 30 symmetrised (``dataset.to_undirected=true``, as the
    studies train it); Squirrel's 12 and 3.

    Args:
        data (torch_geometric.data.Data): The graph.
        train_mask (torch.Tensor): The training node mask (boolean, 1-D).
        test_mask (torch.Tensor): The test node mask (boolean, 1-D).
    """
    x, y = data.x.detach().cpu(), data.y.detach().cpu()
    train, test = train_mask.cpu(), test_mask.cpu()
    features = _groups(x)
    labels = features * (int(y.max()) + 1) + y  # feature group and label
    hoods = _groups(torch.stack(
        [labels, _neighbourhoods(data.edge_index, data.num_nodes)], dim=1))

    def twinned(ids: Tensor) -> int:
        known = torch.zeros(int(ids.max()) + 1, dtype=torch.bool)
        known[ids[train]] = True
        return int(known[ids[test]].sum())
    return {'test': int(test.sum()), 'duplicated_in_train': twinned(features),
            'same_label': twinned(labels), 'same_neighbours': twinned(hoods)}


def share(found: Dict[str, int]) -> float:
    r"""The share of a split's test nodes with a duplicate in training
    (``same_neighbours`` of :func:`leakage`)."""
    return found['same_neighbours'] / max(found['test'], 1)


def leaks(found: Dict[str, int]) -> bool:
    r"""Whether a split's :func:`leakage` reaches :data:`WARN_SHARE` of
    its test nodes with a duplicate in training (``same_neighbours``)."""
    return share(found) >= WARN_SHARE


def leakage_line(name: str, dataset: str, found: Dict[str, int]) -> str:
    r"""What :func:`report` says of the split :obj:`name` (``chameleon,
    geom_gcn split 0``) of :obj:`dataset` and its :func:`leakage`: the
    count and share of its test nodes with a duplicate in training, and
    whether the split leaks (then the variant without duplicates, where
    :data:`VARIANTS` has one)."""
    count = (f"{name}: {found['same_neighbours']} of {found['test']} test "
             f"nodes ({100 * share(found):.1f} %) have a duplicate in "
             f"training (the same features, label and neighbours)")
    if not leaks(found):
        return (f"{count}, under the {100 * WARN_SHARE:g} % at which a "
                f"split leaks (gnorm.data.leakage)")
    variant = VARIANTS.get(dataset)
    other = '' if variant is None else \
        f"; dataset={variant} is {dataset} without its duplicate nodes"
    return f"{count}: the split leaks{other} (gnorm.data.leakage)"


def report(name: str, dataset: str, fingerprint: str,
           found: Dict[str, int]) -> None:
    r"""Logs :func:`leakage_line` of a split with duplicates in training,
    as a warning where it :func:`leaks`, else as info; once per process
    for each :obj:`dataset`, split :obj:`name`, :obj:`fingerprint` (of
    its masks) and counts (a study trains many runs of a split in one
    process)."""
    key = (dataset, name, fingerprint, tuple(sorted(found.items())))
    if found['same_neighbours'] == 0 or key in _REPORTED:
        return
    _REPORTED.add(key)
    log.log(logging.WARNING if leaks(found) else logging.INFO,
            leakage_line(name, dataset, found))


def split_label(split: str, split_index: int = 0, seed: int = 0) -> str:
    r"""``geom_gcn split 0``, ``random split of seed 3``, ``public
    split``."""
    which = (f' {split_index}' if split in INDEXED_SPLITS else
             f' of seed {seed}' if split == 'random' else '')
    return f'{split} split{which}'


def _split_order(config: Dict[str, Any]) -> Tuple[str, int]:
    r"""The split of a run's :obj:`config` and its index (or seed), to
    sort by."""
    split = str(config.get('split'))
    number = config.get('split_index', 0) if split in INDEXED_SPLITS else \
        config.get('seed', 0) if split == 'random' else 0
    return split, int(number or 0)


def leakage_summary(records: Iterable[Dict[str, Any]]
                    ) -> List[SplitLeakage]:
    r"""The leakage of each split that the runs of :obj:`records` (their
    ``results.json``) trained on, one :class:`SplitLeakage` row per
    dataset, split and counts (runs of one split share a row), sorted by
    dataset, split and split index (or seed); records without
    ``dataset.leakage`` (graph-level runs) are left out. Reads nothing
    else: a report calls it on the records it has.

    Args:
        records (iterable of dict): Run records, each with ``config``
            (``split``, ``split_index``, ``seed``) and ``dataset``
            (``name``, ``leakage``).
    """
    rows: Dict[Tuple[Any, ...], SplitLeakage] = {}
    for record in records:
        dataset = record.get('dataset')
        if not isinstance(dataset, dict) or 'leakage' not in dataset:
            continue
        config = dict(record.get('config') or {})
        config.setdefault('split', dataset.get('split'))
        split, number = _split_order(config)
        found = dataset['leakage']
        row = SplitLeakage(
            str(dataset.get('name')),
            split_label(split, number, number), int(found['test']),
            int(found['same_neighbours']))
        rows[(row.dataset, split, number, row.test,
              row.same_neighbours)] = row
    return [rows[key] for key in sorted(rows)]
