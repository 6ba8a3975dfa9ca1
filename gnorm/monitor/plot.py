r"""The plots of :class:`gnorm.monitor.CollapseMonitor`'s records: one
panel per metric, the layers on the x axis and one line per recorded step
(coloured by step), or a layers × steps heatmap (:func:`plot_records`);
several monitors on shared axes, one line each (:func:`plot_compare`).
Either marks where collapse sets in (:mod:`~gnorm.monitor.onset`)."""
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch

from gnorm.monitor.onset import check_fraction, onsets

# The metrics that scale with the features, plotted on a log scale.
SCALED = ('variance', 'dirichlet_energy', 'dirichlet_energy_normalized')


def plot_records(records: Sequence[Dict[str, Any]], layers: Sequence[str],
                 metrics: Sequence[str], path: Optional[Any] = None,
                 kind: str = 'lines', log: Sequence[str] = (),
                 onset: Optional[float] = None):
    r"""Plots :obj:`records` (dicts with ``step``, ``layer``, ``metric``,
    ``value``) of the :obj:`layers` and :obj:`metrics` that have any, as
    :meth:`gnorm.monitor.CollapseMonitor.plot` describes; the metrics in
    :obj:`log` on a log scale; with :obj:`onset`, a marker at each step's
    onset layer (:func:`~gnorm.monitor.onset.onsets` at that fraction).
    Saves to :obj:`path` if given; returns the
    :class:`matplotlib.figure.Figure`."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no backend change
    if kind not in ('lines', 'heatmap'):
        raise ValueError(f"CollapseMonitor.plot expects kind='lines' or "
                         f"'heatmap' (got {kind!r})")
    if not records:
        raise ValueError("CollapseMonitor.plot: nothing recorded yet")
    if onset is not None:
        check_fraction(onset)
    metrics = [m for m in metrics if any(r['metric'] == m for r in records)]
    layers = [n for n in layers if any(r['layer'] == n for r in records)]
    steps = sorted({r['step'] for r in records})
    grid = _grid(records)
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
        marks = {} if onset is None else onsets(records, layers, metric,
                                                onset)
        ax.set_title(metric)
        if all(math.isnan(v) for row in values for v in row):
            ax.text(0.5, 0.5, 'no finite value recorded\n(e.g. mad_gap of a '
                    'graph\nwithout remote pairs)', ha='center',
                    va='center', transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
        elif kind == 'lines':
            _lines(ax, values, layers, steps, cmap, norm, metric in log)
            for s, row in zip(steps, values):
                _mark(ax, layers, row, marks.get(s), cmap(norm(s)))
        else:
            _heatmap(fig, ax, values, layers, steps, metric in log)
            for j, s in enumerate(steps):  # a cross in the onset cell
                if marks.get(s) is not None:
                    ax.scatter([j], [layers.index(marks[s])], marker='x',
                               s=20, color='white', zorder=3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis('off')
    if kind == 'lines':
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        fig.colorbar(mappable, ax=axes.ravel().tolist(), label='step')
    if onset is not None:
        marker = 'v' if kind == 'lines' else 'x'
        axes.flat[0].legend(handles=[_onset_handle(onset, marker)],
                            fontsize=7)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def plot_compare(monitors: Mapping[str, Any],
                 metrics: Optional[Sequence[str]] = None,
                 step: Union[int, Sequence[int], None] = None,
                 path: Optional[Any] = None, log: Sequence[str] = SCALED,
                 onset: Optional[float] = None, run: int = 0):
    r"""Plots several monitors on shared axes: a panel per metric (rows)
    and step (columns), the layers on the x axis, one line per monitor,
    labelled by its key, e.g. a model without and with a norm:

    .. code-block:: python

        plot_compare({'none': monitor, 'contranorm': monitor_cn},
                     metrics=['effective_rank', 'mad'], onset=0.5)

    The panels of a column share the layers, those of a row (a metric)
    their y axis.

    Args:
        monitors (dict): :obj:`{label: monitor}`, each a
            :class:`~gnorm.monitor.CollapseMonitor` or its list of
            records (e.g. read back from a CSV of
            :meth:`~gnorm.monitor.CollapseMonitor.to_csv`, values as
            floats).
        metrics (sequence of str, optional): The metrics to draw; all
            recorded ones if :obj:`None`. (default: :obj:`None`)
        step (int or sequence of int, optional): The step(s) to draw, a
            column each; the last step every monitor recorded if
            :obj:`None`. (default: :obj:`None`)
        path (str or Path, optional): Where to save the figure.
            (default: :obj:`None`)
        log (sequence of str, optional): The metrics drawn on a log scale.
            (default: :obj:`SCALED`)
        onset (float, optional): Marks each line's onset layer
            (:meth:`~gnorm.monitor.CollapseMonitor.onset` at this
            fraction) with a triangle and a dotted vertical line of its
            colour. (default: :obj:`None`)
        run (int, optional): For stacked runs, the run drawn.
            (default: :obj:`0`)

    Returns the :class:`matplotlib.figure.Figure` (drawn without
    :mod:`matplotlib.pyplot`).
    """
    from matplotlib.figure import Figure
    if not monitors:
        raise ValueError("plot_compare expects {label: monitor, ...}")
    if onset is not None:
        check_fraction(onset)
    sources = {label: _source(label, m, run) for label, m in monitors.items()}
    layers: List[str] = []  # the first's order, then any others'
    for _, names in sources.values():
        layers += [n for n in names if n not in layers]
    recorded = [m for records, _ in sources.values() for m in dict.fromkeys(
        r['metric'] for r in records)]
    recorded = list(dict.fromkeys(recorded))
    metrics = list(metrics or recorded)
    bad = [m for m in metrics if m not in recorded]
    if bad:
        raise ValueError(f"plot_compare: no {bad[0]!r} recorded; pass some "
                         f"of {', '.join(recorded)}")
    steps = _steps(sources, step)
    grids = {label: _grid(records) for label, (records, _) in sources.items()}
    fig = Figure(figsize=(max(4.2 * len(steps), 5.0),
                          2.4 * len(metrics) + 1.0), layout='constrained')
    axes = fig.subplots(len(metrics), len(steps), sharex=True, sharey='row',
                        squeeze=False)
    for row, metric in zip(axes, metrics):
        marks = {} if onset is None else {
            label: onsets(records, names, metric, onset)
            for label, (records, names) in sources.items()
            if any(r['metric'] == metric for r in records)}
        for ax, s in zip(row, steps):
            for k, label in enumerate(sources):
                values = [grids[label].get((metric, n, s), math.nan)
                          for n in layers]
                ax.plot(range(len(layers)), values, color=f'C{k}', lw=1.2,
                        label=label)
                _mark(ax, layers, values, marks.get(label, {}).get(s),
                      f'C{k}')
            if metric in log:
                ax.set_yscale('log')
            ax.grid(alpha=0.3)
        row[0].set_ylabel(metric)
    for ax, s in zip(axes[0], steps):
        ax.set_title(f'step {s}')
    for ax in axes[-1]:
        _layer_axis(ax, layers)
    handles, _ = axes[0, 0].get_legend_handles_labels()
    if onset is not None:
        handles.append(_onset_handle(onset, 'v'))
    axes[0, 0].legend(handles=handles, fontsize=7)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _source(label: str, monitor: Any, run: int):
    r"""The records (of run :obj:`run`, for stacked runs) and the layers of
    a monitor, or of a list of records (layers in their order)."""
    records = getattr(monitor, 'records', monitor)
    records = [r for r in records if r.get('run', run) == run]
    if not records:
        raise ValueError(f"plot_compare: {label!r} has no records"
                         + (f' of run {run}' if run else ''))
    layers = getattr(monitor, 'layers', None) or \
        list(dict.fromkeys(r['layer'] for r in records))
    return records, [n for n in layers if any(r['layer'] == n
                                              for r in records)]


def _steps(sources, step) -> List[int]:
    r"""The steps :func:`plot_compare` draws, each recorded by every
    monitor."""
    have = {label: sorted({r['step'] for r in records})
            for label, (records, _) in sources.items()}
    if step is None:
        common = set.intersection(*(set(s) for s in have.values()))
        if not common:
            raise ValueError("plot_compare: no step recorded by every "
                             "monitor; pass step=")
        return [max(common)]
    steps = [step] if isinstance(step, int) else list(step)
    for label, recorded in have.items():
        missing = [s for s in steps if s not in recorded]
        if missing:
            raise ValueError(f"plot_compare: {label!r} has no records at "
                             f"step {missing[0]!r} (its steps: "
                             f"{', '.join(map(str, recorded))})")
    return steps


def _grid(records) -> Dict[tuple, float]:
    return {(r['metric'], r['layer'], r['step']): r['value']
            for r in records}


def _layer_axis(ax, layers) -> None:
    ax.set_xlabel('layer')
    ax.set_xticks(range(len(layers)))
    ax.set_xticklabels(layers, rotation=90, fontsize=6)


def _mark(ax, layers, values, layer: Optional[str], color) -> None:
    r"""The onset :obj:`layer` of a line of :obj:`values`: a triangle on
    the line and a dotted vertical line (collections, not lines: the
    axes' lines stay the curves)."""
    if layer is None or layer not in layers:
        return
    x = layers.index(layer)
    ax.scatter([x], [values[x]], marker='v', s=30, color=color, zorder=3)
    ax.vlines(x, 0, 1, transform=ax.get_xaxis_transform(), colors=[color],
              linestyles=':', linewidth=0.9)


def _onset_handle(onset: float, marker: str):
    from matplotlib.lines import Line2D
    return Line2D([], [], marker=marker, linestyle='', color='0.3',
                  label=f'onset (fraction={onset:g})')


def _lines(ax, values, layers, steps, cmap, norm, log: bool) -> None:
    r"""One line per step over the layers, coloured by step."""
    for s, row in zip(steps, values):
        ax.plot(range(len(layers)), row, color=cmap(norm(s)), lw=1)
    _layer_axis(ax, layers)
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
