import math

import pytest
import torch
from torch_geometric.nn.norm import PairNorm as PyGPairNorm

from gnorm.nn import PairNorm

MODES = ['PN', 'PN-SI', 'PN-SCS']


def reference_pair_norm(x, batch, scale, mode, eps):
    """Slow PairNorm: python loops over graphs and nodes."""
    out = torch.empty_like(x)
    for graph in sorted(set(batch.tolist())):
        nodes = [i for i in range(x.size(0)) if int(batch[i]) == graph]
        mean = sum(x[i] for i in nodes) / len(nodes)
        mean_sq = sum(float(((x[i] - mean)**2).sum())
                      for i in nodes) / len(nodes)
        for i in nodes:
            if mode == 'PN':
                out[i] = scale * (x[i] - mean) / math.sqrt(eps + mean_sq)
            elif mode == 'PN-SI':
                sq = float(((x[i] - mean)**2).sum())
                out[i] = scale * (x[i] - mean) / math.sqrt(eps + sq)
            else:
                sq = float((x[i]**2).sum())
                out[i] = scale * x[i] / math.sqrt(eps + sq) - mean
    return out


def make_input(dtype=torch.float):
    x = torch.randn(9, 4, dtype=dtype) + 2.0
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    return x, batch


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('scale', [1.0, 0.5])
@pytest.mark.parametrize('batched', [False, True])
def test_pair_norm_matches_reference(mode, scale, batched):
    torch.manual_seed(0)
    x, batch = make_input(torch.double)
    norm = PairNorm(scale=scale, mode=mode)
    if batched:
        out = norm(x, batch)
        expected = reference_pair_norm(x, batch, scale, mode, norm.eps)
    else:
        out = norm(x)
        expected = reference_pair_norm(x, torch.zeros_like(batch), scale,
                                       mode, norm.eps)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize('mode', MODES)
def test_pair_norm_batched_equals_per_graph(mode):
    torch.manual_seed(1)
    x, batch = make_input()
    norm = PairNorm(mode=mode)
    out = norm(x, batch, batch_size=3)
    for graph in range(3):
        torch.testing.assert_close(out[batch == graph],
                                   norm(x[batch == graph]))


@pytest.mark.parametrize('mode', ['PN', 'PN-SI'])
@pytest.mark.parametrize('batched', [False, True])
@pytest.mark.parametrize('eps', [1e-5, 0.0])
def test_pair_norm_matches_pyg(mode, batched, eps):
    torch.manual_seed(2)
    x, batch = make_input()
    ours = PairNorm(scale=0.7, mode=mode, eps=eps)
    pyg = PyGPairNorm(scale=0.7, scale_individually=(mode == 'PN-SI'),
                      eps=eps)
    args = (batch, ) if batched else ()
    # PN-SI places eps differently (sqrt(eps + n^2) vs eps + n): close, and
    # equal for eps=0.
    atol = 1e-5 if eps > 0 else 1e-7
    torch.testing.assert_close(ours(x, *args), pyg(x, *args), atol=atol,
                               rtol=1e-5)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('batched', [False, True])
def test_pair_norm_gradcheck(mode, batched):
    torch.manual_seed(3)
    x, batch = make_input(torch.double)
    x.requires_grad_()
    norm = PairNorm(scale=1.5, mode=mode)
    args = (batch, ) if batched else ()
    assert torch.autograd.gradcheck(lambda x: norm(x, *args), (x, ))


def test_pair_norm_repr():
    assert str(PairNorm()) == "PairNorm(scale=1.0, mode='PN')"
    assert str(PairNorm(0.5, 'PN-SCS')) == "PairNorm(scale=0.5, mode='PN-SCS')"


def test_pair_norm_bad_inputs():
    with pytest.raises(ValueError, match="PairNorm.*'PN-SI'"):
        PairNorm(mode='SI')
    norm = PairNorm()
    with pytest.raises(ValueError, match='PairNorm.*num_nodes'):
        norm(torch.randn(5))
    with pytest.raises(ValueError, match='PairNorm.*batch'):
        norm(torch.randn(5, 3), torch.zeros(4, dtype=torch.long))


def test_a_width_as_first_argument_warns_that_it_is_the_scale():
    import warnings
    with pytest.warns(UserWarning) as caught:
        norm = PairNorm(32)
    message, = [str(w.message) for w in caught]
    assert message == ('PairNorm(32): 32 is the scale s; PairNorm takes no '
                       'width, pass scale=32 to silence this')
    assert norm.scale == 32  # warned, not changed
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for norm, scale in ((PairNorm(scale=32), 32), (PairNorm(0.5), 0.5),
                            (PairNorm(1, 'PN-SI'), 1), (PairNorm(), 1.0)):
            assert norm.scale == scale


def test_builders_see_the_arguments_of_init_and_pass_no_width():
    r"""DeepGCN passes a norm its width only under a width argument
    (make_norm); Hydra's keys are checked against the signature."""
    import functools
    import inspect
    import warnings
    from gnorm.models.deep_gcn import make_norm
    assert list(inspect.signature(PairNorm).parameters) == ['scale', 'mode',
                                                            'eps']
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        norm = make_norm(functools.partial(PairNorm, scale=2, mode='PN-SI'),
                         32)
    assert str(norm) == "PairNorm(scale=2, mode='PN-SI')"
