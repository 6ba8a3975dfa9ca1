r"""Studies: your own table of norms (or models) against depth, or rows
paired by seed against a baseline, from a spec, with one command.

    python -m gnorm.study table3_fair          # one of gnorm's studies
    python -m gnorm.study my_study.yaml        # your own spec file

A spec is an experiment config (the protocol: overrides of every run)
with a ``table:`` section: the study's kind (``depth`` or ``paired``),
rows as override lists (any norm or model class Python can import:
``norm._target_=mypkg.MyNorm``), seeds, datasets and depths, each row's
grid of candidate settings (chosen by validation), the rows to compare
and how seeds pair (``pairing: seed`` or ``none``). The study runs what
is missing (many runs as one model, or a Hydra launcher), counts a cell
only when every setting and seed finished with the study's config, and
writes a report from the runs alone. Guide: ``docs/study.rst``.

Modules, in the order a study uses them: :mod:`~gnorm.study.spec` (find,
compose and check a spec), :mod:`~gnorm.study.compose` (the runs of a
depth study), :mod:`~gnorm.study.cache` (specs and compositions kept by
content), :mod:`~gnorm.study.run_index` (the finished runs, each file
read once per content), :mod:`~gnorm.study.runner` (train what is missing),
:mod:`~gnorm.study.select` (selection by validation, ties by counts),
:mod:`~gnorm.study.budget` (each row's settings and default),
:mod:`~gnorm.study.sanity` (cells that predict one class, are no better
than chance pooled over their seeds, or still improve),
:mod:`~gnorm.study.stats` (intervals, p-values, Holm's family,
equivalence within a margin, the difference a design detects),
:mod:`~gnorm.study.pairing` (which runs a paired study may pair),
:mod:`~gnorm.study.findings` (a depth study's comparisons as data),
:mod:`~gnorm.study.verdict_words` (them in words), :mod:`~gnorm.study.variants` (verdicts on a
dataset and its variant), :mod:`~gnorm.study.paired_findings` (a paired study as data),
:mod:`~gnorm.study.paired_words` (its readings in words),
:mod:`~gnorm.study.depth_report`, :mod:`~gnorm.study.paired_report`,
:mod:`~gnorm.study.recipe`, :mod:`~gnorm.study.plot` (the reports),
:mod:`~gnorm.study.engine` and :mod:`~gnorm.study.cli` (the command),
:mod:`~gnorm.study.queue` (the cells left for a GPU, in a time budget:
:mod:`~gnorm.study.queue_plan` which cells, :mod:`~gnorm.study.queue_config`
their order, :mod:`~gnorm.study.queue_cost` their seconds,
:mod:`~gnorm.study.queue_run` training them by a deadline,
:mod:`~gnorm.study.queue_record` what each process trained).
The reproduction of the ContraNorm authors' code lives in this
repository's ``experiments/authors/``, outside the package.
"""
import importlib

from gnorm.study.spec import Spec, SpecError, load_spec

__all__ = ['Spec', 'SpecError', 'load_spec', 'Interval', 'corrected_interval',
           'detectable', 'equivalence_p', 'holm', 'paired_interval',
           'welch_interval', 'verdict']


def __getattr__(name: str):
    r"""The statistics (:mod:`gnorm.study.stats`, which imports scipy)
    where first used (PEP 562): planning a study needs none."""
    if name not in __all__:
        raise AttributeError(f'module {__name__!r} has no attribute '
                             f'{name!r}')
    return getattr(importlib.import_module('gnorm.study.stats'), name)
