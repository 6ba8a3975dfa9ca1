import math

import pytest
import torch

from gnorm.nn import IsoBN


def reference_batch_stats(x):
    """Biased per-channel std and covariance with python loops."""
    n, d = x.shape
    mean = [sum(float(x[r, i]) for r in range(n)) / n for i in range(d)]
    cov = [[
        sum((float(x[r, i]) - mean[i]) * (float(x[r, j]) - mean[j])
            for r in range(n)) / n for j in range(d)
    ] for i in range(d)]
    std = [math.sqrt(cov[i][i]) for i in range(d)]
    return std, cov


def reference_iso_bn(x, std, cov, beta, eps):
    """Slow IsoBN output from given statistics (Eq. 4, 6, 7 with sqrt, 8)."""
    n, d = x.shape
    theta = []
    for i in range(d):
        gamma = sum((cov[i][j] / (std[i] * std[j]))**2 for j in range(d))
        theta.append((std[i] * gamma + eps)**(-beta))
    total = sum(std[i]**2 for i in range(d))
    scaled = sum(std[i]**2 * theta[i]**2 for i in range(d))
    theta_bar = [math.sqrt(total / scaled) * theta[i] for i in range(d)]
    out = torch.empty_like(x)
    for r in range(n):
        for i in range(d):
            out[r, i] = float(x[r, i]) * theta_bar[i]
    return out


def correlated(rows=12, channels=5, dtype=torch.double):
    """Features with correlated, differently scaled channels."""
    z = torch.randn(rows, 3, dtype=dtype)
    mix = torch.randn(3, channels, dtype=dtype)
    return z @ mix + 0.1 * torch.randn(rows, channels, dtype=dtype) + 1.0


@pytest.mark.parametrize('beta', [0.25, 0.5, 1.0])
@pytest.mark.parametrize('momentum', [0.05, 0.5, 1.0])
def test_iso_bn_matches_reference(beta, momentum):
    torch.manual_seed(0)
    norm = IsoBN(5, momentum=momentum, beta=beta, eps=0.1).double()
    std, cov = [1.0] * 5, [[float(i == j) for j in range(5)] for i in range(5)]
    for _ in range(2):  # two training steps: moving statistics accumulate
        x = correlated()
        batch_std, batch_cov = reference_batch_stats(x)
        std = [s + momentum * (b - s) for s, b in zip(std, batch_std)]
        cov = [[c + momentum * (b - c) for c, b in zip(row, batch_row)]
               for row, batch_row in zip(cov, batch_cov)]
        out = norm(x)
        torch.testing.assert_close(out, reference_iso_bn(x, std, cov, beta,
                                                         0.1))
    torch.testing.assert_close(norm.running_std,
                               torch.tensor(std, dtype=torch.double))
    torch.testing.assert_close(norm.running_cov,
                               torch.tensor(cov, dtype=torch.double))

    norm.eval()  # running statistics used as they are
    x = correlated()
    torch.testing.assert_close(norm(x), reference_iso_bn(x, std, cov, beta,
                                                         0.1))


def test_iso_bn_preserves_total_variance():
    torch.manual_seed(1)
    x = correlated(rows=32, channels=6)
    norm = IsoBN(6, momentum=1.0).double()
    out = norm(x)  # statistics set by this very batch
    assert not torch.allclose(out, x)
    torch.testing.assert_close(
        out.var(dim=0, unbiased=False).sum(),
        x.var(dim=0, unbiased=False).sum())
    # The correlated, large channels are shrunk relative to the others.
    theta = norm.scale_factor()
    assert theta.max() / theta.min() > 1.05


def test_iso_bn_identity_when_untrained_or_beta_zero():
    torch.manual_seed(2)
    x = correlated(channels=4)
    norm = IsoBN(4).double().eval()
    torch.testing.assert_close(norm(x), x)
    torch.testing.assert_close(IsoBN(4, beta=0.0).double()(x), x)


def test_iso_bn_train_vs_eval():
    torch.manual_seed(3)
    x, other = correlated(), correlated()
    norm = IsoBN(5, momentum=0.5).double()
    train_out = norm(x)
    std, cov = norm.running_std.clone(), norm.running_cov.clone()
    assert not torch.allclose(std, torch.ones(5, dtype=torch.double))

    norm.eval()
    # Eval uses the statistics the training step left, without updating.
    torch.testing.assert_close(norm(x), train_out)
    norm(other)
    assert torch.equal(norm.running_std, std)
    assert torch.equal(norm.running_cov, cov)

    norm.train()  # another training step moves the statistics again
    assert not torch.allclose(norm(x), train_out)
    assert not torch.allclose(norm.running_std, std)

    norm.reset_parameters()
    assert torch.equal(norm.running_cov, torch.eye(5, dtype=torch.double))


def test_iso_bn_batched_equals_per_graph_in_eval():
    torch.manual_seed(4)
    norm = IsoBN(5).double()
    norm(correlated())
    norm.eval()
    x = correlated(rows=9)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    out = norm(x, batch, batch_size=3)
    for graph in range(3):
        torch.testing.assert_close(out[batch == graph],
                                   norm(x[batch == graph]))


def test_iso_bn_gradcheck():
    torch.manual_seed(5)
    norm = IsoBN(4, momentum=0.5).double()
    norm(correlated(channels=4))
    norm.eval()  # frozen statistics, so repeated calls see the same map
    x = correlated(rows=6, channels=4).requires_grad_()
    assert torch.autograd.gradcheck(norm, (x, ))


def test_iso_bn_repr():
    assert str(IsoBN(16)) == 'IsoBN(16)'
    assert str(IsoBN(8, momentum=0.1, beta=1.0)) == 'IsoBN(8)'


def test_iso_bn_bad_inputs():
    with pytest.raises(ValueError, match='IsoBN.*positive'):
        IsoBN(0)
    with pytest.raises(ValueError, match='IsoBN.*momentum'):
        IsoBN(4, momentum=1.5)
    norm = IsoBN(4)
    with pytest.raises(ValueError, match='IsoBN.*num_rows, 4'):
        norm(torch.randn(4))
    with pytest.raises(ValueError, match='IsoBN.*num_rows, 4'):
        norm(torch.randn(3, 5))
    with pytest.raises(ValueError, match='IsoBN.*eval'):
        norm(torch.randn(1, 4))
