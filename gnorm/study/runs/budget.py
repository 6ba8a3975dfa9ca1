r"""Tuning budgets of a depth study's rows. A row with a grid of k
settings picks the best of k by validation; a row without one gets one
try. When compared rows had different budgets, part of "beats" may be the
budget, so a depth report compares twice: tuned (each row's setting
chosen by validation) and budget-matched (every row at its default
setting, :func:`default_setting`). ``table.budget: equal`` asks for equal
grids of the compared rows and refuses a spec without them
(:func:`gnorm.study.spec.check.check_spec`)."""
from typing import Dict, Optional

from gnorm.study.runs.compose import setting_label
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import Spec, compared_rows, grid


def default_setting(spec: Spec, row: str) -> Optional[str]:
    r"""The label of :obj:`row`'s default setting: the values its config
    gives its grid's keys without the grid (``norm.scale: 1.0`` from
    ``conf/norm/contranorm.yaml``), when that is one of the grid's
    settings; :obj:`None` for a row without grid, a key the config lacks
    (``+norm.alpha``) or a default outside the grid."""
    keys = grid(spec, row)
    if not keys or any(k.startswith(('+', '~')) for k in keys):
        return None
    from omegaconf import OmegaConf
    dataset = (spec.table.get('datasets') or [None])[0]
    cfg = compose([*spec.overrides(), *([f'dataset={dataset}'] if dataset
                                        else []),
                   *spec.table['rows'][row]])
    chosen = {}
    for key, values in keys.items():
        default = OmegaConf.select(cfg, key)
        same = [v for v in values if v == default]
        if not same:
            return None
        chosen[key] = same[0]
    return setting_label(chosen)


def defaults(spec: Spec) -> Dict[str, str]:
    r"""Row -> the label of its default setting, for the compared rows
    with a grid that holds it."""
    found = {row: default_setting(spec, row) for row in compared_rows(spec)}
    return {row: label for row, label in found.items() if label}
