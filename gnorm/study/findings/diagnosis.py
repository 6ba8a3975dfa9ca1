r"""Why a cell's runs failed: the :func:`gnorm.monitor.diagnose` label of
each run of a cell, counted (:func:`cell_diagnosis`): the majority label
with its count, the median of the measure that decided it, the epochs its
failure began at and the failure that most often followed it
(:func:`gnorm.study.words.verdicts.diagnosis_text` words it). A run that
records no constant predictor is judged against one computed from its
split (:func:`gnorm.study.findings.sanity.constant_predictor`). A cell whose runs
recorded no gradients has the metric-only part of the diagnosis, and says
so (``metric_only``)."""
import statistics
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from gnorm.monitor import diagnose
from gnorm.monitor.diagnosis import LABELS, Diagnosis
from gnorm.study.findings.sanity import constant_predictor


def run_diagnosis(run: Dict[str, Any]) -> Diagnosis:
    r"""The :func:`gnorm.monitor.diagnose` of :obj:`run`, with the constant
    predictor of its split where it records none."""
    recorded = (run.get('dataset') or {}).get('constant')
    return diagnose(run, None if recorded or run.get('status') != 'ok'
                    else constant_predictor(run))


def _epochs(onsets: List[int]) -> Optional[List[int]]:
    return [min(onsets), max(onsets)] if onsets else None


def cell_diagnosis(runs: Sequence[Dict[str, Any]]
                   ) -> Optional[Dict[str, Any]]:
    r"""The diagnosis of a cell's :obj:`runs`: ``label`` (the most common;
    the first of :data:`gnorm.monitor.diagnosis.LABELS` among equals),
    ``count`` of ``runs``, ``counts`` per label, ``measure``, ``layer``
    and ``relative`` of the deciding evidence with its median ``value``
    and ``cut`` over the runs of that label, the first and last epoch its
    failure began at in those runs (``onset``; ``onset_exact`` false where
    some run knows only that it held by then), the failure that followed
    it in most of them (``then``: label, count, onset epochs, exactness),
    and ``metric_only`` where a run recorded no gradients; :obj:`None`
    without runs."""
    if not runs:
        return None
    found = [run_diagnosis(r) for r in runs]
    counts = Counter(d.label for d in found)
    label = max(counts, key=lambda k: (counts[k], -LABELS.index(k)))
    mine = [d for d in found if d.label == label]
    evidence = [d.evidence for d in mine if d.evidence is not None]
    told = {'label': label, 'count': counts[label], 'runs': len(found),
            'counts': dict(counts),
            'metric_only': any(d.metric_only for d in found)}
    if evidence:
        told.update(measure=evidence[0].name, layer=evidence[0].layer,
                    value=statistics.median(e.value for e in evidence),
                    cut=evidence[0].threshold,
                    relative=evidence[0].relative,
                    onset=_epochs([d.onset for d in mine
                                   if d.onset is not None]),
                    onset_exact=all(d.onset_exact for d in mine))
    later = Counter(d.then[0].label for d in mine if d.then)
    if later:
        then, n = later.most_common(1)[0]
        followed = [d.then[0] for d in mine if d.then and
                    d.then[0].label == then]
        told['then'] = {'label': then, 'count': n,
                        'onset': _epochs([f.onset for f in followed
                                          if f.onset is not None]),
                        'exact': all(f.exact for f in followed)}
    return told
