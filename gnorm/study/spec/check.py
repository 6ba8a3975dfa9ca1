r"""The checks of a spec before anything trains: every ``table:`` key
known (with the closest for a typo), rows, grids, seeds, depths and
datasets well-formed, the axes a study sets itself left alone, rows
paired by seed on one split, the protocol's keys known to their config
groups, the files and classes the spec names present, and ``--set``
overrides that change a run. Each failure is one line
(:class:`~gnorm.study.spec.table.SpecError`).
"""
import itertools
from typing import Any, Dict, List, Optional, Sequence, Set

from gnorm.errors import ConfigError, closest
from gnorm.study.spec.find import compose, known_datasets
from gnorm.study.spec.table import (AXES, AXIS_SOURCES, BUDGETS, GROUPS, KINDS,
                                    PAIRED_AXES, PRIMARY, SECTION_KEYS,
                                    SPLIT_KEYS, TABLE_KEYS, Spec, SpecError,
                                    budget, compared_rows, grid, override_key,
                                    setting_label)
from gnorm.train import CONF_DIR
from gnorm.train.common import import_error


def _ints(spec: Spec, key: str, low: int, what: str) -> None:
    values = spec.table.get(key)
    if values is None:
        return
    if not isinstance(values, list) or not values or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise SpecError(f'{spec.name}: table.{key} must be a list of '
                        f'integers, got {values!r}')
    bad = [v for v in values if v < low]
    if bad:
        raise SpecError(f'{spec.name}: table.{key} must be {what} '
                        f'(integers >= {low}), got {bad[0]}')
    if len(set(values)) < len(values):
        raise SpecError(f'{spec.name}: table.{key} names a value twice: '
                        f'{values}')


def _check_rows(spec: Spec) -> None:
    rows = spec.table.get('rows')
    if not isinstance(rows, dict) or not rows:
        raise SpecError(f'{spec.name}: table.rows must map row names to '
                        f'override lists, e.g. mine: [norm=layernorm]')
    for row, overrides in rows.items():
        if not isinstance(overrides, list) or not overrides or not all(
                isinstance(o, str) and '=' in o for o in overrides):
            raise SpecError(f'{spec.name}: row {row!r} needs a list of '
                            f'key=value overrides, got {overrides!r}')


def _check_axes(spec: Spec) -> None:
    r"""No row or grid sets a key the study sets itself (a row's
    ``layers=2`` would fill the column of another depth)."""
    axes = AXES if spec.kind == 'depth' else PAIRED_AXES
    for row, overrides in spec.table['rows'].items():
        for keys, where in (([override_key(o) for o in overrides], ''),
                            ([override_key(k) for k in grid(spec, row)],
                             ' in its grid')):
            for key in (k for k in keys if k in axes):
                raise SpecError(f'{spec.name}: row {row!r} sets {key}'
                                f'{where}, which the study sets itself; '
                                f'{AXIS_SOURCES[key]}')


def _split_key(key: str) -> bool:
    return key in SPLIT_KEYS or key.startswith('dataset.')


def _split_of(overrides: Sequence[str]) -> str:
    r"""What :obj:`overrides` set of the split, in words."""
    found = sorted(o.lstrip('+') for o in overrides
                   if _split_key(override_key(o)))
    return ' '.join(found) or 'nothing of the split'


def _check_split_keys(spec: Spec) -> None:
    r"""Rows paired by seed (``pairing: seed``, a paired study) set the
    keys of the split and data alike, and no grid sweeps them: a pair is
    two runs on one split."""
    if spec.kind == 'depth' and spec.pairing != 'seed':
        return
    rows = spec.table['rows']
    for row in rows:
        for key in (k for k in grid(spec, row)
                    if _split_key(override_key(k))):
            raise SpecError(f'{spec.name}: rows paired by seed share their '
                            f'split, but row {row!r} sweeps {key} in its '
                            f'grid; set it in the protocol')
    first, *others = rows
    said = _split_of(rows[first])
    for row in others:
        if _split_of(rows[row]) != said:
            raise SpecError(
                f'{spec.name}: rows paired by seed share their split, but '
                f'row {first!r} sets {said}, row {row!r} '
                f'{_split_of(rows[row])}; set it in the protocol'
                + ('' if spec.kind == 'paired' else ', or use pairing: none'))


