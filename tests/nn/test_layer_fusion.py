import math

import pytest
import torch

from gnorm.nn import LayerFusion


def reference_layer_fusion(fusion, xs):
    """Slow fusion: python loops over nodes, layers and channels."""
    num_layers, (num_nodes, d) = len(xs), xs[0].shape
    rows = []
    for n in range(num_nodes):
        if fusion.mode == 'concat':
            weight, bias = fusion.lin.weight.detach(), fusion.lin.bias.detach()
            row = [float(bias[o]) + sum(
                float(weight[o, k * d + c]) * float(xs[k][n, c])
                for k in range(num_layers) for c in range(d))
                   for o in range(weight.size(0))]
        elif fusion.mode == 'max':
            row = [max(float(xs[k][n, c]) for k in range(num_layers))
                   for c in range(d)]
        else:
            weight, bias = fusion.lin.weight.detach(), fusion.lin.bias.detach()
            scores = [float(bias[0]) + sum(
                float(weight[0, c]) * float(xs[k][n, c]) for c in range(d))
                      for k in range(num_layers)]
            exp = [math.exp(s) for s in scores]
            gates = [e / sum(exp) for e in exp]
            row = [sum(gates[k] * float(xs[k][n, c])
                       for k in range(num_layers)) for c in range(d)]
        rows.append(row)
    return torch.tensor(rows, dtype=xs[0].dtype)


def make_layers(num_layers, num_nodes=6, channels=4, dtype=torch.double):
    return [torch.randn(num_nodes, channels, dtype=dtype)
            for _ in range(num_layers)]


@pytest.mark.parametrize('mode,out_channels', [('concat', None),
                                               ('concat', 3), ('max', None),
                                               ('gate', None)])
@pytest.mark.parametrize('num_layers', [1, 3])
def test_layer_fusion_matches_reference(mode, out_channels, num_layers):
    torch.manual_seed(0)
    fusion = LayerFusion(mode, in_channels=4, num_layers=num_layers,
                         out_channels=out_channels).double()
    xs = make_layers(num_layers)
    out = fusion(xs)
    assert out.shape == (6, out_channels or 4)
    torch.testing.assert_close(out, reference_layer_fusion(fusion, xs))


def test_layer_fusion_gate_weights_sum_to_one():
    torch.manual_seed(1)
    fusion = LayerFusion('gate', in_channels=4)
    xs = make_layers(3, dtype=torch.float)
    weights = fusion.gate_weights(xs)
    assert weights.shape == (6, 3)
    assert (weights > 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(6))
    # Token-wise: different nodes get different weights.
    assert not torch.allclose(weights[0], weights[1])


@pytest.mark.parametrize('mode', ['concat', 'max', 'gate'])
def test_layer_fusion_per_node(mode):
    torch.manual_seed(2)
    fusion = LayerFusion(mode, in_channels=4, num_layers=2)
    xs = make_layers(2, dtype=torch.float)
    batch = torch.tensor([0, 0, 1, 1, 1, 2])
    out = fusion(xs, batch, batch_size=3)
    torch.testing.assert_close(out, fusion(xs))
    for graph in range(3):
        torch.testing.assert_close(
            out[batch == graph], fusion([x[batch == graph] for x in xs]))


@pytest.mark.parametrize('mode', ['concat', 'max', 'gate'])
def test_layer_fusion_gradcheck(mode):
    torch.manual_seed(3)
    fusion = LayerFusion(mode, in_channels=3, num_layers=2).double()
    xs = [x.requires_grad_() for x in make_layers(2, num_nodes=4,
                                                  channels=3)]
    assert torch.autograd.gradcheck(lambda a, b: fusion([a, b]), tuple(xs))


def test_layer_fusion_repr():
    assert str(LayerFusion('concat', 16, 4)) == (
        "LayerFusion('concat', in_channels=16, num_layers=4)")
    assert str(LayerFusion('concat', 16, 4, 8)) == (
        "LayerFusion('concat', in_channels=16, num_layers=4, "
        "out_channels=8)")
    assert str(LayerFusion('max')) == "LayerFusion('max')"
    assert str(LayerFusion('gate', 16)) == (
        "LayerFusion('gate', in_channels=16)")
    assert sum(p.numel() for p in LayerFusion('max').parameters()) == 0


def test_layer_fusion_bad_inputs():
    with pytest.raises(ValueError, match="LayerFusion.*'gate'"):
        LayerFusion('mean')
    with pytest.raises(ValueError, match='LayerFusion.*pass in_channels'):
        LayerFusion('concat', num_layers=3)
    with pytest.raises(ValueError, match='LayerFusion.*pass num_layers'):
        LayerFusion('concat', in_channels=4)
    with pytest.raises(ValueError, match='LayerFusion.*pass in_channels'):
        LayerFusion('gate')
    with pytest.raises(ValueError, match='LayerFusion.*out_channels=None'):
        LayerFusion('max', in_channels=4, out_channels=8)
    with pytest.raises(ValueError, match='LayerFusion.*positive'):
        LayerFusion('max', num_layers=0)

    fusion = LayerFusion('concat', in_channels=4, num_layers=3)
    with pytest.raises(ValueError, match='LayerFusion.*pass 3 tensors'):
        fusion(make_layers(2))
    with pytest.raises(ValueError, match='LayerFusion.*non-empty list'):
        fusion([])
    with pytest.raises(ValueError, match='LayerFusion.*one shape'):
        fusion(make_layers(2) + [torch.randn(5, 4)])
    with pytest.raises(ValueError, match=r'LayerFusion.*\[\.\.\., 4\]'):
        fusion(make_layers(3, channels=5))
    with pytest.raises(ValueError, match="LayerFusion.*mode='gate'"):
        fusion.gate_weights(make_layers(3))
