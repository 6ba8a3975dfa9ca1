import inspect
import warnings
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.typing import OptTensor
from torch_geometric.utils import scatter

from gnorm.nn._inputs import check_batch

MODES = ('PN', 'PN-SI', 'PN-SCS')


def _width_like(value: Any) -> bool:
    r"""Whether :obj:`value` reads as a layer width (an integer >= 2), as
    the first argument of every other gnorm norm is."""
    return isinstance(value, int) and not isinstance(value, bool) \
        and value >= 2


class PairNorm(torch.nn.Module):
    r"""Applies pair normalization over node features from the
    `"PairNorm: Tackling Oversmoothing in GNNs"
    <https://arxiv.org/abs/1909.12223>`_ paper, with all three of its modes.

    With :math:`\boldsymbol{\mu} = \frac{1}{n} \sum_{j=1}^n \mathbf{x}_j` the
    mean over the nodes of the same graph and
    :math:`\mathbf{x}_i^c = \mathbf{x}_i - \boldsymbol{\mu}`:

    .. math::
        \textrm{PN:} \quad \mathbf{x}_i^{\prime} &= s \cdot
        \frac{\mathbf{x}_i^c}{\sqrt{\epsilon + \frac{1}{n} \sum_{j=1}^n
        {\| \mathbf{x}_j^c \|}^2_2}}

        \textrm{PN-SI:} \quad \mathbf{x}_i^{\prime} &= s \cdot
        \frac{\mathbf{x}_i^c}{\sqrt{\epsilon + {\| \mathbf{x}_i^c \|}^2_2}}

        \textrm{PN-SCS:} \quad \mathbf{x}_i^{\prime} &= s \cdot
        \frac{\mathbf{x}_i}{\sqrt{\epsilon + {\| \mathbf{x}_i \|}^2_2}}
        - \boldsymbol{\mu}

    :obj:`'PN'` computes the same as
    :class:`torch_geometric.nn.norm.PairNorm`; :obj:`'PN-SI'` matches it with
    :obj:`scale_individually=True` up to where :math:`\epsilon` enters (the
    authors' :math:`\sqrt{\epsilon + \|\cdot\|^2}` here,
    :math:`\epsilon + \|\cdot\|` there). :obj:`'PN-SCS'` subtracts the mean
    of the *unnormalized* features, as in the authors' code.

    Args:
        scale (float, optional): Scaling factor :math:`s` of normalization.
            (default: :obj:`1.0`)
        mode (str, optional): The variant, :obj:`'PN'`, :obj:`'PN-SI'`
            (scale individually) or :obj:`'PN-SCS'` (scale-and-center
            simultaneously). (default: :obj:`'PN'`)
        eps (float, optional): A value added inside the square root for
            numerical stability. (default: :obj:`1e-5`)

    PairNorm takes no width (as PyG's): its first argument is the scale,
    so :obj:`PairNorm(32)`, written as :obj:`ContraNorm(32)` is, warns
    that it means :obj:`scale=32`; pass :obj:`scale=` by name to mean it.
    """
    def __new__(cls, *args: Any, **kwargs: Any) -> 'PairNorm':
        if args and _width_like(args[0]):
            warnings.warn(f"{cls.__name__}({args[0]}): {args[0]} is the "
                          f"scale s; {cls.__name__} takes no width, pass "
                          f"scale={args[0]} to silence this", stacklevel=2)
        return super().__new__(cls)

    def __init__(self, scale: float = 1.0, mode: str = 'PN',
                 eps: float = 1e-5):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"PairNorm got mode={mode!r}; pass one of "
                             f"{', '.join(repr(m) for m in MODES)}")
        self.scale = scale
        self.mode = mode
        self.eps = eps
        self.reset_parameters()

    # inspect.signature(PairNorm) (Hydra's keys, DeepGCN's width) is
    # __init__'s, not that of __new__, which only looks at the first value.
    __new__.__signature__ = inspect.signature(__init__)

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module (there are none)."""

    def forward(self, x: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Node features of shape :obj:`[num_nodes,
                channels]`.
            batch (torch.Tensor, optional): The batch vector
                :math:`\mathbf{b} \in {\{ 0, \ldots, B-1\}}^N`, which assigns
                each node to a graph; each graph is normalized on its own.
                (default: :obj:`None`)
            batch_size (int, optional): The number of graphs :math:`B`.
                Automatically calculated if not given. (default: :obj:`None`)

        Returns:
            torch.Tensor: Normalized features of shape
            :obj:`[num_nodes, channels]`.
        """
        if x.dim() != 2:
            raise ValueError(f"PairNorm expects node features of shape "
                             f"[num_nodes, channels]; got {tuple(x.shape)}")
        check_batch(self, batch, x.size(0), batch_size)

        if batch is None:
            mean = x.mean(dim=0, keepdim=True)  # [1, channels]
        else:
            mean = scatter(x, batch, dim=0, dim_size=batch_size,
                           reduce='mean')  # [batch_size, channels]
            mean = mean.index_select(0, batch)  # [num_nodes, channels]

        if self.mode == 'PN-SCS':
            norm = (self.eps + x.pow(2).sum(-1, keepdim=True)).sqrt()
            return self.scale * x / norm - mean

        x = x - mean
        sq_norm = x.pow(2).sum(-1, keepdim=True)  # [num_nodes, 1]
        if self.mode == 'PN':
            if batch is None:
                sq_norm = sq_norm.mean()
            else:
                sq_norm = scatter(sq_norm, batch, dim=0, dim_size=batch_size,
                                  reduce='mean').index_select(0, batch)
        return self.scale * x / (self.eps + sq_norm).sqrt()

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(scale={self.scale}, '
                f'mode={self.mode!r})')
