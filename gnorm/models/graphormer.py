r"""The Graphormer: embeddings of a batch of molecules, its attention bias
and the stack of :class:`~gnorm.models.graphormer_layer.GraphormerLayer`.
Its parameters hold one run, or in a
:class:`~gnorm.models.StackedGraphormer` :math:`R` runs stacked; the code
is the same (:mod:`gnorm.models.runs`)."""
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.typing import OptTensor

from gnorm.data.molecules import import_ogb
from gnorm.models.deep_gcn import make_norm
from gnorm.models.graphormer_attention import (LayerContext, dropout,
                                               group_biases, attention_groups,
                                               layer_context)
from gnorm.models.graphormer_layer import (GraphormerLayer, dense_tokens,
                                           norm_kind, norm_site)
from gnorm.models.runs import each_run, embed, run_shape
from gnorm.models.token_layout import check_max_dist, token_layout

FEATURES = ('ogb', 'zinc')
KERNELS = ('auto', 'fused', 'explicit')


def feature_dims(features: str) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    r"""Vocabulary sizes of the atom and bond feature columns of a feature
    scheme: OGB's 9 atom and 3 bond columns, or ZINC's atom type (28) and
    bond type (1, 2, 3; 0 unused)."""
    if features == 'zinc':
        return (28, ), (4, )
    ogb = import_ogb('ogb.utils.features')
    return (tuple(ogb.get_atom_feature_dims()),
            tuple(ogb.get_bond_feature_dims()))


class CategoricalEncoder(torch.nn.Module):
    r"""Embeds :obj:`[num_rows, len(dims)]` categorical columns (one table
    with an offset per column) and sums or averages over the columns:
    :obj:`[num_rows, channels]`, or :obj:`[num_rows, R, channels]` for a
    table of :obj:`R` stacked runs."""
    def __init__(self, dims: Sequence[int], channels: int,
                 reduce: str = 'sum'):
        super().__init__()
        offsets = torch.tensor([0] + list(dims[:-1])).cumsum(0)
        self.register_buffer('offsets', offsets, persistent=False)
        self.embedding = torch.nn.Embedding(sum(dims), channels)
        self.reduce = reduce

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(x.size(0), self.offsets.numel())  # [num_rows, columns]
        # [num_rows, columns, (R,) channels]
        out = embed(self.embedding.weight, x + self.offsets)
        return out.sum(1) if self.reduce == 'sum' else out.mean(1)


def layout_and_degrees(x: Tensor, edge_index: Tensor, spd: Tensor,
                       path_edge: Tensor, batch: OptTensor,
                       batch_size: Optional[int], max_dist: int,
                       layout: Optional[Dict[str, Tensor]],
                       ) -> Tuple[Dict[str, Tensor], Tensor]:
    r"""The batch's token :obj:`layout` (computed here when :obj:`None`;
    :obj:`batch` :obj:`None` means one graph; a given one must keep at
    least :obj:`max_dist` hops) and every node's in-degree."""
    if layout is None:
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        layout = token_layout(edge_index, spd, path_edge, batch, batch_size,
                              max_dist)
    check_max_dist(layout, max_dist)
    deg = x.new_zeros(x.size(0), dtype=torch.long).index_add_(
        0, edge_index[1], torch.ones_like(edge_index[1]))
    return layout, deg


