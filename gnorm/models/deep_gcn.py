import inspect
import math
import warnings
from typing import (Any, Callable, List, NamedTuple, Optional, Sequence,
                    Tuple, Union)

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.typing import OptTensor
from torch_geometric.utils import add_remaining_self_loops, degree

from gnorm.nn import LayerFusion, Stacked
from gnorm.nn._inputs import check_batch, check_edge_index
from gnorm.nn._sparse import (IndexEdges, block_diagonal, csr, csr_pattern,
                              edge_sum, spmm)
from gnorm.nn.contra_norm import MaskedPairs, masked_pairs

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


def gcn_normalized(edge_index: Tensor, num_nodes: int,
                   dtype: torch.dtype = torch.float,
                   ) -> Tuple[Tensor, Tensor]:
    r"""Edges and weights of
    :math:`\mathbf{D}^{-1/2}(\mathbf{A} + \mathbf{I})\mathbf{D}^{-1/2}`, the
    propagation of :class:`torch_geometric.nn.GCNConv`."""
    return gcn_norm(edge_index, None, num_nodes, add_self_loops=True,
                    dtype=dtype)


class SparsePair(NamedTuple):
    r"""A sparse CSR matrix and its transpose, for products whose backward
    pass needs the transpose (built once, not at every backward)."""
    matrix: Tensor
    transpose: Tensor


class _SparseMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, transpose: Tensor, matrix: Tensor,
                dense: Tensor) -> Tensor:
        ctx.transpose = transpose
        return spmm(matrix, dense)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, None, spmm(ctx.transpose, grad)


def sparse_mm(pair: SparsePair, dense: Tensor) -> Tensor:
    r""":obj:`pair.matrix @ dense`, its gradient through
    :obj:`pair.transpose`."""
    return _SparseMM.apply(pair.transpose, pair.matrix, dense)


def propagation_matrix(edge_index: Tensor, edge_weight: Tensor,
                       num_nodes: int) -> SparsePair:
    r"""The sparse :obj:`[num_nodes, num_nodes]` matrix :math:`P` with
    :math:`P_{ij}` = the weight of edge :math:`j \to i`, so that
    :math:`P \mathbf{X}` aggregates at each node what it receives, and its
    transpose."""
    def sparse(index):
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='.*[Ss]parse')
            return torch.sparse_coo_tensor(
                index, edge_weight, (num_nodes, num_nodes)
            ).coalesce().to_sparse_csr()
    return SparsePair(sparse(edge_index.flip(0)), sparse(edge_index))


class EdgeList(NamedTuple):
    r"""The propagation :math:`P` as its edges: :math:`P_{ij}` =
    :obj:`weight[e]` for :obj:`src[e]` = :math:`j`, :obj:`dst[e]` =
    :math:`i` (gathers and scatters, which :func:`torch.compile` takes; it
    takes no sparse tensor)."""
    src: Tensor
    dst: Tensor
    weight: Tensor


class Graph(NamedTuple):
    r"""What :class:`DeepGCN` (and :class:`~gnorm.models.ResGNN`, its
    entries then the input's sparse matrix only) derives from a graph
    once, checked, and reuses in every layer and every call: the
    propagation matrix, the :class:`~gnorm.nn.contra_norm.MaskedPairs`
    of norms that take them (else :obj:`None`) and its number of nodes.
    Made by
    :meth:`DeepGCN.prepare`; pass it to :meth:`DeepGCN.forward` in place of
    :obj:`edge_index`, with any input of :obj:`num_nodes` rows, e.g. into a
    compiled step (it holds no sparse tensor when prepared with
    :obj:`csr=False`).

    With :obj:`csr=True` it also keeps the sparse entries of the input it
    was prepared with (:obj:`entries`, :obj:`None` for a dense input), for
    that very tensor only: :obj:`input` and its version counter
    :obj:`version` (an in-place change bumps it). :meth:`DeepGCN.forward`
    uses them when it gets this tensor, unchanged and without gradient
    (an identity test: no value read, no host round-trip), and finds the
    entries of any other input anew, so it always computes on the input it
    is given."""
    propagation: Union[SparsePair, EdgeList]
    pairs: Optional[MaskedPairs]
    entries: Optional[Tuple[Any, ...]]
    num_nodes: int
    input: Optional[Tensor] = None
    version: int = 0


