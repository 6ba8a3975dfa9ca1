r"""The authors' DeepGCN (their published GCN code, PKU-ML/ContraNorm
``gnn/``, run as :mod:`experiments.authors.code` runs it) and gnorm's
DeepGCN (``experiment=table3_paper``) side by side on the same random
numbers, recording every few epochs their training losses, test
accuracies and the largest difference of their weights (docs/table3.rst).

Both start from their weights (copied into gnorm's model); every epoch
both dropout passes start from one state of torch's generator, their
dropout drawing its masks as gnorm's does
(:func:`gnorm.models.deep_gcn.dropout`) and gnorm's model taking its input
dense; both read their features, their adjacency's entries recomputed in
the run's dtype. Everything else is each side's own code, summing the same
numbers in other orders: a difference that grows from rounding (float32
~1e-7, ``--dtype float64`` ~1e-16) is the training's own sensitivity.

Command: ``experiments/authors_twin.py``; reader:
:func:`experiments.authors.report.read_twins`."""
import time
from typing import Any, Dict

from gnorm.errors import DataError
from gnorm.train import CONF_DIR


def gnorm_config(dataset: str, layers: int, scale: float, mirror: str):
    r"""The config of gnorm's run of the cell: ContraNorm + the shared
    LayerNorm under ``experiment=table3_paper``."""
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return compose('train', overrides=[
            'experiment=table3_paper', f'dataset={dataset}',
            f'layers={layers}', 'norm=contranorm', 'norm.layer_norm=false',
            'model.shared_layer_norm=true', f'norm.scale={scale}',
            f'data.mirror={mirror}', 'tag=contranorm'])


def check_same_data(theirs, ours) -> None:
    r"""Raises unless the two graphs have the same labels, splits and
    features (to float rounding)."""
    import torch
    same = (torch.equal(theirs.y, ours.y)
            and all(torch.equal(theirs[m], ours[m])
                    for m in ('train_mask', 'val_mask', 'test_mask'))
            and torch.allclose(theirs.x, ours.x, atol=1e-6))
    if not same:
        raise DataError('their data and gnorm\'s differ (labels, '
                        'splits or features)')


def gnorm_dropout():
    r"""A dropout module drawing its masks as gnorm's DeepGCN does."""
    import torch
    from gnorm.models.deep_gcn import dropout

    class Dropout(torch.nn.Module):
        def __init__(self, p: float):
            super().__init__()
            self.p = p

        def forward(self, x):
            return dropout(x, self.p, self.training)
    return Dropout


def adjacency_in(adj, dtype):
    r"""Their row-normalised adjacency (a sparse COO matrix whose entries are
    1 / the row's number of entries, computed by their data code in
    float32) with those entries computed in :obj:`dtype`; an error if
    :obj:`adj` is not such a matrix."""
    import torch
    adj = adj.coalesce()
    row = adj.indices()[0]
    count = torch.bincount(row, minlength=adj.size(0)).to(dtype)
    values = 1.0 / count[row]
    if not torch.allclose(adj.values().to(dtype), values, rtol=1e-6):
        raise DataError("their adjacency is not D^-1 (A + I)")
    return torch.sparse_coo_tensor(adj.indices(), values, adj.shape)


def copy_weights(theirs, ours) -> None:
    r"""Their DeepGCN's weights into gnorm's (their weight is
    ``[in, out]``, gnorm's ``[out, in]``)."""
    import torch
    with torch.no_grad():
        for mine, conv in zip(ours.convs, _their_convs(theirs)):
            mine.weight.copy_(conv.weight.T)
            mine.bias.copy_(conv.bias.view(-1))
        ours.shared_norm.weight.copy_(theirs.layer_norm.weight)
        ours.shared_norm.bias.copy_(theirs.layer_norm.bias)


def _their_convs(theirs):
    return [*theirs.hidden_layers, theirs.out_layer]


def weight_difference(theirs, ours) -> float:
    r"""The largest absolute difference of the two models' weights."""
    return max(float((conv.weight.T - mine.weight).abs().max())
               for mine, conv in zip(ours.convs, _their_convs(theirs)))


def twin(their, targs, tdata, cfg, data, seed: int, dtype: str = 'float32',
         every: int = 10, log: bool = True) -> Dict[str, Any]:
    r"""Trains their DeepGCN and gnorm's for ``targs.epochs`` epochs on the
    same random numbers (see the module's doc); every :obj:`every` epochs
    and at the last, records both training losses, both test accuracies
    and :func:`weight_difference`."""
    import torch
    from gnorm.train import node_setup
    torch.manual_seed(seed)
    theirs = getattr(their.models, targs.model)(
        targs, tdata.x.size(1), int(tdata.y.max()) + 1)
    theirs.dropout = gnorm_dropout()(targs.dropout)
    ours = node_setup.build_model(cfg, data.x.size(1), int(data.y.max()) + 1)
    copy_weights(theirs, ours)
    to = getattr(torch, dtype)
    theirs, ours = theirs.to(to), ours.to(to)
    tdata = tdata.clone()
    tdata.x, tdata.adj = tdata.x.to(to), adjacency_in(tdata.adj, to)
    x = tdata.x  # their features: gnorm's own agree to float32 rounding
    graph = ours.prepare(x, data.edge_index)._replace(entries=None)
    criterion = torch.nn.CrossEntropyLoss()
    their_opt = torch.optim.Adam(theirs.parameters(), targs.lr,
                                 weight_decay=targs.wd)
    our_opt = torch.optim.Adam(ours.parameters(), targs.lr,
                               weight_decay=targs.wd)
    rows = {k: [] for k in ('epoch', 'their_loss', 'gnorm_loss',
                            'their_test_acc', 'gnorm_test_acc',
                            'weight_difference')}
    start = time.perf_counter()
    for epoch in range(1, targs.epochs + 1):
        state = torch.get_rng_state()
        their_loss = their.utils.train(theirs, their_opt, criterion,
                                       tdata)[0]
        torch.set_rng_state(state)  # the same dropout masks for gnorm
        ours.train()
        our_opt.zero_grad()
        our_loss = criterion(ours(x, graph)[data.train_mask],
                             data.y[data.train_mask])
        our_loss.backward()
        our_opt.step()
        if epoch % every and epoch != targs.epochs:
            continue
        ours.eval()
        with torch.no_grad():
            pred = ours(x, graph).argmax(-1)
        row = dict(
            epoch=epoch, their_loss=float(their_loss),
            gnorm_loss=float(our_loss),
            their_test_acc=float(their.utils.test(theirs, criterion,
                                                  tdata)[1]),
            gnorm_test_acc=float((pred == data.y)[data.test_mask]
                                 .float().mean()),
            weight_difference=weight_difference(theirs, ours))
        for k, v in row.items():
            rows[k].append(v)
        if log:
            print(f'  seed {seed} epoch {epoch}: loss {row["their_loss"]:.6f}'
                  f' / {row["gnorm_loss"]:.6f}, test acc '
                  f'{100 * row["their_test_acc"]:.2f} / '
                  f'{100 * row["gnorm_test_acc"]:.2f}, weights differ by '
                  f'{row["weight_difference"]:.2e} '
                  f'({time.perf_counter() - start:.0f} s)', flush=True)
    return dict(rows, seconds=round(time.perf_counter() - start, 2))
