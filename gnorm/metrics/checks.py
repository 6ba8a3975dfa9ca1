r"""Input checks shared by the metrics: each raises one
:class:`ValueError` line naming the function, the argument and the fix."""
from typing import Optional, Tuple

import torch
from torch import Tensor


def check_x(fn: str, x: Tensor) -> None:
    if not isinstance(x, Tensor) or x.dim() != 2:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"'{fn}' expects a node feature matrix 'x' of shape "
                         f"[num_nodes, num_features] (got {shape})")
    if not x.is_floating_point():
        raise ValueError(f"'{fn}' expects a floating point 'x' (got "
                         f"{x.dtype}); pass 'x.float()'")


def check_samples(fn: str, max_samples: int) -> None:
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) \
            or max_samples < 2:
        raise ValueError(f"'{fn}' expects an integer 'max_samples' of at "
                         f"least 2 (got {max_samples!r})")


def check_batch(fn: str, x: Tensor, batch: Optional[Tensor],
                 batch_size: Optional[int]) -> Tuple[Tensor, int]:
    r"""Returns a batch vector (all zeros when :obj:`batch` is :obj:`None`)
    and the number of graphs."""
    if batch is None:
        if batch_size not in (None, 1):
            raise ValueError(f"'{fn}' got 'batch_size={batch_size}' without "
                             f"'batch'; pass 'batch' to evaluate several "
                             f"graphs")
        return x.new_zeros(x.size(0), dtype=torch.long), 1
    if (not isinstance(batch, Tensor) or batch.dim() != 1
            or batch.numel() != x.size(0)):
        shape = tuple(batch.shape) if isinstance(batch, Tensor) else batch
        raise ValueError(f"'{fn}' expects 'batch' of shape [num_nodes] = "
                         f"[{x.size(0)}] assigning each row of 'x' to a graph "
                         f"(got {shape})")
    if batch.is_floating_point() or batch.dtype == torch.bool:
        raise ValueError(f"'{fn}' expects an integer 'batch' (got "
                         f"{batch.dtype}); pass 'batch.long()'")
    num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
    if batch.numel() > 0 and int(batch.min()) < 0:
        raise ValueError(f"'{fn}' expects non-negative graph indices in "
                         f"'batch'")
    if batch_size is None:
        batch_size = num_graphs
    elif batch_size < num_graphs:
        raise ValueError(f"'{fn}' got 'batch_size={batch_size}' but 'batch' "
                         f"holds graph index {num_graphs - 1}; pass "
                         f"'batch_size >= batch.max() + 1'")
    return batch.long(), int(batch_size)


def check_edge_index(fn: str, edge_index: Tensor, batch: Tensor) -> None:
    if (not isinstance(edge_index, Tensor) or edge_index.dim() != 2
            or edge_index.size(0) != 2):
        shape = (tuple(edge_index.shape)
                 if isinstance(edge_index, Tensor) else edge_index)
        raise ValueError(f"'{fn}' expects 'edge_index' of shape "
                         f"[2, num_edges] (got {shape})")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
        raise ValueError(f"'{fn}' expects an integer 'edge_index' (got "
                         f"{edge_index.dtype}); pass 'edge_index.long()'")
    if edge_index.numel() == 0:
        return
    num_nodes = batch.numel()
    if int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes:
        raise ValueError(f"'{fn}' expects 'edge_index' entries in "
                         f"[0, {num_nodes}) for 'x' with {num_nodes} rows")
    if bool((batch[edge_index[0]] != batch[edge_index[1]]).any()):
        raise ValueError(f"'{fn}' got edges between different graphs of "
                         f"'batch'")


def check_inputs(fn: str, x: Tensor, batch: Optional[Tensor],
                 batch_size: Optional[int],
                 max_samples: Optional[int] = None) -> Tuple[Tensor, int]:
    r"""The checks of a metric's inputs in order (:func:`check_x`,
    :func:`check_samples` when it samples, :func:`check_batch`); returns
    the batch vector and the number of graphs."""
    check_x(fn, x)
    if max_samples is not None:
        check_samples(fn, max_samples)
    return check_batch(fn, x, batch, batch_size)
