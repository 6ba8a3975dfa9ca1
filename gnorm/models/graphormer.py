import inspect
import math
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.typing import OptTensor
from torch_geometric.utils import to_dense_batch

from gnorm.data.molecules import import_ogb
from gnorm.models.deep_gcn import _forward_inputs, _make_norm
from gnorm.nn import IsoBN, PairNorm


FEATURES = ('ogb', 'zinc')


def feature_dims(features: str) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    r"""Vocabulary sizes of the atom and bond feature columns of a feature
    scheme: OGB's 9 atom and 3 bond columns, or ZINC's atom type (28) and
    bond type (1, 2, 3; 0 unused)."""
    if features == 'zinc':
        return (28, ), (4, )
    ogb = import_ogb('ogb.utils.features')
    return (tuple(ogb.get_atom_feature_dims()),
            tuple(ogb.get_bond_feature_dims()))


# Norms that are not a per-token normaliser: they cannot replace LayerNorm.
_NOT_TOKEN_NORMS = (PairNorm, IsoBN)


class CategoricalEncoder(torch.nn.Module):
    r"""Embeds :obj:`[num_rows, len(dims)]` categorical columns (one table
    with an offset per column) and sums or averages over the columns."""
    def __init__(self, dims: Sequence[int], channels: int,
                 reduce: str = 'sum'):
        super().__init__()
        offsets = torch.tensor([0] + list(dims[:-1])).cumsum(0)
        self.register_buffer('offsets', offsets, persistent=False)
        self.embedding = torch.nn.Embedding(sum(dims), channels)
        self.reduce = reduce

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(x.size(0), -1)  # [num_rows, columns]
        out = self.embedding(x + self.offsets)  # [num_rows, columns, channels]
        return out.sum(1) if self.reduce == 'sum' else out.mean(1)


def _norm_kind(norm: torch.nn.Module) -> Union[str, Tuple[str, ...]]:
    r"""How a norm reads the dense tokens: ``mask`` (dense with a validity
    mask, :class:`~gnorm.nn.SepNorm`), ``dense`` (each token on its own), or
    the inputs it takes besides the valid tokens (:obj:`batch`, ...)."""
    if isinstance(norm, _NOT_TOKEN_NORMS):
        raise ValueError(f"Graphormer cannot use {norm} at its norm sites "
                         f"(not a per-token normaliser); pass LayerNorm, "
                         f"SepNorm, ContraNorm, DualContraNorm or Identity")
    if 'mask' in inspect.signature(norm.forward).parameters:
        return 'mask'
    inputs = _forward_inputs(norm)
    return inputs if 'batch' in inputs else 'dense'


def _run_norm(norm: torch.nn.Module, kind: Union[str, Tuple[str, ...]],
              x: Tensor, ctx: Dict[str, Tensor]) -> Tensor:
    r"""Applies :obj:`norm` to the dense tokens :obj:`x` [B, T, d] of a
    batch; padded tokens never enter a statistic."""
    if kind == 'mask':
        return norm(x, mask=ctx['mask'])
    if kind == 'dense':
        return norm(x)
    flat = norm(x[ctx['mask']], **{k: ctx[k] for k in kind})  # [tokens, d]
    return x.new_zeros(x.shape).masked_scatter(ctx['mask'].unsqueeze(-1),
                                               flat)  # [B, T, d]


