"""Which layer collapses, and when: PyG's 32-layer GCN on Cora, without a
norm and with ContraNorm, watched by gnorm.monitor.CollapseMonitor.

Both models are PyG's ``torch_geometric.nn.models.GCN(1433, 64,
num_layers=32, out_channels=7)``, once with ``norm=None`` and once with
``norm=ContraNorm(64, scale=1.0)`` (``BasicGNN`` puts the norm after every
convolution but the last), trained on Cora's public split (gnorm's
loader) by full-batch Adam (lr 0.01, weight decay 5e-4), seed 0, one CPU
thread. The monitor hooks the 32 convolutions (``convs.i``, before norm
and activation) and records a validation forward pass (eval mode, no
gradient) at the epochs of ``STEPS``: before training (0) and after
epochs 10, 25 and 50. Fifty epochs, not 100: a ContraNorm epoch takes
about 5 s on the shared CPU, and 100 would take over 8 minutes.

Writes ``results/monitor_cora.csv`` (the monitor's records, a ``model``
column in front) and ``results/monitor_cora.png`` drawn from that CSV
alone by ``gnorm.monitor.plot_compare``: one row of panels per metric,
one column per recorded epoch (both models' validation accuracy in its
title, the rows ``metric=val_acc`` of the CSV), the layers on the x axis
and one line per model on shared axes, with its onset of collapse marked
(``CollapseMonitor.onset`` at fraction 0.5).
``--plot-only`` redraws the PNG from the committed CSV; both print the
sentence docs/monitor.rst quotes (:func:`guide_sentence`).

    python experiments/monitor_cora.py              # ~5 minutes
    python experiments/monitor_cora.py --plot-only  # the PNG from the CSV
"""
import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.monitor import (COLUMNS, METRICS, SCALED,  # noqa: E402
                           plot_compare, read_csv)

OUT = ROOT / 'experiments' / 'results' / 'monitor_cora.csv'
PNG = OUT.with_suffix('.png')
EPOCHS = 50
STEPS = (0, 10, 25, 50)  # the epochs recorded (0: before training)
MODELS = ('none', 'contranorm')
HIDDEN, LAYERS = 64, 32
FIELDS = ('model', ) + COLUMNS
TITLES = {'none': 'GCN, no norm', 'contranorm': 'GCN + ContraNorm'}
ONSET = 0.5  # the onset marked: half way from the first layer to collapse


