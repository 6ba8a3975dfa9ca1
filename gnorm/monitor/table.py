r"""The records of :class:`gnorm.monitor.CollapseMonitor` as a small table,
without pandas: one row per layer, one column per metric (at one step) or
per step (of one metric), printable as text or Markdown."""
import math
from typing import Any, Dict, List, Optional, Sequence, Union


def _cell(value: Any, fmt: str) -> str:
    if not isinstance(value, float):
        return str(value)
    text = format(value, fmt)
    if text.startswith('-') and float(text) == 0:  # -0.000 reads as 0.000
        text = text[1:]
    return text


class Table:
    r"""Values by layer (rows) and column (metrics, or steps): what
    :meth:`~gnorm.monitor.CollapseMonitor.table` returns.
    :obj:`str(table)` aligns the columns as text, :meth:`to_markdown`
    writes a Markdown table, :attr:`rows` and :meth:`to_dict` give the
    values as plain dicts (:obj:`pandas.DataFrame(table.to_dict())`
    makes a data frame of it).

    Args:
        layers (list of str): The row labels, the layers.
        columns (list): The column labels, metrics or steps.
        values (list of list of float): :obj:`[layers][columns]`,
            :obj:`nan` where nothing was recorded.
        corner (str, optional): The top-left cell of the printed table:
            what the table holds (e.g. :obj:`"step 20"`). (default:
            :obj:`"layer"`)
    """
    def __init__(self, layers: Sequence[str], columns: Sequence[Any],
                 values: Sequence[Sequence[float]], corner: str = 'layer'):
        self.layers, self.columns = list(layers), list(columns)
        self.values = [list(row) for row in values]
        self.corner = corner

    @property
    def rows(self) -> List[Dict[Any, Any]]:
        r"""One dict per layer: :obj:`{"layer": name, column: value,
        ...}`."""
        return [{'layer': layer, **dict(zip(self.columns, row))}
                for layer, row in zip(self.layers, self.values)]

    def to_dict(self) -> Dict[Any, Dict[str, float]]:
        r"""The values as :obj:`{column: {layer: value}}` (the layout of
        :meth:`pandas.DataFrame.to_dict`)."""
        return {column: {layer: row[j] for layer, row in
                         zip(self.layers, self.values)}
                for j, column in enumerate(self.columns)}

    def _cells(self, fmt: str) -> List[List[str]]:
        head = [self.corner] + [str(c) for c in self.columns]
        return [head] + [[layer] + [_cell(v, fmt) for v in row]
                         for layer, row in zip(self.layers, self.values)]

    def to_text(self, fmt: str = '.4g') -> str:
        r"""The table as aligned text, the values formatted by :obj:`fmt`
        (a :func:`format` spec)."""
        cells = self._cells(fmt)
        widths = [max(len(row[j]) for row in cells)
                  for j in range(len(cells[0]))]
        return '\n'.join('  '.join(
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells)

    def to_markdown(self, fmt: str = '.4g') -> str:
        r"""The table in Markdown, the values formatted by :obj:`fmt`."""
        cells = self._cells(fmt)
        lines = ['| ' + ' | '.join(row) + ' |' for row in cells]
        lines.insert(1, '|' + '|'.join(
            ' --- ' if j == 0 else ' ---: ' for j in range(len(cells[0])))
            + '|')
        return '\n'.join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({len(self.layers)} layers x '
                f'{len(self.columns)} columns, {self.corner})')


def records_table(records: Sequence[Dict[str, Any]], layers: Sequence[str],
                  metrics: Sequence[str],
                  metric: Union[str, Sequence[str], None] = None,
                  step: Optional[int] = None) -> Table:
    r"""The :class:`Table` of :obj:`records` (dicts with ``step``,
    ``layer``, ``metric``, ``value``), as
    :meth:`gnorm.monitor.CollapseMonitor.table` describes: a row per layer
    of :obj:`layers` with any record, the columns the :obj:`metrics`
    (or :obj:`metric`) at :obj:`step`, or, for one metric named and no
    step, that metric at every step."""
    if not records:
        raise ValueError("CollapseMonitor.table: nothing recorded yet")
    steps = sorted({r['step'] for r in records})
    named = [metric] if isinstance(metric, str) else list(metric or metrics)
    bad = [m for m in named if m not in metrics]
    if bad:
        raise ValueError(f"CollapseMonitor.table: no metric {bad[0]!r} "
                         f"recorded; pass some of {', '.join(metrics)}")
    if step is not None and step not in steps:
        raise ValueError(f"CollapseMonitor.table: nothing recorded at step "
                         f"{step!r}; the steps: "
                         f"{', '.join(map(str, steps))}")
    layers = [n for n in layers if any(r['layer'] == n for r in records)]
    grid = {(r['metric'], r['layer'], r['step']): r['value']
            for r in records}
    if isinstance(metric, str) and step is None:  # layers x steps
        return Table(layers, steps, [[grid.get((metric, n, s), math.nan)
                                      for s in steps] for n in layers],
                     corner=metric)
    step = steps[-1] if step is None else step
    return Table(layers, named, [[grid.get((m, n, step), math.nan)
                                  for m in named] for n in layers],
                 corner=f'step {step}')
