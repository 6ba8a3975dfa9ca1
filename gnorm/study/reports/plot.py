r"""The plots of a depth study's report, PNG without the metadata that
changes between matplotlib versions (the same runs give the same bytes):
accuracy vs depth and effective rank vs layer; the saving a paired
study's curves (:mod:`~gnorm.study.reports.curves`) share."""
import io
import math
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional

from gnorm.study.findings.select import scores_said
from gnorm.study.words.verdicts import partial


def save_bytes(path: Path, data: bytes) -> None:
    r"""Writes :obj:`data` to :obj:`path` unless it already holds exactly
    that (a regenerated report leaves an unchanged file untouched)."""
    if not (path.is_file() and path.read_bytes() == data):
        path.write_bytes(data)


def save_figure(fig, path: Path) -> None:
    r"""Saves :obj:`fig` as PNG without the metadata that changes between
    matplotlib versions, so the same records give the same bytes."""
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=110, bbox_inches='tight',
                metadata={'Software': None})
    plt.close(fig)
    save_bytes(path, buffer.getvalue())


def _spans(depths: List[int]) -> str:
    return ', '.join(f'L={d}' for d in depths)


def _grid(rows: int, columns: int, width: float, height: float):
    r"""A figure of :obj:`rows` x :obj:`columns` panels, :obj:`width` x
    :obj:`height` inches, and its axes as a 2-D array."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt.subplots(rows, columns, figsize=(width, height),
                        squeeze=False)


def _panels(n: int, height: float = 3.4):
    fig, axes = _grid(1, n, 4 * n, height)
    return fig, axes[0]


# Points between a panel's lower edge and its notes: below the tick labels
# and the axis label, whatever the panel's height.
NOTES_BELOW = 34
# Characters of a line of notes: a 4-inch panel's width at 7 points.
NOTES_WIDTH = 60


def _wrapped(notes: List[str]) -> List[str]:
    r""":obj:`notes` as the lines they take under a panel: each cut at
    :data:`NOTES_WIDTH` characters, its further lines indented."""
    return [line for note in notes for line in textwrap.wrap(
        note, NOTES_WIDTH, subsequent_indent='  ', break_on_hyphens=False)]


def _notes(ax, notes: List[str]) -> int:
    r"""Writes :obj:`notes` under the panel :obj:`ax`, below its axis
    label, off the data, no wider than the panel (a long note takes more
    lines, so the layout never narrows the panel to make room for it);
    returns the number of lines written."""
    lines = _wrapped(notes)
    if lines:
        ax.annotate('\n'.join(lines), (0.0, 0.0), xycoords='axes fraction',
                    xytext=(0, -NOTES_BELOW), textcoords='offset points',
                    fontsize=7, va='top', color='0.25')
    return len(lines)


# Octaves between neighbouring rows' points at one depth: about a
# marker's width on a 4-inch panel of 2 to 12 layers, so that rows of
# equal scores stay visible side by side, while every point stays nearer
# its own depth than the next (6 rows span 0.25 octave; 12 and 16 layers
# are 0.42 apart).
DODGE = 0.05


def _dodged(layers: List[int], k: int, n: int) -> List[float]:
    r""":obj:`layers` moved sideways for row :obj:`k` of :obj:`n` on a
    log-2 axis, the rows centred on the depth (one row: not moved)."""
    return [d * 2 ** (DODGE * (k - (n - 1) / 2)) for d in layers]


def _rows(rows: List[str], every: List[str]) -> str:
    r""":obj:`rows` by name, or ``every row`` when they are all of
    :obj:`every` (two or more)."""
    return 'every row' if len(rows) > 1 and rows == every \
        else ', '.join(rows)


# Points between the labels of partial cells at one depth, stacked.
LABEL_STEP = 7


def _label_partials(ax, partials: List[Any], rows: int) -> None:
    r"""Labels each partial cell's open marker ``k of n runs`` in its
    row's colour, at its height, right of the rightmost of the
    :obj:`rows` rows placed side by side at its depth (so that no label
    covers another row's marker); at one depth a label that would come
    within :data:`LABEL_STEP` points of the one above moves down to that
    distance, so that the labels never overlap."""
    low, high = ax.get_ylim()
    points = ax.bbox.height * 72 / ax.figure.dpi / ((high - low) or 1.0)
    by_depth: Dict[int, List[Any]] = {}
    for cell, color in partials:
        by_depth.setdefault(cell['layers'], []).append((cell, color))
    for layers, found in by_depth.items():
        right = _dodged([layers], rows - 1, rows)[0]
        above = math.inf  # the height, in points, of the label above
        for cell, color in sorted(found, key=lambda f: -f[0]['test_mean']):
            at = cell['test_mean'] * points
            placed = min(at, above - LABEL_STEP)
            above = placed
            ax.annotate(partial(cell), (right, cell['test_mean']),
                        xytext=(6, placed - at), textcoords='offset points',
                        fontsize=6, color=color, ha='left', va='center')


def _depth_panel(ax, drawn: List[Dict[str, Any]], row_names: List[str],
                 dataset: str, paper_lines: bool, authors: Dict,
                 scored: str) -> List[str]:
    r"""One panel of :func:`plot_depth`: :obj:`dataset`'s rows against
    depth, its axis spanning only the depths where it has runs; returns
    its notes (the cells not drawn, by depth)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    here = [r for r in drawn if r['dataset'] == dataset]
    depths = sorted({r['layers'] for r in here if r['cell_runs']})
    lacking: Dict[str, List[str]] = {}  # depths without runs -> rows
    placed = [row for row in row_names  # side by side: rows with runs here
              if any(r['row'] == row and r['cell_runs'] for r in here)]
    partials: List[Any] = []  # (cell, colour) of the open markers
    for k, row in enumerate(row_names):
        rs = sorted((r for r in here if r['row'] == row),
                    key=lambda r: r['layers'])
        color = f'C{k}'

        def at(layers: List[int]) -> List[float]:
            return (_dodged(layers, placed.index(row), len(placed))
                    if row in placed else layers)

        done = [r for r in rs if r['complete']]  # the line joins these
        x = at([r['layers'] for r in done])
        m = [r['test_mean'] for r in done]
        s = [r['test_std'] for r in done]
        ax.errorbar(x, m, yerr=s, fmt='o-', color=color, capsize=2,
                    elinewidth=0.8, ms=4)
        ax.fill_between(x, [a - b for a, b in zip(m, s)],
                        [a + b for a, b in zip(m, s)], color=color,
                        alpha=0.15, lw=0)
        for r in rs:
            if r['cell_runs'] and not r['complete']:
                ax.plot(at([r['layers']]), r['test_mean'], 'o', mfc='white',
                        color=color, ms=5)
                partials.append((r, color))
        for why in dict.fromkeys(r.get('not_run') for r in rs
                                 if r['cell_runs'] == 0):
            none = _spans([r['layers'] for r in rs if r['cell_runs'] == 0
                           and r.get('not_run') == why])
            said = 'not run here' if why else 'no runs'
            lacking.setdefault(f'{said} at {none}', []).append(row)
        theirs = [(layers, run['mean'])
                  for (d, name, layers), runs in authors.items()
                  if d == dataset and name == row for run in runs]
        if theirs:
            ax.plot(at([t[0] for t in theirs]), [t[1] for t in theirs], 'D',
                    color=color, mec='black', ms=7, ls='none',
                    zorder=4)  # over gnorm's markers
        paper = [r for r in rs if r['paper_mean'] is not None]
        if paper_lines and paper:
            ax.plot(at([r['layers'] for r in paper]),
                    [r['paper_mean'] for r in paper], 'x--',
                    color=color, alpha=0.6)
    _label_partials(ax, partials, max(len(placed), 1))
    ax.set_xscale('log', base=2)
    ax.xaxis.set_major_locator(FixedLocator(depths))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(depths[0] / 1.3, depths[-1] * 1.3)
    ax.set_title(dataset)
    ax.set_xlabel('layers')
    ax.set_ylabel(f'test {scored} (%)')
    ax.grid(alpha=0.3)
    return [f'{_rows(rows, row_names)}: {said}'
            for said, rows in lacking.items()]


def plot_depth(cells: List[Dict[str, Any]], path: Path,
               paper_lines: bool, authors: Optional[Dict] = None,
               figure_title: Optional[str] = None,
               scores: Optional[Dict[str, str]] = None) -> None:
    r"""Test accuracy vs depth of :obj:`cells` (one record per cell: the
    setting chosen by validation,
    :func:`gnorm.study.findings.compare.chosen_by_validation`), a panel per
    dataset, its axis named by :obj:`scores` (dataset → score in words;
    default: :func:`gnorm.study.findings.select.scores_said` of its cells): per row a line with a
    std band through its complete cells only; a partial cell is an open
    marker labelled ``k of n settings``; a missing cell is not drawn and
    is listed under the panel, whose axis spans the depths with runs.
    Rows at one depth sit side by side (:data:`DODGE`), so that equal
    scores hide no row. :obj:`paper_lines`: the paper's values too
    (dashed, crosses); only where the splits are the paper's. :obj:`authors`
    (:func:`read_authors`): the authors' code's mean at every scale it ran,
    a diamond each, in the row's colour. :obj:`figure_title`: the
    figure's title (the spec's)."""
    authors = authors or {}
    from matplotlib.lines import Line2D

    drawn = cells
    datasets = list(dict.fromkeys(r['dataset'] for r in drawn
                                  if r['cell_runs']))
    empty = [d for d in dict.fromkeys(r['dataset'] for r in drawn)
             if d not in datasets]
    row_names = list(dict.fromkeys(r['row'] for r in drawn))
    fig, axes = _panels(max(len(datasets), 1))
    noted = 0  # the most lines of notes under a panel
    for ax, dataset in zip(axes, datasets):
        scored = (scores[dataset] if scores else
                  scores_said([r for r in drawn if r['dataset'] == dataset]))
        notes = _depth_panel(ax, drawn, row_names, dataset, paper_lines,
                             authors, scored)
        noted = max(noted, _notes(ax, notes))
    handles = [Line2D([], [], color=f'C{k}', marker='o', label=row)
               for k, row in enumerate(row_names)]
    handles.append(Line2D([], [], color='0.4', marker='o', ls='none',
                          mfc='white', label='partial cell (not every '
                          'setting and seed run): not on the line'))
    if paper_lines:
        handles.append(Line2D([], [], color='0.4', marker='x', ls='--',
                              label='paper'))
    if authors:
        handles.append(Line2D([], [], color='0.4', marker='D', mec='black',
                              ls='none', label="authors' code, their recipe "
                              '(one per scale run)'))
    title = ('gnorm: mean ± std over seeds (error bar and band); the '
             'setting chosen by validation')
    if len(row_names) > 1:
        title += '; rows side by side at each depth'
    if not paper_lines and any(r['paper_mean'] is not None for r in drawn):
        title += ("; the paper's values are not drawn: its splits differ, "
                  'not comparable')
    if empty:
        title += f"\nno runs yet, not drawn: {', '.join(empty)}"
    if any(r.get('not_run') for r in drawn):
        title += ('\nnot run here: cells the study leaves for another machine '
                  '(table.not_run; the report says why)')
    width, height = fig.get_size_inches()  # room for the notes' lines
    fig.set_size_inches(width, height + 0.13 * noted)
    fig.legend(handles=handles, loc='upper center',
               ncol=min(len(handles), 4 * len(axes)), fontsize=8,
               title=title, title_fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    if figure_title:
        fig.suptitle(figure_title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def _output_tick(ax, n: int) -> None:
    r"""Integer layer ticks 1..:obj:`n` on :obj:`ax`'s x axis, at most
    about 8, the last always shown and labelled ``out`` (the layer whose
    width is the classes: its effective rank is at most their number)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator
    step = max(1, math.ceil(n / 8))
    ticks = [t for t in range(1, n, step) if n - t > step / 2] + [n]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter(
        [str(t) for t in ticks[:-1]] + ['out']))


def _erank_panel(ax, drawn: List[Dict[str, Any]], row_names: List[str],
                 dataset: str, depth: int) -> None:
    r"""One panel of :func:`plot_erank`: the effective rank by layer of
    each row's cell at (:obj:`dataset`, :obj:`depth`)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    here = [r for r in drawn if r['dataset'] == dataset
            and r['layers'] == depth]
    ax.set_title(f'{dataset}, {depth} layers', fontsize=9)
    if not here:
        ax.axis('off')
        ax.text(0.5, 0.5, 'no effective ranks', transform=ax.transAxes,
                ha='center', fontsize=8, color='0.4')
        return
    out = max(len(r['erank']) for r in here)
    dotted = []
    for k, row in enumerate(row_names):
        r = next((r for r in here if r['row'] == row), None)
        if r is None:
            continue
        # hidden layers at their depth, the output layer at "out"
        layers = [*range(1, len(r['erank'])), out]
        ax.plot(layers, r['erank'], color=f'C{k}',
                ls='-' if r['complete'] else ':')
        ax.fill_between(layers, r['erank_min'], r['erank_max'],
                        color=f'C{k}', alpha=0.15, lw=0)
        if not r['complete']:
            dotted.append(f'{row} ({partial(r)})')
    ax.set_xlabel('layer (the last: the output layer)')
    ax.set_ylabel('effective rank')
    _output_tick(ax, out)
    ax.set_yscale('log')
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
    _notes(ax, [f"partial cell, dotted: {', '.join(dotted)}"]
           if dotted else [])


def plot_erank(cells: List[Dict[str, Any]], path: Path) -> bool:
    r"""Effective rank vs layer of every cell with effective ranks among
    :obj:`cells` (one record per cell, as :func:`plot_depth` takes; mean
    over seeds, band: min to max), a panel per (dataset, depth): a row of
    panels per dataset, a column per depth, so that a reader sees at which
    depth and layer each row collapses; returns whether there was any to
    plot (no file otherwise)."""
    from matplotlib.lines import Line2D

    drawn = [r for r in cells if r['erank']]
    datasets = list(dict.fromkeys(r['dataset'] for r in drawn))
    if not datasets:
        return False
    depths = sorted({r['layers'] for r in drawn})
    row_names = list(dict.fromkeys(r['row'] for r in cells))
    fig, axes = _grid(len(datasets), len(depths), 3.2 * len(depths) + 0.8,
                      3.0 * len(datasets))
    for panels, dataset in zip(axes, datasets):
        for ax, depth in zip(panels, depths):
            _erank_panel(ax, drawn, row_names, dataset, depth)
    handles = [Line2D([], [], color=f'C{k}', label=row)
               for k, row in enumerate(row_names)
               if any(r['row'] == row for r in drawn)]
    fig.legend(handles=handles, loc='upper center', ncol=len(handles),
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.0),
               title='mean over seeds of the setting chosen by validation; '
               'band: min to max over seeds; a row without a line in a '
               'panel has no effective ranks there (not run, or not '
               'recorded)', title_fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True
