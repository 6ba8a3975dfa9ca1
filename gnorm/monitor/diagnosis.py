r"""Why a deep GNN run failed, told from what it recorded: a label per run
(:func:`diagnose`), each with the measure that decided it (layer, value,
cut and what the cut is relative to), the epoch its failure began, the
failures that followed it, and every measure it was checked against.

The failures, each a condition on the run's records:

* **gradients vanish** (:data:`UNTRAINABLE`, :func:`trainability`): some
  layer's weights get less than :data:`GRADIENT_RATIO` of the strongest
  layer's *sensitivity* :math:`\|\theta_\ell\| \, \|\nabla_{\theta_\ell}
  L\|` (median over the recorded epochs). The product is what the loss
  gains per relative change of the layer's weights: rescaling a layer's
  input or weights ahead of a norm leaves it unchanged, and a residual
  branch whose weights get no gradient has 0 however well the skip
  carries the gradient past it.
* **collapse** of the last hidden layer, at the selected epoch:
  :data:`OVERSMOOTHED` (a Dirichlet energy below :data:`ENERGY_FALL` of
  the first layer's), :data:`DISAGREE` (that, while the effective rank
  keeps :data:`KEPT_RANK` directions or more), :data:`RANK_COLLAPSED`
  (the effective rank at most :func:`rank_cut`: one direction, where
  :math:`C` classes need :math:`C - 1`).

Where several hold, **the cause comes first**: each failure's onset is
the first recorded epoch at which it holds (the gradient records and the
trace of each layer's effective rank and cosine that runs keep at their
first epochs, :data:`gnorm.monitor.gradients.TRACE_METRICS`); the label
names the earliest, and the later ones follow it as consequences
(``rank-collapsed at epoch 1; then untrainable from epoch 2``). A
failure seen only at the selected epoch began *by* that epoch, so it
follows one seen earlier (that one was seen first). Failures that begin
at one epoch are named together (``with it``); the label is then the one
of :data:`LABELS` listed first (vanishing gradients before collapse).

Without any failure, in this order:

* :data:`UNTRAINABLE` too, where the run **learned nothing**: its lowest
  training loss is not :data:`LOSS_FALL` below a constant predictor's (the
  entropy of the training labels) and its validation score is not
  :data:`LEARNED` above the constant predictor's (the majority class's
  share of the validation nodes; 0.5 for ROC-AUC). Runs that record no
  constant predictor are judged against :math:`\log C` and say so.
* :data:`OVERFITS`: the training score exceeds the validation score by
  :data:`OVERFIT_GAP` or more.
* :data:`TRAINS`: none of these.

The last layer a monitor hooks is the model's output (the logits), so
"last hidden" is the layer before it. A run without gradient records gets
the metric-only part of the diagnosis, and says so.
"""
import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

DIVERGED = 'diverged'
UNTRAINABLE = 'untrainable'
DISAGREE = 'energy and rank disagree'
OVERSMOOTHED = 'oversmoothed'
RANK_COLLAPSED = 'rank-collapsed'
OVERFITS = 'overfits'
TRAINS = 'trains'
# What a diagnosis could not read.
NO_GRADIENTS = 'no gradients recorded'
NO_COLLAPSE = 'no collapse metrics recorded'
NO_WEIGHTS = ('no weight norms recorded: weight gradients compared without '
              'them')
NO_NORMS = ('no row norms recorded: energies compared unscaled (they '
            'scale with the features)')
NO_CONSTANT = ('no constant predictor recorded: the loss judged against '
               'log C')
LABELS = (DIVERGED, UNTRAINABLE, DISAGREE, OVERSMOOTHED, RANK_COLLAPSED,
          OVERFITS, TRAINS)
COLLAPSES = (DISAGREE, OVERSMOOTHED, RANK_COLLAPSED)