class GraphormerLayer(torch.nn.Module):
    r"""One pre-LN encoder layer: :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{Attn}(\mathrm{Norm}_1(\mathbf{H}), \mathbf{B})`, then
    :math:`\mathbf{H} \leftarrow \mathbf{H} +
    \mathrm{FFN}(\mathrm{Norm}_2(\mathbf{H}))`.

    On CUDA each head's channels are zero-padded to a multiple of
    :obj:`head_multiple` before :func:`scaled_dot_product_attention` (the
    fused memory-efficient GPU kernel needs a multiple of 8); the zeros add
    nothing to the scores and the softmax scale stays
    :math:`1 / \sqrt{\text{head dim}}`, so the result is exact. The CPU
    kernel gains nothing from it (only longer products), so there the
    heads stay as they are.
    """
    def __init__(self, channels: int, heads: int, ffn_channels: int,
                 dropout: float, attention_dropout: float,
                 norm: Callable[..., torch.nn.Module], head_multiple: int = 8):
        super().__init__()
        self.heads = heads
        self.head_dim = channels // heads
        self.padded_dim = head_multiple * math.ceil(self.head_dim /
                                                    head_multiple)
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.norm1 = _make_norm(norm, channels)
        self.norm2 = _make_norm(norm, channels)
        self.kinds = (_norm_kind(self.norm1), _norm_kind(self.norm2))
        self.qkv = torch.nn.Linear(channels, 3 * channels)
        self.out = torch.nn.Linear(channels, channels)
        self.ffn1 = torch.nn.Linear(channels, ffn_channels)
        self.ffn2 = torch.nn.Linear(ffn_channels, channels)

    def attention(self, x: Tensor, bias: Tensor,
                  pad: Optional[bool] = None) -> Tensor:
        r"""Multi-head attention of the tokens :obj:`x` :obj:`[B, T, C]`
        with the additive :obj:`bias` :obj:`[B, heads, T, T]`; :obj:`pad`
        (default: on CUDA) zero-pads the heads to :obj:`padded_dim`."""
        B, T, C = x.shape
        H, D = self.heads, self.head_dim
        qkv = self.qkv(x).view(B, T, 3, H, D)  # [B, T, 3, heads, head_dim]
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, heads, T, head_dim]
        if (x.is_cuda if pad is None else pad) and self.padded_dim != D:
            zeros = (0, self.padded_dim - D)
            q, k, v = F.pad(q, zeros), F.pad(k, zeros), F.pad(v, zeros)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), scale=1.0 / math.sqrt(D),
            dropout_p=self.attention_dropout if self.training else 0.0,
        )  # [B, heads, T, padded_dim or head_dim]
        out = out[..., :D].transpose(1, 2).reshape(B, T, C)  # [B, T, C]
        return self.out(out)

    def forward(self, x: Tensor, bias: Tensor,
                ctx: Dict[str, Tensor]) -> Tensor:
        h = self.attention(_run_norm(self.norm1, self.kinds[0], x, ctx), bias)
        x = x + F.dropout(h, self.dropout, self.training)
        h = _run_norm(self.norm2, self.kinds[1], x, ctx)
        h = F.dropout(F.gelu(self.ffn1(h)), self.dropout, self.training)
        return x + F.dropout(self.ffn2(h), self.dropout, self.training)


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
    (:class:`GraphormerLayer`) attends with the per-head additive bias

    .. math::
        B_{ij} = b_{\phi(i, j)} + \frac{1}{\min(\max(\phi(i, j), 1), K)}
        \sum_{k=1}^{\min(\phi(i, j), K)} \mathbf{e}_{k}^{\top}
        \mathbf{W}_k, \qquad B_{0j} = B_{i0} = t

    for nodes :math:`i, j`: :math:`\phi` is the shortest-path distance
    (:math:`b` has one entry per distance up to :obj:`max_spd`, larger
    distances share the last one, and unreachable pairs have their own entry
    and no edge term), :math:`\mathbf{e}_k` the edge embedding (mean of the
    bond-feature embeddings, one value per head) of hop :math:`k` of one
    shortest path (see :class:`gnorm.data.molecules.ShortestPaths`),
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
            and :obj:`edge_index`; others get the dense tokens.
            :class:`~gnorm.nn.PairNorm` and :class:`~gnorm.nn.IsoBN` are
            refused. :obj:`None` means :class:`torch.nn.LayerNorm`.
            (default: :obj:`None`)
        head_multiple (int, optional): On CUDA, zero-pad each head's
            channels to a multiple of this (:obj:`1`: no padding). (default: :obj:`8`)
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
    ):
        super().__init__()
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
        self.final_norm = _make_norm(norm, hidden_channels)
        self.final_kind = _norm_kind(self.final_norm)
        self.head = torch.nn.Linear(hidden_channels, out_channels)
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

    def attention_bias(self, spd: Tensor, path_edge: Tensor,
                       edge_index: Tensor, edge_attr: Tensor, batch: Tensor,
                       counts: Tensor, mask: Tensor) -> Tensor:
        r"""The additive bias :obj:`[B, heads, 1 + N, 1 + N]` of the class
        docstring, :math:`-\infty` at padded keys. :obj:`spd` and
        :obj:`path_edge` are the flat per-graph tensors of
        :class:`~gnorm.data.molecules.ShortestPaths`, :obj:`counts` the
        nodes per graph, :obj:`mask` :obj:`[B, N]` the valid nodes."""
        B, N = mask.shape
        K, E, H = self.max_dist, edge_index.size(1), self.num_heads
        dist = spd.long()  # [P], the pairs of every graph, row-major
        spd_row = torch.where(dist < 0, self.max_spd + 1,
                              dist.clamp(max=self.max_spd))  # [P]
        bias = self.spd_encoder(spd_row)  # [P, heads]

        # Multi-hop edge encoding: pair p owns the max(d_p, 0) entries of
        # path_edge after those of the pairs before it (hop order), so entry
        # a is hop a - start_p of its pair. Its row in the [K * E + 1, heads]
        # table below is hop * E + (graph's first edge + local id), or the
        # zero row K * E for hops >= K.
        length = dist.clamp(min=0)  # [P]
        start = length.cumsum(0) - length  # [P]
        pairs = counts * counts  # [B]
        edge_counts = torch.bincount(batch[edge_index[0]], minlength=B)
        edge_ptr = edge_counts.cumsum(0) - edge_counts  # [B]
        base = torch.repeat_interleave(edge_ptr, pairs, output_size=dist.numel()
                                       ) - start * E  # [P]
        entry = torch.arange(path_edge.numel(), device=spd.device) * E + \
            path_edge.long() + torch.repeat_interleave(
                base, length, output_size=path_edge.numel())  # [L]
        entry = entry.clamp(max=K * E)
        edge = self.bond_encoder(edge_attr)  # [E, heads]
        hops = torch.einsum('eh,khg->keg', edge, self.hop_weight)
        hops = torch.cat([hops.reshape(K * E, H),
                          hops.new_zeros(1, H)])  # [K * E + 1, heads]
        multi_hop = F.embedding_bag(entry, hops, start,
                                    mode='sum')  # [P, heads]
        scale = 1.0 / length.clamp(min=1, max=K).unsqueeze(-1)  # [P, 1]
        bias = bias + multi_hop * scale.to(bias.dtype)  # [P, heads]
        # The pairs fill the valid [i, j] of every graph in row-major order.
        valid = (mask.unsqueeze(2) & mask.unsqueeze(1)).unsqueeze(-1)
        bias = bias.new_zeros(B, N, N, H).masked_scatter(
            valid, bias)  # [B, N, N, heads]
        bias = bias.permute(0, 3, 1, 2)  # [B, heads, N, N]

        # The graph token's row and column (index 0) get the virtual distance.
        bias = F.pad(bias, (1, 0, 1, 0))  # [B, heads, 1 + N, 1 + N]
        border = torch.zeros(N + 1, N + 1, dtype=torch.bool,
                             device=bias.device)
        border[0, :] = border[:, 0] = True
        bias = bias + border * self.virtual_distance.view(-1, 1, 1)
        keys = torch.cat([mask.new_ones(B, 1), mask], dim=1)  # [B, 1 + N]
        return bias.masked_fill(~keys.view(B, 1, 1, N + 1), float('-inf'))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                spd: Tensor, path_edge: Tensor, batch: OptTensor = None,
                batch_size: Optional[int] = None, return_tokens: bool = False,
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
            path_edge (torch.Tensor): Flat first path edges,
                :obj:`[sum_g n_g^2]`.
            batch (torch.Tensor, optional): Sorted graph of each node;
                :obj:`None` means one graph. (default: :obj:`None`)
            batch_size (int, optional): Number of graphs. (default:
                :obj:`None`)
            return_tokens (bool, optional): Also return the final tokens
                :obj:`[B, 1 + N, hidden_channels]` (after the final norm) and
                their mask :obj:`[B, 1 + N]`. (default: :obj:`False`)

        Returns:
            torch.Tensor: Predictions :obj:`[B, out_channels]`.
        """
        if batch is None:
            batch = x.new_zeros(x.size(0), dtype=torch.long)
        B = int(batch.max()) + 1 if batch_size is None else batch_size
        counts = torch.bincount(batch, minlength=B)  # [B]
        deg = torch.bincount(edge_index[1], minlength=x.size(0))  # [num_nodes]
        h = self.atom_encoder(x) + self.degree_encoder(
            deg.clamp(max=self.max_degree))  # [num_nodes, d]
        h, mask = to_dense_batch(h, batch, batch_size=B)  # [B, N, d], [B, N]
        bias = self.attention_bias(spd, path_edge, edge_index, edge_attr,
                                   batch, counts, mask)
        token = self.graph_token.view(1, 1, -1).expand(B, 1, -1)
        h = torch.cat([token, h], dim=1)  # [B, 1 + N, d]
        h = F.dropout(h, self.input_dropout, self.training)

        mask = torch.cat([mask.new_ones(B, 1), mask], dim=1)  # [B, 1 + N]
        # Flat tokens (graph token first): their graph and the edges between
        # them, for norms that take batch / edge_index.
        token_batch = mask.nonzero()[:, 0]  # [num_nodes + B]
        ctx = {'mask': mask, 'batch': token_batch, 'batch_size': B,
               'edge_index': edge_index + batch[edge_index] + 1}
        for layer in self.layers:
            h = layer(h, bias, ctx)
        h = _run_norm(self.final_norm, self.final_kind, h, ctx)
        out = self.head(h[:, 0])  # [B, out_channels]
        return (out, h, mask) if return_tokens else out

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.out_channels}, '
                f'features={self.features!r}, num_layers={self.num_layers}, '
                f'hidden_channels={self.hidden_channels}, '
                f'num_heads={self.num_heads}, max_dist={self.max_dist}, '
                f'norm={self.final_norm})')
