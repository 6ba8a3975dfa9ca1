r"""What a study is before anything trains: its spec, an experiment config
with a ``table:`` section. :mod:`~gnorm.study.spec.table` says what a
spec holds (the :class:`~gnorm.study.spec.table.Spec`, the keys of
``table:``, rows, grids and their settings), :mod:`~gnorm.study.spec.find`
finds and composes it with Hydra, :mod:`~gnorm.study.spec.check` checks it
(one line per failure), :mod:`~gnorm.study.spec.load` does the three and
keeps gnorm's own studies by content (:mod:`~gnorm.study.spec.cache`),
and :mod:`~gnorm.study.spec.inputs` reads the files a spec names beside
its runs (the paper's values, footnotes, a reference's records).

A new key of ``table:`` goes in :data:`~gnorm.study.spec.table.TABLE_KEYS`
with its check in :mod:`~gnorm.study.spec.check`. This package imports
nothing else of :mod:`gnorm.study` but :mod:`~gnorm.study.stats`'s
constants.
"""