# Oversmoothing: the Dirichlet energy decays towards 0 with depth as node
# features converge (Rusch et al., 2023; Cai and Wang, 2020, for the
# degree-normalised energy). gnorm's stated cut: two orders of magnitude
# from the first layer to the last hidden one; a healthy stack stays
# within one (the 2- to 8-layer cases of the tests).
ENERGY_FALL = 1e-2
# Energy and rank disagree when the energy has fallen but the effective
# rank keeps two directions or more: smooth along the edges, yet not one
# vector (e.g. a constant per connected component).
KEPT_RANK = 2.0
# Vanishing gradients: three orders of magnitude between the weakest
# layer's sensitivity and the strongest's (gnorm's stated cut). Adam
# rescales each parameter's step, so the ratio says where the learning
# signal goes rather than proving that it stops; the tests' deep stack
# with a tiny initialisation sits orders of magnitude below it, and
# healthy stacks within 10x of 1.
GRADIENT_RATIO = 1e-3
# A run learns nothing when its lowest training loss is not 10 % below a
# constant predictor's and its validation score is not a point above it.
LOSS_FALL = 0.1
LEARNED = 0.01
# Overfitting: 30 points (0.30) between training and validation scores,
# beyond the 20-odd points of a healthy GCN on Planetoid's 140 training
# nodes (train 100 %, validation about 79 % on Cora).
OVERFIT_GAP = 0.30


def rank_cut(num_classes: Optional[int]) -> float:
    r"""The effective rank at or below which the last hidden layer is
    rank-collapsed: 1.5, half-way from one direction to a second, for any
    number :math:`C` of classes. Keeping the means of :math:`C` classes
    apart takes :math:`C - 1` directions in general, so one direction is
    a collapse for every :math:`C \geq 2`; a cut that grows with
    :math:`C` (:math:`1 + (C - 1)/2` was measured) flags healthy shallow
    models whose ReLU outputs share a dominant mean direction (the best
    2-layer GCN on squirrel_filtered, effective rank 2.6 at 34 % with five
    classes), so the cut stays at one direction and the measure says how
    many directions the classes need."""
    return 1.5


@dataclass
class Measure:
    r"""One measure a diagnosis read: :obj:`name`, the :obj:`layer` it
    is of (1-based, :obj:`None` for a run-level measure), its
    :obj:`value`, the :obj:`threshold` it was compared with, what that
    cut is relative to (:obj:`relative`) and whether the label's
    condition :obj:`holds`."""
    name: str
    value: float
    threshold: float
    holds: bool
    layer: Optional[int] = None
    relative: str = ''

    def __str__(self) -> str:
        at = '' if self.layer is None else f' of layer {self.layer}'
        of = f' {self.relative}' if self.relative else ''
        return f'{self.name}{at} {self.value:.3g}, cut {self.threshold:g}{of}'


@dataclass
class Failure:
    r"""A failure that holds: its :obj:`label`, the :obj:`measure` that
    shows it, and the epoch it began (:obj:`onset`; :obj:`exact` is
    false where it is only known to hold by then, no earlier record
    telling)."""
    label: str
    measure: Measure
    onset: Optional[int] = None
    exact: bool = True

    def when(self) -> str:
        if self.onset is None:
            return ''
        if not self.exact:
            return f' by epoch {self.onset}'
        return (f' from epoch {self.onset}' if self.label == UNTRAINABLE
                else f' at epoch {self.onset}')


