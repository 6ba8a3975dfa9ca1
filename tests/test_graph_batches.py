import pytest
import torch

from gnorm.train.graph_batches import SizeBuckets


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
