import inspect
import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv
from torch_geometric.typing import OptTensor
from torch_geometric.utils import add_remaining_self_loops, degree

from gnorm.nn import LayerFusion

STEPS = ('dropout', 'conv', 'norm', 'act')
CONVS = ('gcn', 'row')
FUSIONS = ('concat', 'max', 'gate')
INITS = ('glorot', 'uniform')

# Names under which norm classes take their width, tried in this order.
_WIDTH_ARGS = ('in_channels', 'normalized_shape', 'num_features')
# Optional inputs handed to a norm's forward when its signature has them.
_NORM_INPUTS = ('batch', 'batch_size', 'edge_index')


def row_normalized(edge_index: Tensor, num_nodes: int,
                   dtype: torch.dtype = torch.float,
                   ) -> Tuple[Tensor, Tensor]:
    r"""Edges and weights of :math:`\mathbf{D}^{-1}(\mathbf{A} + \mathbf{I})`,
    the propagation of the ContraNorm authors' GCN: each node averages itself
    and the nodes it receives an edge from."""
    edge_index, _ = add_remaining_self_loops(edge_index, num_nodes=num_nodes)
    deg = degree(edge_index[1], num_nodes, dtype=dtype)  # [num_nodes]
    return edge_index, deg.reciprocal()[edge_index[1]]  # [2, E], [E]


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    r""":func:`torch.nn.functional.dropout`; on the CPU the mask comes from
    :func:`torch.rand` (same distribution, ~2.4x faster there than its
    Bernoulli sampling)."""
    if not training or p == 0.0 or x.device.type != 'cpu':
        return F.dropout(x, p=p, training=training)
    return x * ((torch.rand_like(x) >= p) / (1.0 - p))


def sparse_dropout(x: Tensor, p: float, index: Tuple[Tensor, Tensor],
                   ) -> Tensor:
    r"""Dropout of a matrix whose non-zero entries are at :obj:`index`
    (rows, columns): each of them is kept with probability :math:`1 - p` and
    scaled by :math:`1 / (1 - p)`, zeros stay zero, as in
    :func:`torch.nn.functional.dropout`, but random numbers are drawn for
    the non-zero entries only (bag-of-words features are ~1 % non-zero)."""
    row, col = index
    keep = torch.rand(row.numel(), device=x.device) >= p  # [nnz]
    row, col = row[keep], col[keep]
    out = torch.zeros_like(x)
    out[row, col] = x[row, col] / (1.0 - p)
    return out