@dataclass
class Diagnosis:
    r"""A run's :obj:`label` (:data:`LABELS`), the measure that decided
    it (:obj:`evidence`, :obj:`None` for :data:`TRAINS`), the epoch its
    failure began (:obj:`onset`, :obj:`onset_exact`), the failures that
    followed it (:obj:`then`), every measure read (:obj:`measures`),
    what could not be read (:obj:`missing`) and what the run said of
    itself (:obj:`said`: a diverged run's error)."""
    label: str
    evidence: Optional[Measure] = None
    measures: List[Measure] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    said: str = ''
    onset: Optional[int] = None
    onset_exact: bool = True
    then: List[Failure] = field(default_factory=list)

    @property
    def metric_only(self) -> bool:
        r"""Whether the run recorded no gradients: the diagnosis rests
        on its collapse metrics, loss and scores alone."""
        return NO_GRADIENTS in self.missing

    def __str__(self) -> str:
        first = Failure(self.label, self.evidence, self.onset,
                        self.onset_exact) if self.evidence else None
        text = self.label + (first.when() if first else '')
        text += f' ({self.evidence})' if self.evidence else ''
        for later in self.then:
            together = (later.onset == self.onset and later.exact
                        and self.onset_exact)
            text += (f"; {'with it' if together else 'then'} "
                     f'{later.label}{later.when()} ({later.measure})')
        if self.said:
            text += f': {self.said}'
        if self.missing:
            text += '; ' + '; '.join(self.missing)
        return text


def _finite(values: Sequence[Any]) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v)
               for v in values)


# The energies a diagnosis reads, with the name its measure takes.
ENERGIES = {'dirichlet_energy': 'energy ratio',
            'dirichlet_energy_normalized': 'normalised energy ratio'}
FIRST_LAYER = "relative to the first layer's"


def scaled(values: Sequence[Any], norms: Optional[Sequence[Any]]
           ) -> Sequence[Any]:
    r"""Each layer's energy over its mean squared row norm :obj:`norms`
    (a Rayleigh quotient: the same whatever scale the layer's output
    has), or the energies themselves without :obj:`norms`."""
    if not norms or not values or len(norms) != len(values):
        return values
    return [v / n if _finite([v, n]) and n > 0 else None
            for v, n in zip(values, norms)]


def energy_ratio(values: Optional[Sequence[Any]],
                 norms: Optional[Sequence[Any]] = None) -> Optional[float]:
    r"""The last hidden layer's energy over the first layer's, each
    :func:`scaled` by :obj:`norms`; :obj:`None` where either is unknown or
    the first is not positive."""
    values = scaled(values, norms)
    if not values or len(values) < 2:
        return None
    first, last = values[0], values[-2]
    return last / first if _finite([first, last]) and first > 0 else None


def energy_fall(collapse: Mapping[str, Sequence[Any]]
                ) -> Optional[Measure]:
    r"""The smaller of the last hidden layer's Dirichlet energies over the
    first layer's, each over its layer's mean squared row norm
    (``squared_norm``, where recorded: then the ratio does not change when
    a layer's output is rescaled): Rusch et al.'s (zero when the rows are
    equal: the limit a row-wise norm such as LayerNorm keeps) and Cai and
    Wang's degree-normalised one (zero when rows are proportional to
    :math:`\sqrt{1 + d_i}`: the limit of GCN propagation). Either falling
    is the rows converging to a smoothing operator's limit."""
    found = []
    for key, name in ENERGIES.items():
        ratio = energy_ratio(collapse.get(key), collapse.get('squared_norm'))
        if ratio is not None:
            found.append(Measure(name, ratio, ENERGY_FALL,
                                 ratio < ENERGY_FALL, len(collapse[key]) - 1,
                                 FIRST_LAYER))
    return min(found, key=lambda m: m.value) if found else None


def last_rank(collapse: Mapping[str, Sequence[Any]]) -> Optional[float]:
    r"""The last hidden layer's effective rank (the last layer's, for a
    model of one layer)."""
    values = collapse.get('effective_rank') or []
    value = values[-2] if len(values) >= 2 else (values or [None])[-1]
    return value if value is not None and math.isfinite(value) else None


def _sensitivity(grad: Optional[float], weight: Optional[float]
                 ) -> Optional[float]:
    r""":math:`\|\theta\| \, \|\nabla_\theta L\|` of a layer whose
    weights' norm is :obj:`weight` (:obj:`None` where it has none) and
    whose gradient's is :obj:`grad` (0 where none reached it)."""
    if not weight:
        return None
    return 0.0 if grad is None else grad * weight


