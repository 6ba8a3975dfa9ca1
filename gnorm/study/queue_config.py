r"""The GPU queue's config, ``conf/queue.yaml``: ``priority``, the order
in which the queue trains the cells (a list of entries ``{study,
datasets?, rows?, depths?}``), and ``calibration``, each GPU's seconds per
cost unit by name (the last measured last). Read and checked here; a bad
value is one line (:class:`gnorm.study.spec.SpecError`)."""
from pathlib import Path
from typing import Any, Dict, Sequence

from gnorm.study.spec import Spec, SpecError, studies
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


def check_calibration(calibration: Dict[str, Any], path: Path) -> None:
    r"""Raises :class:`SpecError` for a calibration that is not a finite
    number of seconds per unit > 0 (NaN too)."""
    for name, value in calibration.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 < value < float('inf'):  # NaN fails too
            raise SpecError(f'{path}: calibration of {name!r} must be '
                            f'seconds per unit (a finite number > 0), got '
                            f'{value!r}')


def read_config(path: Path, known: Sequence[str] = ()) -> Dict[str, Any]:
    r"""``priority`` (a list of entries: ``study`` and optional
    ``datasets``, ``rows``, ``depths``) and ``calibration`` (GPU name:
    seconds per unit) of :obj:`path`; :class:`SpecError` for a bad entry
    or a study not among :obj:`known` and gnorm's."""
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
                calibration=calibration)


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