def _check_grid_values(spec: Spec) -> None:
    r"""Each grid key lists values, none twice or printed alike (as the
    report labels settings, :func:`setting_label`): such values would
    merge into one setting."""
    for row in spec.table['rows']:
        for key, values in grid(spec, row).items():
            if not isinstance(values, list) or not values:
                raise SpecError(f'{spec.name}: table.grid.{row}: {key} '
                                f'needs a list of values, got {values!r}')
            try:
                labels = [setting_label({key: v}) for v in values]
            except (TypeError, ValueError):
                raise SpecError(f'{spec.name}: table.grid.{row}: {key} '
                                f'takes numbers, got {values!r}') from None
            for (a, x), (b, y) in itertools.combinations(
                    zip(values, labels), 2):
                if a == b or x == y:
                    how = 'are equal' if a == b else f'print alike ({x})'
                    raise SpecError(f'{spec.name}: table.grid.{row}: {key} '
                                    f'lists {a!r} and {b!r}, which {how}; '
                                    f'list each value once')


def check_node_task(name: str, datasets: Sequence[str]) -> None:
    r"""Raises :class:`SpecError` for a graph-level dataset among
    :obj:`datasets` of a depth study (it selects and compares the node
    scores of deep GCNs: accuracy, or ROC-AUC where the dataset is scored
    by it)."""
    from gnorm.train.arguments import graph_datasets
    graph = [d for d in datasets if d in graph_datasets(CONF_DIR)]
    if graph:
        raise SpecError(f'{name}: dataset {graph[0]!r} is graph-level (task: '
                        f'graph), and a depth study selects and compares '
                        f'node scores; compare graph-level runs in a '
                        f'study of kind: paired')


def _suggestion(key: str, known: Sequence[str], where: str) -> str:
    r"""The keys of :obj:`known` closest to :obj:`key` in the section
    :obj:`where`, as ``python -m gnorm.train`` names them
    (:func:`gnorm.errors.closest`)."""
    near = closest(key, known)
    if near:
        return f"closest keys: {', '.join(f'{where}.{k}' for k in near)}"
    if where == 'table':
        return 'docs/study.rst lists the keys of table:'
    return f"known keys: {', '.join(known)}"


def _check_keys(spec: Spec, given: Dict[str, Any], known: Sequence[str],
                where: str) -> None:
    r"""Raises :class:`SpecError` for a key of :obj:`given` (the section
    :obj:`where` of the spec) not in :obj:`known`, naming the closest."""
    for key in (str(k) for k in given if k not in known):
        raise SpecError(f"{spec.name}: unknown key '{where}.{key}'; "
                        f'{_suggestion(key, known, where)}')


def _check_table_keys(spec: Spec) -> None:
    r"""Every key of ``table:`` and of its sections is one the study
    reads (:data:`TABLE_KEYS`, :data:`SECTION_KEYS`): a typo would be
    dropped silently."""
    _check_keys(spec, spec.table, TABLE_KEYS, 'table')
    for section, keys in SECTION_KEYS.items():
        given = spec.table.get(section) or {}
        for entry in given if isinstance(given, list) else [given]:
            if not isinstance(entry, dict):
                raise SpecError(f'{spec.name}: table.{section} must map '
                                f"keys ({', '.join(keys)}) to values, got "
                                f'{entry!r}')
            _check_keys(spec, entry, keys, f'table.{section}')


def _dotted(node: Any, prefix: str = '') -> List[str]:
    r"""Every dotted key of the nested dict :obj:`node`."""
    keys = []
    for key, value in node.items():
        keys.append(f'{prefix}{key}')
        if isinstance(value, dict):
            keys += _dotted(value, f'{prefix}{key}.')
    return keys


def _group_choices(spec: Spec, picks: Dict[str, str]) -> List[List[str]]:
    r"""The group overrides of :obj:`picks` (the spec's own options), and
    the same with each other option the study's rows and datasets pick."""
    first = [f'{g}={o}' for g, o in picks.items() if o]
    others = {(override_key(o), o.split('=', 1)[1])
              for row in spec.table['rows'].values() for o in row
              if override_key(o) in GROUPS}
    if spec.kind == 'depth':
        others |= {('dataset', d) for d in spec.table['datasets']}
    return [first] + [[*(f for f in first if not f.startswith(f'{g}=')),
                       f'{g}={o}'] for g, o in sorted(others)
                      if o != picks.get(g)]