def _sensitivities(gradients: Mapping[str, Sequence[Any]]
                   ) -> Tuple[List[List[Optional[float]]], bool]:
    r"""Per recorded epoch, each layer's sensitivity :math:`\|\theta\|
    \, \|\nabla_\theta L\|` (:obj:`None` for a layer without parameters),
    and whether the weights' norms were recorded; without them, the
    weight gradients' norms alone (a layer without parameters is then one
    whose gradient is 0 at every recorded epoch)."""
    grads = gradients.get('param_grad_norm') or []
    weights = gradients.get('param_norm')
    if weights:
        return [[_sensitivity(g, w) for g, w in zip(gs, ws)]
                for gs, ws in zip(grads, weights)], True
    has = [any(gs[i] for gs in grads) for i in range(len(grads[0]))] \
        if grads else []
    return [[g if has[i] else None for i, g in enumerate(gs)]
            for gs in grads], False


def trainability(gradients: Mapping[str, Sequence[Any]]
                 ) -> Optional[Tuple[Measure, Optional[int]]]:
    r"""The weakest layer's sensitivity over the strongest's, per recorded
    epoch (0 where no layer's weights get any gradient), its median over
    the epochs (the :class:`Measure`, of the layer weakest at most
    epochs) and the first epoch at which it is below
    :data:`GRADIENT_RATIO` (the onset, :obj:`None` if none)."""
    rows, weighed = _sensitivities(gradients)
    epochs = gradients.get('epoch') or list(range(1, len(rows) + 1))
    ratios, weakest, onset = [], [], None
    for epoch, row in zip(epochs, rows):
        known = [(v, i) for i, v in enumerate(row)
                 if v is not None and math.isfinite(v)]
        if not known:
            continue
        top = max(v for v, _ in known)
        low, layer = min(known)
        ratio = low / top if top > 0 else 0.0
        ratios.append(ratio)
        weakest.append(layer + 1)
        if onset is None and ratio < GRADIENT_RATIO:
            onset = epoch
    if not ratios:
        return None
    value = statistics.median(ratios)
    name = ('weakest/strongest layer sensitivity' if weighed
            else 'weakest/strongest weight gradient')
    layer = Counter(weakest).most_common(1)[0][0]
    return Measure(name, value, GRADIENT_RATIO, value < GRADIENT_RATIO,
                   layer, "relative to the strongest layer's"), onset


def constant_loss(losses: Sequence[Any], constant: Optional[Mapping],
                  num_classes: Optional[int], val_score: Optional[float]
                  ) -> Optional[Measure]:
    r"""The lowest training loss over the constant predictor's
    (:obj:`constant`'s ``train_loss``), holding where it is not
    :data:`LOSS_FALL` below it and the validation score is not
    :data:`LEARNED` above the constant predictor's ``val_score``; without
    :obj:`constant`, over :math:`\log C`."""
    losses = [v for v in losses if v is not None and math.isfinite(v)]
    if not losses:
        return None
    if constant and constant.get('train_loss'):
        share = min(losses) / constant['train_loss']
        learned = (val_score is not None and constant.get('val_score')
                   is not None and val_score > constant['val_score']
                   + LEARNED)
        return Measure('lowest loss / constant predictor\'s', share,
                       1 - LOSS_FALL, share > 1 - LOSS_FALL and not learned,
                       relative='relative to the constant predictor\'s loss '
                       f"(the training labels' entropy; validation "
                       f"{_pct(val_score)} against its "
                       f"{_pct(constant.get('val_score'))})")
    if not num_classes or num_classes < 2:
        return None
    share = min(losses) / math.log(num_classes)
    return Measure('lowest loss / log C', share, 1 - LOSS_FALL,
                   share > 1 - LOSS_FALL, relative="relative to a uniform "
                   "guess's loss")


def _pct(x: Optional[float]) -> str:
    return 'unknown' if x is None else f'{100 * x:.2f}'


