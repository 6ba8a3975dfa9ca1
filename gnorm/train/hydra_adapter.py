r"""The one place where gnorm uses Hydra's internals: how Hydra's basic
sweeper expands the overrides of ``-m`` into jobs
(``BasicSweeper.split_arguments``, in ``hydra._internal``), which
:class:`gnorm.train.sweep.BatchedSweeper` reuses so that a sweep means
what it means with Hydra's own sweeper, and how Hydra names a job's
folder after its overrides (``get_overrides_dirname``), which
:mod:`gnorm.study` reuses to find a study's runs where ``python -m
gnorm.train -m`` writes them. An upgrade of Hydra may change it
without notice; ``tests/test_hydra_adapter.py`` checks what gnorm relies
on and fails if it changes.

gnorm's sweeper does not subclass Hydra's: Hydra's first plugin scan
re-executes the modules of its plugins, ``basic_sweeper`` among them,
which would put a new class in place of the one a subclass extends.
"""
from typing import Dict, List, Optional, Sequence

from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser

__all__ = ['job_overrides', 'override_dirname']


def job_overrides(config_loader: Optional[ConfigLoader],
                  params: Optional[Dict[str, str]],
                  arguments: Sequence[str]) -> List[List[str]]:
    r"""The overrides of every job of a sweep over :obj:`arguments` (after
    the sweeper's :obj:`params`, e.g. ``{'seed': '0,1'}``), in the order
    Hydra's basic sweeper launches them: every combination of the swept
    values, the last key varying fastest."""
    parser = OverridesParser.create(config_loader=config_loader)
    overrides = parser.parse_overrides(
        [f'{k}={v}' for k, v in (params or {}).items()] + list(arguments))
    return [job for chunk in BasicSweeper.split_arguments(overrides, None)
            for job in chunk]


def override_dirname(overrides: Sequence, exclude_keys: Sequence[str],
                     item_sep: str, kv_sep: str) -> str:
    r"""``hydra.job.override_dirname`` of a job with the parsed
    :obj:`overrides` (its own, not Hydra's), as Hydra computes it: the
    overrides but :obj:`exclude_keys`, sorted, joined by :obj:`item_sep`,
    key and value by :obj:`kv_sep`."""
    return get_overrides_dirname(list(overrides), list(exclude_keys),
                                 item_sep, kv_sep)
