import os
import pickle
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.loader import DataLoader
from torch_geometric.utils import from_networkx

import gnorm.data.molecules as molecules
import gnorm.data.paths as paths_module
from gnorm.data.molecules import (
    graph_sizes,
    import_ogb,
    load_graph_dataset,
    load_molhiv,
    load_zinc,
    zinc_fixture,
)
from gnorm.data.paths import (
    ShortestPaths,
    add_shortest_paths,
    path_edges,
    path_edges_many,
    shortest_paths,
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
    return (edge_index, ) + _reference_edges(edge_index, n)


def _reference_edges(edge_index, n):
    r""":func:`_reference_paths` of the directed edges :obj:`edge_index`
    (repeats and self-loops allowed)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edge_index.t().tolist())
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    out = [[] for _ in range(n)]  # each node's edges, ascending ids
    for e, (u, v) in enumerate(edge_index.t().tolist()):
        out[u].append((e, v))
    dist, paths = [], []
    for i in range(n):
        for j in range(n):
            dist.append(lengths[i].get(j, -1))
            u = i
            while u != j and dist[-1] > 0:
                e, u = next((e, v) for e, v in out[u]
                            if lengths[v].get(j, -1) == lengths[u][j] - 1)
                paths.append(e)
    return dist, paths


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


def _random_graphs(seed, count=60):
    r"""Graphs of every kind mixed: sizes 1 to 40 (and a 0-node one),
    directed and undirected, sparse (several components, isolated nodes)
    and dense, multi-edges and self-loops, no edges, paths and cycles with
    long distances; edges in random order."""
    rng = np.random.default_rng(seed)
    graphs = [(torch.empty(2, 0, dtype=torch.long), 0),
              (torch.empty(2, 0, dtype=torch.long), 1),
              (torch.tensor([[0], [0]]), 1),  # a self-loop
              (torch.empty(2, 0, dtype=torch.long), 7)]
    for _ in range(count):
        n = int(rng.integers(1, 41))
        kind = rng.integers(4)
        if kind == 0:  # random directed edges, repeats and self-loops
            src, dst = rng.integers(0, n, (2, int(rng.integers(0, 3 * n))))
        elif kind == 1:  # undirected, both directions, maybe duplicated
            src, dst = rng.integers(0, n, (2, int(rng.integers(0, 2 * n))))
            src, dst = np.r_[src, dst, src[:2]], np.r_[dst, src, dst[:2]]
        elif kind == 2:  # a path or a cycle, one or both directions
            src = np.arange(n - 1 + int(rng.integers(2)))
            dst = (src + 1) % n
            if rng.integers(2):
                src, dst = np.r_[src, dst], np.r_[dst, src]
        else:  # dense: many shortest paths per pair
            src, dst = (rng.random((n, n)) < 0.3).nonzero()
        perm = rng.permutation(len(src))
        edge_index = torch.from_numpy(np.stack([src[perm], dst[perm]]))
        graphs.append((edge_index.long().reshape(2, -1), n))
    graphs.insert(int(rng.integers(len(graphs))), graphs.pop(0))
    return graphs


@pytest.mark.parametrize('batch_elements', [1, 2000, 1 << 20])
@pytest.mark.parametrize('seed', range(3))
def test_path_edges_many_equal_networkx_on_every_kind_of_graph(
        seed, batch_elements, monkeypatch):
    # One graph per batch, a few, or all graphs of a size in one batch.
    monkeypatch.setattr(paths_module, '_BATCH_ELEMENTS', batch_elements)
    graphs = _random_graphs(seed)
    many = path_edges_many(*zip(*graphs))
    assert len(many) == len(graphs)
    for (edge_index, n), (dist, edges) in zip(graphs, many):
        if n == 0:
            assert dist.numel() == edges.numel() == 0
            continue
        assert dist.dtype == edges.dtype == torch.long
        assert (dist.tolist(), edges.tolist()) == \
            _reference_edges(edge_index, n)


@pytest.mark.parametrize('seed', range(3))
def test_path_edges_many_equal_networkx(seed):
    # The batched paths against networkx's, not only against path_edges.
    rng = np.random.default_rng(seed)
    graphs = [nx.gnp_random_graph(int(n), 0.2, seed=seed + i,
                                  directed=bool(i % 2))
              for i, n in enumerate(rng.integers(2, 13, 8))]
    references = [_reference_paths(g, g.number_of_nodes()) for g in graphs]
    many = path_edges_many([r[0] for r in references],
                           [g.number_of_nodes() for g in graphs])
    for (_, dist, paths), (got_dist, got_paths) in zip(references, many):
        assert got_dist.tolist() == dist and got_paths.tolist() == paths


@needs_mirror
def test_the_fixture_equals_the_transform_graph_by_graph():
    graphs = zinc_fixture(MIRROR, 'val')  # path_edges_many, all at once
    transform = ShortestPaths()
    for g in graphs:
        alone = transform(Data(edge_index=g.edge_index, num_nodes=g.num_nodes))
        assert torch.equal(alone.spd, g.spd)
        assert torch.equal(alone.path_edge, g.path_edge)


def _collated(graphs):
    return InMemoryDataset.collate([g.clone() for g in graphs])


@pytest.mark.parametrize('num_nodes', [False, True])
def test_add_shortest_paths_equals_collating_the_transform(num_nodes):
    # The storage of graphs collated after ShortestPaths, bit for bit; the
    # node counts from num_nodes where given (as ogb), else from x (ZINC).
    graphs = [Data(x=torch.randn(n, 2), edge_index=e, edge_attr=torch.randn(
        e.size(1), 3), y=torch.tensor([float(n)]))
        for e, n in _random_graphs(0) if n > 0]
    for g in graphs if num_nodes else ():
        g.num_nodes = g.x.size(0)
    data, slices = _collated(graphs)
    assert 'spd' not in data
    assert add_shortest_paths(data, slices) is data
    expected, expected_slices = _collated([ShortestPaths()(g) for g in
                                           graphs])
    assert list(data.keys()) == list(expected.keys())
    assert list(slices) == list(expected_slices)
    for key in expected.keys():
        if key == 'num_nodes':
            assert data.num_nodes == expected.num_nodes
            continue
        assert data[key].dtype == expected[key].dtype
        assert torch.equal(data[key], expected[key]), key
        assert torch.equal(slices[key], expected_slices[key]), key
    # A lone graph is kept as is by InMemoryDataset.collate.
    lone, none = _collated(graphs[-1:])
    lone = add_shortest_paths(lone, none)
    assert torch.equal(lone.path_edge, ShortestPaths()(graphs[-1]).path_edge)


def test_add_shortest_paths_checks_int16():
    data, slices = _collated([Data(x=torch.zeros(2, 1), edge_index=torch.zeros(
        2, n, dtype=torch.long)) for n in (1, 40000)])
    with pytest.raises(ValueError, match='int16'):
        add_shortest_paths(data, slices)


class _PerGraphPaths(ShortestPaths):
    r""":class:`ShortestPaths` under another type: datasets run it graph by
    graph, as before the batched paths."""


def _zinc_raw(graphs, raw):
    r"""PyG's raw ZINC files (``<split>.pickle`` and ``.index``) holding
    :obj:`graphs` in every split."""
    raw.mkdir(parents=True)
    mols = []
    for g in graphs:
        bonds = torch.zeros(g.num_nodes, g.num_nodes, dtype=torch.long)
        bonds[g.edge_index[0], g.edge_index[1]] = g.edge_attr
        mols.append({'atom_type': g.x.view(-1), 'bond_type': bonds,
                     'logP_SA_cycle_normalized': g.y})
    for split in ('train', 'val', 'test'):
        with open(raw / f'{split}.pickle', 'wb') as f:
            pickle.dump(mols, f)
        (raw / f'{split}.index').write_text(
            ','.join(map(str, range(len(graphs)))) + '\n')


@needs_mirror
def test_zinc_processing_adds_the_paths_in_batches(tmp_path):
    # PyG's ZINC processed with the batched paths (self.save replaced) and
    # graph by graph: the same storage, and the paths of ShortestPaths.
    graphs = zinc_fixture(MIRROR, 'test', limit=40)
    _zinc_raw(graphs, tmp_path / 'zinc' / 'raw')
    batched = load_zinc(tmp_path)['valid']
    assert 'save' not in vars(batched) and 'collate' not in vars(batched)
    shutil.copytree(tmp_path / 'zinc' / 'raw', tmp_path / 'old' / 'raw')
    per_graph = molecules._PathsZINC(str(tmp_path / 'old'), subset=True,
                                     split='val',
                                     pre_transform=_PerGraphPaths())
    assert len(batched) == len(per_graph) == 40
    assert list(batched.slices) == list(per_graph.slices)
    for key in per_graph.slices:
        assert torch.equal(batched._data[key], per_graph._data[key]), key
        assert torch.equal(batched.slices[key], per_graph.slices[key]), key
    for g, fixture in zip(batched, graphs):
        assert torch.equal(g.edge_index, fixture.edge_index)
        assert torch.equal(g.spd, fixture.spd)
        assert torch.equal(g.path_edge, fixture.path_edge)


def test_processing_shows_no_bars_in_a_log(tmp_path, capfd):
    r"""Processing writes no tqdm bar where stderr is not a terminal (a
    log file: every update would be a carriage return and a line)."""
    graphs = zinc_fixture(MIRROR, 'test', limit=40)
    _zinc_raw(graphs, tmp_path / 'zinc' / 'raw')
    capfd.readouterr()
    load_zinc(tmp_path)
    assert '\r' not in capfd.readouterr().err


@pytest.mark.parametrize('dataset', sorted(molecules.BAR_MODULES))
def test_dataset_bars_only_on_a_terminal(dataset):
    r"""The tqdm of the modules that read ogbg-molhiv (ogb) and ZINC (PyG)
    draws nothing on a stream that is not a terminal while the data are
    loaded, and is restored afterwards."""
    import importlib
    import io
    pytest.importorskip('ogb')
    modules = [importlib.import_module(name)
               for name in molecules.BAR_MODULES[dataset]]
    before = [m.tqdm for m in modules]
    with molecules.terminal_bars(molecules.BAR_MODULES[dataset]):
        for module in modules:
            log = io.StringIO()
            list(module.tqdm(range(50), file=log))
            assert log.getvalue() == '', module.__name__
    assert [m.tqdm for m in modules] == before


def test_batched_processing_must_collate(tmp_path, monkeypatch):
    # A parent process() that collates neither through collate() nor save()
    # would write graphs without paths: an error.
    monkeypatch.setattr(molecules.ZINC, 'process', lambda self: None)
    zinc = molecules._PathsZINC.__new__(molecules._PathsZINC)
    zinc.pre_transform = ShortestPaths()
    with pytest.raises(RuntimeError, match='paths were not added'):
        zinc.process()
    assert isinstance(zinc.pre_transform, ShortestPaths)
    assert 'save' not in vars(zinc) and 'collate' not in vars(zinc)


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
    whole dataset takes about 12 s and is tested with -m slow)."""
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


def test_molhiv_paths_equal_the_transform(molhiv):
    # Processed in batches (ogb's self.collate replaced): every graph's
    # paths are those of ShortestPaths, graph by graph.
    dataset, _, _ = molhiv
    assert 'collate' not in vars(dataset)
    for g in dataset:
        expected = ShortestPaths()(Data(edge_index=g.edge_index,
                                        num_nodes=g.num_nodes))
        assert torch.equal(g.spd, expected.spd)
        assert torch.equal(g.path_edge, expected.path_edge)


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
