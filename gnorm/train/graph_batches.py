r"""Mini-batches of graphs for :mod:`gnorm.train.graph`: the training
batches (uniformly shuffled, or of similar size with
:class:`SizeBuckets`), split between the processes of a data-parallel run,
and the evaluation batches. With a norm that takes batch statistics over
the graphs of a batch (:obj:`min_graphs=2`), a last training batch of one
graph joins the batch before it (:func:`join_short_last`); every other
batch is the one it would be without. Every batch carries its
:func:`~gnorm.models.token_layout.token_layout` (:class:`LayoutCollater`),
computed where the batch is collated (in the loader's workers with
``train.num_workers``), so that the model reads no value of the batch.
"""
import math
from dataclasses import dataclass
from typing import Any, Dict, List

import torch
from omegaconf import DictConfig
from torch.utils.data.distributed import DistributedSampler
from torch.utils.data import DataLoader
from torch_geometric.loader.dataloader import Collater

from gnorm.data.molecules import graph_sizes
from gnorm.errors import ConfigError
from gnorm.models.token_layout import add_token_layout


def join_short_last(batches: List[torch.Tensor],
                    min_graphs: int) -> List[torch.Tensor]:
    r""":obj:`batches` with the last one joined to the one before it when
    it holds fewer than :obj:`min_graphs` graphs (and there is one before
    it): a norm with batch statistics over the graphs of a batch (the
    graph token's BatchNorm) cannot train on one graph. Every graph stays
    in the epoch, and the other batches are untouched."""
    if len(batches) > 1 and len(batches[-1]) < min_graphs:
        batches = batches[:-2] + [torch.cat(batches[-2:])]
    return batches


def _count(graphs: int, batch_size: int, min_graphs: int) -> int:
    r"""The number of batches :func:`join_short_last` leaves of
    :obj:`graphs` cut into batches of :obj:`batch_size`."""
    batches = math.ceil(graphs / batch_size)
    short = 0 < graphs % batch_size < min_graphs and batches > 1
    return batches - short


class SizeBuckets(torch.utils.data.Sampler):
    r"""Mini-batches of graphs of similar size, so that the dense
    :obj:`[B, 1 + N, 1 + N]` attention pads less: every epoch the graphs
    are shuffled (from :obj:`seed` and the epoch), cut into chunks of
    :obj:`chunk` batches, each chunk sorted by node count and cut into
    batches of :obj:`batch_size`, and the batches shuffled. Every graph is
    seen once per epoch; process :obj:`rank` of :obj:`world` takes every
    :obj:`world`-th batch. Every process gets the same number of batches
    (data-parallel training steps together): when :obj:`world` does not
    divide the number of batches, the first batches of the epoch's order
    are repeated to fill the last round, as
    :class:`~torch.utils.data.distributed.DistributedSampler` pads with
    :obj:`drop_last=False`. The last batch of the last chunk, when it has
    fewer than :obj:`min_graphs` graphs, joins the batch before it
    (:func:`join_short_last`) before the batches are shuffled. A batch
    sampler for :class:`~torch_geometric.loader.DataLoader`."""
    def __init__(self, sizes: torch.Tensor, batch_size: int, chunk: int,
                 seed: int = 0, rank: int = 0, world: int = 1,
                 min_graphs: int = 1):
        self.sizes, self.batch_size, self.chunk = sizes, batch_size, chunk
        self.seed, self.rank, self.world, self.epoch = seed, rank, world, 0
        self.min_graphs = min_graphs

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.sizes), generator=gen)
        batches = []
        for part in order.split(self.batch_size * self.chunk):
            part = part[torch.sort(self.sizes[part], stable=True).indices]
            batches += part.split(self.batch_size)
        batches = join_short_last(batches, self.min_graphs)
        pick = torch.randperm(len(batches), generator=gen)
        padded = len(self) * self.world  # the first batches again
        pick = pick.repeat(math.ceil(padded / max(1, len(pick))))[:padded]
        for k in pick[self.rank::self.world].tolist():
            yield batches[k].tolist()

    def __len__(self) -> int:
        # The chunks are whole batches but the last: as one cut of n graphs.
        batches = _count(len(self.sizes), self.batch_size, self.min_graphs)
        return math.ceil(batches / self.world)


