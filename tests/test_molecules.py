import os
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.utils import from_networkx

from gnorm.data.molecules import (
    ShortestPaths,
    graph_sizes,
    import_ogb,
    load_graph_dataset,
    load_molhiv,
    path_edges,
    shortest_paths,
    zinc_fixture,
)
from gnorm.errors import DataError
from gnorm.models import Graphormer
from gnorm.train.graph import evaluate
from conftest import MIRROR, needs_mirror



def _walk(first, edge_index, i, j):
    r"""The edge ids along the first-edge pointers from i to j."""
    path = []
    while first[i, j] >= 0:
        e = int(first[i, j])
        path.append(e)
        i = int(edge_index[1, e])
    return path


@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('directed', [False, True])
def test_shortest_paths_equal_networkx(seed, directed):
    g = nx.gnp_random_graph(14, 0.15, seed=seed, directed=directed)
    edge_index = from_networkx(g).edge_index
    dist, first = shortest_paths(edge_index, 14)
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    for i in range(14):
        for j in range(14):
            expected = lengths[i].get(j, -1)
            assert dist[i, j] == expected
            path = _walk(first, edge_index, i, j)
            assert len(path) == max(expected, 0)
            # A valid path: starts at i, consecutive edges, ends at j.
            nodes = [i] + [int(edge_index[1, e]) for e in path]
            assert all(int(edge_index[0, e]) == u
                       for e, u in zip(path, nodes))
            assert nodes[-1] == j or expected == -1


@pytest.mark.parametrize('seed', range(3))
def test_path_edges_equal_networkx_on_trees(seed):
    # Trees have one shortest path per pair: the edges must be networkx's.
    g = nx.random_labeled_tree(12, seed=seed)
    g.add_nodes_from([12, 13])  # two nodes unreachable from the tree
    g.add_edge(12, 13)
    edge_index = from_networkx(g).edge_index
    ids = {(int(u), int(v)): e for e, (u, v) in enumerate(edge_index.t())}
    dist, first = shortest_paths(edge_index, 14)
    for i in range(14):
        for j in range(14):
            try:
                nodes = nx.shortest_path(g, i, j)
            except nx.NetworkXNoPath:
                assert dist[i, j] == -1 and first[i, j] == -1
                continue
            expected = [ids[u, v] for u, v in zip(nodes, nodes[1:])]
            assert _walk(first, edge_index, i, j) == expected


def test_shortest_paths_transform_is_flat_int16():
    # Path 0 - 1 - 2 (edges 0: 0->1, 1: 1->0, 2: 1->2, 3: 2->1), node 3 alone.
    data = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                num_nodes=4)
    data = ShortestPaths()(data)
    assert data.spd.dtype == data.path_edge.dtype == torch.int16
    assert data.spd.view(4, 4).tolist() == [[0, 1, 2, -1], [1, 0, 1, -1],
                                            [2, 1, 0, -1], [-1, -1, -1, 0]]
    # Pairs (0,1), (0,2), (1,0), (1,2), (2,0), (2,1), hop after hop.
    assert data.path_edge.tolist() == [0, 0, 2, 1, 2, 3, 1, 3]


def _reference_paths(g, n):
    r"""Every pair's edge ids, obviously: at each node, the smallest-id edge
    that stays on a networkx shortest path to the target."""
    edge_index = from_networkx(g).edge_index if g.number_of_edges() else \
        torch.empty(2, 0, dtype=torch.long)
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    dist, paths = [], []
    for i in range(n):
        for j in range(n):
            dist.append(lengths[i].get(j, -1))
            u = i
            while u != j and dist[-1] > 0:
                e = min(e for e in range(edge_index.size(1))
                        if int(edge_index[0, e]) == u and
                        lengths[int(edge_index[1, e])].get(j, -1)
                        == lengths[u][j] - 1)
                paths.append(e)
                u = int(edge_index[1, e])
    return edge_index, dist, paths


