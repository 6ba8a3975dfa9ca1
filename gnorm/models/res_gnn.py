import inspect
import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.typing import OptTensor
from torch_geometric.utils import add_remaining_self_loops, degree, softmax

from gnorm.models.deep_gcn import (EdgeList, Graph, GraphCalls, LayerOutput,
                                   RunConv, SparsePair, dropout,
                                   forward_inputs, gcn_normalized, make_norm,
                                   propagate, propagation_matrix)
from gnorm.nn import SepNorm, Stacked
from gnorm.nn._inputs import check_batch, check_edge_index
from gnorm.nn._sparse import csr
from gnorm.nn.contra_norm import masked_pairs

CONVS = ('gcn', 'sage', 'gat', 'none')
# The block of ResGNN: Platonov et al.'s pre-norm residual block, or Luo
# et al.'s post-norm block (conv plus a skip, then norm, ReLU, dropout).
BLOCKS = ('pre', 'post')
# The skip of a post-norm block: a linear map of the block's input (Luo
# et al.'s), the input itself (the first block, whose input is the raw
# features, maps it linearly), or none (the plain stack).
SKIPS = ('linear', 'identity', 'none')
# The initialisation of a post-norm block's GCN convolution: PyG's GCNConv's
# (Glorot's weights, zero bias; Luo et al.'s code), or torch.nn.Linear's
# (weight and bias from U(+-1/sqrt(c_in)), the bias after the propagation).
CONV_INITS = ('glorot', 'linear')


