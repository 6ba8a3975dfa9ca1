import pytest
import torch
from torch.utils.data import BatchSampler
from torch.utils.data.distributed import DistributedSampler

from gnorm.train.graph_batches import JoinedBatches, SizeBuckets


@pytest.mark.parametrize('world', [1, 3])
def test_size_buckets_cover_every_graph_with_similar_sizes(world):
    sizes = torch.randint(2, 60, (1003, ), generator=torch.Generator()
                          .manual_seed(0))
    batches = []
    for rank in range(world):
        sampler = SizeBuckets(sizes, 16, 8, seed=1, rank=rank, world=world)
        sampler.set_epoch(2)
        mine = list(sampler)
        assert len(mine) == len(sampler)
        batches += mine
    assert sorted(i for b in batches for i in b) == list(range(1003))
    spread = torch.tensor([float(sizes[b].max() - sizes[b].min())
                           for b in batches])
    uniform = torch.tensor([float(sizes[b].max() - sizes[b].min())
                            for b in torch.randperm(1003).split(16)])
    assert spread.mean() < 0.25 * uniform.mean()
    # The same epoch gives the same batches, another epoch others.
    sampler = SizeBuckets(sizes, 16, 8, seed=1)
    sampler.set_epoch(2)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(3)
    assert list(sampler) != first


@pytest.mark.parametrize('world, per_rank', [(1, 63), (2, 32), (3, 21),
                                             (4, 16), (80, 1)])
def test_size_buckets_give_every_rank_as_many_batches(world, per_rank):
    sizes = torch.randint(2, 60, (1003, ), generator=torch.Generator()
                          .manual_seed(0))  # 63 batches of <= 16 graphs
    ranks = []
    for rank in range(world):
        sampler = SizeBuckets(sizes, 16, 8, seed=1, rank=rank, world=world)
        sampler.set_epoch(2)
        ranks.append(list(sampler))
        assert len(ranks[-1]) == len(sampler) == per_rank
    batches = [tuple(b) for mine in ranks for b in mine]
    assert {i for b in batches for i in b} == set(range(1003))
    # The padding repeats whole batches, as few as needed.
    assert len(batches) - len(set(batches)) == world * per_rank - 63


def _epoch(sampler, epoch=2):
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    return batches


@pytest.mark.parametrize('graphs, chunk', [(33, 2), (33, 8), (1001, 8),
                                           (17, 2)])
def test_size_buckets_join_a_last_batch_of_one_graph(graphs, chunk):
    r"""With min_graphs=2 the one-graph batch (33 = 4 * 8 + 1) joins the
    batch before it; the other batches are those of min_graphs=1."""
    sizes = torch.randint(2, 60, (graphs, ), generator=torch.Generator()
                          .manual_seed(0))
    plain = _epoch(SizeBuckets(sizes, 8, chunk, seed=1))
    joined = _epoch(SizeBuckets(sizes, 8, chunk, seed=1, min_graphs=2))
    assert sorted(len(b) for b in plain)[:1] == [1]
    assert sorted(len(b) for b in joined) == [8] * (graphs // 8 - 1) + [9]
    assert sorted(i for b in joined for i in b) == list(range(graphs))
    rest = {tuple(b) for b in plain if len(b) == 8}
    assert len(rest - {tuple(b) for b in joined}) == 1  # the one joined
    # Batches without a one-graph remainder are those of min_graphs=1.
    sizes = sizes[:-1]
    assert _epoch(SizeBuckets(sizes, 8, chunk, seed=1, min_graphs=2)) == \
        _epoch(SizeBuckets(sizes, 8, chunk, seed=1))


@pytest.mark.parametrize('world', [1, 2, 3])
def test_joined_batches_are_the_batch_sampler_s_but_the_last(world):
    r"""The shuffled batches of each process: 33 graphs per process
    (padded as DistributedSampler pads), the last graph joined to the last
    batch; the others those of torch's BatchSampler."""
    graphs = list(range(33 * world - (world - 1)))  # ceil(n / world) = 33
    for rank in range(world):
        sampler = DistributedSampler(graphs, num_replicas=world, rank=rank,
                                     shuffle=True, seed=4)
        sampler.set_epoch(3)
        plain = list(BatchSampler(sampler, 8, drop_last=False))
        joined = list(JoinedBatches(sampler, 8, min_graphs=2))
        assert len(joined) == len(JoinedBatches(sampler, 8, 2)) == 4
        assert joined[:3] == plain[:3]
        assert joined[3] == plain[3] + plain[4] and len(plain[4]) == 1
        assert list(JoinedBatches(sampler, 8, min_graphs=1)) == plain
