r"""What ``python -m gnorm.train`` checks and explains before Hydra
composes the config (whose own reports span many lines): unknown options
of a config group and unknown keys, each as one line naming the valid
ones, launchers that are not installed, an output folder that cannot be
written, and ``--help`` (the main keys, one line each, from the comments
of ``conf/train.yaml``). Options and keys are those of gnorm's ``conf/``
and of the folders the command line adds to Hydra's search path
(``hydra.searchpath=[file:///my/conf]``, ``--config-dir``)."""
import importlib.util
import re
from pathlib import Path
from typing import (Any, Dict, Iterator, List, Optional, Sequence, Set,
                    Tuple, Union)

from hydra.errors import HydraException
from omegaconf import OmegaConf

from gnorm.errors import ConfigError
from gnorm.errors import closest as errors_closest
from gnorm.results.folders import check_folder
from gnorm.results.keys import dotted_keys
from gnorm.train.common import CONF_DIR, quoted, source_folder

# Command-line flags after which the primary config may not be ours.
OTHER_CONFIGS = ('--config-path', '-cp')
# Command-line flags that add a config folder to Hydra's search path.
CONFIG_DIR = ('--config-dir', '-cd')
# Keys that gnorm's sweeper sets, never suggested for a typo.
SET_BY_GNORM = ('batch_file', )
# Hydra's launchers: the plugin module each needs (None: built in).
LAUNCHER_PLUGINS = {
    'basic': None,
    'joblib': 'hydra_plugins.hydra_joblib_launcher',
    'submitit_local': 'hydra_plugins.hydra_submitit_launcher',
    'submitit_slurm': 'hydra_plugins.hydra_submitit_launcher',
}
# One config folder, or several (gnorm's first, then those of Hydra's
# search path).
Folders = Union[Path, Sequence[Path]]
LAUNCHERS_EXTRA = ('pip install "gnorm[launchers]" (in a checkout: pip '
                   'install -e ".[launchers]")')