def _check_protocol(spec: Spec) -> None:
    r"""Every key of the protocol (the composed spec but ``table:``) is a
    key of gnorm's config with the options the study picks, or an
    argument that the protocol's own norm class takes: a typo
    (``train.epoch``) would leave its run at the default."""
    from omegaconf import OmegaConf
    from gnorm.train.arguments import config_keys
    from gnorm.train.common import unknown_norm_keys
    cfg = compose(spec.overrides(), hydra=True)
    picks = {g: cfg.hydra.runtime.choices.get(g) for g in GROUPS}
    known = config_keys(CONF_DIR, _group_choices(spec, picks))
    own = OmegaConf.to_container(cfg, resolve=False)
    own.pop('hydra')
    own.pop('table', None)
    for key in sorted(set(_dotted(own)) - known):
        if key.startswith('norm.') and unknown_norm_keys(cfg.norm) is None:
            continue  # an argument of the norm class of the protocol
        raise SpecError(f'{spec.name}: unknown key {key!r} in the protocol; '
                        f'{_protocol_hint(key, known)}')


def _protocol_hint(key: str, known: Set[str]) -> str:
    r"""What :obj:`key`, a key of no config the study composes, may be:
    a key of other options of a group (``only dataset=csbm have it``), or
    a typo of the closest keys (as ``python -m gnorm.train`` says)."""
    from gnorm.train.arguments import (option_keys_of, other_options_hint,
                                       closest)
    other = other_options_hint(key, known, option_keys_of([CONF_DIR]))
    if other.startswith('only '):
        return other
    near = closest(key, known)
    if near:
        return f"closest keys: {', '.join(near)}"
    return other or 'python -m gnorm.train --cfg job lists the keys'


def check_files(spec: Spec) -> None:
    r"""The files ``table.paper``, ``notes`` and ``authors`` name exist."""
    for key in ('paper', 'notes', 'authors'):
        if isinstance(spec.table.get(key), str):
            spec.file(key)


def check_targets(spec: Spec) -> None:
    r"""Every ``..._target_=module.Class`` of a row imports."""
    for row, overrides in spec.table['rows'].items():
        for item in overrides:
            key, value = item.split('=', 1)
            if not key.endswith('_target_'):
                continue
            why = import_error(value)
            if why:
                raise SpecError(f'{spec.name}: row {row!r}: {item} {why}')


def check_spec(spec: Spec) -> None:
    r"""Raises :class:`SpecError`, one line, for a spec that cannot run:
    an unknown key of ``table:`` or of the protocol, an unknown kind,
    pairing or dataset, a graph-level dataset in a depth study, a row
    without overrides, a row or grid that sets a key the study sets
    (``layers``, ``seed``...), rows paired by seed that set the split
    differently, grid values that are equal or print alike, depths below
    1, negative seeds, a grid key no config has, a class that does not
    import."""
    from gnorm.study.stats import CORRECTIONS, PAIRINGS
    table = spec.table
    _check_table_keys(spec)
    if spec.kind not in KINDS:
        raise SpecError(f'{spec.name}: table.kind must be one of '
                        f'{", ".join(KINDS)}, got {spec.kind!r}')
    if spec.pairing not in PAIRINGS:
        raise SpecError(f'{spec.name}: table.pairing must be one of '
                        f'{", ".join(PAIRINGS)}, got {spec.pairing!r}')
    if not 0 < spec.level < 1:
        raise SpecError(f'{spec.name}: table.level must lie in (0, 1), '
                        f'got {spec.level}')
    _check_choice(spec, 'correction', CORRECTIONS)
    _check_margin(spec)
    _check_choice(spec, 'primary', PRIMARY)
    _check_choice(spec, 'budget', BUDGETS)
    _check_rows(spec)
    _check_axes(spec)
    _check_split_keys(spec)
    _check_grid_values(spec)
    if not table.get('seeds'):
        raise SpecError(f'{spec.name}: table.seeds must list the seeds, '
                        f'e.g. [0, 1, 2]')
    _ints(spec, 'seeds', 0, 'seeds')
    if spec.kind == 'depth':
        for key in ('datasets', 'depths'):
            if not table.get(key):
                raise SpecError(f'{spec.name}: a depth study needs '
                                f'table.{key}')
        _ints(spec, 'depths', 1, 'depths in layers')
        known = known_datasets()
        bad = [d for d in table['datasets'] if d not in known]
        if bad:
            raise SpecError(f'{spec.name}: unknown dataset {bad[0]!r}; '
                            f'pick from {", ".join(known)}')
        check_node_task(spec.name, table['datasets'])
    _check_compare(spec)
    _check_budget(spec)
    check_files(spec)
    check_targets(spec)
    check_row_keys(spec)
    _check_protocol(spec)