@pytest.mark.parametrize('seed', range(6))
@pytest.mark.parametrize('directed', [False, True])
def test_path_edges_equal_networkx(seed, directed):
    # Sparse random graphs (several components, isolated nodes) and a grid
    # (many shortest paths per pair): distances are networkx's, the path of
    # every pair takes the smallest-id edge on a shortest path at each node.
    n = 12
    g = nx.gnp_random_graph(n, 0.12 + 0.04 * seed, seed=seed,
                            directed=directed)
    if seed == 0:  # a 3 x 4 grid: up to 10 shortest paths per pair
        g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 4))
        g = g.to_directed() if directed else g
    edge_index, dist, paths = _reference_paths(g, n)
    got_dist, got_paths = path_edges(edge_index, n)
    assert got_dist.tolist() == dist
    assert got_paths.tolist() == paths
    data = ShortestPaths()(Data(edge_index=edge_index, num_nodes=n))
    assert data.spd.tolist() == dist and data.path_edge.tolist() == paths


@needs_mirror
def test_zinc_fixture_graphs():
    graphs = zinc_fixture(MIRROR, 'test')
    assert len(graphs) == 1000
    assert sum(g.num_nodes for g in graphs) == 23117
    assert sum(g.num_edges for g in graphs) == 49720
    g = graphs[0]
    assert g.x.shape == (g.num_nodes, 1) and g.x.dtype == torch.long
    assert g.edge_attr.shape == (g.num_edges, ) and g.y.shape == (1, )
    assert g.spd.numel() == g.num_nodes**2
    assert int(g.x.max()) < 28 and set(g.edge_attr.tolist()) <= {1, 2, 3}


@needs_mirror
def test_zinc_offline_names_missing_files(tmp_path):
    with pytest.raises(DataError) as info:
        load_graph_dataset('zinc', tmp_path, MIRROR)
    message = str(info.value)
    assert '\n' not in message
    assert 'missing train.pickle, val.pickle, test.pickle in ' in message
    assert str(tmp_path / 'zinc' / 'raw') in message
    # The index files the mirror has were copied.
    assert (tmp_path / 'zinc' / 'raw' / 'train.index').is_file()


def _molhiv_slice(mirror, dst, per_split=100):
    r"""A mirror holding an OGB-layout ogbg-molhiv of :obj:`per_split` train,
    valid and test molecules of the real one (the valid and test ones with
    their positives first, so that ROC-AUC is defined)."""
    src = Path(mirror) / 'ogb_regenerated' / 'ogbg_molhiv'
    out = dst / 'ogb_regenerated' / 'ogbg_molhiv'

    def read(rel):
        return pd.read_csv(src / rel, header=None).values

    nodes, edges = read('raw/num-node-list.csv.gz')[:, 0], read(
        'raw/num-edge-list.csv.gz')[:, 0]
    label = read('raw/graph-label.csv.gz')[:, 0]
    picked = {}
    for split in ('train', 'valid', 'test'):
        idx = read(f'split/scaffold/{split}.csv.gz')[:, 0]
        idx = idx[np.argsort(-label[idx], kind='stable')]  # positives first
        picked[split] = np.sort(idx[:per_split])
    graphs = np.sort(np.concatenate(list(picked.values())))
    node_ptr = np.concatenate([[0], np.cumsum(nodes)])
    edge_ptr = np.concatenate([[0], np.cumsum(edges)])
    node_rows = np.concatenate([np.arange(node_ptr[g], node_ptr[g + 1])
                                for g in graphs])
    edge_rows = np.concatenate([np.arange(edge_ptr[g], edge_ptr[g + 1])
                                for g in graphs])
    files = {'raw/node-feat.csv.gz': read('raw/node-feat.csv.gz')[node_rows],
             'raw/edge.csv.gz': read('raw/edge.csv.gz')[edge_rows],
             'raw/edge-feat.csv.gz': read('raw/edge-feat.csv.gz')[edge_rows],
             'raw/num-node-list.csv.gz': nodes[graphs, None],
             'raw/num-edge-list.csv.gz': edges[graphs, None],
             'raw/graph-label.csv.gz': label[graphs, None]}
    for split, idx in picked.items():
        files[f'split/scaffold/{split}.csv.gz'] = np.searchsorted(
            graphs, idx)[:, None]
    for rel, values in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(values).to_csv(out / rel, header=False, index=False)
    shutil.copyfile(src / 'RELEASE_v1.txt', out / 'RELEASE_v1.txt')
    return dst


