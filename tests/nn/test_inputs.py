import pytest
import torch

from gnorm.nn import (
    ContraNorm,
    DualContraNorm,
    IsoBN,
    LayerFusion,
    PairNorm,
    SepNorm,
)

LAYERS = [
    lambda: ContraNorm(4),
    lambda: ContraNorm(4, negatives='non_neighbors'),
    lambda: DualContraNorm(4),
    lambda: PairNorm(),
    lambda: SepNorm(4),
    lambda: IsoBN(4),
]


def _call(layer, x, batch=None, batch_size=None, edge_index=None):
    if isinstance(layer, LayerFusion):
        return layer([x, x], batch, batch_size)
    if edge_index is not None:
        return layer(x, batch, batch_size, edge_index=edge_index)
    return layer(x, batch, batch_size)


@pytest.mark.parametrize('make', LAYERS + [lambda: LayerFusion('max')])
@pytest.mark.parametrize('batch,batch_size,match', [
    (torch.tensor([0., 0., 0., 1., 1., 1.]), None,
     r'batch must be an integer tensor \(torch.long\), got torch.float32'),
    (torch.tensor([True, True, True, False, False, False]), None,
     'batch must be an integer tensor'),
    (torch.tensor([0, 0, 1, 1]), None, r'batch must have shape \[6\]'),
    (torch.tensor([0, 0, 0, 1, 1, 1]), 1, r'graph ids in \[0, 1\]'),
    (torch.tensor([-1, 0, 0, 1, 1, 1]), None, r'graph ids in \[-1, 1\]'),
])
def test_bad_batch(make, batch, batch_size, match):
    layer = make()
    with pytest.raises(ValueError, match=match) as info:
        _call(layer, torch.randn(6, 4), batch, batch_size)
    assert str(info.value).startswith(str(layer).split('(')[0])
    assert '\n' not in str(info.value)


@pytest.mark.parametrize('negatives', ['all', 'non_neighbors'])
@pytest.mark.parametrize('edge_index,match', [
    (torch.tensor([[0, 1, 9], [1, 2, 3]]),
     r'edge_index holds node indices in \[0, 9\] but x has 6 nodes'),
    (torch.tensor([[0, -1], [1, 2]]), r'indices in \[-1, 2\]'),
    (torch.tensor([[0., 1.], [1., 2.]]), 'edge_index must be an integer'),
    (torch.tensor([0, 1, 2]), r'edge_index must have shape \[2, num_edges\]'),
])
def test_bad_edge_index(negatives, edge_index, match):
    layer = ContraNorm(4, negatives=negatives)
    with pytest.raises(ValueError, match=match) as info:
        layer(torch.randn(6, 4), edge_index=edge_index)
    assert str(info.value).startswith(str(layer))


@pytest.mark.parametrize('make', LAYERS)
def test_good_inputs_pass(make):
    x = torch.randn(6, 4)
    batch = torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.int32)
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 4]])
    out = _call(make(), x, batch, 2, edge_index=edge_index
                if isinstance(make(), ContraNorm) else None)
    assert out.shape == x.shape
