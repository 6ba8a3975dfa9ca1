r"""What a benchmark report is made of: Markdown
tables, and line plots of time against size, each a pure function of the
measurements (the same rows give the same bytes)."""
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from gnorm.machine import cpu_name, machine_words, this_machine  # noqa: F401


def machine(device: Any = 'cpu') -> str:
    r"""Deprecated: :func:`gnorm.machine.machine_words` of
    :func:`gnorm.machine.this_machine`."""
    warnings.warn('gnorm.bench.machine is deprecated: use gnorm.machine.'
                  'machine_words(gnorm.machine.this_machine(device))',
                  DeprecationWarning, stacklevel=2)
    return machine_words(this_machine(device))


def cell(value: Any) -> str:
    r"""A table cell: text as it is (``|`` as ``/``, which would end the
    cell), a float to 4 significant digits, :obj:`None` as ``-``."""
    if value is None:
        return '-'
    if isinstance(value, float):
        return f'{value:.4g}'
    return str(value).replace('|', '/')


def markdown_table(header: Sequence[str],
                   rows: Iterable[Sequence[Any]]) -> List[str]:
    r"""The lines of a Markdown table: :obj:`header`, the rule, then one
    line per row of :obj:`rows` (each value through :func:`cell`)."""
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    return lines + ['| ' + ' | '.join(map(cell, row)) + ' |' for row in rows]


def records_table(rows: Sequence[Dict[str, Any]]) -> List[str]:
    r""":func:`markdown_table` of the dicts :obj:`rows`, a column per key
    in order of first appearance (``-`` where a row lacks it)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return markdown_table(columns, ([r.get(c) for c in columns]
                                    for r in rows))


def write_report(path: Any, lines: Sequence[str]) -> str:
    r"""Writes the report :obj:`lines` to :obj:`path` (a newline after
    each; its folder made where missing) and returns its text."""
    text = '\n'.join(lines) + '\n'
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return text


def line_plot(path: Any, panels: Sequence[Dict[str, Any]], *, xlabel: str,
              ylabel: str, legend_title: str = '', title: str = '',
              panel_size: Sequence[float] = (6, 4.5),
              xticks: Optional[Sequence[float]] = None,
              fontsize: float = 8):
    r"""Draws :obj:`panels` side by side, log-log, and saves the PNG to
    :obj:`path` without the metadata that changes between matplotlib
    versions; returns the figure. A panel is a dict: ``title``, ``lines``
    (dicts of ``x``, ``y``, ``label`` and the keywords of
    ``Axes.plot``: ``color``, ``marker``, ``ls``, ...) and optionally
    ``note``, text under the panel (what was not measured, so not drawn).
    One legend for the figure, each label once, right of the panels, with
    :obj:`legend_title`; :obj:`title` above them all. :obj:`xticks`: the
    x axis's ticks, written plainly (batch sizes: 32, 64, ...), and plain
    numbers on the y axis too; :obj:`None`: matplotlib's log ticks."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import (FixedLocator, FuncFormatter, LogLocator,
                                   NullFormatter, NullLocator)
    width, height = panel_size
    fig = Figure(figsize=(width * len(panels), height))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    plain = FuncFormatter(lambda v, _: f'{v:g}')
    handles: Dict[str, Any] = {}
    for ax, panel in zip(axes, panels):
        for line in panel['lines']:
            kwargs = {k: v for k, v in line.items() if k not in ('x', 'y')}
            handle, = ax.plot(line['x'], line['y'], **kwargs)
            handles.setdefault(line['label'], handle)
        ax.set(xscale='log', yscale='log', xlabel=xlabel, ylabel=ylabel,
               title=panel.get('title', ''))
        if xticks is not None:
            ax.xaxis.set_major_locator(FixedLocator(list(xticks)))
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 2.5,
                                                        3.0, 5.0, 7.0)))
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which='both', alpha=0.3)
        if panel.get('note'):
            ax.text(0.0, -0.16, panel['note'], transform=ax.transAxes,
                    fontsize=7, va='top', color='0.25')
    fig.legend(handles=list(handles.values()), loc='center left',
               bbox_to_anchor=(1.0, 0.5), fontsize=fontsize, frameon=False,
               title=legend_title, title_fontsize=fontsize)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches='tight',
                metadata={'Software': None})
    return fig
