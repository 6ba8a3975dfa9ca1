import itertools
import math

import pytest
import torch

from gnorm.nn import SepNorm

COMBOS = list(itertools.product(['batch', 'layer'], ['batch', 'layer']))
EPS = 1e-5


def layer_norm_ref(h, weight, bias):
    """LayerNorm of one token, channel by channel."""
    d = len(h)
    mean = sum(float(h[c]) for c in range(d)) / d
    var = sum((float(h[c]) - mean)**2 for c in range(d)) / d
    return [(float(h[c]) - mean) / math.sqrt(var + EPS) * float(weight[c]) +
            float(bias[c]) for c in range(d)]


def batch_norm_ref(rows, weight, bias, mean=None, var=None):
    """BatchNorm of a list of tokens; batch statistics if mean is None."""
    d, n = len(weight), len(rows)
    if mean is None:
        mean = [sum(float(r[c]) for r in rows) / n for c in range(d)]
        var = [sum((float(r[c]) - mean[c])**2 for r in rows) / n
               for c in range(d)]
    return [[(float(r[c]) - float(mean[c])) / math.sqrt(float(var[c]) + EPS) *
             float(weight[c]) + float(bias[c]) for c in range(d)]
            for r in rows]


def reference_sep_norm(x, mask, norm):
    """Slow SepNorm on dense tokens: python loops over graphs and tokens."""
    out = torch.zeros_like(x)
    groups = {
        'virtual': (norm.virtual_norm, norm.norm_virtual,
                    [(b, 0) for b in range(x.size(0))]),
        'token': (norm.token_norm, norm.norm_token,
                  [(b, t) for b in range(x.size(0))
                   for t in range(1, x.size(1)) if mask[b, t]]),
    }
    for kind, module, positions in groups.values():
        rows = [x[b, t] for b, t in positions]
        weight, bias = module.weight.detach(), module.bias.detach()
        if kind == 'layer':
            new = [layer_norm_ref(r, weight, bias) for r in rows]
        elif norm.training:
            new = batch_norm_ref(rows, weight, bias)
        else:
            new = batch_norm_ref(rows, weight, bias,
                                 module.running_mean, module.running_var)
        for (b, t), value in zip(positions, new):
            out[b, t] = torch.tensor(value, dtype=x.dtype)
    return out


def make_input(dtype=torch.float, num_graphs=3, channels=4):
    x = 2.0 * torch.randn(num_graphs, 5, channels, dtype=dtype) + 1.0
    sizes = [5, 3, 4, 2][:num_graphs]  # 1 + nodes per graph
    mask = torch.tensor([[t < s for t in range(5)] for s in sizes])
    x = x * mask.unsqueeze(-1)
    return x, mask


def make_norm(virtual, token, channels=4, **kwargs):
    norm = SepNorm(channels, virtual_norm=virtual, token_norm=token, **kwargs)
    with torch.no_grad():  # distinct, non-trivial affine parameters
        for p in norm.parameters():
            p.uniform_(0.5, 1.5)
    return norm


def train_once(norm, x, mask):
    norm.train()
    norm(x, mask=mask)


@pytest.mark.parametrize('virtual,token', COMBOS)
@pytest.mark.parametrize('training', [True, False])
def test_sep_norm_matches_reference(virtual, token, training):
    torch.manual_seed(0)
    x, mask = make_input(torch.double)
    norm = make_norm(virtual, token).double()
    train_once(norm, 3.0 * x + 1.0, mask)  # non-trivial running statistics
    norm.train(training)
    out = norm(x, mask=mask)
    assert out.shape == x.shape
    torch.testing.assert_close(out, reference_sep_norm(x, mask, norm))
    assert (out[~mask] == 0).all()


@pytest.mark.parametrize('virtual,token', COMBOS)
def test_sep_norm_flat_equals_dense(virtual, token):
    torch.manual_seed(1)
    x, mask = make_input()
    batch = torch.arange(3).view(-1, 1).expand(-1, 5)[mask]  # [num_tokens]
    norm = make_norm(virtual, token)
    dense_out = norm(x, mask=mask)
    flat_out = norm(x[mask], batch)
    assert flat_out.shape == (int(mask.sum()), 4)
    torch.testing.assert_close(flat_out, dense_out[mask])


@pytest.mark.parametrize('virtual,token', COMBOS)
@pytest.mark.parametrize('training', [True, False])
def test_sep_norm_graph_tokens_first_matches_reference(virtual, token,
                                                       training):
    # The packed layout [graph tokens; other tokens] with num_graph_tokens:
    # the reference on the dense tokens, and the same running statistics.
    torch.manual_seed(3)
    x, mask = make_input(torch.double)
    packed = torch.cat([x[:, 0], x[:, 1:][mask[:, 1:]]])  # [3 + 10, 4]
    norms = [make_norm(virtual, token).double() for _ in range(2)]
    norms[1].load_state_dict(norms[0].state_dict())
    for norm in norms:
        norm.train(training)
    out = norms[0](packed, num_graph_tokens=3)
    expected = reference_sep_norm(x, mask, norms[0])
    torch.testing.assert_close(out, torch.cat(
        [expected[:, 0], expected[:, 1:][mask[:, 1:]]]))
    norms[1](x, mask=mask)
    for a, b in zip(norms[0].buffers(), norms[1].buffers()):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match='num_graph_tokens.*alone'):
        norms[0](x, mask=mask, num_graph_tokens=3)
    for bad in (0, packed.size(0) + 1):
        with pytest.raises(ValueError, match='SepNorm got num_graph_tokens'):
            norms[0](packed, num_graph_tokens=bad)


