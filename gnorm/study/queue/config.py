r"""The GPU queue's config, ``conf/queue.yaml``: ``priority``, the order
in which the queue trains the cells (a list of entries ``{study,
datasets?, rows?, depths?}``), and ``calibration``, each GPU's seconds per
cost unit by name (the last measured last), with the set-up of a cell
(``{per_unit: S, setup_s: T}``; a plain number: no set-up). Read and
checked here (:class:`Calibration`), and written back
(:func:`calibration_line`); a bad value is one line
(:class:`gnorm.study.spec.table.SpecError`)."""
import math
from pathlib import Path
from typing import Any, Dict, Sequence

from gnorm.study.spec.find import studies
from gnorm.study.spec.table import Spec, SpecError
from gnorm.train import CONF_DIR
from gnorm.train.common import one_line

CONFIG = CONF_DIR / 'queue.yaml'
ENTRY_KEYS = ('study', 'datasets', 'rows', 'depths')
AXES = (('datasets', 'dataset'), ('rows', 'row'), ('depths', 'depth'))


def good_entry(entry: Any, known: Sequence[str]) -> bool:
    r"""Whether :obj:`entry` is a priority entry: a study of
    :obj:`known`, and lists of datasets, rows, depths or none."""
    return (isinstance(entry, dict) and entry.get('study') in known
            and not set(entry) - set(ENTRY_KEYS)
            and all(isinstance(entry[key], list) for key, _ in AXES
                    if key in entry))


def load_yaml(path: Path) -> Dict[str, Any]:
    r"""The mapping of priority and calibration :obj:`path` holds."""
    from omegaconf import OmegaConf
    if not Path(path).is_file():
        raise SpecError(f'no queue config {path}')
    try:
        found = OmegaConf.to_container(OmegaConf.load(path)) or {}
    except Exception as e:  # a YAML error, said in one line
        raise SpecError(f"{path} is not a YAML mapping: "
                        f"{one_line(e)}") from None
    if not isinstance(found, dict):
        raise SpecError(f'{path} is not a YAML mapping of priority and '
                        f'calibration')
    bad = sorted(set(found) - {'priority', 'calibration'})
    if bad:
        raise SpecError(f"{path}: unknown key {bad[0]!r}; it takes "
                        f"priority and calibration")
    return found


CALIBRATION_KEYS = ('per_unit', 'setup_s')


class Calibration(float):
    r"""A GPU's calibration: its seconds per cost unit (the number itself,
    the steady rate of the epochs alone) and ``setup_s``, the seconds of a
    cell's set-up (data, compose, first steps), which an estimate adds
    once a cell (:class:`gnorm.study.runs.cost.Rate`)."""
    setup_s: float

    def __new__(cls, per_unit: float, setup_s: float = 0.0):
        found = super().__new__(cls, per_unit)
        found.setup_s = float(setup_s)
        return found


def _finite(value: Any) -> bool:
    r"""Whether :obj:`value` is a finite number (not a bool; NaN is
    not)."""
    return not isinstance(value, bool) and \
        isinstance(value, (int, float)) and math.isfinite(value)


def check_calibration(calibration: Dict[str, Any], path: Path) -> None:
    r"""Raises :class:`SpecError` for a calibration that is not a finite
    number of seconds per unit > 0 (NaN too), or a mapping of one
    (``per_unit``) and of the seconds of a cell's set-up >= 0
    (``setup_s``)."""
    for name, value in calibration.items():
        per_unit, setup = (value.get('per_unit'), value.get('setup_s', 0.0)) \
            if isinstance(value, dict) else (value, 0.0)
        keys = set(value) if isinstance(value, dict) else set()
        if keys - set(CALIBRATION_KEYS) or not _finite(per_unit) or \
                not _finite(setup) or per_unit <= 0 or setup < 0:
            raise SpecError(f'{path}: calibration of {name!r} must be '
                            f'seconds per unit (a finite number > 0), got '
                            f'{value!r}; with the set-up of a cell: '
                            f'{{per_unit: S, setup_s: seconds >= 0}}')


def calibrations(calibration: Dict[str, Any]) -> Dict[str, Calibration]:
    r"""The checked :obj:`calibration` of ``conf/queue.yaml`` as
    :class:`Calibration` values, in its order."""
    return {name: Calibration(value['per_unit'], value.get('setup_s', 0.0))
            if isinstance(value, dict) else Calibration(value)
            for name, value in calibration.items()}


def calibration_line(calibration: Dict[str, float]) -> str:
    r"""The ``calibration:`` line of ``conf/queue.yaml`` that
    :func:`read_config` reads back as :obj:`calibration` (each GPU's
    seconds per unit, a plain number where there is no set-up)."""
    def value(found: float) -> str:
        setup = round(float(getattr(found, 'setup_s', 0.0)), 3)
        return (f'{{per_unit: {found:.4e}, setup_s: {setup!r}}}' if setup
                else f'{found:.4e}')
    return 'calibration: {' + ', '.join(
        f'"{name}": {value(found)}'
        for name, found in calibration.items()) + '}'


def read_config(path: Path, known: Sequence[str] = ()) -> Dict[str, Any]:
    r"""``priority`` (a list of entries: ``study`` and optional
    ``datasets``, ``rows``, ``depths``) and ``calibration`` (GPU name:
    seconds per unit with the set-up of a cell, :class:`Calibration`) of
    :obj:`path`; :class:`SpecError` for a bad entry or a study not among
    :obj:`known` and gnorm's."""
    found = load_yaml(path)
    known = {*known, *studies()}
    for entry in found.get('priority') or []:
        if not good_entry(entry, known):
            raise SpecError(f'{path}: a priority entry takes a study of '
                            f"{', '.join(sorted(known))} and optional "
                            f'lists datasets, rows, depths; got {entry!r}')
    calibration = dict(found.get('calibration') or {})
    check_calibration(calibration, path)
    return dict(priority=list(found.get('priority') or []),
                calibration=calibrations(calibration))


def check_priority(priority: Sequence[Dict[str, Any]],
                   specs: Sequence[Spec], path: Path) -> None:
    r"""Raises :class:`SpecError` for a priority entry naming a dataset,
    row or depth its study does not have (a typo would match nothing and
    leave the cells it meant at the end of the queue)."""
    tables = {s.name: s.table for s in specs}
    for entry in priority:
        table = tables.get(entry['study'])
        if table is None:
            continue  # a study not queued in this call
        for key, _ in AXES:
            has = list(table[key])
            bad = [v for v in entry.get(key, []) if v not in has]
            if bad:
                raise SpecError(
                    f"{path}: priority entry of {entry['study']} names "
                    f"{key[:-1]} {bad[0]!r}, which the study does not have "
                    f"(it has {', '.join(map(str, has))})")
