r"""The layers' forward reads nothing back from the device (their
value checks run only under gnorm.nn.validate_inputs), so they compile with
torch.compile(fullgraph=True) inside a user's model."""
import pytest
import torch
from torch_geometric.nn.models import GCN

from gnorm.nn import (ContraNorm, DualContraNorm, IsoBN, PairNorm,
                      validate_inputs)
from test_contra_norm import UNSORTED, inputs_for, per_graph, random_batch

pytestmark = pytest.mark.usefixtures('one_thread')


class _Reads:
    r"""Counts the values read back from tensors (int(), bool(), float(),
    .item(), .tolist()), i.e. the host round-trips on a GPU."""
    names = ('__int__', '__bool__', '__float__', '__index__', 'item',
             'tolist')

    def __init__(self, monkeypatch):
        self.count = 0
        for name in self.names:
            original = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._counting(original))

    def _counting(self, original):
        def read(tensor, *args):
            self.count += 1
            return original(tensor, *args)
        return read


@pytest.mark.parametrize('make,batched,reads', [
    (lambda: ContraNorm(6, negatives='non_neighbors', symmetric=True),
     False, 0),
    (lambda: ContraNorm(6), False, 0),
    (lambda: DualContraNorm(6), False, 0),
    # A dense batch needs the size of its largest graph: one read, the
    # layout's (PyG's to_dense_batch reads it too), none for checks.
    (lambda: ContraNorm(6, negatives='non_neighbors', symmetric=True),
     True, 1),
    (lambda: DualContraNorm(6), True, 1),
    (lambda: PairNorm(), True, 0),
    (lambda: IsoBN(6), True, 0),
])
def test_forward_reads_no_value_for_checks(make, batched, reads,
                                           monkeypatch):
    x, batch, edge_index = random_batch(dtype=torch.float32)
    layer = make().eval()  # IsoBN: the same statistics in both calls
    kwargs = dict(batch=batch, batch_size=4) if batched else {}
    if isinstance(layer, ContraNorm):
        kwargs['edge_index'] = edge_index
    expected = layer(x, **kwargs)
    counter = _Reads(monkeypatch)
    out = layer(x, **kwargs)
    assert counter.count == reads
    assert torch.equal(out, expected)
    if batched or 'edge_index' in kwargs:  # the checks read values
        with validate_inputs():
            layer(x, **kwargs)
        assert counter.count > reads


def test_contra_norm_compiles_with_fullgraph():
    # The fast check of the slow tests below: the layer alone, tracing
    # and autograd only (aot_eager).
    x, _, edge_index = random_batch(sizes=(9, ), dtype=torch.float32)
    norm = ContraNorm(6, negatives='non_neighbors', symmetric=True)
    compiled = torch.compile(norm, fullgraph=True, backend='aot_eager')
    torch.testing.assert_close(compiled(x, edge_index=edge_index),
                               norm(x, edge_index=edge_index))


@pytest.mark.slow
def test_pyg_gcn_with_contra_norm_compiles_with_fullgraph():
    x, batch, edge_index = random_batch(sizes=(6, 8, 5), channels=4,
                                        dtype=torch.float32, seed=2)
    model = GCN(4, 16, num_layers=3, out_channels=3,
                norm=ContraNorm(16, scale=0.5)).eval()
    compiled = torch.compile(model, fullgraph=True, backend='aot_eager')
    torch.testing.assert_close(
        compiled(x, edge_index, batch=batch, batch_size=3),
        model(x, edge_index, batch=batch, batch_size=3))


class _NonNeighborModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 8)
        self.norm = ContraNorm(8, negatives='non_neighbors')

    def forward(self, x, edge_index, batch=None, batch_size=None):
        return self.norm(self.lin(x), batch, batch_size,
                         edge_index=edge_index).relu()


@pytest.mark.slow
@pytest.mark.parametrize('batched', ['no', 'sorted', 'unsorted'])
def test_model_with_non_neighbor_contra_norm_compiles_with_fullgraph(
        batched):
    x, batch, edge_index = random_batch(dtype=torch.float32)
    if batched == 'unsorted':
        batch = UNSORTED['random0']
        x, edge_index = inputs_for(batch, dtype=torch.float32)
    kwargs = {} if batched == 'no' else dict(
        batch=batch, batch_size=int(batch.max()) + 1)
    model = _NonNeighborModel()
    compiled = torch.compile(model, fullgraph=True, backend='aot_eager')
    out = compiled(x, edge_index, **kwargs)
    torch.testing.assert_close(out, model(x, edge_index, **kwargs))
    if batched == 'unsorted':  # each graph as if alone
        torch.testing.assert_close(out, per_graph(model, x, batch, edge_index))
    out.sum().backward()