class Graphormer(torch.nn.Module):
    r"""The Graphormer from the `"Do Transformers Really Perform Bad for
    Graph Representation?" <https://arxiv.org/abs/2106.05234>`_ paper, in
    plain PyTorch and PyG, with a configurable norm at every norm site for
    the `"On Separate Normalization in Self-supervised Transformers"
    <https://arxiv.org/abs/2309.12931>`_ paper (SepNorm).

    Every graph becomes the token sequence (graph token, its nodes) after
    :func:`~torch_geometric.utils.to_dense_batch`, the graph token at index
    :obj:`0`. A node token is the sum of its atom-feature embeddings and its
    in-degree embedding. Each of the :obj:`num_layers` pre-LN layers
    (:class:`~gnorm.models.graphormer_layer.GraphormerLayer`) attends with
    the per-head additive bias

    .. math::
        B_{ij} = b_{\phi(i, j)} + \frac{1}{\min(\max(\phi(i, j), 1), K)}
        \sum_{k=1}^{\min(\phi(i, j), K)} \mathbf{e}_{k}^{\top}
        \mathbf{W}_k, \qquad B_{0j} = B_{i0} = t

    for nodes :math:`i, j`: :math:`\phi` is the shortest-path distance
    (:math:`b` has one entry per distance up to :obj:`max_spd`, larger
    distances share the last one, and unreachable pairs have their own entry
    and no edge term), :math:`\mathbf{e}_k` the edge embedding (mean of the
    bond-feature embeddings, one value per head) of hop :math:`k` of one
    shortest path (at every node the smallest-id edge that stays on a
    shortest path, see :func:`gnorm.data.path_edges`),
    :math:`\mathbf{W}_k` a learned :obj:`[heads, heads]` matrix per hop,
    :math:`K` = :obj:`max_dist`; :math:`t` is the learned virtual distance of
    the graph token's row and column (its diagonal entry included). Padded
    keys get :math:`-\infty`; every query row keeps the graph token, so no
    softmax is empty. A final norm follows the last layer, and a linear
    readout of the graph token gives the prediction.

    Args:
        out_channels (int): Number of outputs per graph.
        features (str, optional): Feature scheme, :obj:`"ogb"` (9 atom and
            3 bond columns, :func:`ogb.utils.features.get_atom_feature_dims`)
            or :obj:`"zinc"` (one atom type, one bond type).
            (default: :obj:`"ogb"`)
        num_layers (int, optional): Number of encoder layers.
            (default: :obj:`12`)
        hidden_channels (int, optional): Token width. (default: :obj:`80`)
        num_heads (int, optional): Attention heads; must divide
            :obj:`hidden_channels`. (default: :obj:`8`)
        ffn_channels (int, optional): Hidden width of the feed-forward
            block. (default: :obj:`80`)
        dropout (float, optional): Dropout after attention and in the
            feed-forward block. (default: :obj:`0.1`)
        input_dropout (float, optional): Dropout of the input tokens.
            (default: :obj:`0.1`)
        attention_dropout (float, optional): Dropout of the attention
            weights. (default: :obj:`0.1`)
        max_dist (int, optional): Number :math:`K \geq 1` of hops of the
            multi-hop edge encoding. (default: :obj:`20`)
        max_spd (int, optional): Distances :math:`\geq` :obj:`max_spd` share
            one embedding. (default: :obj:`128`)
        max_degree (int, optional): In-degrees :math:`\geq` :obj:`max_degree`
            share one embedding. (default: :obj:`64`)
        norm (callable, optional): Makes the norm of every norm site (two per
            layer and the final one), called with the width as
            :obj:`in_channels` (or :obj:`normalized_shape`). A norm whose
            forward takes :obj:`mask` (:class:`~gnorm.nn.SepNorm`) gets the
            dense tokens with their mask; one that takes :obj:`batch`
            (:class:`~gnorm.nn.ContraNorm`) gets the valid tokens of each
            graph (graph token first) with :obj:`batch`, :obj:`batch_size`
            and :obj:`edge_index`; others get the valid tokens
            :obj:`[num_tokens, channels]` (each on its own, no padding).
            :class:`~gnorm.nn.PairNorm` and :class:`~gnorm.nn.IsoBN` are
            refused. :obj:`None` means :class:`torch.nn.LayerNorm`.
            (default: :obj:`None`)
        head_multiple (int, optional): With the fused kernels, zero-pad
            each head's channels to a multiple of this in the attention
            products (:obj:`1`: no padding). (default: :obj:`8`)
        kernels (str, optional): :obj:`"fused"`: the attention of all
            graphs of a batch in one
            :func:`~torch.nn.functional.scaled_dot_product_attention` call
            and :func:`~torch.nn.functional.dropout`; :obj:`"explicit"`:
            attention written out per group of similar-size graphs, with
            cheaper dropout masks (faster on the CPU); :obj:`"auto"`: fused
            on CUDA, explicit elsewhere. Both give the same function (the
            tests run both on the CPU); their dropout masks differ.
            (default: :obj:`"auto"`)

    Set the attribute :obj:`dropout_generator` (a :class:`torch.Generator`
    on the model's device) to draw every dropout mask from it rather than
    from torch's generator (outside a compiled graph): the model's random
    stream is then its own, as in
    :class:`~gnorm.models.StackedGraphormer`, where each run has one.
    :class:`~gnorm.models.StackedGraphormer` stacks the parameters of
    :math:`R` models in one Graphormer, whose :meth:`forward_runs` runs
    them all.
    """
    def __init__(
        self,
        out_channels: int,
        features: str = 'ogb',
        num_layers: int = 12,
        hidden_channels: int = 80,
        num_heads: int = 8,
        ffn_channels: int = 80,
        dropout: float = 0.1,
        input_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        max_dist: int = 20,
        max_spd: int = 128,
        max_degree: int = 64,
        norm: Optional[Callable[..., torch.nn.Module]] = None,
        head_multiple: int = 8,
        kernels: str = 'auto',
    ):
        super().__init__()
        if kernels not in KERNELS:
            raise ValueError(f"Graphormer got kernels={kernels!r}; pass one "
                             f"of {', '.join(KERNELS)}")
        self.kernels = kernels
        if features not in FEATURES:
            raise ValueError(f"Graphormer got features={features!r}; pass one "
                             f"of {', '.join(FEATURES)}")
        for name, value in (('num_layers', num_layers), ('max_dist', max_dist),
                            ('max_spd', max_spd), ('max_degree', max_degree),
                            ('num_heads', num_heads),
                            ('head_multiple', head_multiple)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Graphormer needs {name} >= 1, got "
                                 f"{value!r}")
        if hidden_channels % num_heads != 0:
            raise ValueError(f"Graphormer: num_heads={num_heads} must divide "
                             f"hidden_channels={hidden_channels}")
        for name, p in (('dropout', dropout), ('input_dropout', input_dropout),
                        ('attention_dropout', attention_dropout)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"Graphormer got {name}={p}; pass a "
                                 f"probability in [0, 1)")
        norm = norm or torch.nn.LayerNorm
        self.out_channels = out_channels
        self.features = features
        self.num_layers = num_layers
        self.hidden_channels = hidden_channels
        self.num_heads = num_heads
        self.input_dropout = input_dropout
        self.max_dist = max_dist
        self.max_spd = max_spd
        self.max_degree = max_degree

        atom_dims, bond_dims = feature_dims(features)
        self.atom_encoder = CategoricalEncoder(atom_dims, hidden_channels)
        self.degree_encoder = torch.nn.Embedding(max_degree + 1,
                                                 hidden_channels)
        self.graph_token = torch.nn.Parameter(torch.empty(hidden_channels))
        self.bond_encoder = CategoricalEncoder(bond_dims, num_heads, 'mean')
        self.spd_encoder = torch.nn.Embedding(max_spd + 2, num_heads)
        self.hop_weight = torch.nn.Parameter(
            torch.empty(max_dist, num_heads, num_heads))
        self.virtual_distance = torch.nn.Parameter(torch.empty(num_heads))
        self.layers = torch.nn.ModuleList([
            GraphormerLayer(hidden_channels, num_heads, ffn_channels, dropout,
                            attention_dropout, norm, head_multiple)
            for _ in range(num_layers)
        ])
        self.final_norm = make_norm(norm, hidden_channels)
        self.final_kind = norm_kind(self.final_norm)
        self.head = torch.nn.Linear(hidden_channels, out_channels)
        self.dropout_generator: Optional[torch.Generator] = None
        self.reset_parameters()

    def reset_parameters(self):
        r"""Resets all learnable parameters: normal(0, 0.02) for embeddings
        and linear weights, zero biases, norms reset."""
        for module in self.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.normal_(module.weight, std=0.02)
                if getattr(module, 'bias', None) is not None:
                    torch.nn.init.zeros_(module.bias)
            elif module is not self and hasattr(module, 'reset_parameters'):
                module.reset_parameters()  # norms
        for p in (self.graph_token, self.hop_weight, self.virtual_distance):
            torch.nn.init.normal_(p, std=0.02)

    @property
    def runs(self) -> int:
        r"""The number of runs its parameters hold (:obj:`1`, or :math:`R`
        stacked by :class:`~gnorm.models.StackedGraphormer`)."""
        return run_shape(self.graph_token, (self.hidden_channels, )).size(0)

    def pair_bias(self, spd: Tensor, edge_attr: Tensor,
                  layout: Dict[str, Tensor]) -> Tensor:
        r"""Every node pair's part of the class docstring's bias,
        :obj:`[P, R heads]` (the spatial and the multi-hop edge encodings;
        runs one after the other within a pair, so that every index runs
        along the first dimension), from the flat distances :obj:`spd`
        :obj:`[P]` of :class:`~gnorm.data.ShortestPaths`, the bond
        features and the batch's
        :func:`~gnorm.models.token_layout.token_layout`: embedding look-ups
        and index sums whose shapes are the layout's."""
        K, E, H, R = self.max_dist, edge_attr.size(0), self.num_heads, \
            self.runs
        RH = R * H
        dist = spd.long()  # [P], the pairs of every graph, row-major
        spd_row = torch.where(dist < 0, self.max_spd + 1,
                              dist.clamp(max=self.max_spd))  # [P]
        bias = embed(self.spd_encoder.weight, spd_row).view(-1, RH)

        # Multi-hop edge encoding: hop k of pair p's path adds row
        # k E + edge of the [K E + 1, R heads] table (the zero row K E for
        # hops >= K), and the sum is divided by the clamped length.
        hop, pair = layout['path_hop'], layout['path_pair']  # [L]
        entry = torch.where(hop < K, hop * E + layout['path_edge'], K * E)
        edge = self.bond_encoder(edge_attr).view(E, R, H)  # [E, R, heads]
        hops = torch.einsum('erh,rkhg->kerg', edge,
                            run_shape(self.hop_weight, (K, H, H)))
        hops = torch.cat([hops.reshape(K * E, RH),
                          hops.new_zeros(1, RH)])  # [K E + 1, R heads]
        multi_hop = bias.new_zeros(dist.size(0), RH).index_add_(
            0, pair, hops.index_select(0, entry).to(bias.dtype))
        scale = 1.0 / dist.clamp(min=1, max=K).unsqueeze(-1)  # [P, 1]
        return bias + multi_hop * scale.to(bias.dtype)  # [P, R heads]

    def attention_bias(self, spd: Tensor, edge_attr: Tensor,
                       layout: Dict[str, Tensor]) -> Tensor:
        r"""The additive bias :obj:`[B, heads, T, T]` of the class
        docstring (of one run), :math:`-\infty` at padded keys
        (:meth:`pair_bias` at every pair's position, the virtual distance
        on the graph token's row and column), dense for all graphs of the
        batch (the layers build it per attention group,
        :func:`~gnorm.models.graphormer_attention.group_biases`)."""
        groups = attention_groups(layout, single=True)
        (bias, ) = group_biases(self.pair_bias(spd, edge_attr, layout),
                                groups, self.virtual_distance.view(1, -1))
        return bias[0]

    def layer_context(self, pairs: Tensor, layout: Dict[str, Tensor],
                      generators: Optional[Sequence[torch.Generator]] = None,
                      ) -> LayerContext:
        r"""What every layer reads besides the tokens
        (:func:`~gnorm.models.graphormer_attention.layer_context`), from
        the pairs' bias :obj:`pairs` (:meth:`pair_bias`), the batch's
        :obj:`layout` and the dropout :obj:`generators` (one per run;
        :obj:`None`: :obj:`dropout_generator` of one run, else torch's)."""
        fused = self.kernels == 'fused' or (self.kernels == 'auto'
                                            and pairs.is_cuda)
        if generators is None and self.dropout_generator is not None:
            generators = [self.dropout_generator]
        virtual = run_shape(self.virtual_distance, (self.num_heads, ))
        return layer_context(layout, pairs, virtual, fused, generators)

    def forward_runs(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                     spd: Tensor, path_edge: Tensor, batch: OptTensor = None,
                     batch_size: Optional[int] = None,
                     layout: Optional[Dict[str, Tensor]] = None,
                     generators: Optional[Sequence[torch.Generator]] = None,
                     ) -> Tuple[Tensor, Tensor, LayerContext]:
        r""":meth:`forward` of every run its parameters hold (the same
        arguments; :obj:`generators`: see :meth:`layer_context`): the
        predictions :obj:`[R, B, out_channels]`, the final packed tokens
        :obj:`[R, M, hidden_channels]` and the layers' context."""
        layout, deg = layout_and_degrees(x, edge_index, spd, path_edge,
                                         batch, batch_size, self.max_dist,
                                         layout)
        B, C, R = layout['mask'].size(0), self.hidden_channels, self.runs
        h = self.atom_encoder(x) + embed(
            self.degree_encoder.weight, deg.clamp(max=self.max_degree))
        h = h.view(h.size(0), R, C).transpose(0, 1)  # [R, num_nodes, C]
        pairs = self.pair_bias(spd, edge_attr, layout)  # [P, R heads]
        # The packed tokens: the graph tokens, then the nodes.
        token = run_shape(self.graph_token, (C, ))  # [R, C]
        h = torch.cat([token.unsqueeze(1).expand(-1, B, -1), h], 1)
        ctx = self.layer_context(pairs, layout, generators)
        h = dropout(h, self.input_dropout, self.training, ctx.fused,
                    ctx.generators)  # [R, M, C]
        for layer in self.layers:
            h = layer(h, ctx)
        h = norm_site(self.final_norm, self.final_kind, h, ctx)
        return each_run(self.head, h[:, :B]), h, ctx  # [R, B, out]

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                spd: Tensor, path_edge: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, return_tokens: bool = False,
                layout: Optional[Dict[str, Tensor]] = None,
                ) -> Union[Tensor, Tuple[Tensor, Tensor, Tensor]]:
        r"""Forward pass.

        Args:
            x (torch.Tensor): Atom features :obj:`[num_nodes, columns]`
                (or :obj:`[num_nodes]`), int64.
            edge_index (torch.Tensor): Edges :obj:`[2, num_edges]`, the edges
                of each graph contiguous and in the order of its
                :obj:`path_edge` ids (as PyG batches them).
            edge_attr (torch.Tensor): Bond features :obj:`[num_edges, columns]`
                (or :obj:`[num_edges]`), int64.
            spd (torch.Tensor): Flat shortest-path distances of every graph,
                :obj:`[sum_g n_g^2]`.
            path_edge (torch.Tensor): Flat local edge ids along every
                pair's path, :obj:`[sum_g sum_{i,j} max(d_g(i, j), 0)]`.
            batch (torch.Tensor, optional): Sorted graph of each node;
                :obj:`None` means one graph. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs. (default:
                :obj:`None`)
            return_tokens (bool, optional): Also return the final tokens
                :obj:`[B, 1 + N, hidden_channels]` (after the final norm) and
                their mask :obj:`[B, 1 + N]`. (default: :obj:`False`)
            layout (dict, optional): The batch's
                :func:`~gnorm.models.token_layout.token_layout`, computed
                ahead (e.g. in the data loader, see
                :func:`~gnorm.models.token_layout.add_token_layout`) with
                :obj:`max_dist` at least the model's (a smaller one raises
                :class:`ValueError`); then :obj:`batch`, :obj:`batch_size`
                and :obj:`path_edge` are not read, and the forward pass
                reads no value of the batch on the host (it compiles with
                ``fullgraph=True``). (default: :obj:`None`: computed here)

        Returns:
            torch.Tensor: Predictions :obj:`[B, out_channels]`.
        """
        out, h, ctx = self.forward_runs(x, edge_index, edge_attr, spd,
                                        path_edge, batch, batch_size, layout)
        if not return_tokens:
            return out[0]
        return out[0], dense_tokens(h[0], ctx), ctx.layout['mask']

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.out_channels}, '
                f'features={self.features!r}, num_layers={self.num_layers}, '
                f'hidden_channels={self.hidden_channels}, '
                f'num_heads={self.num_heads}, max_dist={self.max_dist}, '
                f'norm={self.final_norm})')