class RunLinear(RunConv):
    r""":class:`torch.nn.Linear` of :obj:`runs` runs (none: one run), its
    weight :obj:`[(runs,) out_channels, in_channels]` and bias
    :obj:`[(runs,) out_channels]` (or none), initialised as
    :class:`torch.nn.Linear` does: both from
    :math:`\mathcal{U}(-1/\sqrt{c_{in}}, 1/\sqrt{c_{in}})`."""
    def __init__(self, in_channels: int, out_channels: int,
                 runs: Optional[int] = None, bias: bool = True):
        super().__init__(in_channels, out_channels, runs)
        if not bias:
            self.register_parameter('bias', None)

    def reset_parameters(self, generators: Optional[
            Sequence[torch.Generator]] = None):
        r"""Draws the weights (then the bias) of run :math:`r` from
        :obj:`generators[r]` if given."""
        weights = self.weight.view(-1, self.out_channels, self.in_channels)
        biases = [None] * weights.size(0) if self.bias is None else \
            self.bias.view(-1, self.out_channels)
        if generators is None:
            generators = [None] * weights.size(0)
        bound = self.init_bound()
        with torch.no_grad():
            for weight, bias, gen in zip(weights, biases, generators):
                weight.uniform_(-bound, bound, generator=gen)
                if bias is not None:
                    bias.uniform_(-bound, bound, generator=gen)

    def init_bound(self) -> float:
        r"""The bound of the uniform initialisation: torch.nn.Linear's
        :math:`1/\sqrt{c_{in}}`."""
        return 1.0 / math.sqrt(self.in_channels)

    def forward(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf{X} \mathbf{W}^\top + \mathbf{b}` for :obj:`x` of
        shape :obj:`[(runs,) nodes, in_channels]` (without the run
        dimension, the same input for every run)."""
        if self.weight.dim() == 2:
            return F.linear(x, self.weight, self.bias)
        out = self.linear(x)  # [runs, nodes, out]
        return out if self.bias is None else out + self.bias.unsqueeze(-2)


class GlorotLinear(RunLinear):
    r""":class:`RunLinear` without bias, initialised as PyG's
    :class:`~torch_geometric.nn.conv.GCNConv` initialises its weight:
    Glorot's :math:`\mathcal{U}(\pm\sqrt{6 / (c_{in} + c_{out})})`."""
    def __init__(self, in_channels: int, out_channels: int,
                 runs: Optional[int] = None):
        super().__init__(in_channels, out_channels, runs, bias=False)

    def init_bound(self) -> float:
        return math.sqrt(6.0 / (self.in_channels + self.out_channels))


class FeedForward(torch.nn.Module):
    r"""The feed-forward part of a residual block, :math:`\mathbf{W}_2\,
    \mathrm{GELU}(\mathrm{Dropout}(\mathbf{W}_1 \mathbf{Z} + \mathbf{b}_1))
    + \mathbf{b}_2` (the block's last dropout comes after)."""
    def __init__(self, in_channels: int, hidden_channels: int,
                 out_channels: int, runs: Optional[int] = None):
        super().__init__()
        self.lin1 = RunLinear(in_channels, hidden_channels, runs)
        self.lin2 = RunLinear(hidden_channels, out_channels, runs)

    def reset_parameters(self, generators=None):
        self.lin1.reset_parameters(generators)
        self.lin2.reset_parameters(generators)

    def forward(self, x: Tensor, p: float, training: bool,
                generators, runs: bool) -> Tensor:
        x = dropout(self.lin1(x), p, training, generators, runs)
        return self.lin2(F.gelu(x))


class Attention(torch.nn.Module):
    r"""Platonov et al.'s GAT propagation: :math:`\mathbf{H} = \mathbf{W}
    \mathbf{Z} + \mathbf{b}`, per head :math:`k` scores :math:`e_{ji} =
    \mathrm{LeakyReLU}_{0.2}(\mathbf{a}_k^\top \mathbf{h}_j + c_k +
    \mathbf{a}'^\top_k \mathbf{h}_i)` of the edges :math:`j \to i` (self
    loops included), a softmax over each node's in-edges, and
    :math:`\mathbf{h}'_i = \sum_j \alpha_{ji} \mathbf{h}_j`; channel
    :math:`c` belongs to head :math:`c \bmod` :obj:`heads`, as in their
    code."""
    def __init__(self, channels: int, heads: int,
                 runs: Optional[int] = None):
        super().__init__()
        self.heads = heads
        self.lin = RunLinear(channels, channels, runs)
        self.att_src = RunLinear(channels, heads, runs)
        self.att_dst = RunLinear(channels, heads, runs, bias=False)

    def reset_parameters(self, generators=None):
        for lin in (self.lin, self.att_src, self.att_dst):
            lin.reset_parameters(generators)

    def forward(self, x: Tensor, edges: EdgeList) -> Tensor:
        h = self.lin(x)  # [(runs,) nodes, channels]
        *lead, nodes, channels = h.shape
        score = (self.att_src(h).index_select(-2, edges.src) +
                 self.att_dst(h).index_select(-2, edges.dst))
        score = F.leaky_relu(score, 0.2)  # [(runs,) edges, heads]
        alpha = softmax(score, edges.dst, num_nodes=nodes,
                        dim=score.dim() - 2)
        split = (channels // self.heads, self.heads)
        message = h.index_select(-2, edges.src).view(
            *lead, -1, *split) * alpha.unsqueeze(-2)  # [(runs,) E, c/H, H]
        out = h.new_zeros(*lead, nodes, *split).index_add_(
            len(lead), edges.dst, message)
        return out.view(*lead, nodes, channels)


def sage_normalized(edge_index: Tensor, num_nodes: int,
                    dtype: torch.dtype = torch.float,
                    ) -> Tuple[Tensor, Tensor]:
    r"""Edges and weights of the mean over each node's in-neighbours,
    :math:`\mathbf{D}^{-1}\mathbf{A}` without self-loops (a node without
    neighbours gets zeros)."""
    deg = degree(edge_index[1], num_nodes, dtype=dtype)  # [num_nodes]
    return edge_index, deg.reciprocal()[edge_index[1]]


class ResGNN(GraphCalls, torch.nn.Module):
    r"""The residual GNN of the `"A Critical Look at the Evaluation of GNNs
    under Heterophily: Are We Really Making Progress?"
    <https://arxiv.org/abs/2302.11640>`_ paper (Platonov et al., ICLR
    2023): an input layer, :obj:`num_layers` pre-norm residual blocks of a
    graph propagation and a feed-forward network (the :obj:`"res+"`
    block of :class:`torch_geometric.nn.DeepGCNLayer`), a final norm and
    an output layer.

    .. math::
        \mathbf{H}^{(0)} &= \mathrm{GELU}\big(\mathrm{Dropout}(
        \mathbf{X}\mathbf{W}_{in}^\top + \mathbf{b}_{in})\big)

        \mathbf{H}^{(l)} &= \mathbf{H}^{(l-1)} + \mathrm{Dropout}\Big(
        \mathrm{FF}_l\big(\mathrm{Prop}(\mathrm{Norm}_l(
        \mathbf{H}^{(l-1)}))\big)\Big)

        \mathbf{Y} &= \mathrm{Norm}_{L+1}(\mathbf{H}^{(L)})
        \mathbf{W}_{out}^\top + \mathbf{b}_{out}

    with :math:`\mathrm{FF}(\mathbf{Z}) = \mathrm{GELU}(\mathrm{Dropout}(
    \mathbf{Z}\mathbf{W}_1^\top + \mathbf{b}_1))\mathbf{W}_2^\top +
    \mathbf{b}_2`. The propagation has no weight of its own (the
    feed-forward network does the linear maps): :obj:`"gcn"`
    :math:`\mathbf{D}^{-1/2}(\mathbf{A}+\mathbf{I})\mathbf{D}^{-1/2}
    \mathbf{Z}`; :obj:`"sage"` :math:`[\mathbf{Z} \,\|\, \mathbf{D}^{-1}
    \mathbf{A}\mathbf{Z}]` (the feed-forward network then takes twice the
    width); :obj:`"gat"` their attention (:obj:`heads` heads, self-loops
    added); :obj:`"none"` the identity (their ResNet). The norm reads
    what a block propagates; the skip path carries the features
    un-normalised.

    With :obj:`block="post"`, the blocks are those of Luo et al.'s tuned
    classic GNNs (`"Classic GNNs are Strong Baselines"
    <https://arxiv.org/abs/2406.08993>`_, NeurIPS 2024): no input layer,
    each block a graph convolution with its own weights plus a skip, then
    the norm slot, ReLU and dropout, and a linear head,

    .. math::
        \mathbf{H}^{(l)} = \mathrm{Dropout}\Big(\mathrm{ReLU}\big(
        \mathrm{Norm}_l(\mathrm{Conv}_l(\mathbf{H}^{(l-1)}) +
        \mathrm{Skip}_l(\mathbf{H}^{(l-1)}))\big)\Big), \quad
        \mathbf{H}^{(0)} = \mathbf{X}, \quad
        \mathbf{Y} = \mathbf{H}^{(L)}\mathbf{W}_{out}^\top +
        \mathbf{b}_{out},

    where :obj:`"gcn"` is PyG's :class:`~torch_geometric.nn.conv.GCNConv`,
    :math:`\hat{\mathbf{A}}\mathbf{H}\mathbf{W}^\top + \mathbf{b}`
    (Glorot weights, zero bias), :obj:`"sage"` its
    :class:`~torch_geometric.nn.conv.SAGEConv` on the graph with
    self-loops (as Luo et al. feed it), :math:`\mathbf{W}_1
    \mathrm{mean}_{j \in \mathcal{N}(i) \cup \{i\}} \mathbf{h}_j +
    \mathbf{b} + \mathbf{W}_2 \mathbf{h}_i`, and :obj:`"none"` no
    convolution (an MLP with skips); the skip is a linear map
    (:obj:`skip="linear"`, theirs), the identity (:obj:`"identity"`;
    the first block, whose input is the features, maps them linearly) or
    none (:obj:`"none"`: the plain stack). :obj:`"gat"` is not offered in
    this block.

    Args:
        in_channels (int): Size of each input sample.
        out_channels (int): Number of classes.
        num_layers (int): Number of residual blocks, :math:`\geq 1`.
        hidden_channels (int, optional): Width of the residual stream.
            (default: :obj:`512`)
        conv (str, optional): The propagation, :obj:`"gcn"`,
            :obj:`"sage"`, :obj:`"gat"` or :obj:`"none"`.
            (default: :obj:`"gcn"`)
        ff_multiplier (float, optional): Width of a feed-forward network's
            hidden layer, as a multiple of :obj:`hidden_channels`.
            (default: :obj:`1.0`)
        dropout (float, optional): Dropout probability after the input
            layer and at two places in every block. (default: :obj:`0.2`)
        norm (callable, optional): Makes one norm layer (called as by
            :class:`~gnorm.models.DeepGCN`: with the width as
            :obj:`in_channels`, :obj:`normalized_shape` or
            :obj:`num_features` when it takes one; its forward gets
            :obj:`batch`, :obj:`batch_size` and :obj:`edge_index` when its
            signature names them), one per block and the final one;
            with :obj:`runs`, a list of one factory per run is also
            taken. :obj:`None` or :obj:`"none"` for no norm.
            (default: :obj:`None`)
        heads (int, optional): Attention heads of :obj:`conv="gat"`, a
            divisor of :obj:`hidden_channels`. (default: :obj:`8`)
        cached (bool, optional): Reuse the graph of the first call in
            later calls (one graph, full batch), as
            :class:`~gnorm.models.DeepGCN`.
            (default: :obj:`False`)
        runs (int, optional): Train :obj:`runs` independent runs as one
            model: every weight has a leading run dimension and the
            outputs are :obj:`[runs, num_nodes, out_channels]`.
            (default: :obj:`None`: one run)
        block (str, optional): :obj:`"pre"` (Platonov et al.'s pre-norm
            residual block) or :obj:`"post"` (Luo et al.'s post-norm
            block). (default: :obj:`"pre"`)
        skip (str, optional): The skip of a post-norm block,
            :obj:`"linear"`, :obj:`"identity"` or :obj:`"none"`.
            (default: :obj:`"linear"`)
        conv_init (str, optional): The initialisation of a post-norm
            block's :obj:`"gcn"` convolution: :obj:`"glorot"` (PyG's
            GCNConv: Glorot's weights, zero bias) or :obj:`"linear"`
            (:class:`torch.nn.Linear`'s: weight and bias from
            :math:`\mathcal{U}(\pm 1/\sqrt{c_{in}})`, the bias added
            after the propagation). (default: :obj:`"glorot"`)
    """
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_layers: int,
        hidden_channels: int = 512,
        conv: str = 'gcn',
        ff_multiplier: float = 1.0,
        dropout: float = 0.2,
        norm: Union[None, str, Callable[..., torch.nn.Module],
                    Sequence[Callable[..., torch.nn.Module]]] = None,
        heads: int = 8,
        cached: bool = False,
        runs: Optional[int] = None,
        block: str = 'pre',
        skip: str = 'linear',
        conv_init: str = 'glorot',
    ):
        super().__init__()
        for name, value, choices in (('block', block, BLOCKS),
                                     ('skip', skip, SKIPS),
                                     ('conv', conv, CONVS),
                                     ('conv_init', conv_init, CONV_INITS)):
            if value not in choices:
                raise ValueError(f"ResGNN got {name}={value!r}; pass one of "
                                 f"{', '.join(choices)}")
        if block == 'post' and conv == 'gat':
            raise ValueError("ResGNN's post-norm block (block='post') takes "
                             "conv='gcn', 'sage' or 'none', got 'gat'")
        if block == 'post' and conv == 'none' and skip == 'none':
            raise ValueError("ResGNN's post-norm block with conv='none' "
                             "and skip='none' maps nothing; pass "
                             "skip='linear' (an MLP) or a conv")
        if conv_init != 'glorot' and (block, conv) != ('post', 'gcn'):
            raise ValueError(f"ResGNN's conv_init={conv_init!r} sets the "
                             f"GCN convolution of the post-norm block; "
                             f"pass block='post' and conv='gcn', or "
                             f"conv_init='glorot'")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"ResGNN needs num_layers >= 1, got "
                             f"{num_layers!r}")
        if not isinstance(hidden_channels, int) or hidden_channels < 1:
            raise ValueError(f"ResGNN needs hidden_channels >= 1, got "
                             f"{hidden_channels!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"ResGNN got dropout={dropout}; pass a "
                             f"probability in [0, 1)")
        ff_channels = int(hidden_channels * ff_multiplier)
        if ff_channels < 1:
            raise ValueError(f"ResGNN got ff_multiplier={ff_multiplier}; "
                             f"pass a positive number (hidden_channels * "
                             f"ff_multiplier >= 1)")
        if conv == 'gat' and (not isinstance(heads, int) or heads < 1
                              or hidden_channels % heads != 0):
            raise ValueError(f"ResGNN got heads={heads!r}; pass a divisor "
                             f"of hidden_channels={hidden_channels}")
        if runs is not None and (not isinstance(runs, int) or runs < 1):
            raise ValueError(f"ResGNN got runs={runs!r}; pass an integer "
                             f">= 1 or None")
        factories = self._factories(norm, runs)

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.conv = conv
        self.ff_multiplier = ff_multiplier
        self.dropout = dropout
        self.heads = heads
        self.cached = cached
        self.runs = runs
        self.block = block
        self.skip = skip
        self.conv_init = conv_init
        if block == 'post':
            self._build_post(factories)
        else:
            self._build_pre(factories, ff_channels)
        first = getattr(self.norms[0], 'module', self.norms[0])
        self._norm_inputs = forward_inputs(first)
        self._takes_pairs = getattr(first, 'takes_pairs', False)
        self._cached_graph: Optional[Graph] = None
        self.reset_parameters()

    def _build_post(self, factories: Optional[list]) -> None:
        r"""The modules of the post-norm blocks: per block a convolution
        (``convs``; for ``"sage"`` also its root map, ``roots``), a skip
        (``skips``: every block's, or only the first's for
        ``"identity"``), a norm, and the head ``lin_out``."""
        runs, hidden, layers = self.runs, self.hidden_channels, \
            self.num_layers
        widths = [self.in_channels] + [hidden] * (layers - 1)
        glorot = self.conv == 'gcn' and self.conv_init == 'glorot'
        self.convs = torch.nn.ModuleList(
            GlorotLinear(widths[i], hidden, runs) if glorot else
            RunLinear(widths[i], hidden, runs, bias=self.conv != 'gcn')
            for i in range(layers if self.conv != 'none' else 0))
        self.conv_bias = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(*((runs, ) if runs else ()),
                                           hidden))
            for _ in range(layers if self.conv == 'gcn' else 0))
        self.roots = torch.nn.ModuleList(
            RunLinear(widths[i], hidden, runs, bias=False)
            for i in range(layers if self.conv == 'sage' else 0))
        skips = {'linear': layers, 'identity': 1, 'none': 0}[self.skip]
        self.skips = torch.nn.ModuleList(
            RunLinear(widths[i], hidden, runs) for i in range(skips))
        self.norms = torch.nn.ModuleList(
            self._make_norms(factories) for _ in range(layers))
        self.lin_out = RunLinear(hidden, self.out_channels, runs)
        # each block's output, then the logits: outputs.0 ... outputs.{L}
        self.outputs = torch.nn.ModuleList(
            LayerOutput() for _ in range(layers + 1))

    def _reset_conv_bias(self, conv: RunLinear, bias: Tensor,
                         generators: Optional[Sequence[torch.Generator]]
                         ) -> None:
        r"""A GCN convolution's bias: zero (:obj:`conv_init="glorot"`), or
        drawn from :obj:`conv`'s bound for run :math:`r` by
        :obj:`generators[r]` after its weight (:obj:`"linear"`)."""
        if self.conv_init == 'glorot':
            bias.zero_()
            return
        bound = conv.init_bound()
        for r, row in enumerate(bias.view(-1, bias.size(-1))):
            gen = generators[r] if generators is not None else None
            row.uniform_(-bound, bound, generator=gen)

    def _build_pre(self, factories: Optional[list], ff_channels: int
                   ) -> None:
        r"""The modules of the pre-norm residual blocks."""
        runs, hidden_channels, heads = self.runs, self.hidden_channels, \
            self.heads
        num_layers, conv = self.num_layers, self.conv
        in_channels, out_channels = self.in_channels, self.out_channels
        self.lin_in = RunLinear(in_channels, hidden_channels, runs)
        # One norm per block and the final one: norms.{num_layers}.
        self.norms = torch.nn.ModuleList(
            self._make_norms(factories) for _ in range(num_layers + 1))
        self.attentions = torch.nn.ModuleList(
            Attention(hidden_channels, heads, runs)
            for _ in range(num_layers if conv == 'gat' else 0))
        width = 2 * hidden_channels if conv == 'sage' else hidden_channels
        self.ffs = torch.nn.ModuleList(
            FeedForward(width, ff_channels, hidden_channels, runs)
            for _ in range(num_layers))
        self.lin_out = RunLinear(hidden_channels, out_channels, runs)
        # The residual stream after every block, then the logits, for
        # forward hooks: outputs.0 ... outputs.{num_layers}.
        self.outputs = torch.nn.ModuleList(
            LayerOutput() for _ in range(num_layers + 1))

    @staticmethod
    def _factories(norm, runs: Optional[int]) -> Optional[list]:
        r"""One norm factory per run (:obj:`None`: no norm)."""
        if norm is None or (isinstance(norm, str) and norm == 'none'):
            return None
        if isinstance(norm, str):
            raise ValueError(f"ResGNN got norm={norm!r}; pass a norm class "
                             f"or factory, or None or 'none' for no norm")
        if isinstance(norm, (list, tuple)):
            if runs is None or len(norm) != runs:
                raise ValueError(f"ResGNN got {len(norm)} norm factories; "
                                 f"pass one per run (runs={runs})")
            factories = list(norm)
            nones = [f is None or (isinstance(f, str) and f == 'none')
                     for f in factories]
            if all(nones):
                return None
            if any(nones):
                raise ValueError(f"ResGNN got norm={factories!r}; pass a "
                                 f"norm for every run or for none")
        else:
            factories = [norm] * (runs or 1)
        for factory in factories:
            if not callable(factory):
                raise ValueError(f"ResGNN got norm={factory!r}; pass a norm "
                                 f"class or factory")
        return factories

    def _make_norms(self, factories: Optional[list]) -> torch.nn.Module:
        r"""The norm of one slot for all runs (an identity serves them as
        it is), checked: a module that takes node features and what
        ResGNN hands to a norm."""
        if factories is None:
            return torch.nn.Identity()
        modules = []
        for factory in factories:
            try:
                module = make_norm(factory, self.hidden_channels)
            except (TypeError, ValueError) as e:
                raise ValueError(f"ResGNN cannot make its norm from "
                                 f"{factory!r}: {e}") from None
            if not isinstance(module, torch.nn.Module):
                raise ValueError(f"ResGNN got a norm factory that made "
                                 f"{type(module).__name__}; pass one that "
                                 f"makes a torch.nn.Module")
            if isinstance(module, SepNorm):
                raise ValueError(f"ResGNN cannot take norm={module} (it "
                                 f"normalises a Graphormer's graph token "
                                 f"apart); pass another norm")
            params = list(inspect.signature(
                module.forward).parameters.values())[1:]  # after x
            needed = [p.name for p in params if p.default is p.empty
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                      and p.name not in forward_inputs(module)]
            if needed:
                raise ValueError(f"ResGNN cannot take norm={module}: its "
                                 f"forward needs {', '.join(needed)}; pass "
                                 f"a norm that takes node features")
            modules.append(module)
        if self.runs is None or isinstance(modules[0], torch.nn.Identity):
            return modules[0]
        return Stacked(modules)

    def reset_parameters(self, generators: Optional[
            Sequence[torch.Generator]] = None):
        r"""Resets all learnable parameters of the module; the random
        weights of run :math:`r` are drawn from :obj:`generators[r]` if
        given (one generator per run, on the CPU)."""
        for norm in self.norms:
            if hasattr(norm, 'reset_parameters'):
                norm.reset_parameters()
        if self.block == 'post':  # block by block: conv, root, skip
            for i in range(self.num_layers):
                for group in (self.convs, self.roots, self.skips):
                    if i < len(group):
                        group[i].reset_parameters(generators)
            with torch.no_grad():
                for conv, bias in zip(self.convs, self.conv_bias):
                    self._reset_conv_bias(conv, bias, generators)
            self.lin_out.reset_parameters(generators)
            return
        self.lin_in.reset_parameters(generators)
        for i, ff in enumerate(self.ffs):
            if self.conv == 'gat':
                self.attentions[i].reset_parameters(generators)
            ff.reset_parameters(generators)
        self.lin_out.reset_parameters(generators)

    def _input_entries(self, x: Tensor) -> Optional[SparsePair]:
        r"""For an input that is at most 10 % non-zero and without
        gradient, its sparse matrix and its transpose (the input layer's
        product and its backward); else :obj:`None`."""
        if x.requires_grad or x.dim() != 2:
            return None
        row, col = x.nonzero(as_tuple=True)  # sorted by row, column
        if row.numel() > 0.1 * x.numel():
            return None
        value = x[row, col]
        order = torch.argsort(col * x.size(0) + row)  # by column
        size = tuple(x.shape)
        return SparsePair(csr(row, col, value, size),
                          csr(col[order], row[order], value[order],
                              size[::-1]))

    def prepare(self, x: Tensor, edge_index: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, csr: bool = True,
                ) -> Graph:
        r"""The :class:`~gnorm.models.deep_gcn.Graph` of :obj:`edge_index`
        (and :obj:`batch`), its inputs checked, as
        :meth:`DeepGCN.prepare <gnorm.models.DeepGCN.prepare>` makes it:
        a training loop prepares it once and passes it to :meth:`forward`
        in place of :obj:`edge_index`. Its propagation is that of
        :obj:`conv` (the edges with self-loops for :obj:`"gat"`,
        :obj:`None` for :obj:`"none"`); its :obj:`entries` the sparse
        matrix of :obj:`x` (:obj:`None` for a dense :obj:`x`), kept for
        calls with this very tensor. With :obj:`csr=False`, the
        propagation is an :class:`~gnorm.models.deep_gcn.EdgeList` and
        every input is used dense (for :func:`torch.compile`)."""
        num_nodes = x.size(-2)
        check_edge_index(self, edge_index, num_nodes, values=True)
        check_batch(self, batch, num_nodes, batch_size, values=True)
        propagation = None
        if self.conv == 'gat':
            edges, _ = add_remaining_self_loops(edge_index,
                                                num_nodes=num_nodes)
            propagation = EdgeList(edges[0], edges[1],
                                   x.new_ones(edges.size(1)))
        elif self.conv != 'none':
            norm = gcn_normalized if self.conv == 'gcn' else sage_normalized
            if self.conv == 'sage' and self.block == 'post':
                # Luo et al. feed SAGEConv the graph with self-loops
                edge_index, _ = add_remaining_self_loops(
                    edge_index, num_nodes=num_nodes)
            edges, weight = norm(edge_index, num_nodes, x.dtype)
            propagation = (propagation_matrix(edges, weight, num_nodes)
                           if csr else EdgeList(edges[0], edges[1], weight))
        pairs = None
        if self._takes_pairs:
            pairs = masked_pairs(edge_index, num_nodes, batch, batch_size)
        if not csr:
            return Graph(propagation, pairs, None, num_nodes)
        return Graph(propagation, pairs, self._input_entries(x), num_nodes,
                     x, x._version)

    def _norm(self, i: int, x: Tensor, graph: Graph, inputs: dict) -> Tensor:
        kwargs = {k: inputs[k] for k in self._norm_inputs}
        if self._takes_pairs and 'edge_index' in kwargs:
            kwargs['edge_index'] = graph.pairs
        return self.norms[i](x, **kwargs)

    def _propagate(self, i: int, x: Tensor, graph: Graph) -> Tensor:
        if self.conv == 'none':
            return x
        if self.conv == 'gat':
            return self.attentions[i](x, graph.propagation)
        out = propagate(graph.propagation, x).to(x.dtype)
        return torch.cat([x, out], dim=-1) if self.conv == 'sage' else out

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
                their :class:`~gnorm.models.deep_gcn.Graph` from
                :meth:`prepare`.
            batch (torch.Tensor, optional): Graph of each node, handed to the
                norms. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs.
                (default: :obj:`None`)
            return_hidden (bool, optional): Also return the residual stream
                after every block and the logits (:obj:`num_layers + 1`
                tensors). (default: :obj:`False`)
            generators (list of torch.Generator, optional): One per run, on
                :obj:`x`'s device: the dropout masks of run :math:`r` come
                from :obj:`generators[r]`. (default: :obj:`None`: the global
                generator)

        Returns:
            torch.Tensor: Logits :obj:`[(runs,) num_nodes, out_channels]`
            (and the list of block outputs if :obj:`return_hidden`).
        """
        graph, inputs = self._call_graph(x, edge_index, batch, batch_size,
                                         generators)
        runs, p = self.runs is not None, self.dropout
        if self.block == 'post':
            return self._post(x, graph, inputs, generators, return_hidden)
        if graph.entries is not None:  # a sparse input: one sparse product
            x = self.lin_in.sparse_linear(graph.entries) + \
                self.lin_in.bias.unsqueeze(-2)
        else:
            x = self.lin_in(x)  # [(runs,) nodes, hidden]
        x = F.gelu(dropout(x, p, self.training, generators, runs))
        hidden = []
        for i, ff in enumerate(self.ffs):
            h = self._propagate(i, self._norm(i, x, graph, inputs), graph)
            h = ff(h, p, self.training, generators, runs)
            x = self.outputs[i](x + dropout(h, p, self.training, generators,
                                            runs))
            hidden.append(x)
        x = self._norm(self.num_layers, x, graph, inputs)
        x = self.outputs[-1](self.lin_out(x))
        return (x, hidden + [x]) if return_hidden else x

    def _post(self, x: Tensor, graph: Graph, inputs: dict,
              generators: Optional[Sequence[torch.Generator]],
              return_hidden: bool):
        r"""The forward pass of the post-norm blocks (:obj:`block="post"`)."""
        runs, p = self.runs is not None, self.dropout
        hidden = []
        for i in range(self.num_layers):
            h = self._conv(i, x, graph)
            if i < len(self.skips):
                h = h + self.skips[i](x)
            elif self.skip == 'identity':
                h = h + x
            h = F.relu(self._norm(i, h, graph, inputs))
            x = self.outputs[i](dropout(h, p, self.training, generators,
                                        runs))
            hidden.append(x)
        x = self.outputs[-1](self.lin_out(x))
        return (x, hidden + [x]) if return_hidden else x

    def _conv(self, i: int, x: Tensor, graph: Graph) -> Tensor:
        r"""Block :obj:`i`'s convolution of :obj:`x` (post-norm blocks):
        GCN :math:`\hat{\mathbf{A}}\mathbf{X}\mathbf{W}^\top +
        \mathbf{b}`, SAGE :math:`\mathbf{W}_1\,\mathrm{mean}(\cdot) +
        \mathbf{b} + \mathbf{W}_2 \mathbf{x}_i`, or 0 for
        :obj:`"none"`."""
        if self.conv == 'none':
            return x.new_zeros(())
        if self.conv == 'gcn':
            h = propagate(graph.propagation, self.convs[i](x)).to(x.dtype)
            return h + self.conv_bias[i].unsqueeze(-2)
        mean = propagate(graph.propagation, x).to(x.dtype)
        return self.convs[i](mean) + self.roots[i](x)

    def __repr__(self) -> str:
        args = [f'{self.in_channels}', f'{self.out_channels}',
                f'num_layers={self.num_layers}',
                f'hidden_channels={self.hidden_channels}',
                f'conv={self.conv!r}']
        if self.ff_multiplier != 1:
            args.append(f'ff_multiplier={self.ff_multiplier}')
        if not isinstance(self.norms[0], torch.nn.Identity):
            args.append(f'norm={self.norms[0]}')
        if self.conv == 'gat':
            args.append(f'heads={self.heads}')
        if self.runs is not None:
            args.append(f'runs={self.runs}')
        if self.block != 'pre':
            args.append(f'block={self.block!r}, skip={self.skip!r}')
            if self.conv_init != 'glorot':
                args.append(f'conv_init={self.conv_init!r}')
        return f'{self.__class__.__name__}({", ".join(args)})'
