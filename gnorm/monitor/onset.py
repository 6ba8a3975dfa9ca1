r"""Where collapse sets in: for each recorded step, the first layer whose
metric has come a stated part of the way to the value it takes when the
outputs collapse (:data:`COLLAPSED`, :func:`onsets`)."""
import math
from typing import Any, Dict, Optional, Sequence

from gnorm.monitor.table import records_table

#: Each metric's value when every node's output is the same (non-zero)
#: vector, and whether the metric falls or rises to it as the outputs
#: collapse (docs/monitor.rst, "Under full collapse"). The normalised
#: Dirichlet energy is 0 for rows proportional to sqrt(1 + degree), the
#: limit of GCN propagation, not for equal rows: there it is the squared
#: norm of the row times a constant of the graph.
COLLAPSED = {
    'effective_rank': (1.0, 'falls'),
    'cosine_similarity': (1.0, 'rises'),
    'variance': (0.0, 'falls'),
    'dirichlet_energy': (0.0, 'falls'),
    'dirichlet_energy_normalized': (0.0, 'falls'),
    'mad': (0.0, 'falls'),
    'mad_gap': (0.0, 'falls'),
    'uniformity': (0.0, 'rises'),
}


def check_fraction(fraction: Any) -> None:
    r"""Refuses an onset :obj:`fraction` outside :math:`(0, 1)`."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0 < fraction < 1:
        raise ValueError(f"CollapseMonitor.onset expects a fraction between "
                         f"0 and 1 (got {fraction!r})")


def onsets(records: Sequence[Dict[str, Any]], layers: Sequence[str],
           metric: str, fraction: float = 0.5,
           output: bool = False) -> Dict[Any, Optional[str]]:
    r"""For each step of :obj:`records`, the first layer of :obj:`layers`
    after the first (and, unless :obj:`output`, before the last) whose
    :obj:`metric` lies closer to its collapsed value :math:`c`
    (:data:`COLLAPSED`) than :obj:`fraction` of the first layer's
    distance, or :obj:`None` if no layer does:

    .. math::
        s \, (v_\ell - c) < \mathrm{fraction} \cdot s \, (v_0 - c),

    with :math:`s = 1` for the metrics that fall to :math:`c` and
    :math:`s = -1` for those that rise to it (cosine similarity,
    uniformity), :math:`v_0` the first layer's value. For the metrics
    that fall to :math:`0` (variance, the Dirichlet energies, MAD,
    MADGap), the first layer below :obj:`fraction` of the first layer's
    value; for the effective rank, counted from :math:`1`; for cosine
    similarity, :math:`1 - v_\ell` below :obj:`fraction` of
    :math:`1 - v_0`. A step whose first layer is :obj:`nan` or already at
    (or past) :math:`c` has no onset (:obj:`None`).

    The last of :obj:`layers` is the model's output where a monitor hooks
    a whole model (the logits of PyG's GCN, :obj:`outputs.{L-1}` of
    :class:`~gnorm.models.DeepGCN`): as many columns as classes, so its
    effective rank is at most that (2 on a binary task), and its metrics
    say what the classifier does, not whether the hidden layers collapsed.
    It is no onset unless :obj:`output` is :obj:`True` (nor is a
    Graphormer's last layer, whose tokens the head reads)."""
    check_fraction(fraction)
    if metric not in COLLAPSED:
        raise ValueError(f"CollapseMonitor.onset: no collapsed value of "
                         f"{metric!r}; pass one of {', '.join(COLLAPSED)}")
    recorded = list(dict.fromkeys(r['metric'] for r in records))
    if records and metric not in recorded:
        raise ValueError(f"CollapseMonitor.onset: no {metric!r} recorded; "
                         f"pass one of {', '.join(recorded)}")
    target, direction = COLLAPSED[metric]
    sign = 1.0 if direction == 'falls' else -1.0
    table = records_table(records, layers, [metric], metric)  # layers x steps
    found: Dict[Any, Optional[str]] = {}
    skipped = None if output or not layers else layers[-1]
    for j, step in enumerate(table.columns):
        distance = [sign * (row[j] - target) for row in table.values]
        first = distance[0] if distance else math.nan
        found[step] = None
        if first > 0:  # False for nan
            found[step] = next(
                (layer for layer, d in zip(table.layers[1:], distance[1:])
                 if d < fraction * first and layer != skipped), None)
    return found
