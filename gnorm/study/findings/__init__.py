r"""What a study's runs show, as data, before any word is written.
:mod:`~gnorm.study.findings.select` picks each cell's setting by
validation, :mod:`~gnorm.study.findings.sanity` screens cells (one class,
chance by the metric's own test, still improving, too few seeds),
:mod:`~gnorm.study.findings.diagnosis` counts why a cell's runs failed,
:mod:`~gnorm.study.findings.compare` compares two rows of a depth study
(differences, intervals, the test the design implies, Holm's family),
:mod:`~gnorm.study.findings.depth_gain` says what depth does for a row,
and :mod:`~gnorm.study.findings.depth` and
:mod:`~gnorm.study.findings.paired` gather a depth or a paired study's
findings in one pass. The statistics themselves are
:mod:`gnorm.study.stats`.

A new screen goes in :mod:`~gnorm.study.findings.sanity`; a new kind of
comparison (a new verdict kind) is computed in
:mod:`~gnorm.study.findings.compare` and said in :mod:`gnorm.study.words`.
Nothing here writes text that a reader sees.
"""
