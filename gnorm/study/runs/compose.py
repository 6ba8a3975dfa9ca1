r"""The runs of a depth study: its (dataset, row, depth) cells, each the
Hydra multirun ``python -m gnorm.train -m <spec> dataset=... layers=...
tag=<row> <row's overrides> seed=... <grid>``, composed here as that
command composes its jobs (:class:`Composer`: the same overrides, configs,
group choices and run folders), and the finished runs found by their
identity (:func:`gnorm.results.keys.config_identity`)."""
import copy
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.results.keys import config_identity, record_identity
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import Spec, grid, setting_label, settings

# Nodes and symmetrised edges, only to run cheap cells first and to
# estimate a cell's time (gnorm.study.queue.command); (1000, 5000) for the others.
_SIZE = {'cora': (2708, 10556), 'citeseer': (3327, 9104),
         'chameleon': (2277, 62792), 'squirrel': (5201, 396846),
         'chameleon_filtered': (890, 17708),
         'squirrel_filtered': (2223, 93996),
         'minesweeper': (10000, 78804), 'tolokers': (11758, 1038000)}


def _values(values: Sequence[Any]) -> str:
    return ','.join(str(v) for v in values)


def cells(spec: Spec, datasets: Sequence[str], rows: Sequence[str],
          depths: Sequence[int], seeds: Sequence[int]
          ) -> List[Dict[str, Any]]:
    r"""The (dataset, row, depth) cells of :obj:`spec` over the given
    selection, cheapest first, each with its multirun's overrides:
    ``base`` (fixed) and ``sweep`` (the seeds and the row's grid), and its
    ``position`` in the table's order."""
    out = []
    for dataset in datasets:
        for row in rows:
            found = grid(spec, row)
            candidates = settings(spec, row)
            for depth in depths:
                base = [f'dataset={dataset}', f'layers={depth}',
                        f'tag={row}', *spec.table['rows'][row],
                        *per_dataset(spec, dataset)]
                sweep = [f"seed={_values(seeds)}",
                         *(f'{k}={_values(v)}' for k, v in found.items())]
                runs = len(candidates) * len(seeds)
                out.append(dict(dataset=dataset, row=row, depth=depth,
                                base=base, sweep=sweep, settings=candidates,
                                expected=len(seeds),
                                cost=cost(dataset, depth, base) * runs,
                                position=len(out)))
    return sorted(out, key=lambda c: c['cost'])


def per_dataset(spec: Spec, dataset: str) -> List[str]:
    r"""The overrides ``table.per_dataset`` gives every run on
    :obj:`dataset` (e.g. a smaller width where the protocol's does not fit
    a CPU), after the row's."""
    return list((spec.table.get('per_dataset') or {}).get(dataset, []))


# Per layer, epoch and node, the units of the linear-time ContraNorms
# beyond an elementwise norm (at width 32), fitted to tuned_depth's
# committed Minesweeper runs so that their seconds per unit match
# batchnorm's: the Nystrom kernel one per landmark (k, 64 by default:
# conf/norm/contranorm_lin.yaml), the dual (channel) softmax 16.
LANDMARKS = 64
DUAL_UNITS = 16


def _choice(base: Sequence[str], key: str) -> Optional[str]:
    r"""The value the overrides :obj:`base` give :obj:`key` last, else
    :obj:`None`."""
    given = [o.split('=', 1)[1] for o in base if o.startswith(f'{key}=')]
    return given[-1] if given else None


