from typing import Optional

import torch
from torch import Tensor
from torch_geometric.typing import OptTensor

from gnorm.nn._inputs import check_batch


class IsoBN(torch.nn.Module):
    r"""Applies isotropic batch normalization from the `"IsoBN: Fine-Tuning
    BERT with Isotropic Batch Normalization"
    <https://arxiv.org/abs/2005.02178>`_ paper (modified IsoBN, Algorithm 1).

    Each channel :math:`i` is rescaled by a factor that shrinks channels
    which are large and strongly correlated with many others:

    .. math::
        \rho_{ij} &= \frac{\Sigma_{ij}}{\sigma_i \sigma_j}, \qquad
        \gamma_i = \sum_{j=1}^d \rho_{ij}^2, \qquad
        \theta_i = (\sigma_i \gamma_i + \epsilon)^{-\beta}

        \bar{\boldsymbol{\theta}} &= \sqrt{\frac{\sum_{i=1}^d \sigma_i^2}
        {\sum_{i=1}^d \sigma_i^2 \theta_i^2}} \cdot \boldsymbol{\theta},
        \qquad \mathbf{x}^{\prime}_n = \bar{\boldsymbol{\theta}} \odot
        \mathbf{x}_n

    where :math:`\boldsymbol{\sigma}` and :math:`\boldsymbol{\Sigma}` are the
    moving standard deviation and covariance. In training they are first
    updated with the biased statistics of the mini-batch,
    :math:`\boldsymbol{\sigma} \leftarrow \boldsymbol{\sigma} +
    \alpha (\boldsymbol{\sigma}_B - \boldsymbol{\sigma})` and likewise for
    :math:`\boldsymbol{\Sigma}`; in evaluation mode they are used as they are.
    As in the paper's modified IsoBN, the mean is not subtracted.

    Eq. 7 of the paper is printed without the square root, which does not
    keep the total variance; with it, as the paper's text requires,
    :math:`\sum_i \sigma_i^2 \bar{\theta}_i^2 = \sum_i \sigma_i^2`.
    The factor :math:`\bar{\boldsymbol{\theta}}` is computed from the
    running statistics without gradient (a data-dependent constant, as in
    batch normalization's running statistics). The statistics are taken over
    all rows of :obj:`x` in the mini-batch, like
    :class:`torch_geometric.nn.norm.BatchNorm`. The buffers start as
    :math:`\boldsymbol{\sigma} = \mathbf{1}`, :math:`\boldsymbol{\Sigma} =
    \mathbf{I}`, so an untrained IsoBN is the identity; :obj:`beta=0` is the
    identity too.

    Args:
        in_channels (int): Size of each input sample.
        momentum (float, optional): The momentum :math:`\alpha` of the moving
            statistics (the paper's decay :math:`0.95` is
            :math:`\alpha = 0.05`). (default: :obj:`0.05`)
        beta (float, optional): The normalization strength :math:`\beta`.
            (default: :obj:`0.5`)
        eps (float, optional): The value :math:`\epsilon` in
            :math:`\theta_i`. (default: :obj:`0.1`)
    """
    def __init__(self, in_channels: int, momentum: float = 0.05,
                 beta: float = 0.5, eps: float = 0.1):
        super().__init__()
        if in_channels < 1:
            raise ValueError(f"IsoBN got in_channels={in_channels}; pass a "
                             f"positive number of channels")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"IsoBN got momentum={momentum}; pass a value "
                             f"in [0, 1]")
        self.in_channels = in_channels
        self.momentum = momentum
        self.beta = beta
        self.eps = eps

        self.register_buffer('running_std', torch.ones(in_channels))
        self.register_buffer('running_cov', torch.eye(in_channels))
        self.reset_parameters()

    def reset_running_stats(self):
        r"""Resets the moving statistics to :math:`\mathbf{1}` and
        :math:`\mathbf{I}`."""
        self.running_std.fill_(1.0)
        self.running_cov.copy_(torch.eye(self.in_channels))

    def reset_parameters(self):
        r"""Resets the moving statistics (there are no learnable
        parameters)."""
        self.reset_running_stats()

    @torch.no_grad()
    def scale_factor(self) -> Tensor:
        r"""Returns :math:`\bar{\boldsymbol{\theta}}` of shape
        :obj:`[in_channels]`, computed from the moving statistics."""
        std, cov = self.running_std, self.running_cov
        outer = std.unsqueeze(1) * std.unsqueeze(0)  # [channels, channels]
        # A channel with zero deviation is correlated with nothing:
        rho = torch.where(outer > 0, cov / outer, torch.zeros_like(cov))
        gamma = rho.pow(2).sum(dim=1)  # [channels]
        theta = (std * gamma + self.eps).pow(-self.beta)  # [channels]

        var = std.pow(2)
        scaled = (var * theta.pow(2)).sum()
        theta_bar = (var.sum() / scaled).sqrt() * theta
        # All deviations zero: no variance to preserve, leave x unchanged.
        return torch.where(scaled > 0, theta_bar, torch.ones_like(theta))

    def forward(self, x: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Input features of shape :obj:`[num_rows,
                in_channels]`.
            batch (torch.Tensor, optional): Accepted for API compatibility
                and ignored: the statistics are over all rows of the
                mini-batch. (default: :obj:`None`)
            batch_size (int, optional): Accepted for API compatibility and
                ignored. (default: :obj:`None`)

        Returns:
            torch.Tensor: Rescaled features of shape :obj:`[num_rows,
            in_channels]`.
        """
        if x.dim() != 2 or x.size(-1) != self.in_channels:
            raise ValueError(f"IsoBN({self.in_channels}) expects x of shape "
                             f"[num_rows, {self.in_channels}]; got "
                             f"{tuple(x.shape)}")
        check_batch(self, batch, x.size(0), batch_size)
        if self.training:
            if x.size(0) < 2:
                raise ValueError(f"IsoBN needs >= 2 rows to estimate batch "
                                 f"statistics in training; got {x.size(0)}. "
                                 f"Pass a larger batch or call .eval()")
            self._update_running_stats(x.detach())
        return x * self.scale_factor().to(x.dtype)

    @torch.no_grad()
    def _update_running_stats(self, x: Tensor):
        x = x.to(self.running_cov.dtype)
        x_c = x - x.mean(dim=0, keepdim=True)  # [num_rows, channels]
        std = x_c.pow(2).mean(dim=0).sqrt()  # [channels]
        cov = x_c.t() @ x_c / x.size(0)  # [channels, channels]
        self.running_std.add_(self.momentum * (std - self.running_std))
        self.running_cov.add_(self.momentum * (cov - self.running_cov))

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}({self.in_channels})'