def train(model_name: str, data, epochs: int = EPOCHS):
    r"""Trains the GCN with the norm :obj:`model_name`, recording the
    monitor at :obj:`STEPS`; returns its records with a ``model`` field,
    and the validation accuracy at each recorded step."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn.models import GCN

    from gnorm.monitor import CollapseMonitor
    from gnorm.nn import ContraNorm

    torch.manual_seed(0)
    norm = ContraNorm(HIDDEN, scale=1.0) if model_name == 'contranorm' \
        else None
    model = GCN(data.num_features, HIDDEN, num_layers=LAYERS,
                out_channels=int(data.y.max()) + 1, norm=norm)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01,
                                 weight_decay=5e-4)
    monitor = CollapseMonitor(model)
    accuracy = {}
    for epoch in range(epochs + 1):
        if epoch > 0:
            model.train()
            optimizer.zero_grad()
            out = model(data.x, data.edge_index)
            F.cross_entropy(out[data.train_mask],
                            data.y[data.train_mask]).backward()
            optimizer.step()
        if epoch in STEPS:
            model.eval()
            with torch.no_grad(), monitor.record(epoch,
                                                 edge_index=data.edge_index):
                out = model(data.x, data.edge_index)
            pred = out.argmax(-1)[data.val_mask]
            accuracy[epoch] = float((pred == data.y[data.val_mask]).float()
                                    .mean())
            print(f'{model_name} epoch {epoch}: val acc '
                  f'{accuracy[epoch]:.3f}', flush=True)
    monitor.remove()
    return [{'model': model_name, **r} for r in monitor.records], accuracy


def plot(rows, path: Path = PNG):
    r"""Both models on shared axes from the records :obj:`rows`
    (:func:`gnorm.monitor.plot_compare`): one row of panels per metric,
    one column per recorded epoch (the validation accuracies in its
    title), the layers on the x axis and one line per model, each with
    its onset of collapse marked (half of the first layer's distance to
    the collapsed value, :meth:`~gnorm.monitor.CollapseMonitor.onset`)."""
    acc = {(r['model'], r['step']): r['value'] for r in rows
           if r['metric'] == 'val_acc'}
    records = {TITLES[model]: [r for r in rows if r['model'] == model
                               and r['metric'] != 'val_acc']
               for model in MODELS}
    layers = list(dict.fromkeys(r['layer'] for r in records[TITLES[
        MODELS[0]]]))
    steps = sorted({r['step'] for r in rows})
    fig = plot_compare(records, metrics=METRICS, step=steps, log=SCALED,
                       onset=ONSET)
    fig.set_size_inches(3.2 * len(steps) + 1, 1.9 * len(METRICS) + 1.4)
    ticks = list(range(0, len(layers) - 1, 4)) + [len(layers) - 1]
    axes = fig.axes
    for ax in axes:
        ax.tick_params(axis='y', labelsize=8)
        ax.yaxis.label.set_fontsize(9)
    for ax in axes[-len(steps):]:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(i) for i in ticks], rotation=0, fontsize=8)
        ax.set_xlabel(f'layer i (convs.i; {len(layers) - 1}: the logits)',
                      fontsize=9)
    for ax, step in zip(axes, steps):
        ax.set_title(f'epoch {step}\nval acc ' + ' / '.join(
            f'{acc[model, step]:.2f}' for model in MODELS
            if (model, step) in acc), fontsize=10)
    fig.suptitle(f'PyG GCN, {len(layers)} layers, on Cora: collapse metrics '
                 f'of each convolution\'s output (before norm and '
                 f'activation),\nvalidation forward pass at epochs '
                 f'{", ".join(map(str, steps))}; val acc: '
                 f'{" / ".join(TITLES[m] for m in MODELS)}', fontsize=11)
    fig.savefig(path, dpi=100)
    return fig


def guide_sentence(rows) -> str:
    r"""The sentence of docs/monitor.rst under the figure, its numbers
    from the records :obj:`rows`: at the last recorded epoch, the range
    over the hidden convolutions (all but the first and the logits) of
    the effective rank, the cosine similarity and the variance, and the
    validation accuracy, of each model."""
    last = max(r['step'] for r in rows)
    layers = list(dict.fromkeys(r['layer'] for r in rows if r['layer']))
    hidden = layers[1:-1]  # convs.1 ... convs.30

    def span(model, metric, fmt):
        values = [r['value'] for r in rows if r['model'] == model and
                  r['metric'] == metric and r['layer'] in hidden and
                  r['step'] == last]
        return f'{min(values):{fmt}} to {max(values):{fmt}}'

    def acc(model):
        return next(r['value'] for r in rows if r['model'] == model and
                    r['metric'] == 'val_acc' and r['step'] == last)
    return (f"At epoch {last}, over ``{hidden[0]}`` to ``{hidden[-1]}``: "
            f"effective rank {span('none', 'effective_rank', '.2f')} "
            f"without a norm, {span('contranorm', 'effective_rank', '.2f')}"
            f" with ContraNorm; cosine similarity "
            f"{span('none', 'cosine_similarity', '.2f')} and "
            f"{span('contranorm', 'cosine_similarity', '.2f')}; variance "
            f"{span('none', 'variance', '.1e')} and "
            f"{span('contranorm', 'variance', '.1e')}; validation accuracy "
            f"{acc('none'):.2f} and {acc('contranorm'):.2f}.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--plot-only', action='store_true',
                        help='redraw the PNG from the committed CSV')
    parser.add_argument('--epochs', type=int, default=EPOCHS)
    parser.add_argument('--data-root', default=None)
    args = parser.parse_args(argv)
    if not args.plot_only:
        import torch

        from experiments.cases.monitor import load_cora
        torch.set_num_threads(1)
        with tempfile.TemporaryDirectory() as tmp:
            data = load_cora(args.data_root or tmp)
        records = []
        for model in MODELS:
            begin = time.perf_counter()
            got, acc = train(model, data, args.epochs)
            records += got
            records += [{'model': model, 'step': step, 'layer': '',
                         'metric': 'val_acc', 'value': value, 'graphs': 1}
                        for step, value in acc.items()]
            print(f'{model}: {time.perf_counter() - begin:.0f} s',
                  flush=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        with open(OUT, 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(records)
    rows = read_csv(OUT)
    plot(rows)
    print(f'wrote {PNG}')
    print(guide_sentence(rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
