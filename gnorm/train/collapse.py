r"""The per-layer collapse metrics of a finished run, for every task: one
:class:`gnorm.monitor.CollapseMonitor` pass over the final model (the
metrics computed in float64), written to ``results.json``'s ``collapse``
field and, as the monitor's tidy records, to ``collapse.csv`` in the run
folder. Graph runs also record SepNorm's uniformity (of each graph's node
tokens).
"""
import csv
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from gnorm.monitor import COLUMNS, METRICS, CollapseMonitor

COLLAPSE_CSV = 'collapse.csv'
# The metrics of graph runs: the default ones and SepNorm's own.
GRAPH_METRICS = (*METRICS, 'uniformity')


def monitor(model: torch.nn.Module,
            metrics: Sequence[str] = METRICS) -> CollapseMonitor:
    r"""A :class:`~gnorm.monitor.CollapseMonitor` of :obj:`model`'s layers
    (the :obj:`metrics`, computed in float64; a non-finite output, of a
    run that diverged, gives :obj:`nan` values rather than an error)."""
    return CollapseMonitor(model, metrics=metrics, dtype=torch.float64,
                           nonfinite='nan')


@torch.no_grad()
def squared_norms(model: torch.nn.Module, layers: Sequence[str],
                  forward: Callable[[], Any]) -> List[List[float]]:
    r"""Per run (one for a model of one run), the mean squared row norm of
    each of :obj:`layers`' outputs in the pass :obj:`forward` runs (the
    scale a diagnosis reads the layers' Dirichlet energies against,
    :func:`gnorm.monitor.diagnosis.energy_fall`), in float64."""
    from gnorm.monitor.gradients import squared_norm
    modules = dict(model.named_modules())
    found: Dict[int, torch.Tensor] = {}

    def keep(index):
        def hook(module, args, output):
            if isinstance(output, torch.Tensor) and output.dim() >= 2:
                x = output.detach().double()
                found[index] = squared_norm(x if x.dim() == 3
                                            else x.unsqueeze(0))
        return hook
    handles = [modules[n].register_forward_hook(keep(i))
               for i, n in enumerate(layers)]
    try:
        forward()
    finally:
        for h in handles:
            h.remove()
    nan = torch.tensor([math.nan], dtype=torch.float64)
    runs = max((v.numel() for v in found.values()), default=1)
    table = torch.stack([found.get(i, nan).cpu().expand(runs)
                         for i in range(len(layers))])  # [L, runs]
    return table.T.tolist()


def run_records(records: Sequence[Dict[str, Any]], run: Optional[int],
                step: int) -> List[Dict[str, Any]]:
    r"""The records of run :obj:`run` (:obj:`None`: a model of one run),
    without their ``run`` field, at step :obj:`step` (the epoch whose
    weights were measured)."""
    return [{**{k: v for k, v in r.items() if k != 'run'}, 'step': step}
            for r in records if run is None or r['run'] == run]


def collapse_field(records: Sequence[Dict[str, Any]],
                   graphs: bool = False) -> Dict[str, list]:
    r"""``results.json``'s ``collapse`` field of one run's :obj:`records`
    (one step): ``layer`` (1 ... L, in the model's order) and one list per
    metric, a value per layer; with :obj:`graphs`, also ``graphs``, the
    number of graphs each layer's values are the mean of. An undefined
    value (:obj:`nan`) is :obj:`None`, as ``results.json`` keeps it."""
    layers: List[str] = []
    values: Dict[str, list] = {}
    counts: Dict[str, int] = {}
    for r in records:
        if r['layer'] not in counts:
            layers.append(r['layer'])
            counts[r['layer']] = r['graphs']
        value = r['value']  # nan (e.g. MADGap without remote pairs): null
        values.setdefault(r['metric'], []).append(
            None if math.isnan(value) else value)
    field: Dict[str, list] = {'layer': list(range(1, len(layers) + 1))}
    field.update(values)
    if graphs:
        field['graphs'] = [counts[n] for n in layers]
    return field


def write_csv(folder: Path, records: Sequence[Dict[str, Any]]) -> None:
    r"""Writes one run's :obj:`records` to ``collapse.csv`` in
    :obj:`folder` (the columns of :meth:`CollapseMonitor.to_csv`)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / COLLAPSE_CSV, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(records)
