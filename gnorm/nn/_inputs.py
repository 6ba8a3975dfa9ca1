r"""Checks of the graph inputs every layer takes (``batch``,
``edge_index``): misuse raises a :class:`ValueError` naming the layer and
the fix, before torch or PyG fail with an error about their internals."""
from typing import Optional

import torch
from torch import Tensor

_INDEX_DTYPES = (torch.int64, torch.int32)


def _check_index(module: torch.nn.Module, name: str, index: Tensor) -> None:
    if not isinstance(index, Tensor) or index.dtype not in _INDEX_DTYPES:
        got = index.dtype if isinstance(index, Tensor) else type(index)
        raise ValueError(f"{module}: {name} must be an integer tensor "
                         f"(torch.long), got {got}; pass {name}.long()")


def check_batch(module: torch.nn.Module, batch: Optional[Tensor],
                num_nodes: int, batch_size: Optional[int] = None,
                ) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`module` unless
    :obj:`batch` is :obj:`None` or a vector of :obj:`num_nodes` graph ids in
    :obj:`[0, batch_size)`."""
    if batch is None:
        return
    _check_index(module, 'batch', batch)
    if batch.dim() != 1 or batch.numel() != num_nodes:
        raise ValueError(f"{module}: batch must have shape [{num_nodes}] "
                         f"(one graph id per node), got "
                         f"{list(batch.shape)}")
    if batch.numel() == 0:
        return
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or (batch_size is not None and high >= batch_size):
        bound = '' if batch_size is None else f', < batch_size={batch_size}'
        raise ValueError(f"{module}: batch holds graph ids in [{low}, "
                         f"{high}]; pass ids >= 0{bound}")


def check_edge_index(module: torch.nn.Module, edge_index: Optional[Tensor],
                     num_nodes: int) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`module` unless
    :obj:`edge_index` is :obj:`None` or a :obj:`[2, num_edges]` tensor of
    node indices in :obj:`[0, num_nodes)`."""
    if edge_index is None:
        return
    _check_index(module, 'edge_index', edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{module}: edge_index must have shape "
                         f"[2, num_edges], got {list(edge_index.shape)}")
    if edge_index.numel() == 0:
        return
    low, high = int(edge_index.min()), int(edge_index.max())
    if low < 0 or high >= num_nodes:
        raise ValueError(f"{module}: edge_index holds node indices in "
                         f"[{low}, {high}] but x has {num_nodes} nodes; "
                         f"pass indices in [0, {num_nodes - 1}]")