def _onset(trace: Optional[Mapping[str, Sequence[Any]]], metric: str,
           holds) -> Optional[int]:
    r"""The first epoch of :obj:`trace` (``epoch`` and, per epoch, a value
    per layer of :obj:`metric`) whose last hidden layer's value
    :obj:`holds`."""
    if not trace or not trace.get(metric):
        return None
    for epoch, values in zip(trace.get('epoch') or [], trace[metric]):
        value = (last_rank({'effective_rank': values})
                 if metric == 'effective_rank' else
                 energy_ratio(values, _at(trace, 'squared_norm', epoch)))
        if value is not None and holds(value):
            return epoch
    return None


def _at(trace: Mapping[str, Sequence[Any]], metric: str, epoch: int
        ) -> Optional[Sequence[Any]]:
    r"""The values per layer of :obj:`metric` at :obj:`epoch` of
    :obj:`trace`."""
    for at, values in zip(trace.get('epoch') or [], trace.get(metric) or []):
        if at == epoch:
            return values
    return None


def collapse_failure(collapse: Mapping[str, Sequence[Any]],
                     trace: Optional[Mapping[str, Sequence[Any]]],
                     num_classes: Optional[int], at: Optional[int]
                     ) -> Tuple[Optional[Failure], List[Measure]]:
    r"""The collapse of the last hidden layer at the selected epoch
    :obj:`at`, if any (oversmoothed, energy and rank disagree or
    rank-collapsed), with its onset from :obj:`trace` (else: by epoch
    :obj:`at`), and the measures read."""
    energy, rank = energy_fall(collapse), last_rank(collapse)
    cut = rank_cut(num_classes)
    layer = len(collapse.get('effective_rank') or []) - 1 or 1
    rank_m = None if rank is None else Measure(
        'effective rank', rank, cut, rank <= cut, layer,
        f'(one direction; C = {num_classes or 2} classes need '
        f'{max(1, (num_classes or 2) - 1)} to keep their means apart)')
    measures = [m for m in (energy, rank_m) if m is not None]
    if energy is not None and energy.holds:
        key = ('dirichlet_energy' if energy.name == 'energy ratio'
               else 'dirichlet_energy_normalized')
        onset = _onset(trace, key, lambda v: v < ENERGY_FALL)
        if rank is not None and rank >= KEPT_RANK:
            found = Failure(DISAGREE, Measure(
                'effective rank', rank, KEPT_RANK, True, layer,
                'directions, kept while the energy fell'), onset)
        else:
            found = Failure(OVERSMOOTHED, energy, onset)
    elif rank_m is not None and rank_m.holds:
        found = Failure(RANK_COLLAPSED, rank_m,
                        _onset(trace, 'effective_rank', lambda v: v <= cut))
    else:
        return None, measures
    if found.onset is None or (at is not None and found.onset > at):
        found.onset, found.exact = at, False
    return found, measures


def first_cause(failures: Sequence[Failure]) -> List[Failure]:
    r""":obj:`failures` in the order they began: by onset (one without
    an onset last), at one epoch in the order of :data:`LABELS`."""
    def key(f: Failure):
        return (f.onset if f.onset is not None else math.inf,
                LABELS.index(f.label))
    return sorted(failures, key=key)