def propagate(matrix: Union[SparsePair, EdgeList], x: Tensor) -> Tensor:
    r""":math:`P \mathbf{X}` for :obj:`x` of shape :obj:`[nodes, channels]`
    or :obj:`[runs, nodes, channels]`: one sparse product for all runs, their
    features side by side (or, for an :class:`EdgeList`, one gather and
    scatter along the edges)."""
    if isinstance(matrix, EdgeList):
        return edge_sum(matrix.weight, x, IndexEdges(matrix.src, matrix.dst))
    if x.dim() == 2:
        return sparse_mm(matrix, x)
    runs, nodes, channels = x.shape
    out = sparse_mm(matrix, x.transpose(0, 1).reshape(nodes, runs * channels))
    return out.view(nodes, runs, channels).transpose(0, 1)  # [runs, nodes, c]


def rand(shape: Sequence[int], like: Tensor,
         generators: Optional[Sequence[torch.Generator]] = None,
         runs: bool = False) -> Tensor:
    r"""Uniform :math:`[0, 1)` numbers of :obj:`shape` on :obj:`like`'s
    device: from the global generator, or from :obj:`generators`, one per
    run, each drawing its run's slice (:obj:`runs`: :obj:`shape` starts
    with the run dimension) so that a run's numbers do not depend on the
    other runs."""
    kwargs = dict(dtype=like.dtype, device=like.device)
    if generators is None:
        return torch.rand(shape, **kwargs)
    if not runs:
        return torch.rand(shape, generator=generators[0], **kwargs)
    out = torch.empty(shape, **kwargs)
    for numbers, generator in zip(out, generators):  # [runs, ...]
        numbers.uniform_(generator=generator)  # as torch.rand draws them
    return out


def dropout(x: Tensor, p: float, training: bool = True,
            generators: Optional[Sequence[torch.Generator]] = None,
            runs: bool = False) -> Tensor:
    r""":func:`torch.nn.functional.dropout`, its mask drawn by :func:`rand`
    (on the CPU :func:`torch.rand` is also ~2.4x faster than Bernoulli
    sampling); :obj:`generators` and :obj:`runs` as in :func:`rand`."""
    if not training or p == 0.0:
        return x
    if generators is None and x.device.type != 'cpu':
        return F.dropout(x, p=p)
    keep = rand(x.shape, x, generators, runs).ge_(p)  # in place: 0. or 1.
    return x * keep.div_(1.0 - p)


class LayerOutput(torch.nn.Identity):
    r"""Returns its input: marks the output of a layer of
    :class:`DeepGCN` so that forward hooks (:mod:`gnorm.monitor`) see it;
    no parameter, no state, nothing in :obj:`state_dict`."""


