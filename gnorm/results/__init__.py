r"""Results of many runs: finds the ``results.json`` files under folders
(any multirun or output folder of ``python -m gnorm.train``), groups the
runs into configurations and reports mean and standard deviation per
configuration::

    python -m gnorm.results multirun/2026-11-22_10-00-00
    python -m gnorm.results multirun/table3_paper --by dataset.name tag layers norm.scale
    python -m gnorm.results multirun/ --failed          # list the failed runs

A key names a field of the run: a top-level field of ``results.json``
(``status``, ``test_acc``, ``tag``...), a config group choice (``norm``,
``dataset``, ``model``) or a dotted config path (``layers``,
``norm.scale``, ``dataset.name``). A metric (``--metrics``) is a number
in ``results.json`` (``test_acc``, ``val_loss``) or a layer's value of its
``collapse`` field, ``collapse.<metric>.<layer>`` with the layer ``first``,
``last`` or its number from 1 (``collapse.effective_rank.last``,
``collapse.mad_gap.16``; ``collapse.csv`` in each run folder holds the same
values as tidy records). Without ``--by``, runs are grouped by
every key their command lines set except ``--over`` (default: ``seed``).
Runs whose configs differ elsewhere (apart from ``--over`` and the keys
that cannot change a result,
:func:`gnorm.results.keys.config_identity`; the number
of processes counts) never share a row: the keys that tell their rows
apart become columns (the ``experiment`` if it does), with a note on
stderr when ``--by`` named the columns. A key or metric that no run has is
refused, naming the closest ones. Each ``results.json`` counts once,
however many of the folders hold it.

Runs that repeat a seed (of ``--over``: same split and initialisation)
are not independent samples. A row whose runs repeat one is split by the
code that made them (``code``: the commit a run records), else by the
sweep folder that holds them (``sweep``), when that tells the repeats
apart; a row whose seeds still repeat shows its ``seeds`` beside its runs
and averages each seed's runs before the mean and std over seeds, so a
repeat never shrinks a spread.

The table shows each key by a short label (:func:`label`: ``cora``,
``contranorm``, ``DeepGCN``), rows sorted by the keys (numbers as
numbers), and each metric as mean ± std over the finished runs of a row,
under a header naming the metric and its unit: accuracies and ROC-AUC in
%, MAE as is; a graph run's ``test_metric`` becomes ``test ROC-AUC (%)``
or ``test MAE`` after the metric it records. Standard deviations are over
runs with ``ddof=0`` (numpy's default, as the papers report them). A
``results.json`` that cannot be read (truncated, not a run) counts as
failed: the table's last line counts it and ``--failed`` lists it.

The package also keeps the run bookkeeping that training writes through:
:mod:`~gnorm.results.keys` (which config keys make a run's identity),
:mod:`~gnorm.results.user_code` (which of the user's own code made a run)
and :mod:`~gnorm.results.folders` (output folders and files checked before
a run starts).
"""
from gnorm.results.summary import (  # noqa: F401
    CLASS_GROUPS, DERIVED, METRICS, MISSING, NOT_CONFIG_KEYS, SPLITS,
    STD_NOTE, UNITS, aggregate, check_keys, chosen, code, column, counts,
    default_keys, differing_keys, flat_identity, label, load_runs, machines,
    main, mean_std, metric_columns, metric_name, metric_value, overrides, plural,
    repeat_keys, repeated, score_field, split_keys, to_markdown, unit,
    user_code_words, value, write_csv, write_records)
from gnorm.errors import renamed as _renamed

# The former name, for one release.
identity = _renamed(flat_identity, 'gnorm.results.identity')
