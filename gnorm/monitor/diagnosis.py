r"""Why a deep GNN run failed, told from what it recorded: a label per run
(:func:`diagnose`), each with the measures that decided it (layer, value,
threshold) and those it was checked against.

The labels, checked in this order (the first that holds is the run's):

* :data:`DIVERGED`: the training loss stopped being finite.
* :data:`UNTRAINABLE`: the gradient reaching the first layer's output is
  below :data:`GRADIENT_RATIO` of the gradient reaching the last hidden
  layer's (the median over the recorded epochs): the first layers do not
  learn, whatever the representations are.
* :data:`DISAGREE`: a Dirichlet energy says the last hidden
  layer is smooth (below :data:`ENERGY_FALL` of the first layer's) while
  its effective rank keeps :data:`KEPT_RANK` directions or more: the two
  measures of collapse disagree, and the label says so rather than
  choosing one.
* :data:`OVERSMOOTHED`: a Dirichlet energy (:func:`energy_fall`: Rusch et
  al.'s or the degree-normalised one) has fallen below :data:`ENERGY_FALL`
  of the first layer's by the last hidden layer, while gradients still
  reach the first layers.
* :data:`RANK_COLLAPSED`: the last hidden layer's effective rank is at
  most :data:`COLLAPSED_RANK`, with the energy not fallen.
* :data:`UNTRAINABLE` too where the training loss never falls
  :data:`LOSS_FALL` below :math:`\log C` (a uniform guess over the
  :math:`C` classes) and no collapse explains it.
* :data:`OVERFITS`: the training score exceeds the validation score by
  :data:`OVERFIT_GAP` or more.
* :data:`TRAINS`: none of these.

The last layer a monitor hooks is the model's output (the logits), so
"last hidden" is the layer before it. A run without gradient records
(made before they were recorded, or with ``train.grad_every=0``) gets the
metric-only part of the diagnosis, and says so.
"""
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Union

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
LABELS = (DIVERGED, UNTRAINABLE, DISAGREE, OVERSMOOTHED, RANK_COLLAPSED,
          OVERFITS, TRAINS)

# Oversmoothing: the Dirichlet energy decays towards 0 with depth as node
# features converge (Rusch et al., 2023, who define oversmoothing by that
# decay; Cai and Wang, 2020, for the degree-normalised energy). gnorm's stated cut: two
# orders of magnitude from the first layer to the last hidden one; a
# healthy stack stays within one (the 2- to 8-layer cases of the tests).
ENERGY_FALL = 1e-2
# Rank collapse: the effective rank is 1 when every node's output lies on
# one direction (gnorm.monitor.onset.COLLAPSED); 1.5 is half-way to a
# second direction.
COLLAPSED_RANK = 1.5
# Energy and rank disagree when the energy has fallen but the effective
# rank keeps two directions or more: smooth along the edges, yet not one
# vector (e.g. a constant per connected component).
KEPT_RANK = 2.0
# Vanishing gradients: three orders of magnitude between the gradient
# reaching the first layer and the last hidden one (gnorm's stated cut).
# Adam rescales each parameter's step, so the ratio says where the
# learning signal goes rather than proving that it stops; the tests' deep
# stack with a tiny initialisation sits orders of magnitude below it, and
# healthy stacks within 10x of 1.
GRADIENT_RATIO = 1e-3
# A run learns nothing when its training loss never falls 10 % below a
# uniform guess's log C. A run that learns the class frequencies alone
# passes it on unbalanced classes: the chance screen of gnorm.study tells
# those apart.
LOSS_FALL = 0.1
# Overfitting: 30 points (0.30) between training and validation scores,
# beyond the 20-odd points of a healthy GCN on Planetoid's 140 training
# nodes (train 100 %, validation about 79 % on Cora).
OVERFIT_GAP = 0.30


@dataclass
class Measure:
    r"""One measure a diagnosis read: :obj:`name`, the :obj:`layer` it
    is of (1-based, :obj:`None` for a run-level measure), its
    :obj:`value`, the :obj:`threshold` it was compared with and whether
    the label's condition :obj:`holds`."""
    name: str
    value: float
    threshold: float
    holds: bool
    layer: Optional[int] = None

    def __str__(self) -> str:
        at = '' if self.layer is None else f' of layer {self.layer}'
        return f'{self.name}{at} {self.value:.3g}, cut {self.threshold:g}'


@dataclass
class Diagnosis:
    r"""A run's :obj:`label` (:data:`LABELS`), the measure that decided
    it (:obj:`evidence`, :obj:`None` for :data:`TRAINS`), every measure
    read (:obj:`measures`), what could not be read (:obj:`missing`:
    e.g. no gradients recorded) and what the run said of itself
    (:obj:`said`: a diverged run's error)."""
    label: str
    evidence: Optional[Measure] = None
    measures: List[Measure] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    said: str = ''

    @property
    def metric_only(self) -> bool:
        r"""Whether the run recorded no gradients: the diagnosis rests
        on its collapse metrics, loss and scores alone."""
        return NO_GRADIENTS in self.missing

    def __str__(self) -> str:
        text = self.label + (f' ({self.evidence})' if self.evidence else '')
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