def _overrides(argv: List[str]) -> Iterator[Any]:
    r"""The parsed ``key=value`` overrides of :obj:`argv` (Hydra reports
    the ones it cannot parse itself)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith('-') or '=' not in arg:
            continue
        try:
            yield parser.parse_overrides([arg])[0]
        except Exception:
            continue


def _other_configs(argv: List[str]) -> bool:
    r"""Whether :obj:`argv` points Hydra to another primary config
    folder (whose options and keys may differ from gnorm's)."""
    return any(a.split('=')[0] in OTHER_CONFIGS for a in argv)


def searchpath(argv: List[str]) -> List[str]:
    r"""The config sources that :obj:`argv` adds to Hydra's search path,
    as Hydra writes them: the folder of ``--config-dir`` (absolute, as
    ``file://...``), then the entries of a ``hydra.searchpath=[...]``
    override (``file://`` paths, relative ones to the working folder;
    ``pkg://`` packages; a path without a scheme is a file path)."""
    entries = []
    for i, arg in enumerate(argv):
        flag, _, folder = arg.partition('=')
        if flag in CONFIG_DIR:
            folder = folder or (argv[i + 1] if i + 1 < len(argv) else '')
            entries.append(f'file://{Path(folder).absolute()}')
    for override in _overrides(argv):
        if override.key_or_group.lstrip('+') == 'hydra.searchpath' and \
                not override.is_delete() and \
                isinstance(override.value(), list):
            entries += [str(entry) for entry in override.value()]
    return entries


def config_folders(argv: List[str], conf_dir: Path = CONF_DIR,
                   ) -> Optional[List[Path]]:
    r"""The config folders Hydra composes the config of :obj:`argv` from:
    :obj:`conf_dir`, then those of :func:`searchpath`; :obj:`None` when
    their options are unknown here: :obj:`argv` names another primary
    config folder (``--config-path``), or a source that is no folder."""
    if _other_configs(argv):
        return None
    folders = [conf_dir]
    for entry in searchpath(argv):
        schema, sep, path = entry.partition('://')
        folder = source_folder(path, schema) if sep else Path(entry)
        if folder is None:
            return None
        folders.append(folder)
    return folders


def _folders(conf_dir: Folders) -> List[Path]:
    r""":obj:`conf_dir`, one config folder or several, as a list."""
    return [Path(conf_dir)] if isinstance(conf_dir, (str, Path)) \
        else [Path(d) for d in conf_dir]


def _first(conf_dir: Folders, name: str) -> Optional[Path]:
    r"""The config file :obj:`name` of the first folder of
    :obj:`conf_dir` that has it (as Hydra picks it), else :obj:`None`."""
    return next((d / name for d in _folders(conf_dir)
                 if (d / name).is_file()), None)


def _values(override: Any) -> List[str]:
    r"""The values of a (swept) override, :obj:`None` as ``null``."""
    values = (list(override.sweep_string_iterator())
              if override.is_sweep_override() else [override.value()])
    return ['null' if v is None else str(v) for v in values]


def groups(conf_dir: Folders) -> List[str]:
    r"""The config groups (folders with ``.yaml`` files in :obj:`conf_dir`,
    one config folder or several), without Hydra's."""
    return sorted({p.name for d in _folders(conf_dir) if d.is_dir()
                   for p in d.iterdir() if p.is_dir() and p.name != 'hydra'
                   and any(p.glob('*.yaml'))})


def options(conf_dir: Folders, group: str) -> List[str]:
    r"""The options of config group :obj:`group` in :obj:`conf_dir` (one
    config folder or several)."""
    return sorted({p.stem for d in _folders(conf_dir)
                   for p in (d / group).glob('*.yaml')})


def check_choices(argv: List[str], conf_dir: Path = CONF_DIR) -> None:
    r"""Raises :class:`ConfigError` for a command-line override that picks
    an unknown option of a config group (``dataset=foo``); the options are
    those of :obj:`conf_dir` and of the folders :obj:`argv` adds to
    Hydra's search path (:func:`config_folders`)."""
    folders = config_folders(argv, conf_dir)
    if folders is None:
        return
    known = groups(folders)
    for override in _overrides(argv):
        group = override.key_or_group.lstrip('/')
        if (group not in known or override.package is not None
                or override.is_delete()):
            continue
        valid = options(folders, group)
        for value in _values(override):
            if value == 'null' and group == 'experiment':
                continue
            if value not in valid:
                raise ConfigError(f"unknown {group} {value!r}; pass "
                                  f"{group}= one of {', '.join(valid)}")


def config_keys(conf_dir: Path, choices: List[List[str]],
                sources: Sequence[str] = ()) -> Set[str]:
    r"""The keys of the configs composed with each of :obj:`choices` (lists
    of group overrides such as ``['norm=pairnorm']``), with the config
    sources :obj:`sources` added to Hydra's search path."""
    return set().union(*_keys_per_choice(conf_dir, choices, sources))


def _keys_per_choice(conf_dir: Path, choices: List[List[str]],
                     sources: Sequence[str] = ()) -> List[Set[str]]:
    r"""The keys of the config composed with each of :obj:`choices`."""
    from hydra import compose, initialize_config_dir
    extra = [] if not sources else ['hydra.searchpath=[{}]'.format(
        ','.join(quoted(s) for s in sources))]
    keys = []
    with initialize_config_dir(config_dir=str(conf_dir), version_base='1.3'):
        for overrides in choices:
            cfg = compose('train', overrides=[*overrides, *extra])
            keys.append(set(dotted_keys(OmegaConf.to_container(cfg,
                                                         resolve=False))))
    return keys


def option_keys_of(folders: List[Path], sources: Sequence[str] = (),
                 ) -> Dict[Tuple[str, str], Set[str]]:
    r"""The keys of the config with each option of each group of the
    primary config folder (the first of :obj:`folders`; but
    ``experiment``, whose overlays pick options of the others) on its
    own, the options of all :obj:`folders` (those of :obj:`sources`)
    included."""
    conf_dir = folders[0]
    picks = [(group, option)
             for group in groups(conf_dir) if group != 'experiment'
             for option in options(folders, group)]
    return dict(zip(picks, _keys_per_choice(
        conf_dir, [[f'{group}={option}'] for group, option in picks],
        sources)))


def closest(key: str, keys: Set[str]) -> List[str]:
    r""":func:`gnorm.errors.closest`, never naming keys that only gnorm sets
    (:data:`SET_BY_GNORM`)."""
    return errors_closest(key, keys - set(SET_BY_GNORM))


def check_keys(argv: List[str], conf_dir: Path = CONF_DIR) -> None:
    r"""Raises :class:`ConfigError` naming the closest valid keys for an
    override of a key the config does not have (``layer=3``,
    ``norm.scal=0.5``), and for ``+key=value`` when :obj:`key` looks like a
    typo of an existing key (Hydra would add it and nothing would read
    it), is a key that only other options of a group declare, or exists
    already (every key gnorm reads is declared where it applies: a
    dataset config's ``metric``, for one). ``+key=value`` for any other
    new key is left to Hydra. Keys are those of the configs the group
    overrides of :obj:`argv` compose (each option of a swept group once),
    with the folders :obj:`argv` adds to Hydra's search path; a config
    that does not compose is left to Hydra, which says why."""
    folders = config_folders(argv, conf_dir)
    if folders is None:
        return
    sources = searchpath(argv)
    known = set(groups(folders))
    picks: List[Tuple[str, List[str]]] = []
    keys_to_check = []
    for override in _overrides(argv):
        name = override.key_or_group.lstrip('/')
        if name.split('.')[0].split('/')[0] == 'hydra' or \
                override.is_delete():
            continue
        if name in known and override.package is None:
            prefix = '+' if override.is_add() else ''
            picks.append((f'{prefix}{name}', _values(override)))
        else:
            keys_to_check.append(override)
    if not keys_to_check:
        return
    # Every option of each group once, the other groups at their first.
    first = [f'{name}={values[0]}' for name, values in picks]
    choices = [first] + [
        first[:i] + [f'{name}={value}'] + first[i + 1:]
        for i, (name, values) in enumerate(picks) for value in values[1:]]
    try:
        keys = config_keys(conf_dir, choices, sources)
    except HydraException:  # e.g. +norm=layernorm: Hydra reports it
        return
    option_keys: Dict[Tuple[str, str], Set[str]] = {}
    for override in keys_to_check:
        key = override.key_or_group
        text = override.input_line
        if key in keys:
            if override.is_add():
                raise ConfigError(f"{key} is in the config already; pass "
                                  f"{text.lstrip('+')} without the +")
            continue
        # A study's table: section describes runs, it is no place for a
        # run's key (a typo in a grid key would suggest itself).
        near = closest(key, {k for k in keys if not k.startswith('table.')})
        if near:
            hint = f"closest keys: {', '.join(near)}"
        else:
            try:
                option_keys = option_keys or option_keys_of(folders, sources)
            except HydraException:  # an option that does not compose
                option_keys = {}
            hint = other_options_hint(key, keys, option_keys)
        if not (override.is_add() or override.is_force_add()):
            raise ConfigError(f"unknown key {key!r} in {text}; " + (
                hint or "python -m gnorm.train --cfg job lists the keys"))
        if near:  # a typo: nothing reads the key it adds
            raise ConfigError(f"unknown key {key!r} in {text} (a + adds "
                              f"a key that nothing reads); {hint}")
        if hint:  # a key of other options, which this one does not declare
            raise ConfigError(f"unknown key {key!r} in {text} (a + adds "
                              f"a key this config does not declare); {hint}")


def other_options_hint(key: str, keys: Set[str],
                        option_keys: Dict[Tuple[str, str], Set[str]]) -> str:
    r"""For a key that other options of a group have (``train.batch_size``:
    the graph datasets), or one close to such a key (``norm.scal``), those
    keys and the options that have them; nothing if there are none."""
    found: Dict[str, Dict[str, List[str]]] = {}
    for (group, option), other in option_keys.items():
        for near in closest(key, other - keys):
            found.setdefault(near, {}).setdefault(group, []).append(option)
    if key in found:
        found = {key: found[key]}
    hints = []
    for near, owners in found.items():
        where = ' or '.join(f"{group}={'|'.join(names)}"
                            for group, names in owners.items())
        hints.append(f"only {where} have it" if near == key else
                     f"closest key: {near} (with {where})")
    return '; '.join(hints)


def _raw(path: Path, key: str) -> Any:
    r"""The value of dotted :obj:`key` in the config file :obj:`path`, not
    resolved (:obj:`None` if it has none)."""
    node: Any = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    for part in key.split('.'):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _experiment_raw(conf_dir: Folders, name: str, key: str) -> Any:
    r"""The value of dotted :obj:`key` in the experiment config
    :obj:`name`, not resolved, as its defaults list composes it: the
    experiments it names (``- luo``) in order, with its own keys where
    ``_self_`` stands (last if it is not named); :obj:`None` if none has
    it."""
    path = _first(conf_dir, f'experiment/{name}.yaml')
    if path is None:
        return None
    defaults = _raw(path, 'defaults') or []
    if '_self_' not in defaults:
        defaults = [*defaults, '_self_']
    value = None
    for entry in defaults:
        if entry == '_self_':
            found = _raw(path, key)
        elif isinstance(entry, str):
            found = _experiment_raw(conf_dir, entry, key)
        else:  # an override of another group: not an experiment
            continue
        value = value if found is None else found
    return value


def output_folder(argv: List[str], conf_dir: Folders = CONF_DIR,
                  ) -> Tuple[str, str, bool]:
    r"""The key of the folder Hydra makes first for :obj:`argv`
    (``hydra.sweep.dir`` with ``-m``, else ``hydra.run.dir``), its value
    (typed, else the experiment's, else ``conf/hydra/default.yaml``'s,
    not resolved) and whether it was typed."""
    multirun = any(a in ('-m', '--multirun') for a in argv)
    key = 'hydra.sweep.dir' if multirun else 'hydra.run.dir'
    value, experiment = None, None
    for override in _overrides(argv):
        name = override.key_or_group.lstrip('+/')
        if name == key and not override.is_sweep_override():
            value = str(override.value())
        elif name == 'experiment' and not override.is_sweep_override():
            experiment = override.value()
    if value is not None:
        return key, value, True
    if experiment is not None:
        value = _experiment_raw(conf_dir, str(experiment), key)
    if value is None:
        value = _raw(_folders(conf_dir)[0] / 'hydra' / 'default.yaml',
                     key.split('.', 1)[1])
    return key, str(value), False


def check_output_folder(argv: List[str], conf_dir: Path = CONF_DIR) -> None:
    r"""Raises :class:`ConfigError` if the output folder of :obj:`argv`
    (:func:`output_folder`; its part before the first interpolation
    ``${...}``) lies under a file or in a read-only folder, before Hydra
    makes it and a traceback ends the command."""
    folders = config_folders(argv, conf_dir)
    key, value, typed = output_folder(argv, folders or conf_dir)
    static = value.split('${', 1)[0]
    if '${' in value:  # the folders that exist before the run's own
        static = static.rsplit('/', 1)[0] if '/' in static else ''
    if not typed and folders is None:
        return
    check_folder(static or '.', f'{key}={value}' if typed else
                 f'{key} (default {value})')


def _installed(module: str) -> bool:
    r"""Whether the module :obj:`module` can be imported."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


def _launcher_plugin(name: str, conf_dir: Folders) -> Any:
    r"""The plugin module that launcher :obj:`name` needs (:obj:`None`:
    built in): Hydra's own, or that of the launcher an option of
    ``hydra/launcher/`` in :obj:`conf_dir` extends; ``False`` for an
    unknown name."""
    if name in LAUNCHER_PLUGINS:
        return LAUNCHER_PLUGINS[name]
    path = _first(conf_dir, f'hydra/launcher/{name}.yaml')
    if path is None:
        return False
    base = next((item for item in OmegaConf.load(path).get('defaults', [])
                 if isinstance(item, str) and item in LAUNCHER_PLUGINS),
                'basic')
    return LAUNCHER_PLUGINS[base]


def launchers(conf_dir: Folders = CONF_DIR) -> List[str]:
    r"""The launchers one can pick (``hydra/launcher=NAME``): Hydra's and
    those of ``hydra/launcher/`` in :obj:`conf_dir` (gnorm's
    ``conf/``) whose plugin is installed."""
    names = {*LAUNCHER_PLUGINS, *options(conf_dir, 'hydra/launcher')}
    return sorted(name for name in names
                  if (plugin := _launcher_plugin(name, conf_dir)) is None
                  or (plugin and _installed(plugin)))


def check_launcher(name: str, conf_dir: Folders = CONF_DIR) -> None:
    r"""Raises :class:`ConfigError` if launcher :obj:`name` is unknown, or
    its plugin is not installed (naming the ``[launchers]`` extra)."""
    plugin = _launcher_plugin(name, conf_dir)
    if plugin is False:
        raise ConfigError(f"unknown hydra/launcher {name!r}; pass "
                          f"hydra/launcher= one of "
                          f"{', '.join(launchers(conf_dir))}")
    if plugin is not None and not _installed(plugin):
        package = plugin.rsplit('.', 1)[1].replace('_', '-')
        raise ConfigError(f"hydra/launcher={name} needs {package}, which "
                          f"is not installed: {LAUNCHERS_EXTRA}")


def check_launchers(argv: List[str], conf_dir: Path = CONF_DIR) -> None:
    r""":func:`check_launcher` for every ``hydra/launcher=`` override of
    :obj:`argv`."""
    folders = config_folders(argv, conf_dir)
    if folders is None:
        return
    for override in _overrides(argv):
        if override.key_or_group.lstrip('+/') == 'hydra/launcher' and \
                not override.is_delete():
            for name in _values(override):
                check_launcher(name, folders)


_LINE = re.compile(r'^(?P<indent> *)(?P<item>- )?(?P<key>[\w.]+):[ ]*'
                   r'(?P<value>.*?)[ ]*(?:#[ ]?(?P<comment>.*))?$')


def _rows(path: Path) -> Tuple[Dict[str, str], List[Tuple[str, str, str]]]:
    r"""The defaults list (group: default option) and the keys of the
    config file :obj:`path`, each as (dotted key, default, comment)."""
    group_default: Dict[str, str] = {}
    rows = []
    section = None
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        key, value = match['key'], match['value']
        comment = match['comment'] or ''
        if match['item']:
            group_default[key] = value
        elif not match['indent']:
            section = None if value or comment else key
            if section is None and key != 'defaults':
                rows.append((key, value, comment))
        elif section is not None:
            rows.append((f'{section}.{key}', value, comment))
    return group_default, rows


def graph_datasets(conf_dir: Path) -> List[str]:
    r"""The options of ``dataset`` whose task is graph-level."""
    return [name for name in options(conf_dir, 'dataset') if OmegaConf.load(
        conf_dir / 'dataset' / f'{name}.yaml').get('task') == 'graph']


def help_text(conf_dir: Path = CONF_DIR) -> str:
    r"""The text of ``python -m gnorm.train --help``: the config groups
    with their options, the keys of ``conf/train.yaml`` and the training
    keys of the graph-level datasets (``conf/train_graph.yaml``), each with
    its default and comment."""
    group_default, rows = _rows(conf_dir / 'train.yaml')
    _, graph_rows = _rows(conf_dir / 'train_graph.yaml')
    graph_rows = [(f'train.{key}', value, comment)
                  for key, value, comment in graph_rows]
    lines = ['python -m gnorm.train [KEY=VALUE ...]   (same: gnorm-train)',
             '',
             'Trains one model and writes results.json into its run folder;',
             'with -m, one job per combination of comma-separated values',
             '(seed=0,1,2). Ctrl-C or SIGTERM stops cleanly, keeping the',
             'results so far.',
             '',
             'Groups (GROUP=OPTION):']
    for group in groups(conf_dir):
        default = group_default.get(group, 'null')
        names = [f'{o} (default)' if o == default else o
                 for o in options(conf_dir, group)]
        lines.append(f'  {group:<20} {" | ".join(names)}')
    width = max(len(key) for key, _, _ in rows + graph_rows)

    def table(rows):
        return [f'  {key:<{width}}  [{value}]  {comment}'.rstrip()
                for key, value, comment in rows]

    graph = '|'.join(graph_datasets(conf_dir))
    lines += ['', 'Keys (KEY=VALUE, default in brackets):', *table(rows),
              '', f'Training keys of dataset={graph} (model=graphormer), '
              f'set or added by those datasets:', *table(graph_rows)]
    lines += ['',
              'Keys of a group option, e.g. norm.scale: python -m '
              'gnorm.train norm=contranorm --cfg job',
              "Hydra's own options (--cfg, --multirun, ...): python -m "
              'gnorm.train --hydra-help']
    return '\n'.join(lines)