def cost(dataset: str, depth: int, base: Sequence[str], hidden: int = 32,
         epochs: int = 1) -> int:
    r"""A run's time, roughly, in cost units: per layer and epoch one unit
    per edge or node channel (32 channels at width 32; ~42 ns each on a
    CPU), 1/6 unit per node pair of ContraNorm's attention (~7 ns), one
    per node and landmark of its Nystrom kernel (``contranorm_lin``,
    :data:`LANDMARKS`), :data:`DUAL_UNITS` per node of ContraNorm-D's
    channel softmax, all scaled by the width :obj:`hidden` / 32 and by
    :obj:`epochs`. Cells run cheapest first by it (at width 32, one
    epoch); the queue turns it into seconds
    (:mod:`gnorm.study.runs.cost`)."""
    nodes, edges = _SIZE.get(dataset, (1000, 5000))
    units = depth * (edges + 32 * nodes)
    norm = _choice(base, 'norm')
    if norm in ('contranorm', 'contranorm_lin') \
            and _choice(base, 'norm.scale') != '0.0':
        kernel = _choice(base, 'norm.kernel') or (
            'nystrom' if norm == 'contranorm_lin' else 'exact')
        units += depth * (
            nodes * int(_choice(base, 'norm.landmarks') or LANDMARKS)
            if kernel == 'nystrom' else nodes * nodes // 6)
    elif norm == 'contranorm_d':
        units += depth * nodes * DUAL_UNITS
    return units * hidden * epochs // 32


def arguments(spec: Spec, cell: Dict[str, Any],
              sets: Sequence[str]) -> List[str]:
    r"""The overrides of :obj:`cell`'s multirun."""
    return [*spec.overrides(), *cell['base'], *cell['sweep'], *sets]


def command(spec: Spec, cell: Dict[str, Any], runs_dir: Path,
            sets: Sequence[str], launcher: Optional[str] = None) -> List[str]:
    r"""The ``python -m gnorm.train -m`` command of one cell."""
    return ['python', '-m', 'gnorm.train', '-m',
            *arguments(spec, cell, sets),
            f'hydra.sweep.dir={runs_dir}',
            *([f'hydra/launcher={launcher}'] if launcher else [])]


def run_key(found: Dict[str, Any]) -> str:
    r"""The identity :obj:`found` of a run
    (:func:`gnorm.results.keys.config_identity`
    of a composed config, :func:`gnorm.results.keys.record_identity` of a
    record) as text."""
    return json.dumps(found, sort_keys=True)


class Composer:
    r"""Composes the runs of cells as ``python -m gnorm.train -m`` composes
    its jobs: the jobs' overrides from Hydra's basic sweeper, each job's
    config, group choices and run folder (``hydra.sweep.subdir``). Configs
    that differ only in ``layers``, ``seed`` and grid keys (plain values)
    are composed and resolved once and the values set, with the values
    that are exactly ``${key}`` of one of them (``split_index: ${seed}``);
    a key interpolated any other way is set before resolving (the tests
    check that this equals composing each)."""

    def __init__(self, varying: Sequence[str]):
        from hydra.core.override_parser.overrides_parser import \
            OverridesParser
        self.parser = OverridesParser.create()
        self.varying = ('layers', 'seed', *varying)
        self.composed: Dict[tuple, Any] = {}
        self.resolved: Dict[tuple, Dict[str, Any]] = {}
        self.parsed: Dict[str, Any] = {}
        self.names: Dict[tuple, Dict[str, Any]] = {}

    def jobs(self, overrides: Sequence[str]) -> List[List[str]]:
        r"""The job overrides of the multirun over :obj:`overrides`."""
        from gnorm.train.hydra_adapter import job_overrides
        return job_overrides(None, None, overrides)

    def _parse(self, job: List[str]) -> list:
        for item in job:
            if item not in self.parsed:
                self.parsed[item] = self.parser.parse_override(item)
        return [self.parsed[item] for item in job]

    def _compose(self, fixed: Tuple[str, ...]):
        if fixed not in self.composed:
            from omegaconf import OmegaConf
            cfg = compose(fixed, hydra=True)
            choices = {k: v for k, v in cfg.hydra.runtime.choices.items()
                       if not k.startswith('hydra/') and k != 'hydra'}
            task = OmegaConf.masked_copy(cfg, [k for k in cfg
                                               if k != 'hydra'])
            container = OmegaConf.to_container(task)
            # Values set after resolving, each with the values that are
            # exactly its interpolation, unless something else reads it.
            late = {}
            for k in self.varying:
                found = late_paths(container, k.lstrip('+'))
                if found is not None:
                    late[k] = found
            self.composed[fixed] = (cfg, task, choices, late)
        return self.composed[fixed]

    def run(self, job: List[str], runs_dir: Path) -> Dict[str, Any]:
        r"""One job: ``dir``, ``info`` (for ``results.json``), ``key``
        (:func:`run_key`), its width and epochs (``hidden``, ``epochs``:
        its cost, :mod:`gnorm.study.runs.cost`) and what :meth:`config`
        needs."""
        from omegaconf import OmegaConf, open_dict
        from gnorm.train.common import run_names
        from gnorm.train.hydra_adapter import override_dirname
        parsed = self._parse(job)
        fixed = tuple(o.input_line for o in parsed
                      if o.get_key_element() not in self.varying)
        values = {o.get_key_element(): o.value() for o in parsed
                  if o.get_key_element() in self.varying}
        full, task, choices, late = self._compose(fixed)
        early = tuple((k, v) for k, v in values.items() if k not in late)
        if (fixed, early) not in self.resolved:
            cfg = copy.deepcopy(task)
            for k, v in early:
                _set(cfg, k, v)
            self.resolved[fixed, early] = OmegaConf.to_container(
                cfg, resolve=True)
        config = copy.deepcopy(self.resolved[fixed, early])
        for k, v in values.items():
            for *path, last in late.get(k, ()):
                node = config
                for part in path:
                    node = node[part]
                node[last] = v
        # The job's own overrides, as Hydra keeps them apart from its
        # hydra.* ones (e.g. the search path of a user's spec).
        own = [o for o in parsed if not o.get_key_element().startswith(
            ('hydra.', 'hydra/'))]
        naming = full.hydra.job.config.override_dirname
        with open_dict(full.hydra.job):
            full.hydra.job.override_dirname = override_dirname(
                own, naming.exclude_keys, naming.item_sep, naming.kv_sep)
        # What the run trains by name, as `python -m gnorm.train` records
        # it (a user's norm class by its class, not the option `none`).
        # A name depends on the option and the group's _target_ alone:
        # found once per (fixed overrides, targets), not read per run.
        targets = tuple((g, str((config.get(g) or {}).get('_target_')))
                        for g in choices if isinstance(config.get(g), dict))
        if (fixed, targets) not in self.names:
            self.names[fixed, targets] = run_names(
                config, choices, full.hydra.runtime.config_sources)
        names = dict(self.names[fixed, targets])
        return dict(fixed=fixed, values=values,
                    dir=runs_dir / str(full.hydra.sweep.subdir),
                    info={'choices': dict(choices), 'names': names,
                          'overrides': [o.input_line for o in own]},
                    key=run_key(config_identity(config)),
                    hidden=int((config.get('model') or {}).get(
                        'hidden_channels') or 32),
                    epochs=int(config['train']['epochs']))

    def config(self, run: Dict[str, Any]):
        r"""The config of :obj:`run` (a :class:`DictConfig` of its own)."""
        cfg = copy.deepcopy(self._compose(run['fixed'])[1])
        for k, v in run['values'].items():
            _set(cfg, k, v)
        return cfg


def late_paths(container: Dict[str, Any], key: str
               ) -> Optional[List[Tuple[str, ...]]]:
    r"""Where the value of :obj:`key` (dotted) goes in the unresolved
    :obj:`container`: its own path and those of the values that are
    exactly ``${key}``; :obj:`None` where anything else interpolates it
    (in a longer string, or by reading a value that is ``${key}``), so
    that it must be set before resolving."""
    whole, found = '${' + key + '}', [tuple(key.split('.'))]

    def walk(node, path):
        items = (node.items() if isinstance(node, dict) else
                 enumerate(node) if isinstance(node, list) else ())
        for name, value in items:
            if value == whole:
                found.append((*path, name))
            else:
                walk(value, (*path, name))
    walk(container, ())
    text = json.dumps(container)
    copies = ['${' + '.'.join(map(str, p)) for p in found[1:]]
    if text.count('${' + key) != len(found) - 1 or any(
            c in text for c in copies):
        return None
    return found


def _set(cfg, key: str, value: Any) -> None:
    r"""Sets the override :obj:`key` (``norm.scale``, or ``+norm.alpha``:
    a key the config lacks, e.g. an argument of a user's norm class) of
    :obj:`cfg` to :obj:`value`."""
    from omegaconf import OmegaConf
    OmegaConf.update(cfg, key.lstrip('+'), value,
                     force_add=key.startswith('+'))


def compose_cells(spec: Spec, todo: List[Dict[str, Any]],
                  sets: Sequence[str], runs_dir: Path) -> Composer:
    r"""Adds to each cell of :obj:`todo` its ``runs``: one per job of its
    multirun, with its ``setting`` (of the row's grid) and ``seed``;
    returns the :class:`Composer` that makes their configs (when asked:
    a cell of one of gnorm's studies that the cache holds for these
    overrides, :func:`cells_store`, is not composed here)."""
    grid_keys = sorted({k for row in spec.table['rows']
                        for k in grid(spec, row)})
    composer = Composer(grid_keys)
    store = cells_store(spec)
    for cell in todo:
        given = json.dumps(arguments(spec, cell, sets))
        kept = store.get(given) if store else None
        if kept is not None:
            cell['runs'] = [_unpacked(run, runs_dir) for run in kept]
            continue
        cell['runs'] = []
        keys = list(cell['settings'][0])
        for job in composer.jobs(arguments(spec, cell, sets)):
            run = composer.run(job, runs_dir)
            run['setting'] = setting_label(
                {k: run['values'][k] for k in keys})
            run['seed'] = run['values']['seed']
            cell['runs'].append(run)
        if store:
            store.put(given, [_packed(run, runs_dir)
                              for run in cell['runs']])
    if store:
        store.save()
    return composer


def cells_store(spec: Spec):
    r"""The cache of the runs of :obj:`spec`'s cells by their overrides
    (:class:`gnorm.study.spec.cache.Store`; the runs folder apart), for one
    of gnorm's studies; :obj:`None` for a user's spec."""
    if not spec.own:
        return None
    from gnorm.study.spec.cache import Store, context
    from gnorm.study.spec.find import CONF_DIR  # as the spec composes
    conf, key = CONF_DIR, context(CONF_DIR)
    return Store('cells', spec.experiment, key,
                 lambda: context(conf) == key)


def _packed(run: Dict[str, Any], runs_dir: Path) -> Dict[str, Any]:
    r""":obj:`run` as the cache keeps it: its folder relative to
    :obj:`runs_dir`."""
    folder = Path(run['dir'])
    return {**run, 'fixed': list(run['fixed']),
            'dir': (folder.relative_to(runs_dir).as_posix()
                    if folder.is_relative_to(runs_dir) else str(folder))}


def _unpacked(run: Dict[str, Any], runs_dir: Path) -> Dict[str, Any]:
    r"""The run :obj:`run` the cache kept, its folder in
    :obj:`runs_dir`."""
    return {**run, 'fixed': tuple(run['fixed']), 'dir': runs_dir / run['dir']}


def index(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    r"""The finished runs by :func:`run_key` (the first by path of equal
    ones: e.g. a run whose overrides spell out a default)."""
    found: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        if run.get('status') == 'ok' and 'config' in run:
            found.setdefault(run_key(record_identity(run)), run)
    return found


def write_hydra(run: Dict[str, Any], cfg) -> None:
    r"""``.hydra/config.yaml`` and ``overrides.yaml`` of a run, as a job of
    a multirun writes them."""
    from omegaconf import OmegaConf
    hydra_dir = run['dir'] / '.hydra'
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, hydra_dir / 'config.yaml')
    OmegaConf.save(OmegaConf.create(run['info']['overrides']),
                   hydra_dir / 'overrides.yaml')
