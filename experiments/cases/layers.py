r"""A layer's forward and backward pass beside its reference, the cases of
``experiments/bench/layers.py`` and of the GPU check's layer step.

Every case is one layer on one random graph of :obj:`n` nodes with
:data:`DEGREE` in-edges per node and :obj:`d` channels: ContraNorm
(``negatives='all'``, ``'non_neighbors'``, ``symmetric=True``) beside
:func:`dense_contranorm`, the same math as an explicit n x n matrix;
ContraNorm-D beside ``GCNConv(d, d)``; PairNorm beside PyG's; LayerNorm
alone (:data:`REFERENCE`)."""
import statistics
from typing import Any, Callable, Dict, Tuple

import torch
import torch.nn.functional as F

from gnorm.bench import PeakMemory, alternate

DEGREE = 10
# Each layer's reference, in words (None: measured alone).
REFERENCE = {
    'contranorm': 'dense n x n',
    'contranorm_nn': 'dense n x n',
    'contranorm_sym': 'dense n x n',
    'contranorm_d': 'GCNConv(d, d)',
    'pairnorm': 'PyG PairNorm',
    'layernorm': None,
}
LAYERS = tuple(REFERENCE)
# The ContraNorm options of the layers whose reference is quadratic in n.
QUADRATIC = {'contranorm': dict(negatives='all', symmetric=False),
             'contranorm_nn': dict(negatives='non_neighbors', symmetric=False),
             'contranorm_sym': dict(negatives='all', symmetric=True)}


def dense_contranorm(x: torch.Tensor, edge_index: torch.Tensor,
                     negatives: str, symmetric: bool,
                     scale: float = 1.0) -> torch.Tensor:
    r"""ContraNorm the way the authors compute it: an explicit n x n
    similarity matrix (a neighbour's pair masked out under
    ``negatives='non_neighbors'``)."""
    xn = F.normalize(x, dim=-1)
    sim = xn @ xn.t()  # [n, n]
    if negatives == 'non_neighbors':
        masked = torch.zeros_like(sim, dtype=torch.bool)
        masked[edge_index[1], edge_index[0]] = True
        masked.fill_diagonal_(True)
        sim = sim.masked_fill(masked, float('-inf'))
    neg = sim.softmax(dim=1) @ x
    if symmetric:
        neg = neg + sim.softmax(dim=0) @ x
    return F.layer_norm((1 + scale) * x - scale * neg, (x.size(1), ))


def build(layer: str, reference: bool, n: int, d: int,
          device: torch.device, dtype: torch.dtype,
          seed: int = 0) -> Tuple[torch.Tensor, Callable[[], torch.Tensor]]:
    r"""The input :obj:`x` (requiring its gradient) and a function giving
    the output of :obj:`layer` (its :data:`REFERENCE` where
    :obj:`reference`) on one random graph."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.nn.norm import PairNorm as PyGPairNorm

    from gnorm.nn import ContraNorm, DualContraNorm, PairNorm

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen).to(device, dtype).requires_grad_()
    edge_index = torch.randint(0, n, (2, n * DEGREE), generator=gen).to(device)
    if layer in QUADRATIC:
        opts = QUADRATIC[layer]
        if reference:
            return x, lambda: dense_contranorm(x, edge_index, **opts)
        module = ContraNorm(d, **opts).to(device, dtype)
        return x, lambda: module(x, edge_index=edge_index)
    if layer == 'contranorm_d' and reference:
        module = GCNConv(d, d).to(device, dtype)
        return x, lambda: module(x, edge_index)
    modules = {'contranorm_d': lambda: DualContraNorm(d),
               'pairnorm': PyGPairNorm if reference else PairNorm,
               'layernorm': lambda: torch.nn.LayerNorm(d)}
    if layer not in modules:
        raise ValueError(f'unknown layer {layer!r} (layers: '
                         f'{", ".join(LAYERS)})')
    module = modules[layer]().to(device, dtype)
    return x, lambda: module(x)


def measure(layer: str, reference: bool, n: int, d: int, device: str,
            dtype: str, repeats: int) -> Dict[str, Any]:
    r"""One case (:func:`build`): the median seconds of
    :obj:`repeats` forward+backward passes after a warm-up, the peak
    memory in GiB (:class:`~gnorm.bench.PeakMemory`) and whether the
    output is finite."""
    x, fn = build(layer, reference, n, d, torch.device(device),
                  getattr(torch, dtype))
    out = []

    def step():
        x.grad = None
        out[:] = [fn()]
        out[0].float().square().sum().backward()
    with PeakMemory(device) as peak:
        times = alternate({'step': step}, repeats, device=device)['step']
    return dict(seconds=statistics.median(times), peak_gib=peak.gib,
                finite=bool(torch.isfinite(out[0]).all()))


def max_abs_difference(layer: str, n: int, d: int, device: str,
                       dtype: str) -> float:
    r"""The largest absolute difference between gnorm's output and the
    dense reference's for :obj:`layer`, one of :data:`QUADRATIC`."""
    torch.manual_seed(0)
    outs = []
    for reference in (False, True):
        x, fn = build(layer, reference, n, d, torch.device(device),
                      getattr(torch, dtype))
        with torch.no_grad():
            outs.append(fn().float())
    return float((outs[0] - outs[1]).abs().max())


def dense_gib(n: int, dtype: str) -> float:
    r"""The memory in GiB that :func:`dense_contranorm`'s n x n tensors
    take in forward+backward (similarity, softmax, masks and their
    gradients: about six)."""
    return 6 * n * n * torch.finfo(getattr(torch, dtype)).bits / 8 / 2**30


def model_epoch_seconds(dataset: str, norm: str, device: str,
                        repeats: int, layers: int = 32) -> float:
    r"""The median seconds of a full-batch training epoch of
    ``python -m gnorm.train``'s GCN of :obj:`layers` layers with
    :obj:`norm` on :obj:`dataset`."""
    from hydra import compose, initialize_config_dir

    from gnorm.train import CONF_DIR, build_model, load_data

    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose('train', overrides=[f'dataset={dataset}',
                                          f'norm={norm}', f'layers={layers}'])
    data = load_data(cfg).to(device)
    model = build_model(cfg, data.num_features, int(data.y.max()) + 1)
    model = model.to(device).train()
    optim = torch.optim.Adam(model.parameters(), lr=0.005)

    def epoch():
        optim.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index), data.y).backward()
        optim.step()
    return statistics.median(alternate({'epoch': epoch}, repeats,
                                       device=device)['epoch'])
