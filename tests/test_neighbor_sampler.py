r"""TorchNeighborSampler: batches of PyG's NodeLoader checked against a slow
reference that walks the graph edge by edge."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.sampler import NodeSamplerInput

from gnorm.data import TorchNeighborSampler


def small_graph(n=60, m=300, seed=0):
    r"""A random directed graph with repeated edges and self-loops, edge
    features equal to the edge ids."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, m), generator=g)
    return Data(x=torch.randn(n, 8, generator=g), edge_index=edge_index,
                edge_attr=torch.arange(m, dtype=torch.float).view(-1, 1),
                y=torch.randint(0, 3, (n, ), generator=g))


def incoming(edge_index, node):
    r"""The ids of the edges into :obj:`node`, one by one."""
    return [e for e in range(edge_index.size(1))
            if int(edge_index[1, e]) == node]


def check_batch(batch, data, seeds, num_neighbors):
    r"""What a NeighborLoader batch is, checked hop by hop."""
    n_id, e_id = batch.n_id.tolist(), batch.e_id.tolist()
    assert batch.batch_size == len(seeds) and n_id[:len(seeds)] == seeds
    assert len(set(n_id)) == len(n_id) == batch.num_nodes
    # Every sampled edge is the graph's edge e_id, between its nodes.
    for (row, col), e in zip(batch.edge_index.t().tolist(), e_id):
        assert [n_id[row], n_id[col]] == data.edge_index[:, e].tolist()
    assert batch.edge_attr.view(-1).long().tolist() == e_id
    assert torch.equal(batch.x, data.x[batch.n_id])
    # Hop by hop: each node of the frontier draws min(k, degree) of its
    # incoming edges, without repeats; the new sources are the next hop.
    assert sum(batch.num_sampled_nodes) == len(n_id)
    assert len(batch.num_sampled_edges) == len(num_neighbors)
    nodes = iter(n_id)
    frontier = [next(nodes) for _ in range(batch.num_sampled_nodes[0])]
    seen, start = set(frontier), 0
    for hop, k in enumerate(num_neighbors):
        count = batch.num_sampled_edges[hop]
        hop_edges = e_id[start:start + count]
        start += count
        sources = []
        for node in frontier:
            mine = [e for e in hop_edges
                    if int(data.edge_index[1, e]) == node]
            allowed = incoming(data.edge_index, node)
            assert len(mine) == len(set(mine)) and set(mine) <= set(allowed)
            assert len(mine) == (len(allowed) if k < 0 else
                                 min(k, len(allowed)))
            sources += [int(data.edge_index[0, e]) for e in mine]
        assert len(hop_edges) == sum(
            len(incoming(data.edge_index, v)) if k < 0 else
            min(k, len(incoming(data.edge_index, v))) for v in frontier)
        new = sorted({s for s in sources if s not in seen})
        frontier = [next(nodes) for _ in
                    range(batch.num_sampled_nodes[hop + 1])]
        assert frontier == new
        seen |= set(new)
    assert start == len(e_id)


@pytest.mark.parametrize('num_neighbors', [[3, 2], [2, -1, 1]])
def test_batches_are_neighbourhoods_of_the_seeds(num_neighbors):
    data = small_graph()
    sampler = TorchNeighborSampler(data, num_neighbors, seed=0)
    assert str(sampler) == f'TorchNeighborSampler(num_neighbors=' \
        f'{num_neighbors})'
    inputs = torch.tensor([5, 17, 3, 40, 22, 8, 59, 0, 31])
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=inputs,
                        batch_size=4)
    batches = list(loader)
    assert len(batches) == 3
    for i, batch in enumerate(batches):
        seeds = inputs[4 * i:4 * i + 4].tolist()
        assert batch.input_id.tolist() == list(range(4 * i, 4 * i + len(
            seeds)))
        check_batch(batch, data, seeds, num_neighbors)


def test_the_same_seed_draws_the_same_batches():
    data = small_graph(seed=1)
    inputs = NodeSamplerInput(input_id=None, node=torch.arange(10))

    def draw(seed):
        out = TorchNeighborSampler(data, [2, 2], seed=seed) \
            .sample_from_nodes(inputs)
        return out.node.tolist(), out.row.tolist(), out.edge.tolist()
    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_each_incoming_edge_is_drawn_equally_often():
    r"""Node 0 has four incoming edges; two drawn, 2,000 times: each edge
    about 1,000 times."""
    edge_index = torch.tensor([[1, 2, 3, 4, 0], [0, 0, 0, 0, 1]])
    sampler = TorchNeighborSampler(Data(edge_index=edge_index, num_nodes=5),
                                   [2], seed=0)
    inputs = NodeSamplerInput(input_id=None, node=torch.tensor([0]))
    counts = torch.zeros(5)
    for _ in range(2000):
        edges = sampler.sample_from_nodes(inputs).edge
        assert edges.numel() == 2 and edges[0] != edges[1]
        counts[edges] += 1
    assert counts[4] == 0 and ((counts[:4] - 1000).abs() < 120).all()


def test_a_graphsage_forward_on_a_batch():
    data = small_graph(n=200, m=800, seed=2)
    loader = NodeLoader(data, node_sampler=TorchNeighborSampler(
        data, [5, 5], seed=0), batch_size=32, shuffle=True)
    model = GraphSAGE(8, 16, num_layers=2, out_channels=3)
    batch = next(iter(loader))
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    assert out.shape == (32, 3) and torch.isfinite(out).all()
    loss = torch.nn.functional.cross_entropy(out, batch.y[:32])
    loss.backward()


def test_bad_arguments_are_one_line():
    data = small_graph()
    with pytest.raises(ValueError, match=r'list of integers per hop'):
        TorchNeighborSampler(data, 10)
    with pytest.raises(NotImplementedError, match='samples from nodes'):
        TorchNeighborSampler(data, [2]).sample_from_edges(None)
