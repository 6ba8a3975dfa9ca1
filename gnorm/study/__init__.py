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

Sub-packages, in the order a study uses them, each importing only those
before it: :mod:`~gnorm.study.spec` (find, compose, check and cache a
spec), :mod:`~gnorm.study.runs` (the runs of its cells, what is
finished, training what is missing, pairing, each cell's cost),
:mod:`~gnorm.study.findings` (selection by validation, screens,
diagnoses, comparisons, what depth does: data, no words; the statistics
are :mod:`~gnorm.study.stats`), :mod:`~gnorm.study.queue` (the cells left
for a GPU or the CPU, trained within a time budget),
:mod:`~gnorm.study.words` (the findings in words) and
:mod:`~gnorm.study.reports` (the ``.md``, ``.csv`` and plots); then
:mod:`~gnorm.study.engine` (a study's plan) and :mod:`~gnorm.study.cli`
(the command). A new screen goes in :mod:`gnorm.study.findings.sanity`,
a new verdict kind in :mod:`gnorm.study.findings.compare` with its words
in :mod:`gnorm.study.words.verdicts`, a new study kind as a plan in
:mod:`~gnorm.study.engine` with its findings and its report.
The reproduction of the ContraNorm authors' code lives in this
repository's ``experiments/authors/``, outside the package.
"""
import importlib

from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import Spec, SpecError

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
