r"""The findings in words: every sentence a report or the README quotes.
:mod:`~gnorm.study.words.flags` says what each sanity flag of a cell
means, :mod:`~gnorm.study.words.verdicts` says a depth study's comparisons
(beats, loses, not distinguishable, with their intervals and p),
:mod:`~gnorm.study.words.variants` whether they hold on a dataset's
variant, and :mod:`~gnorm.study.words.paired` a paired study's readings.
Nothing here computes a statistic: each word reads a finding of
:mod:`gnorm.study.findings`.

A new verdict kind gets its words here, beside the finding that decides
it.
"""