class RunConv(torch.nn.Module):
    r"""The weights of one graph convolution of :obj:`runs` runs (none:
    one run), :math:`\mathbf{X}' = P \mathbf{X} \mathbf{W}^\top +
    \mathbf{b}`, stacked along a leading run dimension: weight
    :obj:`[runs, out_channels, in_channels]`, bias :obj:`[runs,
    out_channels]`."""
    def __init__(self, in_channels: int, out_channels: int,
                 runs: Optional[int] = None):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        lead = () if runs is None else (runs, )
        self.weight = Parameter(torch.empty(*lead, out_channels, in_channels))
        self.bias = Parameter(torch.empty(*lead, out_channels))

    def reset_parameters(self, init: str = 'glorot',
                         generators: Optional[Sequence[torch.Generator]]
                         = None):
        r"""Glorot weight and zero bias, or (:obj:`init="uniform"`) both
        from :math:`\mathcal{U}(-1/\sqrt{c_{out}}, 1/\sqrt{c_{out}})`;
        run :math:`r` draws from :obj:`generators[r]` if given."""
        weights = self.weight.view(-1, self.out_channels, self.in_channels)
        biases = self.bias.view(-1, self.out_channels)
        if generators is None:
            generators = [None] * weights.size(0)
        if init == 'glorot':
            bound = math.sqrt(6.0 / (self.in_channels + self.out_channels))
        else:
            bound = 1.0 / math.sqrt(self.out_channels)
        with torch.no_grad():
            for weight, bias, gen in zip(weights, biases, generators):
                weight.uniform_(-bound, bound, generator=gen)
                if init == 'glorot':
                    bias.zero_()
                else:
                    bias.uniform_(-bound, bound, generator=gen)

    def linear(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf{X} \mathbf{W}^\top` for :obj:`x` of shape
        :obj:`[(runs,) nodes, in_channels]` (without the run dimension, the
        same input for every run)."""
        return x @ self.weight.transpose(-1, -2)

    def sparse_linear(self, x: SparsePair) -> Tensor:
        r""":math:`\mathbf{X} \mathbf{W}^\top` of a sparse input
        :obj:`[nodes, in_channels]` that every run sees."""
        weight = self.weight.transpose(-1, -2)  # [(runs,) in, out]
        if weight.dim() == 2:
            return sparse_mm(x, weight)
        runs, nodes = weight.size(0), x.matrix.size(0)
        out = sparse_mm(x, weight.transpose(0, 1).reshape(self.in_channels,
                                                          -1))
        return out.view(nodes, runs, -1).transpose(0, 1)  # [runs, nodes, out]

    def entries_linear(self, x: SparsePair, num_nodes: int) -> Tensor:
        r""":math:`\mathbf{X}_r \mathbf{W}_r^\top` of sparse inputs that
        differ between runs: one sparse product of their block-diagonal
        :obj:`[runs * nodes, runs * in_channels]` matrix :obj:`x` with the
        stacked weights."""
        runs = 1 if self.weight.dim() == 2 else self.weight.size(0)
        weight = self.weight.transpose(-1, -2).reshape(
            runs * self.in_channels, self.out_channels)  # [runs * in, out]
        out = sparse_mm(x, weight)  # [runs * nodes, out]
        return out.view(*self.bias.shape[:-1], num_nodes, self.out_channels)

    def extra_repr(self) -> str:
        runs = '' if self.weight.dim() == 2 else f', runs={self.weight.size(0)}'
        return f'{self.in_channels}, {self.out_channels}{runs}'


def make_norm(factory: Callable[..., torch.nn.Module],
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


def forward_inputs(module: torch.nn.Module) -> Tuple[str, ...]:
    r"""The optional inputs of :obj:`_NORM_INPUTS` that
    :obj:`module.forward` accepts."""
    params = inspect.signature(module.forward).parameters
    return tuple(name for name in _NORM_INPUTS if name in params)


class GraphCalls:
    r"""How a model that derives a :class:`Graph` from its inputs
    (:class:`DeepGCN`, :class:`~gnorm.models.ResGNN`) gets the graph of a
    call: the one passed in, checked against the input, or prepared now,
    or with :obj:`cached` the one of the first call. The model defines
    :meth:`prepare` and :meth:`_input_entries` (the sparse entries of an
    input, or :obj:`None`) and sets :obj:`cached`, :obj:`in_channels` and
    :obj:`_cached_graph`."""

    def _for_input(self, graph: Graph, x: Tensor) -> Graph:
        r""":obj:`graph` with the sparse entries of :obj:`x`: those it
        keeps if :obj:`x` is the tensor it was prepared with, unchanged and
        without gradient, else found now (none with :obj:`csr=False`)."""
        if x.size(-2) != graph.num_nodes or x.size(-1) != self.in_channels:
            raise ValueError(f"{self}: its graph was prepared for "
                             f"{graph.num_nodes} nodes, got an input of "
                             f"shape {list(x.shape)}; pass "
                             f"[{graph.num_nodes}, {self.in_channels}] or "
                             f"prepare() the graph of this input")
        if graph.input is None or (graph.input is x and not x.requires_grad
                                   and graph.version == x._version):
            return graph
        return graph._replace(entries=self._input_entries(x), input=None)

    def _graph_of(self, x: Tensor, edge_index: Tensor, batch: OptTensor,
                  batch_size: Optional[int]) -> Graph:
        r"""The :class:`Graph` of a call: prepared now, or with
        :obj:`cached` the one of the first call (the input's entries found
        anew)."""
        if not self.cached:
            return self.prepare(x, edge_index, batch, batch_size)
        if self._cached_graph is None:
            graph = self.prepare(x, edge_index, batch, batch_size)
            self._cached_graph = graph._replace(entries=None, input=None)
            return graph
        nodes = self._cached_graph.num_nodes
        if nodes != x.size(-2):
            raise ValueError(f"{self}: its cached graph has {nodes} nodes, "
                             f"the input {x.size(-2)}; pass cached=False "
                             f"to run it on more than one graph")
        return self._cached_graph._replace(entries=self._input_entries(x))

    def _call_graph(self, x: Tensor, edge_index: Union[Tensor, Graph],
                    batch: OptTensor, batch_size: Optional[int],
                    generators: Optional[Sequence[torch.Generator]]
                    ) -> Tuple[Graph, dict]:
        r"""The graph of a call (:obj:`edge_index` itself where it is a
        :class:`Graph`, else :meth:`_graph_of`) and the optional inputs
        handed to the norms; one generator per run, or none."""
        if generators is not None and len(generators) != (self.runs or 1):
            raise ValueError(f"{self}: got {len(generators)} generators; "
                             f"pass one per run")
        if isinstance(edge_index, Graph):
            graph, edge_index = self._for_input(edge_index, x), None
        else:
            graph = self._graph_of(x, edge_index, batch, batch_size)
        return graph, dict(batch=batch, batch_size=batch_size,
                           edge_index=edge_index)


class DeepGCN(GraphCalls, torch.nn.Module):
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
            convolution; the command line's default too (``0.6``, Kipf and
            Welling's and the ContraNorm paper's, leaves deep stacks far
            behind, see ``conf/model/gcn.yaml``). (default: :obj:`0.2`)
        norm (callable, optional): Makes one norm layer; called with the
            width as :obj:`in_channels` (or :obj:`normalized_shape`,
            :obj:`num_features`) when it takes one. The layer's forward gets
            :obj:`batch`, :obj:`batch_size` and :obj:`edge_index` when its
            signature names them. :obj:`None` for no norm.
            (default: :obj:`None`)
        conv (str, optional): :obj:`"gcn"` (the propagation of PyG's
            :class:`GCNConv`,
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
        cached (bool, optional): As in :class:`GCNConv`: the first call
            prepares the graph (propagation matrix, pairs of the norms) and
            every later call reuses it, whatever :obj:`edge_index` it gets
            (transductive learning on one graph only). A sparse input's
            entries are found at every call. A training loop can instead
            hold the :class:`Graph` of :meth:`prepare` and pass it to
            :meth:`forward`. (default: :obj:`False`)
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
        dropout: float = 0.2,
        norm: Union[None, Callable[..., torch.nn.Module],
                    Sequence[Callable[..., torch.nn.Module]]] = None,
        conv: str = 'gcn',
        order: Sequence[str] = ('dropout', 'conv', 'norm', 'act'),
        residual: bool = False,
        fusion: Optional[str] = None,
        cached: bool = False,
        shared_layer_norm: bool = False,
        init: str = 'glorot',
        runs: Optional[int] = None,
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
        if runs is not None and (not isinstance(runs, int) or runs < 1):
            raise ValueError(f"DeepGCN got runs={runs!r}; pass an integer "
                             f">= 1 or None")
        if runs is not None and fusion is not None:
            raise ValueError("DeepGCN: fusion is not available with runs; "
                             "pass fusion=None or train runs one by one")
        factories = norm
        if isinstance(norm, (list, tuple)):
            if runs is None or len(norm) != runs:
                raise ValueError(f"DeepGCN got {len(norm)} norm factories; "
                                 f"pass one per run (runs={runs})")
        elif norm is not None:
            factories = [norm] * (runs or 1)

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.dropout = dropout
        self.conv = conv
        self.order = order
        self.residual = residual
        self.init = init
        self.cached = cached
        self.runs = runs

        widths = [in_channels] + [hidden_channels] * (num_layers - 1)
        self.convs = torch.nn.ModuleList([
            RunConv(c_in, c_out, runs)
            for c_in, c_out in zip(widths, widths[1:] + [out_channels])
        ])
        # The output of every layer (as return_hidden gives them), for
        # forward hooks: outputs.0 ... outputs.{num_layers - 1}.
        self.outputs = torch.nn.ModuleList(
            [LayerOutput() for _ in range(num_layers)])
        self.norms = torch.nn.ModuleList()
        if factories is not None and 'norm' in order:
            self.norms.extend(
                self._per_run([make_norm(f, hidden_channels)
                               for f in factories])
                for _ in range(num_layers - 1))
        self._norm_inputs = [forward_inputs(getattr(n, 'module', n))
                             for n in self.norms]
        self._takes_pairs = [
            getattr(getattr(n, 'module', n), 'takes_pairs', False)
            for n in self.norms]
        self._cached_graph: Optional[Graph] = None
        self.shared_norm = None
        if shared_layer_norm and 'norm' in order:
            self.shared_norm = self._per_run([
                torch.nn.LayerNorm(hidden_channels)
                for _ in range(runs or 1)])
        self.fusion = None
        if fusion is not None:
            self.fusion = LayerFusion(fusion, in_channels=hidden_channels,
                                      num_layers=num_layers - 1)
        self.reset_parameters()

    def _per_run(self, modules: List[torch.nn.Module]) -> torch.nn.Module:
        r"""One module for the norms of all runs (an identity serves
        them as it is)."""
        if self.runs is None or isinstance(modules[0], torch.nn.Identity):
            return modules[0]
        return Stacked(modules)

    def reset_parameters(self, generators: Optional[
            Sequence[torch.Generator]] = None):
        r"""Resets all learnable parameters of the module; the random
        weights of run :math:`r` are drawn from :obj:`generators[r]` if
        given (one generator per run, on the CPU)."""
        for module in [*self.norms, self.shared_norm, self.fusion]:
            if hasattr(module, 'reset_parameters'):
                module.reset_parameters()
        for conv in self.convs:
            conv.reset_parameters(self.init, generators)

    def _input_entries(self, x: Tensor) -> Optional[Tuple[Any, ...]]:
        r"""For an input that is at most 10 % non-zero and without
        gradient: the values of its non-zero entries, their order by
        column, its sparse matrix and the pattern of the block-diagonal
        matrix that holds one copy of it per run (rows, then columns, of
        the matrix and of its transpose); else :obj:`None`."""
        if x.requires_grad or x.dim() != 2:
            return None
        row, col = x.nonzero(as_tuple=True)  # sorted by row, column
        if row.numel() > 0.1 * x.numel():
            return None
        value = x[row, col]
        order = torch.argsort(col * x.size(0) + row)  # by column
        size, runs = tuple(x.shape), self.runs or 1
        matrix = SparsePair(
            csr(row, col, value, size),
            csr(col[order], row[order], value[order], size[::-1]))
        blocks = (block_diagonal(row, col, size, runs),
                  block_diagonal(col[order], row[order], size[::-1], runs))
        return value, order, matrix, blocks

    def prepare(self, x: Tensor, edge_index: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, csr: bool = True,
                ) -> Graph:
        r"""The :class:`Graph` of :obj:`edge_index` (and :obj:`batch`),
        its inputs checked: a training loop on one graph prepares it once
        and passes it to :meth:`forward` in place of :obj:`edge_index`, so
        that it is derived once, not in every layer and epoch. :obj:`x`
        gives the number of nodes and the type of the edge weights; the
        sparse entries of :obj:`x` are kept for calls with this very tensor
        (any other input's are found at its call). With :obj:`csr=False`,
        the propagation is an :class:`EdgeList` and every input is used
        dense (no sparse tensor: for :func:`torch.compile`)."""
        num_nodes = x.size(-2)
        check_edge_index(self, edge_index, num_nodes, values=True)
        check_batch(self, batch, num_nodes, batch_size, values=True)
        norm = row_normalized if self.conv == 'row' else gcn_normalized
        edges, weight = norm(edge_index, num_nodes, x.dtype)
        matrix = (propagation_matrix(edges, weight, num_nodes) if csr
                  else EdgeList(edges[0], edges[1], weight))
        pairs = None
        if any(self._takes_pairs):
            pairs = masked_pairs(edge_index, num_nodes, batch, batch_size)
        if not csr:
            return Graph(matrix, pairs, None, num_nodes)
        return Graph(matrix, pairs, self._input_entries(x), num_nodes, x,
                     x._version)

    def _input_conv(self, x: Tensor, graph: Graph, generators) -> Tensor:
        r"""Dropout then the first convolution, for a sparse input: random
        numbers are drawn for the non-zero entries only (bag-of-words
        features are ~1 % non-zero), each run keeping its own entries: one
        product of the block-diagonal matrix of every run's input, the
        entries a run drops set to zero (a fixed pattern: nothing to sort or
        search at each step)."""
        value, order, sparse, (pattern, pattern_t) = graph.entries
        conv = self.convs[0]
        if not self.training or self.dropout == 0.0:
            h = conv.sparse_linear(sparse)
        else:
            runs, (nodes, channels) = self.runs or 1, x.shape
            values = dropout(value.expand(runs, -1), self.dropout,
                             generators=generators, runs=True)  # [runs, nnz]
            size = (runs * nodes, runs * channels)
            blocks = SparsePair(  # block-diagonal: one block per run
                csr_pattern(pattern, values.view(-1), size),
                csr_pattern(pattern_t, values[:, order].view(-1),
                            size[::-1]))
            h = conv.entries_linear(blocks, nodes)
        return propagate(graph.propagation, h) + conv.bias.unsqueeze(-2)

    def _layer(self, i: int, x: Tensor, graph: Graph, inputs: dict,
               generators) -> Tensor:
        last = i == self.num_layers - 1
        steps = self.order
        # The input layer of a sparse input: dropout and conv in one.
        fused = (i == 0 and steps[:2] == ('dropout', 'conv')
                 and graph.entries is not None)
        if fused:
            x = self._input_conv(x, graph, generators)
            steps = steps[2:]
        runs = self.runs is not None
        for step in steps:
            shared = runs and i == 0 and x.dim() == 2  # no run dim yet
            if step == 'dropout':
                if shared and self.training and self.dropout > 0:
                    x = x.expand(self.runs, *x.shape)
                x = dropout(x, self.dropout, self.training, generators, runs)
            elif step == 'conv':
                conv = self.convs[i]
                x = propagate(graph.propagation, conv.linear(x)) + \
                    conv.bias.unsqueeze(-2)
            elif last:  # the output layer: no norm, no activation
                continue
            elif step == 'norm':
                if shared:
                    x = x.expand(self.runs, *x.shape)
                if len(self.norms) > 0:
                    kwargs = {k: inputs[k] for k in self._norm_inputs[i]}
                    if self._takes_pairs[i] and 'edge_index' in kwargs:
                        kwargs['edge_index'] = graph.pairs
                    x = self.norms[i](x, **kwargs)
                if self.shared_norm is not None:
                    x = self.shared_norm(x)
            elif step == 'act':
                x = x.relu()
        return x

    def forward(self, x: Tensor, edge_index: Union[Tensor, Graph],
                batch: OptTensor = None,
                batch_size: Optional[int] = None, return_hidden: bool = False,
                generators: Optional[Sequence[torch.Generator]] = None,
                ) -> Union[Tensor, Tuple[Tensor, List[Tensor]]]:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Node features :obj:`[num_nodes, in_channels]`
                (shared by all runs).
            edge_index (torch.Tensor): Edges :obj:`[2, num_edges]`, or
                their :class:`Graph` from :meth:`prepare` (used as it is,
                with any :obj:`x` of its number of nodes).
            batch (torch.Tensor, optional): Graph of each node, handed to the
                norms. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs.
                (default: :obj:`None`)
            return_hidden (bool, optional): Also return the output of every
                layer (:obj:`num_layers` tensors, the last being the logits).
                (default: :obj:`False`)
            generators (list of torch.Generator, optional): One per run, on
                :obj:`x`'s device: the dropout masks of run :math:`r` come
                from :obj:`generators[r]`. (default: :obj:`None`: the global
                generator)

        Returns:
            torch.Tensor: Logits :obj:`[(runs,) num_nodes, out_channels]`
            (and the list of layer outputs if :obj:`return_hidden`).
        """
        graph, inputs = self._call_graph(x, edge_index, batch, batch_size,
                                         generators)
        hidden = []
        for i in range(self.num_layers - 1):
            h = self._layer(i, x, graph, inputs, generators)
            x = h + x if self.residual and h.size(-1) == x.size(-1) else h
            x = self.outputs[i](x)
            hidden.append(x)
        if self.fusion is not None:
            x = self.fusion(hidden, batch=batch, batch_size=batch_size)
        x = self._layer(self.num_layers - 1, x, graph, inputs, generators)
        x = self.outputs[-1](x)
        if self.runs is not None and x.dim() == 2:  # a 1-layer net, no dropout
            x = x.expand(self.runs, *x.shape)
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
        if self.runs is not None:
            args.append(f'runs={self.runs}')
        return f'{self.__class__.__name__}({", ".join(args)})'
