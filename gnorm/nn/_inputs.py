r"""Checks of the graph inputs every layer takes (``batch``,
``edge_index``): misuse raises a :class:`ValueError` naming the layer and
the fix, before torch or PyG fail with an error about their internals.

One rule, the same on every device: the type and shape of an input are
always checked (this reads nothing back from the device); its *values*
(graph ids in range, and sorted for the layers that need it, node indices
in range, edges inside one graph) only under :class:`validate_inputs`,
because reading them costs a host round-trip in every call and breaks
:func:`torch.compile(fullgraph=True) <torch.compile>`, as PyG's own layers
do no such checks. :meth:`gnorm.models.DeepGCN.prepare` checks the values
always, once per graph."""
from typing import Optional

import torch
from torch import Tensor

_INDEX_DTYPES = (torch.int64, torch.int32)


class validate_inputs:
    r"""Makes gnorm's layers check the values of their graph inputs too
    (graph ids in range, and sorted for the layers that need it, node
    indices in range, edges inside one graph), a :class:`ValueError`
    naming the layer for bad ones, at the cost of host round-trips in
    every forward pass: for debugging, in eager mode. A context manager
    (``with validate_inputs(): ...``), or switched for the process with
    :meth:`enable` / :meth:`disable`, as
    :class:`torch.sparse.check_sparse_tensor_invariants`. Off by default.

    Args:
        enabled (bool, optional): Check values inside the block.
            (default: :obj:`True`)
    """
    _enabled = False

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    @staticmethod
    def is_enabled() -> bool:
        r"""Whether the values of graph inputs are checked."""
        return validate_inputs._enabled

    @staticmethod
    def enable():
        r"""Checks the values of graph inputs from now on."""
        validate_inputs._enabled = True

    @staticmethod
    def disable():
        r"""Stops checking the values of graph inputs."""
        validate_inputs._enabled = False

    def __enter__(self):
        self._saved = validate_inputs._enabled
        validate_inputs._enabled = self.enabled

    def __exit__(self, *exc):
        validate_inputs._enabled = self._saved


def _check_index(module: torch.nn.Module, name: str, index: Tensor) -> None:
    if not isinstance(index, Tensor) or index.dtype not in _INDEX_DTYPES:
        got = index.dtype if isinstance(index, Tensor) else type(index)
        raise ValueError(f"{module}: {name} must be an integer tensor "
                         f"(torch.long), got {got}; pass {name}.long()")


def check_batch(module: torch.nn.Module, batch: Optional[Tensor],
                num_nodes: int, batch_size: Optional[int] = None,
                sorted: bool = False, values: Optional[bool] = None,
                ) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`module` unless
    :obj:`batch` is :obj:`None` or a vector of :obj:`num_nodes` graph ids in
    :obj:`[0, batch_size)` (in non-decreasing order if :obj:`sorted`); the
    ids themselves are read only if :obj:`values` (default: under
    :class:`validate_inputs`)."""
    if batch is None:
        return
    _check_index(module, 'batch', batch)
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"{module}: batch must have shape [{num_nodes}] "
                         f"(one graph id per node), got "
                         f"{list(batch.shape)}")
    if batch.numel() == 0 or not _reads_values(values):
        return
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or (batch_size is not None and high >= batch_size):
        bound = '' if batch_size is None else f', < batch_size={batch_size}'
        raise ValueError(f"{module}: batch holds graph ids in [{low}, "
                         f"{high}]; pass ids >= 0{bound}")
    if sorted and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError(f"{module}: batch must be sorted (the nodes of "
                         f"each graph together, graph ids non-decreasing, "
                         f"as in PyG's batches); reorder the nodes by "
                         f"batch.argsort(stable=True)")


def check_edge_index(module: torch.nn.Module, edge_index: Optional[Tensor],
                     num_nodes: int, batch: Optional[Tensor] = None,
                     values: Optional[bool] = None) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`module` unless
    :obj:`edge_index` is :obj:`None` or a :obj:`[2, num_edges]` tensor of
    node indices in :obj:`[0, num_nodes)` (linking nodes of one graph of
    :obj:`batch`, if given); the indices themselves are read only if
    :obj:`values` (default: under :class:`validate_inputs`)."""
    if edge_index is None:
        return
    _check_index(module, 'edge_index', edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{module}: edge_index must have shape "
                         f"[2, num_edges], got {list(edge_index.shape)}")
    if edge_index.numel() == 0 or not _reads_values(values):
        return
    low, high = int(edge_index.min()), int(edge_index.max())
    if low < 0 or high >= num_nodes:
        raise ValueError(f"{module}: edge_index holds node indices in "
                         f"[{low}, {high}] but x has {num_nodes} nodes; "
                         f"pass indices in [0, {num_nodes - 1}]")
    if batch is not None and bool(
            (batch[edge_index[0]] != batch[edge_index[1]]).any()):
        raise ValueError(f"{module}: edge_index links nodes of different "
                         f"graphs; pass the edges of the batched graphs")


def _reads_values(values: Optional[bool]) -> bool:
    return validate_inputs.is_enabled() if values is None else values
