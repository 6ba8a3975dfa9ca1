r"""The one place where gnorm uses Hydra's internals: its basic sweeper,
which :class:`gnorm.train.sweep.BatchedSweeper` extends. Hydra keeps it
in ``hydra._internal``, so an upgrade may change it without notice;
``tests/test_hydra_adapter.py`` checks what gnorm relies on:

* ``BasicSweeper(max_batch_size, params)``, a
  :class:`hydra.plugins.sweeper.Sweeper`, whose ``setup(hydra_context=,
  task_function=, config=)`` sets ``hydra_context``, ``config`` and
  ``launcher``;
* the jobs of a sweep (:func:`job_overrides`): ``_parse_config()`` (the
  sweeper's ``params`` as overrides) and the static
  ``split_arguments(overrides, max_batch_size)`` (every combination of
  the swept values, as override lists).
"""
from typing import List, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

__all__ = ['BasicSweeper', 'job_overrides']


def job_overrides(sweeper: BasicSweeper,
                  arguments: Sequence[str]) -> List[List[str]]:
    r"""The overrides of every job of a sweep over :obj:`arguments` (the
    sweeper's ``params`` first), in the order Hydra's basic sweeper
    launches them."""
    parser = OverridesParser.create(
        config_loader=sweeper.hydra_context.config_loader)
    overrides = parser.parse_overrides(sweeper._parse_config()
                                       + list(arguments))
    return [job for chunk in BasicSweeper.split_arguments(overrides, None)
            for job in chunk]
