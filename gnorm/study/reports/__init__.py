r"""A study's report, from its runs alone: :mod:`~gnorm.study.reports.depth`
(a depth study's ``.md``, ``.csv`` and plots),
:mod:`~gnorm.study.reports.paired` (a paired study's),
:mod:`~gnorm.study.reports.recipe` (the recipe, read from the runs'
recorded configs), :mod:`~gnorm.study.reports.plot` (a depth study's
plots, PNG without changing metadata) and :mod:`~gnorm.study.reports.curves` (a
paired study's). The same runs give the same bytes. A report computes
its findings in one pass
(:func:`gnorm.study.findings.depth.depth_findings`,
:func:`gnorm.study.findings.paired.paired_findings`: the spec, the runs,
the statistics), then words them (:mod:`gnorm.study.words`): its writing
enters no room of the computing side once the wording began, which
``experiments/report_trace.py`` shows room by room and tests hold.

A new study kind gets its report here, its findings in
:mod:`gnorm.study.findings` and its plan in :mod:`gnorm.study.engine`.
"""
