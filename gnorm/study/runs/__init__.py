r"""A study's runs: what it trains and what it finds trained.
:mod:`~gnorm.study.runs.compose` turns a depth study's cells into the
runs Hydra would compose (folders and identities),
:mod:`~gnorm.study.runs.budget` gives each row its settings and default,
:mod:`~gnorm.study.runs.index` reads the finished runs below a folder
(each ``results.json`` once per content), :mod:`~gnorm.study.runs.runner`
trains what is missing, in this process or through a Hydra launcher,
:mod:`~gnorm.study.runs.pairing` says which runs a paired study may pair,
and :mod:`~gnorm.study.runs.cost` and :mod:`~gnorm.study.runs.record`
estimate a cell's seconds from the rates measured and recorded.

A new way to train a study's runs (a launcher, a device) goes here; it
imports :mod:`gnorm.study.spec` and :mod:`gnorm.train`, and nothing that
reads results.
"""
