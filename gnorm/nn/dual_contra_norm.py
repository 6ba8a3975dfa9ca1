from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import LayerNorm
from torch_geometric.typing import OptTensor

from gnorm.nn.contra_norm import (check_args, check_input, contrasts,
                                  dense_index, each_run, to_dense)
from gnorm.nn.stacked import layer_norm


def channel_negatives(x: Tensor, xn: Tensor, temperature: float = 1.0,
                      batch: OptTensor = None,
                      batch_size: Optional[int] = None) -> Tensor:
    r"""The negative term :math:`\mathbf{X} \, \mathrm{softmax}(
    \hat{\mathbf{X}}^{\top} \hat{\mathbf{X}} / \tau)` of ContraNorm-D,
    one :math:`d \times d` similarity per graph of :obj:`batch` (and per run
    of a leading run dimension, :obj:`[runs, num_nodes, d]`)."""
    if x.dim() == 3 and batch is not None:  # mini-batches of graphs per run
        return each_run(channel_negatives, x, xn, temperature, batch,
                        batch_size)
    if batch is None:
        sim = xn.transpose(-1, -2) @ xn / temperature  # [(runs,) d, d]
        return x @ sim.softmax(dim=-1)
    index, mask = dense_index(batch, batch_size)
    xn_d, x_d = to_dense(xn, index, mask), to_dense(x, index, mask)
    sim = xn_d.transpose(1, 2) @ xn_d / temperature  # [B, d, d]
    out = x_d @ sim.softmax(dim=-1)  # [B, M, d]
    return out.reshape(-1, out.size(-1)).index_select(0, index)  # [nodes, d]


class DualContraNorm(torch.nn.Module):
    r"""Applies the dual contrastive normalization (ContraNorm-D) from the
    `"ContraNorm: A Contrastive Learning Perspective on Oversmoothing and
    Beyond" <https://arxiv.org/abs/2303.06562>`_ paper (Eq. 30), which
    contrasts feature channels instead of nodes:

    .. math::
        \mathbf{X}^{\prime} = \mathrm{LN}\Big((1 + s) \, \mathbf{X} - s \,
        \mathbf{X} \, \mathrm{softmax}\big(\hat{\mathbf{X}}^{\top}
        \hat{\mathbf{X}} / \tau \big)\Big)

    with :math:`\hat{\mathbf{X}}` the L2-normalised rows of
    :math:`\mathbf{X}` and the softmax taken over each row of the
    :math:`d \times d` similarity. Each graph of a mini-batch gets its own
    :math:`d \times d` similarity. Cost is :math:`O(n d^2)` time and
    :math:`O(n d + d^2)` memory per graph, so it scales to any number of
    nodes.

    Args:
        in_channels (int): Size of each input sample.
        scale (float, optional): Scale :math:`s \geq 0`. (default: :obj:`1.0`)
        temperature (float, optional): Temperature :math:`\tau > 0`.
            (default: :obj:`1.0`)
        identity (bool, optional): Use :math:`(1 + s)\mathbf{X} - s
            \mathbf{X}_{\text{neg}}` rather than :math:`\mathbf{X} - s
            \mathbf{X}_{\text{neg}}`. (default: :obj:`True`)
        center (bool, optional): Subtract each row's mean over channels
            first (an option of the authors' code). (default: :obj:`False`)
        layer_norm (bool, optional): Append an affine
            :class:`torch.nn.LayerNorm`. (default: :obj:`True`)

    Like :class:`ContraNorm`, the input may carry a leading run dimension
    (:obj:`[runs, num_nodes, in_channels]`, each run on its own), as
    :class:`gnorm.nn.Stacked` hands it.
    """
    takes_runs = True  # forward takes [runs, ...] inputs (gnorm.nn.Stacked)

    def __init__(self, in_channels: int, scale: float = 1.0,
                 temperature: float = 1.0, identity: bool = True,
                 center: bool = False, layer_norm: bool = True):
        super().__init__()
        check_args(self.__class__.__name__, in_channels, scale, temperature)
        self.in_channels = in_channels
        self.scale = float(scale)
        self.temperature = float(temperature)
        self.identity = identity
        self.center = center
        self.norm = LayerNorm(in_channels) if layer_norm else None
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module."""
        if self.norm is not None:
            self.norm.reset_parameters()

    def forward(self, x: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Node features
                :obj:`[(runs,) num_nodes, in_channels]`.
            batch (torch.Tensor, optional): Graph assignment vector of shape
                :obj:`[num_nodes]`, in any order. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs.
                (default: :obj:`None`)
        """
        check_input(self, x, batch, batch_size)
        if contrasts(self.scale):
            if self.center:
                x = x - x.mean(dim=-1, keepdim=True)
            x_neg = channel_negatives(x, F.normalize(x, dim=-1),
                                      self.temperature, batch, batch_size)
            s = self.scale
            x = (1 + s) * x - s * x_neg if self.identity else x - s * x_neg

        if self.norm is not None:
            x = layer_norm(x, self.norm)
        return x

    def __repr__(self) -> str:
        args = [f'{self.in_channels}', f'scale={self.scale}']
        if self.temperature != 1.0:
            args.append(f'temperature={self.temperature}')
        if not self.identity:
            args.append('identity=False')
        if self.center:
            args.append('center=True')
        if self.norm is None:
            args.append('layer_norm=False')
        return f'{self.__class__.__name__}({", ".join(args)})'
