r"""A study's report, from its runs alone: :mod:`~gnorm.study.reports.depth`
(a depth study's ``.md``, ``.csv`` and plots),
:mod:`~gnorm.study.reports.paired` (a paired study's),
:mod:`~gnorm.study.reports.recipe` (the recipe, read from the runs'
recorded configs) and :mod:`~gnorm.study.reports.plot` (the plots, PNG
without changing metadata). The same runs give the same bytes.

A new study kind gets its report here, its findings in
:mod:`gnorm.study.findings` and its plan in :mod:`gnorm.study.engine`.
"""
