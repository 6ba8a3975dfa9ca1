r"""The plots of :class:`gnorm.monitor.CollapseMonitor`'s records: one
panel per metric, the layers on the x axis and one line per recorded step
(coloured by step), or a layers × steps heatmap."""
import math
from typing import Any, Dict, Optional, Sequence

import torch


def plot_records(records: Sequence[Dict[str, Any]], layers: Sequence[str],
                 metrics: Sequence[str], path: Optional[Any] = None,
                 kind: str = 'lines', log: Sequence[str] = ()):
    r"""Plots :obj:`records` (dicts with ``step``, ``layer``, ``metric``,
    ``value``) of the :obj:`layers` and :obj:`metrics` that have any, as
    :meth:`gnorm.monitor.CollapseMonitor.plot` describes; the metrics in
    :obj:`log` on a log scale. Saves to :obj:`path` if given; returns the
    :class:`matplotlib.figure.Figure`."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no backend change
    if kind not in ('lines', 'heatmap'):
        raise ValueError(f"CollapseMonitor.plot expects kind='lines' or "
                         f"'heatmap' (got {kind!r})")
    if not records:
        raise ValueError("CollapseMonitor.plot: nothing recorded yet")
    metrics = [m for m in metrics if any(r['metric'] == m for r in records)]
    layers = [n for n in layers if any(r['layer'] == n for r in records)]
    steps = sorted({r['step'] for r in records})
    grid = {(r['metric'], r['layer'], r['step']): r['value']
            for r in records}
    cols = min(len(metrics), 4)
    rows = math.ceil(len(metrics) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.6 * rows), layout='constrained')
    axes = fig.subplots(rows, cols, squeeze=False)
    cmap = matplotlib.colormaps['viridis']
    norm = matplotlib.colors.Normalize(min(steps), max(max(steps),
                                                       min(steps) + 1))
    for ax, metric in zip(axes.flat, metrics):
        values = [[grid.get((metric, n, s), math.nan) for n in layers]
                  for s in steps]  # [steps, layers]
        ax.set_title(metric)
        if all(math.isnan(v) for row in values for v in row):
            ax.text(0.5, 0.5, 'no finite value recorded\n(e.g. mad_gap of a '
                    'graph\nwithout remote pairs)', ha='center',
                    va='center', transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        elif kind == 'lines':
            _lines(ax, values, layers, steps, cmap, norm, metric in log)
        else:
            _heatmap(fig, ax, values, layers, steps, metric in log)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis('off')
    if kind == 'lines':
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(mappable, ax=axes.ravel().tolist(), label='step')
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _lines(ax, values, layers, steps, cmap, norm, log: bool) -> None:
    r"""One line per step over the layers, coloured by step."""
    for s, row in zip(steps, values):
        ax.plot(range(len(layers)), row, color=cmap(norm(s)), lw=1)
    ax.set_xlabel('layer')
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers, rotation=90, fontsize=6)
    if log:
        ax.set_yscale('log')


def _heatmap(fig, ax, values, layers, steps, log: bool) -> None:
    r"""The values as a layers × steps image, on a log colour scale when
    :obj:`log` and some value is positive."""
    import matplotlib
    grid = torch.tensor(values, dtype=torch.float64).t()  # [layers, steps]
    positive = grid[grid > 0]
    scale = (matplotlib.colors.LogNorm(float(positive.min()),
                                       float(positive.max()))
             if log and positive.numel() > 0 else None)
    image = ax.imshow(grid.numpy(), aspect='auto', cmap='magma',
                      interpolation='nearest', norm=scale)
    fig.colorbar(image, ax=ax)
    ax.set_xlabel('step')
    ax.set_xticks(range(len(steps)))
    ax.set_xticklabels(steps, rotation=90, fontsize=6)
    ax.set_yticks(range(len(layers)))
    ax.set_yticklabels(layers, fontsize=6)