def _check_margin(spec: Spec) -> None:
    r"""``table.margin``, the margin of equivalence in points of the
    study's score, must be a finite number > 0."""
    from gnorm.study.stats import MARGIN
    margin = spec.table.get('margin', MARGIN)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) \
            or not 0 < margin < float('inf'):
        raise SpecError(f'{spec.name}: table.margin must be a number > 0 '
                        f'(points of the score, e.g. 1.0), got {margin!r}')


def _check_choice(spec: Spec, key: str, choices: Sequence[str]) -> None:
    given = spec.table.get(key, choices[0])
    if given not in choices:
        raise SpecError(f'{spec.name}: table.{key} must be one of '
                        f'{", ".join(choices)}, got {given!r}')


def _check_budget(spec: Spec) -> None:
    r"""With ``table.budget: equal``, the compared rows must try equally
    many settings (a row with a larger grid has more tries to win)."""
    if spec.table.get('budget', 'any') != 'equal':
        return
    sizes = {row: budget(spec, row) for row in compared_rows(spec)}
    if len(set(sizes.values())) > 1:
        said = ', '.join(f'{row} {n}' for row, n in sizes.items())
        raise SpecError(f'{spec.name}: table.budget: equal, but the '
                        f'compared rows try different numbers of settings '
                        f'({said}); give them grids of one size')


def _check_compare(spec: Spec) -> None:
    compare = spec.table.get('compare') or {}
    rows = spec.table['rows']
    for key in ('rows', 'against'):
        bad = [r for r in compare.get(key, []) if r not in rows]
        if bad:
            raise SpecError(f'{spec.name}: table.compare.{key} names '
                            f'{bad[0]!r}, no row of the study')
    variants = spec.table.get('variants') or {}
    datasets = spec.table.get('datasets') or []
    bad = [d for pair in variants.items() for d in pair if d not in datasets]
    if bad:
        raise SpecError(f'{spec.name}: table.variants names {bad[0]!r}, '
                        f'not a dataset of the study')


def check_row_keys(spec: Spec, sets: Sequence[str] = (),
                   rows: Optional[Sequence[str]] = None,
                   datasets: Optional[Sequence[str]] = None) -> None:
    r"""Raises :class:`SpecError` for an override, grid key or :obj:`sets`
    key of :obj:`rows` (default: every row) on :obj:`datasets` (default:
    the study's) that the config has not, or an unknown group option,
    naming the closest (as ``python -m gnorm.train`` does)."""
    from gnorm.train.arguments import check_choices, check_keys
    unknown = set(spec.table.get('grid') or {}) - set(spec.table['rows'])
    if unknown:
        raise SpecError(f'{spec.name}: table.grid names '
                        f'{sorted(unknown)[0]!r}, no row of the study')
    datasets = datasets or spec.table.get('datasets')
    picked = [f"dataset={','.join(datasets)}"] if datasets else []
    for row in rows or list(spec.table['rows']):
        overrides = [*spec.overrides(), *picked, *spec.table['rows'][row],
                     *(f'{k}={v[0]}' for k, v in grid(spec, row).items())]
        for argv, what in ((overrides, f'{spec.name}: row {row!r}'),
                           ([*overrides, *sets], '--set')):
            try:
                check_choices(argv)
                check_keys(argv)
            except ConfigError as e:
                raise SpecError(f'{what}: {e}') from None
            if not sets:
                break


def check_sets(spec: Spec, sets: Sequence[str],
               rows: Optional[Sequence[str]] = None,
               datasets: Optional[Sequence[str]] = None) -> None:
    r"""Raises :class:`SpecError` for a ``--set`` the study sets itself
    or that a run of :obj:`rows` (default: every row) has not."""
    keys = set(AXES)
    for row, overrides in spec.table['rows'].items():
        keys |= {o.split('=', 1)[0] for o in overrides}
        keys |= set(grid(spec, row))
    for item in sets:
        if '=' not in item:
            raise SpecError(f'--set takes key=value, got {item!r}')
        key = override_key(item)
        if key in keys:
            raise SpecError(f'--set {item}: the study sets {key} itself; '
                            f'select with --datasets, --depths, --seeds, '
                            f'--rows or change the spec')
    if sets:
        check_row_keys(spec, sets, rows, datasets)
