from typing import Optional

import torch
from torch import Tensor
from torch_geometric.typing import OptTensor
from torch_geometric.utils import to_dense_batch

from gnorm.nn._inputs import check_batch

KINDS = ('batch', 'layer')


def _make_norm(kind: str, in_channels: int, eps: float,
               momentum: float) -> torch.nn.Module:
    if kind == 'batch':
        return torch.nn.BatchNorm1d(in_channels, eps=eps, momentum=momentum)
    return torch.nn.LayerNorm(in_channels, eps=eps)


class SepNorm(torch.nn.Module):
    r"""Applies separate normalization to the graph token and to the other
    tokens from the `"On Separate Normalization in Self-supervised
    Transformers" <https://arxiv.org/abs/2309.12931>`_ paper.

    Token :math:`0` of every graph is its graph token ([VNode], [CLS]); it
    gets its own normalization and its own affine parameters
    :math:`g_1 = (\boldsymbol{\gamma}_1, \boldsymbol{\beta}_1)`, while all
    other tokens share :math:`g_2 = (\boldsymbol{\gamma}_2,
    \boldsymbol{\beta}_2)`:

    .. math::
        \mathbf{H}^{\prime} = \left( N_v(\mathbf{H}_0; g_1),
        N_t(\mathbf{H}_1; g_2), \ldots, N_t(\mathbf{H}_N; g_2) \right),
        \qquad N_v, N_t \in \{ \mathrm{BN}, \mathrm{LN} \}

    with :math:`\mathrm{LN}(\mathbf{h}) = \boldsymbol{\gamma} \odot
    (\mathbf{h} - \mu) / \sqrt{\sigma^2 + \epsilon} + \boldsymbol{\beta}`
    over the channels of one token, and :math:`\mathrm{BN}(\mathbf{h}) =
    \boldsymbol{\gamma} \odot (\mathbf{h} - \boldsymbol{\mu}_B) /
    \sqrt{\boldsymbol{\sigma}_B^2 + \epsilon} + \boldsymbol{\beta}` over a set
    of tokens of the mini-batch: the graph tokens of all graphs for
    :math:`N_v`, the valid (non-padded) ordinary tokens of all graphs for
    :math:`N_t`. Padded tokens never enter the statistics and are zero in the
    output. BN is :class:`torch.nn.BatchNorm1d` on those rows: it keeps
    running statistics (:math:`\hat{x} \leftarrow (1 - m) \hat{x} + m x_B`,
    unbiased running variance) and uses them in evaluation mode. The paper's
    main setting is :obj:`virtual_norm='batch'`, :obj:`token_norm='layer'`.

    Args:
        in_channels (int): Size of each token embedding.
        virtual_norm (str, optional): Normalization of the graph token,
            :obj:`'batch'` or :obj:`'layer'`. (default: :obj:`'batch'`)
        token_norm (str, optional): Normalization of the other tokens,
            :obj:`'batch'` or :obj:`'layer'`. (default: :obj:`'layer'`)
        eps (float, optional): A value added to the variance for numerical
            stability. (default: :obj:`1e-5`)
        momentum (float, optional): The momentum :math:`m` of the running
            statistics of BN. (default: :obj:`0.1`)
    """
    def __init__(self, in_channels: int, virtual_norm: str = 'batch',
                 token_norm: str = 'layer', eps: float = 1e-5,
                 momentum: float = 0.1):
        super().__init__()
        for name, kind in (('virtual_norm', virtual_norm),
                           ('token_norm', token_norm)):
            if kind not in KINDS:
                raise ValueError(f"SepNorm got {name}={kind!r}; pass "
                                 f"'batch' or 'layer'")
        if in_channels < 1:
            raise ValueError(f"SepNorm got in_channels={in_channels}; pass a "
                             f"positive number of channels")
        self.in_channels = in_channels
        self.virtual_norm = virtual_norm
        self.token_norm = token_norm
        self.eps = eps
        self.momentum = momentum

        self.norm_virtual = _make_norm(virtual_norm, in_channels, eps,
                                       momentum)
        self.norm_token = _make_norm(token_norm, in_channels, eps, momentum)
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters and running statistics."""
        self.norm_virtual.reset_parameters()
        self.norm_token.reset_parameters()

    def forward(self, x: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None,
                mask: OptTensor = None,
                num_graph_tokens: Optional[int] = None) -> Tensor:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Either dense tokens of shape
                :obj:`[num_graphs, 1 + max_nodes, channels]` with the graph
                token at position :obj:`0`, or flat tokens of shape
                :obj:`[num_tokens, channels]` where the first token of each
                graph (in :obj:`batch` order) is its graph token.
            batch (torch.Tensor, optional): For flat :obj:`x` only: the sorted
                batch vector assigning each token to a graph; :obj:`None`
                means one graph. (default: :obj:`None`)
            batch_size (int, optional): For flat :obj:`x` only: the number of
                graphs. Automatically calculated if not given.
                (default: :obj:`None`)
            mask (torch.Tensor, optional): For dense :obj:`x` only: boolean
                validity mask of shape :obj:`[num_graphs, 1 + max_nodes]`
                (:obj:`True` = real token, :obj:`mask[:, 0]` all
                :obj:`True`); :obj:`None` means no padding.
                (default: :obj:`None`)
            num_graph_tokens (int, optional): For flat :obj:`x` only, in
                place of :obj:`batch`: the first :obj:`num_graph_tokens`
                rows are the graph tokens of the graphs, all other rows
                their other tokens (the packed layout of
                :class:`~gnorm.models.Graphormer`; no value of :obj:`x`'s
                structure is read, so it compiles in one graph).
                (default: :obj:`None`)

        Returns:
            torch.Tensor: Normalized tokens of the same shape as :obj:`x`,
            zero at padded positions.
        """
        if num_graph_tokens is not None:
            if x.dim() != 2 or batch is not None or mask is not None:
                raise ValueError("SepNorm got num_graph_tokens with batch, "
                                 "mask or dense x; pass it alone, with flat "
                                 "[num_tokens, channels] x")
            return self._split_forward(x, num_graph_tokens)
        if x.dim() == 3:
            if batch is not None:
                raise ValueError("SepNorm got dense x together with batch; "
                                 "pass mask for dense [num_graphs, 1 + "
                                 "max_nodes, channels] input, batch only for "
                                 "flat [num_tokens, channels] input")
            return self._dense_forward(x, mask)

        if x.dim() != 2:
            raise ValueError(f"SepNorm expects x of shape [num_graphs, 1 + "
                             f"max_nodes, channels] or [num_tokens, channels]"
                             f"; got {tuple(x.shape)}")
        if mask is not None:
            raise ValueError("SepNorm got flat x together with mask; pass "
                             "batch for flat input, mask only for dense input")
        if batch is None:
            return self._dense_forward(x.unsqueeze(0), None).squeeze(0)
        check_batch(self, batch, x.size(0), batch_size, sorted=True)
        if batch.numel() > 1 and bool((batch[1:] < batch[:-1]).any()):
            raise ValueError("SepNorm needs a sorted batch vector (each "
                             "graph's tokens contiguous, graph token first); "
                             "pass a sorted batch")
        # [num_graphs, 1 + max_nodes, channels], [num_graphs, 1 + max_nodes]
        dense, mask = to_dense_batch(x, batch, batch_size=batch_size)
        out = self._dense_forward(dense, mask)
        return out[mask]  # [num_tokens, channels]

    def _split_forward(self, x: Tensor, num_graphs: int) -> Tensor:
        if not 0 < num_graphs <= x.size(0):
            raise ValueError(f"SepNorm got num_graph_tokens={num_graphs} for "
                             f"{x.size(0)} tokens; pass the number of graphs "
                             f"(>= 1), whose tokens come first")
        self._check_channels(x.size(-1))
        self._check_batch_statistics(num_graphs, x.size(0) - num_graphs)
        virtual = self.norm_virtual(x[:num_graphs])  # [num_graphs, channels]
        tokens = x[num_graphs:]  # [num_tokens - num_graphs, channels]
        if tokens.size(0) > 0:
            tokens = self.norm_token(tokens)
        return torch.cat([virtual, tokens])

    def _check_channels(self, channels: int) -> None:
        if channels != self.in_channels:
            raise ValueError(f"SepNorm({self.in_channels}) got {channels} "
                             f"channels; pass in_channels={channels} or "
                             f"matching features")

    def _check_batch_statistics(self, num_graphs: int,
                                num_tokens: int) -> None:
        r"""Refuses batch statistics from fewer than two rows in
        training."""
        if not self.training:
            return
        if self.virtual_norm == 'batch' and num_graphs < 2:
            raise ValueError("SepNorm(virtual_norm='batch') cannot compute "
                             "batch statistics of the graph token from a "
                             "single graph in training; pass "
                             "virtual_norm='layer' or a batch of >= 2 graphs")
        if self.token_norm == 'batch' and 0 < num_tokens < 2:
            raise ValueError("SepNorm(token_norm='batch') needs >= 2 "
                             "valid tokens besides the graph tokens in "
                             "training; pass token_norm='layer' or a "
                             "larger batch")

    def _dense_forward(self, x: Tensor, mask: OptTensor) -> Tensor:
        num_graphs, num_tokens, channels = x.shape
        self._check_channels(channels)
        if num_tokens < 1:
            raise ValueError("SepNorm needs at least the graph token per "
                             "graph; pass x with 1 + max_nodes >= 1 tokens")
        if mask is None:
            mask = x.new_ones(num_graphs, num_tokens, dtype=torch.bool)
        elif mask.shape != x.shape[:2] or mask.dtype != torch.bool:
            raise ValueError(f"SepNorm expects a bool mask of shape "
                             f"{tuple(x.shape[:2])}; got {mask.dtype} of "
                             f"shape {tuple(mask.shape)}")
        elif not bool(mask[:, 0].all()):
            raise ValueError("SepNorm expects the graph token at position 0 "
                             "of every graph; pass mask[:, 0] all True (no "
                             "empty graphs)")

        token_mask = mask[:, 1:]  # [num_graphs, max_nodes]
        rows = x[:, 1:][token_mask]  # [num_valid_tokens, channels]
        self._check_batch_statistics(num_graphs, rows.size(0))
        virtual = self.norm_virtual(x[:, 0])  # [num_graphs, channels]
        if rows.size(0) > 0:
            rows = self.norm_token(rows)
        # Scatter back; padded positions stay zero.
        tokens = rows.new_zeros(num_graphs, num_tokens - 1, channels)
        tokens[token_mask] = rows  # [num_graphs, max_nodes, channels]

        # [num_graphs, 1 + max_nodes, channels]
        return torch.cat([virtual.unsqueeze(1), tokens], dim=1)

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.in_channels}, '
                f'virtual_norm={self.virtual_norm!r}, '
                f'token_norm={self.token_norm!r})')