def energy_fall(collapse: Mapping[str, Sequence[Any]]
                ) -> Optional[Measure]:
    r"""The smaller of the last hidden layer's Dirichlet energies over the
    first layer's: Rusch et al.'s (zero when the rows are equal: the
    limit a row-wise norm such as LayerNorm keeps) and Cai and Wang's
    degree-normalised one (zero when rows are proportional to
    :math:`\sqrt{1 + d_i}`: the limit of GCN propagation). Either falling
    is the rows converging to a smoothing operator's limit."""
    found = []
    for key, name in ENERGIES.items():
        values = collapse.get(key)
        if values and len(values) >= 2 and \
                _finite(values[:1] + values[-2:-1]) and values[0] > 0:
            ratio = values[-2] / values[0]
            found.append(Measure(name, ratio, ENERGY_FALL,
                                 ratio < ENERGY_FALL, len(values) - 1))
    return min(found, key=lambda m: m.value) if found else None


def last_rank(collapse: Mapping[str, Sequence[Any]]) -> Optional[float]:
    r"""The last hidden layer's effective rank (the last layer's, for a
    model of one layer)."""
    values = collapse.get('effective_rank') or []
    value = values[-2] if len(values) >= 2 else (values or [None])[-1]
    return value if value is not None and math.isfinite(value) else None


def gradient_ratio(gradients: Mapping[str, Sequence[Any]]
                   ) -> Optional[Measure]:
    r"""The median over the recorded epochs of the norm of the gradient
    reaching the first layer's output over that reaching the last hidden
    layer's."""
    ratios = []
    for norms in gradients.get('output_grad_norm') or []:
        last = norms[-2] if len(norms) >= 2 else None
        if last and _finite([norms[0], last]) and last > 0:
            ratios.append(norms[0] / last)
    if not ratios:
        return None
    ratio = statistics.median(ratios)
    return Measure('first/last gradient', ratio, GRADIENT_RATIO,
                   ratio < GRADIENT_RATIO, 1)


def loss_measure(losses: Sequence[Any], num_classes: int
                 ) -> Optional[Measure]:
    r"""The lowest training loss over :math:`\log C`."""
    losses = [v for v in losses if v is not None and math.isfinite(v)]
    if not losses or num_classes < 2:
        return None
    share = min(losses) / math.log(num_classes)
    return Measure('lowest loss / log C', share, 1 - LOSS_FALL,
                   share > 1 - LOSS_FALL)


def diagnose_measures(collapse: Optional[Mapping[str, Sequence[Any]]] = None,
                      gradients: Optional[Mapping[str, Sequence[Any]]] = None,
                      losses: Optional[Sequence[Any]] = None,
                      num_classes: Optional[int] = None,
                      train_score: Optional[float] = None,
                      val_score: Optional[float] = None) -> Diagnosis:
    r"""The :class:`Diagnosis` of one run from its measures: the per-layer
    :obj:`collapse` metrics of its model (``effective_rank``,
    ``dirichlet_energy_normalized``, a value per layer, the output last),
    its :obj:`gradients` (``output_grad_norm``: per recorded epoch, a
    value per layer), its training :obj:`losses` per epoch with
    :obj:`num_classes`, and its :obj:`train_score` and :obj:`val_score`
    (fractions) at the selected epoch. What is missing is left out of the
    diagnosis and named in it."""
    missing: List[str] = []
    energy = energy_fall(collapse or {})
    rank = last_rank(collapse or {})
    grad = gradient_ratio(gradients or {})
    loss = (loss_measure(losses, num_classes)
            if losses is not None and num_classes else None)
    if grad is None:
        missing.append(NO_GRADIENTS)
    if energy is None and rank is None:
        missing.append(NO_COLLAPSE)
    rank_m = None if rank is None else Measure(
        'effective rank', rank, COLLAPSED_RANK, rank <= COLLAPSED_RANK,
        len((collapse or {}).get('effective_rank', [])) - 1 or 1)
    gap = None
    if train_score is not None and val_score is not None:
        gap = Measure('train - val', train_score - val_score, OVERFIT_GAP,
                      train_score - val_score >= OVERFIT_GAP)
    measures = [m for m in (grad, energy, rank_m, loss, gap) if m is not None]

    def told(label, evidence=None):
        return Diagnosis(label, evidence, measures, missing)

    if grad is not None and grad.holds:
        return told(UNTRAINABLE, grad)
    if energy is not None and energy.holds:
        if rank is not None and rank >= KEPT_RANK:
            return told(DISAGREE, Measure('effective rank', rank, KEPT_RANK,
                                          True, rank_m.layer))
        return told(OVERSMOOTHED, energy)
    if rank_m is not None and rank_m.holds:
        return told(RANK_COLLAPSED, rank_m)
    if loss is not None and loss.holds:
        return told(UNTRAINABLE, loss)
    if gap is not None and gap.holds:
        return told(OVERFITS, gap)
    return told(TRAINS)


def _score(results: Mapping[str, Any], part: str) -> Optional[float]:
    for key in (f'{part}_acc', f'{part}_metric'):
        if isinstance(results.get(key), (int, float)):
            return float(results[key])
    return None


def diagnose(results: Union[Mapping[str, Any], str, Path]) -> Diagnosis:
    r"""The :class:`Diagnosis` of a run of :mod:`gnorm.train` (its
    ``results.json``, as a dict or a path): its ``collapse`` metrics,
    ``gradients``, training loss curve, number of classes and training and
    validation scores (:func:`diagnose_measures`). A run whose loss
    stopped being finite is :data:`DIVERGED`."""
    if not isinstance(results, Mapping):
        with open(results) as f:
            results = json.load(f)
    if results.get('status') == 'failed' and 'loss became' in str(
            results.get('error', '')):
        return Diagnosis(DIVERGED, said=str(results['error']))
    return diagnose_measures(
        results.get('collapse'), results.get('gradients'),
        (results.get('curve') or {}).get('loss'),
        (results.get('dataset') or {}).get('num_classes'),
        _score(results, 'train'), _score(results, 'val'))