def _make_norm(factory: Callable[..., torch.nn.Module],
               channels: int) -> torch.nn.Module:
    r"""Calls :obj:`factory`, passing :obj:`channels` under the first width
    argument its signature has, if any."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature
        params = {}
    for name in _WIDTH_ARGS:
        if name in params:
            return factory(**{name: channels})
    return factory()


def _forward_inputs(module: torch.nn.Module) -> Tuple[str, ...]:
    r"""The optional inputs of :obj:`_NORM_INPUTS` that
    :obj:`module.forward` accepts."""
    params = inspect.signature(module.forward).parameters
    return tuple(name for name in _NORM_INPUTS if name in params)


class DeepGCN(torch.nn.Module):
    r"""A stack of :obj:`num_layers` graph convolutions for node
    classification, with a normalisation layer after every hidden
    convolution, for the oversmoothing experiments of the `"ContraNorm: A
    Contrastive Learning Perspective on Oversmoothing and Beyond"
    <https://arxiv.org/abs/2303.06562>`_ paper (Table 3).

    Each of the first :obj:`num_layers - 1` layers runs the steps of
    :obj:`order` (default, as in the authors' code):

    .. math::
        \mathbf{H}^{(l)} = \mathrm{ReLU}\Big(\mathrm{Norm}\big(
        \mathrm{Conv}(\mathrm{Dropout}(\mathbf{H}^{(l-1)}))\big)\Big)
        \;\big(+\, \mathbf{H}^{(l-1)} \text{ if residual}\big)

    and the last layer runs only the dropout and convolution steps of
    :obj:`order`, so it outputs logits. With :obj:`fusion`, the hidden
    outputs :math:`\mathbf{H}^{(1)}, \ldots, \mathbf{H}^{(L-1)}` are fused by
    :class:`gnorm.nn.LayerFusion` before the last layer. The residual
    connection skips the first layer, whose input has another width.

    Args:
        in_channels (int): Size of each input sample.
        out_channels (int): Number of classes.
        num_layers (int): Number of graph convolutions, :math:`\geq 1`.
        hidden_channels (int, optional): Width of the hidden layers.
            (default: :obj:`32`)
        dropout (float, optional): Dropout probability before each
            convolution. (default: :obj:`0.6`)
        norm (callable, optional): Makes one norm layer; called with the
            width as :obj:`in_channels` (or :obj:`normalized_shape`,
            :obj:`num_features`) when it takes one. The layer's forward gets
            :obj:`batch`, :obj:`batch_size` and :obj:`edge_index` when its
            signature names them. :obj:`None` for no norm.
            (default: :obj:`None`)
        conv (str, optional): :obj:`"gcn"` (:class:`GCNConv`,
            :math:`\mathbf{D}^{-1/2}(\mathbf{A}+\mathbf{I})\mathbf{D}^{-1/2}`)
            or :obj:`"row"` (row-normalised
            :math:`\mathbf{D}^{-1}(\mathbf{A}+\mathbf{I})`, the authors'
            code). (default: :obj:`"gcn"`)
        order (sequence of str, optional): Steps of a hidden layer, a
            permutation of (a subset of) :obj:`"dropout"`, :obj:`"conv"`,
            :obj:`"norm"`, :obj:`"act"` that contains :obj:`"conv"`.
            PairNorm's authors use :obj:`("dropout", "conv", "norm", "act")`
            too; some codes put the norm after the activation.
            (default: :obj:`("dropout", "conv", "norm", "act")`)
        residual (bool, optional): Add each hidden layer's input to its
            output. (default: :obj:`False`)
        fusion (str, optional): :obj:`"concat"`, :obj:`"max"` or
            :obj:`"gate"` layer fusion of the hidden outputs; needs
            :obj:`num_layers >= 2`. (default: :obj:`None`)
        cached (bool, optional): Cache the normalised adjacency of
            :class:`GCNConv` (transductive, one graph). (default: :obj:`True`)
        shared_layer_norm (bool, optional): Apply one
            :class:`torch.nn.LayerNorm` module, shared by all hidden layers
            (one :math:`\gamma`, :math:`\beta`), right after the norm of
            every hidden layer, as the ContraNorm authors' sweep script does.
            (default: :obj:`False`)
        init (str, optional): :obj:`"glorot"` (PyG's :class:`GCNConv`:
            Glorot weight, zero bias) or :obj:`"uniform"` (weight and bias of
            every convolution drawn from
            :math:`\mathcal{U}(-1/\sqrt{c_{out}}, 1/\sqrt{c_{out}})`, the
            ContraNorm authors' GCN). (default: :obj:`"glorot"`)
    """
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_layers: int,
        hidden_channels: int = 32,
        dropout: float = 0.6,
        norm: Optional[Callable[..., torch.nn.Module]] = None,
        conv: str = 'gcn',
        order: Sequence[str] = ('dropout', 'conv', 'norm', 'act'),
        residual: bool = False,
        fusion: Optional[str] = None,
        cached: bool = True,
        shared_layer_norm: bool = False,
        init: str = 'glorot',
    ):
        super().__init__()
        order = tuple(order)
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"DeepGCN needs num_layers >= 1, got "
                             f"{num_layers!r}")
        if conv not in CONVS:
            raise ValueError(f"DeepGCN got conv={conv!r}; pass one of "
                             f"{', '.join(CONVS)}")
        if (any(step not in STEPS for step in order)
                or len(set(order)) != len(order) or 'conv' not in order):
            raise ValueError(f"DeepGCN got order={list(order)}; pass each of "
                             f"{', '.join(STEPS)} at most once, 'conv' "
                             f"included")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"DeepGCN got dropout={dropout}; pass a "
                             f"probability in [0, 1)")
        if fusion is not None and fusion not in FUSIONS:
            raise ValueError(f"DeepGCN got fusion={fusion!r}; pass one of "
                             f"{', '.join(FUSIONS)} or None")
        if init not in INITS:
            raise ValueError(f"DeepGCN got init={init!r}; pass one of "
                             f"{', '.join(INITS)}")
        if fusion is not None and num_layers < 2:
            raise ValueError("DeepGCN: fusion needs hidden layers to fuse; "
                             "pass num_layers >= 2")

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.dropout = dropout
        self.conv = conv
        self.order = order
        self.residual = residual
        self.init = init

        row = conv == 'row'
        widths = [in_channels] + [hidden_channels] * (num_layers - 1)
        self.convs = torch.nn.ModuleList([
            GCNConv(c_in, c_out, cached=cached and not row, normalize=not row)
            for c_in, c_out in zip(widths, widths[1:] + [out_channels])
        ])
        self.norms = torch.nn.ModuleList()
        if norm is not None and 'norm' in order:
            self.norms.extend(
                _make_norm(norm, hidden_channels)
                for _ in range(num_layers - 1))
        self._norm_inputs = [_forward_inputs(n) for n in self.norms]
        self._input_key, self._input_nonzero = None, None
        self.shared_norm = None
        if shared_layer_norm and 'norm' in order:
            self.shared_norm = torch.nn.LayerNorm(hidden_channels)
        self.fusion = None
        if fusion is not None:
            self.fusion = LayerFusion(fusion, in_channels=hidden_channels,
                                      num_layers=num_layers - 1)
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters of the module."""
        for module in [*self.convs, *self.norms, self.shared_norm,
                       self.fusion]:
            if hasattr(module, 'reset_parameters'):
                module.reset_parameters()
        if self.init == 'uniform':
            for conv in self.convs:
                bound = 1.0 / math.sqrt(conv.out_channels)
                torch.nn.init.uniform_(conv.lin.weight, -bound, bound)
                torch.nn.init.uniform_(conv.bias, -bound, bound)

    def _input_dropout(self, x: Tensor) -> Tensor:
        r"""Dropout of the input features; for a sparse input (at most 10 %
        non-zero, constant across calls, no gradient) through
        :func:`sparse_dropout`, its non-zero pattern found once."""
        if (not self.training or self.dropout == 0.0 or x.requires_grad
                or x.dim() != 2):
            return dropout(x, self.dropout, self.training)
        key = (x.data_ptr(), x._version, tuple(x.shape), x.dtype, x.device)
        if self._input_key != key:
            index = x.nonzero(as_tuple=True)
            sparse = index[0].numel() <= 0.1 * x.numel()
            self._input_key = key
            self._input_nonzero = index if sparse else None
        if self._input_nonzero is None:
            return dropout(x, self.dropout)
        return sparse_dropout(x, self.dropout, self._input_nonzero)

    def _layer(self, i: int, x: Tensor, edge_index: Tensor,
               edge_weight: OptTensor, inputs: dict) -> Tensor:
        last = i == self.num_layers - 1
        for step in self.order:
            if step == 'dropout' and i == 0:
                x = self._input_dropout(x)
            elif step == 'dropout':
                x = dropout(x, self.dropout, self.training)
            elif step == 'conv':
                x = self.convs[i](x, edge_index, edge_weight)
            elif last:  # the output layer: no norm, no activation
                continue
            elif step == 'norm':
                if len(self.norms) > 0:
                    kwargs = {k: inputs[k] for k in self._norm_inputs[i]}
                    x = self.norms[i](x, **kwargs)
                if self.shared_norm is not None:
                    x = self.shared_norm(x)
            elif step == 'act':
                x = x.relu()
        return x

    def forward(self, x: Tensor, edge_index: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, return_hidden: bool = False,
                ) -> Union[Tensor, Tuple[Tensor, List[Tensor]]]:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Node features :obj:`[num_nodes, in_channels]`.
            edge_index (torch.Tensor): Edges :obj:`[2, num_edges]`.
            batch (torch.Tensor, optional): Graph of each node, handed to the
                norms. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs.
                (default: :obj:`None`)
            return_hidden (bool, optional): Also return the output of every
                layer (:obj:`num_layers` tensors, the last being the logits).
                (default: :obj:`False`)

        Returns:
            torch.Tensor: Logits :obj:`[num_nodes, out_channels]` (and the
            list of layer outputs if :obj:`return_hidden`).
        """
        inputs = dict(batch=batch, batch_size=batch_size,
                      edge_index=edge_index)
        edge_weight = None
        if self.conv == 'row':
            edge_index, edge_weight = row_normalized(edge_index, x.size(0),
                                                     x.dtype)
        hidden = []
        for i in range(self.num_layers - 1):
            h = self._layer(i, x, edge_index, edge_weight, inputs)
            x = h + x if self.residual and h.shape == x.shape else h
            hidden.append(x)
        if self.fusion is not None:
            x = self.fusion(hidden, batch=batch, batch_size=batch_size)
        x = self._layer(self.num_layers - 1, x, edge_index, edge_weight,
                        inputs)
        return (x, hidden + [x]) if return_hidden else x

    def __repr__(self) -> str:
        args = [f'{self.in_channels}', f'{self.out_channels}',
                f'num_layers={self.num_layers}',
                f'hidden_channels={self.hidden_channels}']
        if len(self.norms) > 0:
            args.append(f'norm={self.norms[0]}')
        if self.conv != 'gcn':
            args.append(f'conv={self.conv!r}')
        if self.shared_norm is not None:
            args.append('shared_layer_norm=True')
        if self.init != 'glorot':
            args.append(f'init={self.init!r}')
        if self.residual:
            args.append('residual=True')
        if self.fusion is not None:
            args.append(f'fusion={self.fusion.mode!r}')
        return f'{self.__class__.__name__}({", ".join(args)})'
