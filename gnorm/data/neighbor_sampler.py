r"""Neighbour sampling in plain torch, for PyG's
:class:`~torch_geometric.loader.NodeLoader` where neither ``pyg-lib`` nor
``torch-sparse`` is installed (PyG's
:class:`~torch_geometric.loader.NeighborLoader` needs one of them)."""
from typing import List, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.sampler import (BaseSampler, NodeSamplerInput,
                                     SamplerOutput)


class TorchNeighborSampler(BaseSampler):
    r"""Samples the neighbourhoods of seed nodes hop by hop, as PyG's
    :class:`~torch_geometric.sampler.NeighborSampler` does for a
    homogeneous graph (directed subgraphs, without replacement), in plain
    torch: at hop :math:`h`, every node reached at hop :math:`h - 1` (the
    seeds at hop :math:`1`) keeps :math:`\min(k_h, d_i)` of its
    :math:`d_i` incoming edges :math:`j \to i`, drawn uniformly without
    replacement (all of them for :math:`k_h < 0`), and their sources not
    reached before are the nodes of hop :math:`h`.

    Plugs into :class:`~torch_geometric.loader.NodeLoader`:

    .. code-block:: python

        loader = NodeLoader(data, node_sampler=TorchNeighborSampler(
            data, [10, 10], seed=0), input_nodes=data.train_mask,
            batch_size=128, shuffle=True)

    Each batch is a :class:`~torch_geometric.data.Data` as
    :class:`~torch_geometric.loader.NeighborLoader` gives: the
    :obj:`batch_size` seed nodes first, then each hop's new nodes (by
    index), their ids in the graph :obj:`n_id`, the ids of the sampled
    edges :obj:`e_id` (edge attributes are taken along), the edges
    pointing from sampled neighbours to the nodes that drew them,
    :obj:`input_id`, :obj:`num_sampled_nodes` and
    :obj:`num_sampled_edges` per hop.

    Args:
        data (torch_geometric.data.Data): The graph (its
            :obj:`edge_index` and :obj:`num_nodes`).
        num_neighbors (list of int): The number of incoming edges drawn per
            node at each hop; :obj:`-1` for all of them.
        seed (int, optional): Seeds the sampler's own random generator, so
            that a loader over the same seed nodes in the same order draws
            the same batches; :obj:`None`: torch's global generator.
            (default: :obj:`None`)
    """
    def __init__(self, data, num_neighbors: Sequence[int],
                 seed: Optional[int] = None):
        if isinstance(num_neighbors, int) or not all(
                isinstance(k, int) for k in num_neighbors):
            raise ValueError(f"TorchNeighborSampler expects a list of "
                             f"integers per hop, e.g. [10, 10] (got "
                             f"num_neighbors={num_neighbors!r})")
        self.num_neighbors: List[int] = list(num_neighbors)
        self.num_nodes = data.num_nodes
        self.seed = seed
        self.generator = None if seed is None else \
            torch.Generator().manual_seed(seed)
        # The incoming edges of each node, contiguous (CSC): those of node
        # i are sources[ptr[i]:ptr[i + 1]], edge ids edge_ids[...].
        src, dst = data.edge_index.cpu()
        self.edge_ids = torch.argsort(dst, stable=True)  # [E]
        self.sources = src[self.edge_ids]  # [E]
        degree = torch.bincount(dst, minlength=self.num_nodes)  # [N]
        self.ptr = torch.cat([degree.new_zeros(1), degree.cumsum(0)])

    def _draw(self, nodes: Tensor, k: int) -> Tensor:
        r"""The positions (in the CSC arrays) of the incoming edges drawn
        for :obj:`nodes`: :math:`\min(k, d_i)` of node :math:`i`'s, node
        by node."""
        start, degree = self.ptr[nodes], self.ptr[nodes + 1] - self.ptr[nodes]
        owner = torch.repeat_interleave(degree)  # [C], node of a candidate
        first = degree.cumsum(0) - degree  # [n], its first candidate
        rank = torch.arange(owner.numel()) - first[owner]  # [C]
        candidates = start[owner] + rank  # [C]
        if k < 0:
            return candidates
        # A random order within each node: sort by a random key, then
        # stably by node; the first k of each node are drawn.
        key = torch.rand(owner.numel(), generator=self.generator)
        order = torch.argsort(key)
        order = order[torch.argsort(owner[order], stable=True)]
        return candidates[order[rank < k]]

    def sample_from_nodes(self, index: NodeSamplerInput,
                          **kwargs) -> SamplerOutput:
        r"""Samples the subgraph around the seed nodes :obj:`index.node`.

        Args:
            index (torch_geometric.sampler.NodeSamplerInput): The seed
                nodes (and their ids in the loader's inputs,
                :obj:`input_id`).
        """
        if index.input_type is not None or index.time is not None:
            raise ValueError("TorchNeighborSampler samples homogeneous "
                             "graphs without time; use PyG's "
                             "NeighborSampler for heterogeneous or temporal "
                             "sampling")
        seeds = index.node.cpu().long()
        local = torch.full((self.num_nodes, ), -1, dtype=torch.long)
        local[seeds] = torch.arange(seeds.numel())
        nodes, frontier, count = [seeds], seeds, seeds.numel()
        rows, cols, edges, num_edges = [], [], [], []
        for k in self.num_neighbors:
            drawn = self._draw(frontier, k)  # [E_h], CSC positions
            degree = self.ptr[frontier + 1] - self.ptr[frontier]
            kept = degree if k < 0 else degree.clamp(max=k)
            target = torch.repeat_interleave(frontier, kept)  # [E_h]
            source = self.sources[drawn]
            new = source[local[source] < 0].unique()  # reached first now
            local[new] = torch.arange(count, count + new.numel())
            count += new.numel()
            nodes.append(new)
            rows.append(local[source])
            cols.append(local[target])
            edges.append(self.edge_ids[drawn])
            num_edges.append(drawn.numel())
            frontier = new
        return SamplerOutput(
            node=torch.cat(nodes), row=torch.cat(rows), col=torch.cat(cols),
            edge=torch.cat(edges), batch=None,
            num_sampled_nodes=[n.numel() for n in nodes],
            num_sampled_edges=num_edges,
            metadata=(index.input_id, index.time))

    def sample_from_edges(self, index, neg_sampling=None):
        r"""Not supported: this sampler samples from nodes."""
        raise NotImplementedError("TorchNeighborSampler samples from nodes "
                                  "(NodeLoader), not from edges")

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(num_neighbors='
                f'{self.num_neighbors})')