def diagnose_measures(collapse: Optional[Mapping[str, Sequence[Any]]] = None,
                      gradients: Optional[Mapping[str, Sequence[Any]]] = None,
                      losses: Optional[Sequence[Any]] = None,
                      num_classes: Optional[int] = None,
                      train_score: Optional[float] = None,
                      val_score: Optional[float] = None,
                      constant: Optional[Mapping[str, float]] = None,
                      trace: Optional[Mapping[str, Sequence[Any]]] = None,
                      at: Optional[int] = None) -> Diagnosis:
    r"""The :class:`Diagnosis` of one run from its measures: the per-layer
    :obj:`collapse` metrics of its model at the selected epoch :obj:`at`
    (``effective_rank``, the energies: a value per layer, the output
    last), its :obj:`gradients` (per recorded ``epoch``, a value per layer
    of ``param_grad_norm`` and ``param_norm``), the :obj:`trace` of its
    layers' collapse metrics over epochs (same layout; a run's
    ``gradients`` field holds it), its training :obj:`losses` per epoch
    with :obj:`num_classes`, the :obj:`constant` predictor's training loss
    and validation score, and its :obj:`train_score` and
    :obj:`val_score` (fractions) at the selected epoch. What is missing
    is left out of the diagnosis and named in it."""
    missing: List[str] = []
    gradients = gradients or {}
    found = trainability(gradients) if gradients.get('param_grad_norm') \
        else None
    if found is None:
        missing.append(NO_GRADIENTS)
    elif not gradients.get('param_norm'):
        missing.append(NO_WEIGHTS)
    grad, grad_onset = found if found else (None, None)
    collapsed, measures = collapse_failure(collapse or {}, trace,
                                           num_classes, at)
    if not measures:
        missing.append(NO_COLLAPSE)
    elif any(k in (collapse or {}) for k in ENERGIES) and \
            not (collapse or {}).get('squared_norm'):
        missing.append(NO_NORMS)
    loss = (constant_loss(losses, constant, num_classes, val_score)
            if losses is not None else None)
    if loss is not None and not (constant and constant.get('train_loss')):
        missing.append(NO_CONSTANT)
    gap = None
    if train_score is not None and val_score is not None:
        gap = Measure('train - val', train_score - val_score, OVERFIT_GAP,
                      train_score - val_score >= OVERFIT_GAP,
                      relative='in score, absolute')
    measures = [m for m in (grad, *measures, loss, gap) if m is not None]

    failures = [f for f in (
        collapsed, Failure(UNTRAINABLE, grad, grad_onset)
        if grad is not None and grad.holds else None) if f is not None]
    if failures:
        first, *then = first_cause(failures)
        return Diagnosis(first.label, first.measure, measures, missing,
                         onset=first.onset, onset_exact=first.exact,
                         then=then)
    for label, m in ((UNTRAINABLE, loss), (OVERFITS, gap)):
        if m is not None and m.holds:
            return Diagnosis(label, m, measures, missing)
    return Diagnosis(TRAINS, None, measures, missing)


def _score(results: Mapping[str, Any], part: str) -> Optional[float]:
    for key in (f'{part}_acc', f'{part}_metric'):
        if isinstance(results.get(key), (int, float)):
            return float(results[key])
    return None


def diagnose(results: Union[Mapping[str, Any], str, Path],
             constant: Optional[Mapping[str, float]] = None) -> Diagnosis:
    r"""The :class:`Diagnosis` of a run of :mod:`gnorm.train` (its
    ``results.json``, as a dict or a path): its ``collapse`` metrics at
    the selected epoch, ``gradients`` (with the trace of its layers'
    effective rank and cosine at the recorded epochs), training loss
    curve, number of classes, constant predictor (``dataset.constant``,
    or :obj:`constant` for a run that records none) and training and
    validation scores (:func:`diagnose_measures`). A run whose loss
    stopped being finite is :data:`DIVERGED`."""
    if not isinstance(results, Mapping):
        with open(results) as f:
            results = json.load(f)
    if results.get('status') == 'failed' and 'loss became' in str(
            results.get('error', '')):
        return Diagnosis(DIVERGED, said=str(results['error']))
    dataset = results.get('dataset') or {}
    gradients = results.get('gradients') or {}
    return diagnose_measures(
        results.get('collapse'), gradients,
        (results.get('curve') or {}).get('loss'),
        dataset.get('num_classes'),
        _score(results, 'train'), _score(results, 'val'),
        dataset.get('constant') or constant,
        gradients if gradients.get('effective_rank') else None,
        results.get('selected_epoch') or results.get('best_epoch'))
