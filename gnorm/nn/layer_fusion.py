from typing import List, Optional

import torch
from torch import Tensor
from torch_geometric.typing import OptTensor

from gnorm.nn._inputs import check_batch

MODES = ('concat', 'max', 'gate')


class LayerFusion(torch.nn.Module):
    r"""Fuses the node representations of all layers into one, the
    hierarchical fusion from the `"Revisiting Over-smoothing in BERT from the
    Perspective of Graph" <https://arxiv.org/abs/2202.08625>`_ paper
    (Section 6.1).

    Given the outputs :math:`\mathbf{H}_1, \ldots, \mathbf{H}_L` of :math:`L`
    layers, the fused representation of node :math:`t` is

    .. math::
        \textrm{concat:} \quad \mathbf{h}^{\prime}_t &= \mathbf{W}
        \left[ \mathbf{h}^1_t \, \Vert \, \cdots \, \Vert \,
        \mathbf{h}^L_t \right] + \mathbf{b}

        \textrm{max:} \quad h^{\prime}_{t,c} &= \max_{k} h^k_{t,c}

        \textrm{gate:} \quad \mathbf{h}^{\prime}_t &= \sum_{k=1}^L
        w^k_t \mathbf{h}^k_t, \qquad (w^1_t, \ldots, w^L_t) =
        \mathrm{softmax} \left( g(\mathbf{h}^1_t), \ldots,
        g(\mathbf{h}^L_t) \right)

    where :math:`g` is one linear scorer :math:`\mathbb{R}^d \to \mathbb{R}`
    shared by all layers. :obj:`'max'` has no parameters.

    Args:
        mode (str, optional): The fusion, :obj:`'concat'`, :obj:`'max'` or
            :obj:`'gate'`. (default: :obj:`'concat'`)
        in_channels (int, optional): Size of each layer's node
            representation; required by :obj:`'concat'` and :obj:`'gate'`.
            (default: :obj:`None`)
        num_layers (int, optional): Number of fused layers :math:`L`;
            required by :obj:`'concat'`, checked against the input otherwise.
            (default: :obj:`None`)
        out_channels (int, optional): Output size of :obj:`'concat'`; the
            other modes output :obj:`in_channels`. If :obj:`None`, uses
            :obj:`in_channels`. (default: :obj:`None`)
    """
    def __init__(self, mode: str = 'concat', in_channels: Optional[int] = None,
                 num_layers: Optional[int] = None,
                 out_channels: Optional[int] = None):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"LayerFusion got mode={mode!r}; pass one of "
                             f"{', '.join(repr(m) for m in MODES)}")
        for name, value in (('in_channels', in_channels),
                            ('num_layers', num_layers),
                            ('out_channels', out_channels)):
            if value is not None and value < 1:
                raise ValueError(f"LayerFusion got {name}={value}; pass a "
                                 f"positive integer or None")
        if mode in ('concat', 'gate') and in_channels is None:
            raise ValueError(f"LayerFusion(mode={mode!r}) needs the layer "
                             f"size; pass in_channels")
        if mode == 'concat' and num_layers is None:
            raise ValueError("LayerFusion(mode='concat') needs the number of "
                             "layers; pass num_layers")
        if (mode != 'concat' and out_channels is not None
                and out_channels != in_channels):
            raise ValueError(f"LayerFusion(mode={mode!r}) outputs "
                             f"in_channels; pass out_channels=None or "
                             f"mode='concat'")
        self.mode = mode
        self.in_channels = in_channels
        self.num_layers = num_layers
        self.out_channels = out_channels

        self.lin: Optional[torch.nn.Linear] = None
        if mode == 'concat':
            self.lin = torch.nn.Linear(num_layers * in_channels,
                                       out_channels or in_channels)
        elif mode == 'gate':
            self.lin = torch.nn.Linear(in_channels, 1)  # the scorer g
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module."""
        if self.lin is not None:
            self.lin.reset_parameters()

    def _check(self, xs: List[Tensor]):
        if not isinstance(xs, (list, tuple)) or len(xs) == 0:
            raise ValueError("LayerFusion expects a non-empty list of "
                             "per-layer node representations; pass xs=[h_1, "
                             "..., h_L]")
        if self.num_layers is not None and len(xs) != self.num_layers:
            raise ValueError(f"LayerFusion(num_layers={self.num_layers}) got "
                             f"{len(xs)} layers; pass {self.num_layers} "
                             f"tensors")
        shape = xs[0].shape
        if any(x.shape != shape for x in xs):
            raise ValueError(f"LayerFusion expects all layers to share one "
                             f"shape; got "
                             f"{[tuple(x.shape) for x in xs]}")
        if len(shape) < 1 or (self.in_channels is not None
                              and shape[-1] != self.in_channels):
            raise ValueError(f"LayerFusion(in_channels={self.in_channels}) "
                             f"got representations of shape {tuple(shape)}; "
                             f"pass [..., {self.in_channels}] tensors")

    def gate_weights(self, xs: List[Tensor]) -> Tensor:
        r"""Returns the gate weights :math:`w^k_t` of shape
        :obj:`[..., num_layers]` (mode :obj:`'gate'` only); they sum to one
        over the layers of each node."""
        if self.mode != 'gate':
            raise ValueError(f"LayerFusion(mode={self.mode!r}) has no gate "
                             f"weights; pass mode='gate'")
        self._check(xs)
        scores = torch.cat([self.lin(x) for x in xs], dim=-1)  # [..., L]
        return scores.softmax(dim=-1)

    def forward(self, xs: List[Tensor], batch: OptTensor = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Forward pass.

        Args:
            xs (List[torch.Tensor]): The :math:`L` per-layer node
                representations, each of shape :obj:`[num_nodes,
                in_channels]` (any leading shape works).
            batch (torch.Tensor, optional): Accepted for API compatibility
                and ignored: fusion is per node. (default: :obj:`None`)
            batch_size (int, optional): Accepted for API compatibility and
                ignored. (default: :obj:`None`)

        Returns:
            torch.Tensor: The fused representation of shape
            :obj:`[num_nodes, out_channels]` for :obj:`'concat'`, else
            :obj:`[num_nodes, in_channels]`.
        """
        self._check(xs)
        if xs[0].dim() == 2:
            check_batch(self, batch, xs[0].size(0), batch_size)
        if self.mode == 'concat':
            return self.lin(torch.cat(list(xs), dim=-1))  # [..., L * d] -> out
        if self.mode == 'max':
            return torch.stack(list(xs), dim=0).max(dim=0).values  # [..., d]
        weights = self.gate_weights(xs)  # [..., L]
        stacked = torch.stack(list(xs), dim=-1)  # [..., d, L]
        return (stacked * weights.unsqueeze(-2)).sum(dim=-1)  # [..., d]

    def __repr__(self) -> str:
        args = [repr(self.mode)]
        for name in ('in_channels', 'num_layers', 'out_channels'):
            value = getattr(self, name)
            if value is not None:
                args.append(f'{name}={value}')
        return f'{self.__class__.__name__}({", ".join(args)})'