@pytest.fixture(scope='module')
def molhiv(tmp_path_factory):
    r"""A 300-molecule slice of ogbg-molhiv, loaded offline through
    :func:`load_molhiv` from a mirror holding the slice (about 2 s; the
    whole dataset takes about 60 s and is tested with -m slow)."""
    if not MIRROR or not Path(MIRROR).is_dir():
        pytest.skip('needs the offline dataset mirror (GNORM_DATA_MIRROR)')
    mirror = _molhiv_slice(MIRROR, tmp_path_factory.mktemp('mirror'))
    before = os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD')
    dataset, split = load_molhiv(tmp_path_factory.mktemp('ogb'), mirror)
    return dataset, split, before


@pytest.mark.slow
def test_whole_molhiv_loads_offline(tmp_path):
    dataset, split = load_molhiv(tmp_path, MIRROR)
    assert len(dataset) == 41127
    assert [len(split[k]) for k in ('train', 'valid', 'test')] == [
        32901, 4113, 4113]
    assert int(dataset.y.sum()) == 1443
    g = dataset[0]
    assert g.x.shape[1] == 9 and g.edge_attr.shape[1] == 3
    assert g.spd.numel() == g.num_nodes**2
    assert g.path_edge.numel() == int(g.spd.clamp(min=0).sum())


def test_molhiv_loads_offline(molhiv):
    dataset, split, before = molhiv
    # ogb's torch.load was let through without touching the environment.
    assert os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD') == before
    assert len(dataset) == 300
    assert [len(split[k]) for k in ('train', 'valid', 'test')] == [100] * 3
    g = dataset[0]
    assert g.x.shape[1] == 9 and g.edge_attr.shape[1] == 3
    assert g.spd.numel() == g.num_nodes**2
    assert g.path_edge.numel() == int(g.spd.clamp(min=0).sum())
    assert g.spd.view(g.num_nodes, -1).diagonal().eq(0).all()


def test_molhiv_scored_by_evaluator(molhiv):
    dataset, split, _ = molhiv
    torch.manual_seed(0)
    model = Graphormer(1, num_layers=1, hidden_channels=16, num_heads=2,
                       max_dist=5)
    loader = DataLoader(dataset[split['valid']], batch_size=50)
    score, loss = evaluate(model, loader, 'rocauc', torch.device('cpu'),
                           autocast=False)
    assert 0.0 <= score <= 1.0 and loss > 0.0


def test_graph_sizes_from_slices_equal_the_graphs(molhiv):
    dataset, split, _ = molhiv
    view = dataset[split['valid'][torch.randperm(100)]]
    assert graph_sizes(view).tolist() == [g.num_nodes for g in view]
    graphs = [view[i] for i in range(5)]
    assert graph_sizes(graphs).tolist() == [g.num_nodes for g in graphs]


def test_missing_ogb_names_the_graph_extra(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'ogb', None)  # as if not installed
    with pytest.raises(DataError, match=r'need ogb.*pip install '
                       r'"gnorm\[graph\]".*"\.\[graph\]"') as info:
        import_ogb('ogb.graphproppred')
    assert '\n' not in str(info.value)
    with pytest.raises(DataError, match='gnorm\\[graph\\]'):
        load_molhiv('unused', None)


def test_processed_files_of_another_layout_are_not_read(tmp_path):
    # A processed file of the old layout (ogb's own name) is left alone: the
    # one read is named after ShortestPaths.LAYOUT.
    if not MIRROR or not Path(MIRROR).is_dir():
        pytest.skip('needs the offline dataset mirror (GNORM_DATA_MIRROR)')
    mirror = _molhiv_slice(MIRROR, tmp_path / 'mirror', per_split=5)
    processed = tmp_path / 'ogb' / 'ogbg_molhiv' / 'processed'
    processed.mkdir(parents=True)
    torch.save('stale', processed / 'geometric_data_processed.pt')
    dataset, _ = load_molhiv(tmp_path / 'ogb', mirror)
    assert Path(dataset.processed_paths[0]).name == (
        f'geometric_data_processed_{ShortestPaths.LAYOUT}.pt')
    g = dataset[0]
    assert g.path_edge.numel() == int(g.spd.clamp(min=0).sum())
    assert torch.load(processed / 'geometric_data_processed.pt') == 'stale'


def test_zinc_processed_folder_names_the_layout(tmp_path):
    from gnorm.data.molecules import _PathsZINC
    zinc = _PathsZINC.__new__(_PathsZINC)  # no raw files needed
    zinc.root, zinc.subset = str(tmp_path), True
    assert zinc.processed_dir == str(tmp_path / 'subset' /
                                     f'processed_{ShortestPaths.LAYOUT}')
