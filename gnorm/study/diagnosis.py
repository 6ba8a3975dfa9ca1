r"""Why a cell's runs failed: the :func:`gnorm.monitor.diagnose` label of
each run of a cell, counted (:func:`cell_diagnosis`): the majority label
with its count and the median of the measure that decided it
(:func:`gnorm.study.verdict_words.diagnosis_text` words it). A cell whose
runs recorded no gradients (made before runs recorded them) has the
metric-only part of the diagnosis, and says so (``metric_only``)."""
import statistics
from collections import Counter
from typing import Any, Dict, Optional, Sequence

from gnorm.monitor import diagnose
from gnorm.monitor.diagnosis import LABELS


def cell_diagnosis(runs: Sequence[Dict[str, Any]]
                   ) -> Optional[Dict[str, Any]]:
    r"""The diagnosis of a cell's :obj:`runs`: ``label`` (the most common;
    the first of :data:`gnorm.monitor.diagnosis.LABELS` among equals),
    ``count`` of ``runs``, ``counts`` per label, ``measure`` and
    ``layer`` of the deciding evidence with its median ``value`` and
    ``cut`` over the runs of that label, and ``metric_only`` where a run
    recorded no gradients; :obj:`None` without runs."""
    if not runs:
        return None
    found = [diagnose(r) for r in runs]
    counts = Counter(d.label for d in found)
    label = max(counts, key=lambda k: (counts[k], -LABELS.index(k)))
    evidence = [d.evidence for d in found
                if d.label == label and d.evidence is not None]
    told = {'label': label, 'count': counts[label], 'runs': len(found),
            'counts': dict(counts),
            'metric_only': any(d.metric_only for d in found)}
    if evidence:
        told.update(measure=evidence[0].name, layer=evidence[0].layer,
                    value=statistics.median(e.value for e in evidence),
                    cut=evidence[0].threshold)
    return told