@pytest.mark.parametrize('virtual,token,training',
                         [('layer', 'layer', True)] +
                         [(v, t, False) for v, t in COMBOS])
def test_sep_norm_batched_equals_per_graph(virtual, token, training):
    torch.manual_seed(2)
    x, mask = make_input()
    norm = make_norm(virtual, token)
    train_once(norm, x, mask)
    norm.train(training)
    out = norm(x, mask=mask)
    for b in range(x.size(0)):
        size = int(mask[b].sum())
        single = norm(x[b:b + 1, :size])  # one graph, no padding
        torch.testing.assert_close(out[b:b + 1, :size], single)
        torch.testing.assert_close(norm(x[b, :size]), single[0])  # flat


@pytest.mark.parametrize('virtual,token', COMBOS)
@pytest.mark.parametrize('training', [True, False])
def test_sep_norm_ignores_padding(virtual, token, training):
    torch.manual_seed(3)
    x, mask = make_input()
    garbage = x + 100.0 * torch.randn_like(x) * (~mask).unsqueeze(-1)
    norm_a, norm_b = make_norm(virtual, token), make_norm(virtual, token)
    norm_b.load_state_dict(norm_a.state_dict())
    norm_a.train(training), norm_b.train(training)
    out_a, out_b = norm_a(x, mask=mask), norm_b(garbage, mask=mask)
    torch.testing.assert_close(out_a, out_b)
    assert (out_b[~mask] == 0).all()
    for key, value in norm_a.state_dict().items():  # same running statistics
        torch.testing.assert_close(value, norm_b.state_dict()[key])


@pytest.mark.parametrize('virtual,token',
                         [c for c in COMBOS if 'batch' in c])
def test_sep_norm_running_statistics(virtual, token):
    torch.manual_seed(4)
    x, mask = make_input()
    norm = make_norm(virtual, token, momentum=0.3)
    train_out = norm(x, mask=mask)

    # Running statistics: (1 - m) * initial + m * batch (unbiased variance).
    tokens = x[:, 1:][mask[:, 1:]]  # valid ordinary tokens only
    for kind, module, rows in ((virtual, norm.norm_virtual, x[:, 0]),
                               (token, norm.norm_token, tokens)):
        if kind == 'batch':
            torch.testing.assert_close(module.running_mean,
                                       0.3 * rows.mean(dim=0))
            torch.testing.assert_close(module.running_var,
                                       0.7 + 0.3 * rows.var(dim=0))

    norm.eval()
    eval_out = norm(x, mask=mask)
    assert not torch.allclose(train_out, eval_out, atol=1e-3)
    # In eval, a graph's output does not depend on the other graphs.
    other, other_mask = make_input(num_graphs=4)
    other[0], other_mask[0] = x[0], mask[0]
    torch.testing.assert_close(norm(other, mask=other_mask)[0], eval_out[0])
    # Eval leaves the running statistics alone.
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    norm(other, mask=other_mask)
    for key, value in norm.state_dict().items():
        assert torch.equal(value, before[key])


@pytest.mark.parametrize('virtual,token', COMBOS)
def test_sep_norm_gradcheck(virtual, token):
    torch.manual_seed(5)
    x, mask = make_input(torch.double, channels=3)
    x.requires_grad_()
    norm = make_norm(virtual, token, channels=3).double()
    assert torch.autograd.gradcheck(lambda x: norm(x, mask=mask), (x, ),
                                    fast_mode=True)


def test_sep_norm_repr():
    assert str(SepNorm(16)) == ("SepNorm(16, virtual_norm='batch', "
                                "token_norm='layer')")
    assert str(SepNorm(8, 'layer', 'batch')) == (
        "SepNorm(8, virtual_norm='layer', token_norm='batch')")


def test_sep_norm_single_graph_batch_norm():
    x = torch.randn(1, 4, 4)
    norm = SepNorm(4, virtual_norm='batch')
    with pytest.raises(ValueError, match="SepNorm.*virtual_norm='layer'"):
        norm(x)
    with pytest.raises(ValueError, match="SepNorm.*virtual_norm='layer'"):
        norm(x[0])  # flat, one graph
    norm.eval()
    assert norm(x).shape == x.shape  # running statistics in eval
    assert SepNorm(4, virtual_norm='layer')(x).shape == x.shape


def test_sep_norm_bad_inputs():
    with pytest.raises(ValueError, match="SepNorm.*'batch' or 'layer'"):
        SepNorm(4, virtual_norm='group')
    with pytest.raises(ValueError, match="SepNorm.*'batch' or 'layer'"):
        SepNorm(4, token_norm='instance')
    norm = SepNorm(4)
    x, mask = make_input()
    with pytest.raises(ValueError, match='SepNorm.*in_channels=3'):
        norm(x[..., :3], mask=mask)
    with pytest.raises(ValueError, match='SepNorm.*bool mask'):
        norm(x, mask=mask[:, :4])
    bad_mask = mask.clone()
    bad_mask[1, 0] = False
    with pytest.raises(ValueError, match='SepNorm.*mask\\[:, 0\\]'):
        norm(x, mask=bad_mask)
    with pytest.raises(ValueError, match='SepNorm.*pass mask'):
        norm(x, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match='SepNorm.*pass batch'):
        norm(x[mask], mask=mask)
    with pytest.raises(ValueError, match='SepNorm.*sorted'):
        norm(torch.randn(4, 4), torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match='SepNorm.*shape'):
        norm(torch.randn(2, 3, 4, 4))
