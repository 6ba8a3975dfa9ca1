import pytest
import torch

from gnorm.nn import (
    ContraNorm,
    DualContraNorm,
    IsoBN,
    LayerFusion,
    PairNorm,
    SepNorm,
    validate_inputs,
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
    with pytest.raises(ValueError, match=match) as info, validate_inputs():
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
    with pytest.raises(ValueError, match=match) as info, validate_inputs():
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


def test_unsorted_batch_is_a_value_error_for_sep_norm():
    # SepNorm batches graphs densely with the nodes of a graph together
    # (torch's "shape mismatch" otherwise).
    layer = SepNorm(4)
    batch = torch.tensor([0, 1, 0, 1, 1, 0])
    with pytest.raises(ValueError, match='batch must be sorted') as info, \
            validate_inputs():
        _call(layer, torch.randn(6, 4), batch, 2)
    assert str(info.value).startswith('SepNorm')


@pytest.mark.parametrize('make', LAYERS[:4])
def test_unsorted_batch_passes(make):
    # ContraNorm, ContraNorm-D and PairNorm take graph ids in any order, as
    # PyG's norms do.
    layer = make()
    batch = torch.tensor([0, 1, 0, 1, 1, 0])
    with validate_inputs():
        out = _call(layer, torch.randn(6, 4), batch, 2,
                    edge_index=torch.tensor([[0, 1], [2, 3]])
                    if isinstance(layer, ContraNorm) else None)
    assert out.shape == (6, 4)


def test_values_are_checked_only_under_validate_inputs():
    # Shapes and types always (nothing read from the device); values only
    # inside validate_inputs, or for the whole process after enable().
    layer = ContraNorm(4)
    x, bad = torch.randn(6, 4), torch.tensor([0, 0, 0, 1, 1, 7])
    with pytest.raises(ValueError, match=r'batch must have shape \[6\]'):
        layer(x, bad[:4], 8)
    layer(x, bad, 8)  # not read: graph 7 of 8 is as good as graph 1
    assert not validate_inputs.is_enabled()
    with validate_inputs():
        assert validate_inputs.is_enabled()
        with validate_inputs(False):
            layer(x, bad, 8)
        with pytest.raises(ValueError, match='graph ids'):
            layer(x, bad, 2)
    validate_inputs.enable()
    try:
        with pytest.raises(ValueError, match='graph ids'):
            layer(x, bad, 2)
    finally:
        validate_inputs.disable()
    assert not validate_inputs.is_enabled()
