r"""A paired study's plot: each row's validation curve per epoch (mean and
min–max band over seeds), or its seeds' scores where runs have one epoch,
from the rows' curves as the findings hold them
(:class:`gnorm.study.findings.paired.RowCurve`)."""
from pathlib import Path
from typing import List, Optional

from gnorm.results import plural
from gnorm.study.findings.paired import RowCurve
from gnorm.study.reports.plot import save_figure

MARKERS = 'os^vD'


def plot_curves(curves: List[RowCurve], one_epoch: bool, path: Path,
                title: str, where: Optional[str], metric: str) -> None:
    r"""A paired study's validation :obj:`metric` per epoch: each row's
    mean over seeds as a line and the min–max over seeds as a band; with
    one epoch per run (:obj:`one_epoch`: no curve to draw), each row's
    seeds as dots beside their mean ± std."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    named = f'{where}, {title}' if where and where != title else title
    if one_epoch:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _plot_seeds(ax, curves, named, metric)
        fig.tight_layout()
        return save_figure(fig, path)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for k, curve in enumerate(curves):
        _plot_band(ax, curve, f'C{k}', MARKERS[k % len(MARKERS)])
    ax.set_xlabel('epoch')
    ax.set_ylabel(f'validation {metric} (%)')
    ax.grid(alpha=0.3)
    ax.set_title(f'{named}: validation {metric} per epoch',
                 fontsize=9)
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1), fontsize=8,
              title='line: mean over seeds\nband: min–max over seeds',
              title_fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _plot_band(ax, curve: RowCurve, color: str, marker: str) -> None:
    r"""A row's mean validation metric per epoch over its seeds, and the
    band from the seeds' minimum to their maximum."""
    if not curve.epochs:
        return
    values = curve.per_epoch
    ax.fill_between(curve.epochs, [min(v) for v in values],
                    [max(v) for v in values], color=color, alpha=0.15,
                    lw=0)
    ax.plot(curve.epochs, [sum(v) / len(v) for v in values], color=color,
            lw=1.6, marker=marker, ms=4,
            markevery=max(1, len(curve.epochs) // 20),
            label=f"{curve.label} ({plural(curve.runs, 'seed')})")


def _plot_seeds(ax, curves: List[RowCurve], title: str, metric: str) -> None:
    r"""Validation metric of runs of one epoch: a dot per seed, the mean ±
    std over seeds beside them, a column per row."""
    for k, curve in enumerate(curves):
        values = curve.seeds
        ax.plot([k - 0.08] * len(values), values, 'o', color=f'C{k}',
                alpha=0.6, ms=5)
        if values:
            ax.errorbar([k + 0.08], [curve.val_mean], yerr=[curve.val_std],
                        fmt='D', color=f'C{k}', capsize=4)
    ax.set_xticks(range(len(curves)))
    ax.set_xticklabels([f"{c.label}\n({plural(c.runs, 'seed')})"
                        for c in curves], fontsize=7)
    ax.set_xlim(-0.5, len(curves) - 0.5)
    ax.set_ylabel(f'validation {metric} (%)')
    ax.grid(axis='y', alpha=0.3)
    ax.set_title(f'{title}: one epoch per run, no curve\n'
                 'dots: each seed; diamond and bar: mean ± std over seeds '
                 '(ddof=0)', fontsize=9)