class JoinedBatches(torch.utils.data.Sampler):
    r"""The batches :class:`~torch.utils.data.BatchSampler` makes of
    :obj:`sampler` (:obj:`batch_size` consecutive indices,
    :obj:`drop_last=False`), the last one joined to the one before it when
    it holds fewer than :obj:`min_graphs` graphs (:func:`join_short_last`).
    A batch sampler for :class:`~torch_geometric.loader.DataLoader`."""
    def __init__(self, sampler: torch.utils.data.Sampler, batch_size: int,
                 min_graphs: int):
        self.sampler, self.batch_size = sampler, batch_size
        self.min_graphs = min_graphs

    def __iter__(self):
        order = torch.tensor(list(self.sampler), dtype=torch.long)
        for batch in join_short_last(list(order.split(self.batch_size)),
                                     self.min_graphs):
            yield batch.tolist()

    def __len__(self) -> int:
        return _count(len(self.sampler), self.batch_size, self.min_graphs)


class LayoutCollater:
    r"""PyG's collation of a list of graphs into a batch, then the batch's
    :func:`~gnorm.models.token_layout.add_token_layout` for a model that
    reads :obj:`max_dist` hops of every path. Picklable (loader
    workers)."""
    def __init__(self, graphs, max_dist: int):
        self.collate, self.max_dist = Collater(graphs), max_dist

    def __call__(self, graphs):
        return add_token_layout(self.collate(graphs), self.max_dist)


@dataclass
class Loaders:
    r"""The loaders of a run: :obj:`train` draws its batches from
    :obj:`sampler` (reseeded every epoch by :meth:`set_epoch`)."""
    train: DataLoader
    sampler: Any
    valid: DataLoader
    test: DataLoader


def _eval_batching(graphs, batch_size: int, buckets: bool) -> Dict[str, Any]:
    r"""Evaluation batches: the graphs in their order, or with
    :obj:`buckets` sorted by size (a graph's prediction does not depend on
    its batch-mates)."""
    if not buckets:
        return dict(batch_size=batch_size, shuffle=False)
    order = graph_sizes(graphs).sort(stable=True).indices
    return dict(batch_sampler=[b.tolist() for b in order.split(batch_size)])


def build_loaders(splits: Dict[str, Any], t: DictConfig, seed: int,
                  rank: int, world: int, device: torch.device,
                  max_dist: int, min_graphs: int = 1) -> Loaders:
    r"""The loaders of :obj:`splits` for process :obj:`rank` of
    :obj:`world`: training batches of ``train.batch_size`` graphs, of
    similar size with ``train.bucket_chunk`` (:class:`SizeBuckets`), else
    uniformly shuffled (:class:`DistributedSampler`), each with its token
    layout for a model of multi-hop distance :obj:`max_dist`. A last
    training batch of fewer than :obj:`min_graphs` graphs (2 for a norm
    with batch statistics over graphs) joins the batch before it; raises
    :class:`ConfigError` when a process has too few training graphs for
    one such batch."""
    train = len(splits['train'])
    # Whole batches are dealt to the processes with buckets; graphs without.
    mine = train if t.bucket_chunk else math.ceil(train / world)
    if mine < min_graphs:
        who = 'the run' if world == 1 else f'each of {world} processes'
        raise ConfigError(f"the norm's batch statistics need >= "
                          f"{min_graphs} graphs per training batch, but "
                          f"{who} gets {mine} training graph(s); pass more "
                          f"graphs (dataset.limit) or fewer processes")
    if t.bucket_chunk:
        sampler = SizeBuckets(graph_sizes(splits['train']), t.batch_size,
                              t.bucket_chunk, seed, rank, world, min_graphs)
        batching = dict(batch_sampler=sampler)
    else:
        sampler = DistributedSampler(splits['train'], num_replicas=world,
                                     rank=rank, shuffle=True, seed=seed)
        batching = dict(batch_size=t.batch_size, sampler=sampler)
        if 0 < mine % t.batch_size < min_graphs:  # else: batches unchanged
            batching = dict(batch_sampler=JoinedBatches(
                sampler, t.batch_size, min_graphs))
    # Workers collate ahead of the model (kept across epochs); on CUDA the
    # batches come in pinned memory and copy asynchronously. Each loader
    # draws its workers' seeds from a generator of its own: a loader takes
    # one such draw per iterator (every epoch without workers, once with
    # persistent ones), which from torch's global generator would shift the
    # model's dropout masks with num_workers.
    args = dict(num_workers=t.num_workers, pin_memory=device.type == 'cuda',
                persistent_workers=t.num_workers > 0)

    def loader(graphs, **kwargs):
        return DataLoader(graphs, **kwargs, **args,
                          collate_fn=LayoutCollater(graphs, max_dist),
                          generator=torch.Generator().manual_seed(seed))
    evals = {k: loader(splits[k], **_eval_batching(
        splits[k], t.batch_size, bool(t.bucket_chunk)))
        for k in ('valid', 'test')}
    return Loaders(loader(splits['train'], **batching), sampler, **evals)
