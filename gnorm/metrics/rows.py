r"""What the metrics share about rows and graphs: rows scaled without
overflow, rows sorted by graph, sums per graph, the nodes drawn per graph,
and the 0-dim result of one graph."""
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def finish(out: Tensor, batch: Optional[Tensor]) -> Tensor:
    return out.squeeze(0) if batch is None else out


def scaled_rows(x: Tensor, peak: Optional[Tensor] = None
                 ) -> Tuple[Tensor, Tensor]:
    r"""The rows divided by their largest entry (so that their norms
    neither over- nor underflow) and the norms of those :obj:`[...,
    num_nodes]`: :obj:`y / norm` are the unit rows. :obj:`peak`: the
    largest absolute entry of each row :obj:`[..., num_nodes]`, if known
    (:func:`row_peaks`)."""
    peak = row_peaks(x) if peak is None else peak
    peak = peak.unsqueeze(-1)  # [..., num_nodes, 1]
    y = x / torch.where(peak > 0, peak, torch.ones_like(peak))
    return y, torch.linalg.vector_norm(y, dim=-1)


def row_peaks(x: Tensor) -> Tensor:
    r"""The largest absolute entry of each row of :obj:`x` :obj:`[...,
    num_nodes, d]`, :obj:`[..., num_nodes]` (:obj:`nan` for a row with a
    :obj:`nan`): two reductions, no temporary of the size of :obj:`x`."""
    return torch.maximum(x.amax(dim=-1), -x.amin(dim=-1))


def unit_rows(x: Tensor) -> Tensor:
    r"""Rows scaled to unit norm; zero rows stay zero."""
    y, norm = scaled_rows(x)
    return y / torch.where(norm > 0, norm, torch.ones_like(norm)).unsqueeze(-1)


def sort_by_graph(x: Tensor, batch: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Sorts nodes by graph, as :func:`to_dense_batch` requires."""
    if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
        perm = torch.argsort(batch, stable=True)
        return x[perm], batch[perm]
    return x, batch


def graph_sum(t: Tensor, batch: Tensor, size: int, dim: int) -> Tensor:
    r"""Sums :obj:`t` over the nodes of each graph along :obj:`dim`."""
    if size == 1:  # one graph: a plain sum
        return t.sum(dim, keepdim=True)
    return scatter(t, batch, dim=dim, dim_size=size, reduce='sum')


def weighted_graph_sum(w: Tensor, x: Tensor, batch: Tensor,
                        size: int) -> Tensor:
    r"""The sums :math:`\sum_i w_i \mathbf{x}_i` :obj:`[..., B, d]` over
    the nodes of each graph of rows :obj:`x` :obj:`[..., num_nodes, d]`
    weighted by :obj:`w` :obj:`[..., num_nodes]`."""
    if size == 1:  # one graph: one matrix product
        return w.unsqueeze(-2) @ x
    return graph_sum(x * w.unsqueeze(-1), batch, size, -2)


def subsample(batch: Tensor, size: int, max_samples: int,
               generator: Optional[torch.Generator]) -> Optional[Tensor]:
    r"""Indices of at most :obj:`max_samples` uniformly drawn nodes per graph,
    or :obj:`None` if no graph is larger."""
    counts = torch.bincount(batch, minlength=size)
    if int(counts.max()) <= max_samples:
        return None
    starts = torch.cumsum(counts, dim=0) - counts
    keep = []
    rand_device = generator.device if generator is not None else batch.device
    for g in range(size):
        n, start = int(counts[g]), int(starts[g])
        if n > max_samples:
            perm = torch.randperm(n, generator=generator, device=rand_device)
            idx = perm[:max_samples].sort().values.to(batch.device) + start
        else:
            idx = torch.arange(start, start + n, device=batch.device)
        keep.append(idx)
    return torch.cat(keep)
