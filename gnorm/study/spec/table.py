r"""What a spec is: the :class:`Spec` (a composed experiment config with
a ``table:`` section), the keys its ``table:`` may hold and what a study
reads of them (rows, grids and their settings, budgets, ``--set`` names).
Nothing here composes or checks a config (:mod:`~gnorm.study.spec.find`,
:mod:`~gnorm.study.spec.check`).
"""
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gnorm.errors import ConfigError
from gnorm.results import NOT_CONFIG_KEYS
from gnorm.train import CONF_DIR


KINDS = ('depth', 'paired')
# Where gnorm's own studies keep their runs and reports (experiments/runs,
# experiments/results): the checkout holding conf/, or, for an installed
# gnorm (whose conf/ lies in the package), the working folder.
REPO = (CONF_DIR.parent if (CONF_DIR.parent / 'experiments').is_dir()
        else Path.cwd())
# Keys a depth study sets in each run itself; --set, rows and grids
# cannot change them (a paired study sets those of PAIRED_AXES), and what
# sets each instead.
AXES = ('experiment', 'dataset', 'layers', 'seed', 'tag')
PAIRED_AXES = ('experiment', 'seed', 'tag')
AXIS_SOURCES = {'experiment': 'the spec is the experiment',
                'dataset': 'list the datasets in table.datasets',
                'layers': 'list the depths in table.depths',
                'seed': 'list the seeds in table.seeds (or table.row_seeds)',
                'tag': "a row's name is its runs' tag"}
# Keys that decide a run's split and data: rows paired by seed set them
# alike (and ``dataset.*``, the graph itself).
SPLIT_KEYS = ('split', 'split_index', 'test_set')
# Every key of ``table:`` (docs/study.rst) and of its sections.
TABLE_KEYS = (
    'kind', 'name', 'title', 'rows', 'seeds', 'pairing', 'level', 'runs',
    'out', 'datasets', 'depths', 'grid', 'compare', 'spread_rule', 'paper',
    'paper_lines', 'flag', 'notes', 'not_run', 'authors',
    'authors_compared', 'row_seeds', 'min_seeds', 'higher_is_better',
    'labels', 'metric', 'dataset', 'plot_title', 'recipe_note',
    'mirror_note', 'epochs_why', 'published', 'beside', 'elsewhere',
    'elsewhere_intro', 'correction', 'budget', 'paper_recipe', 'variants',
    'primary', 'per_dataset', 'reproduced', 'margin')
BUDGETS = ('any', 'equal')
# The view of a depth study whose verdicts are the study's (table.primary):
# each row tuned by validation, or every row at its default (equal budgets).
PRIMARY = ('tuned', 'budget')
SECTION_KEYS = {'compare': ('rows', 'against'),
                'flag': ('rows', 'paper_stds'),
                'not_run': ('datasets', 'rows', 'depths', 'why')}
# The config groups a protocol's keys are checked against.
GROUPS = ('dataset', 'model', 'norm')


# A depth study's run folders: <runs>/<overrides but NOT_RESULT_KEYS>.
RUN_FOLDERS = [
    'hydra.sweep.subdir=${hydra.job.override_dirname}',
    'hydra.job.config.override_dirname.exclude_keys='
    '${gnorm.not_result_keys:experiment}']


class SpecError(ConfigError):
    r"""A bad spec or command line: one line, exit status 2."""


@dataclass
class Spec:
    r"""A composed spec: ``name`` (``table.name``, else the experiment's),
    ``experiment`` (the option of Hydra's ``experiment`` group),
    ``source`` (its YAML file), ``folder`` (the search-path folder of a
    user's file, else :obj:`None`) and ``table`` (the resolved ``table:``
    section)."""
    name: str
    experiment: str
    source: Path
    folder: Optional[Path]
    table: Dict[str, Any]

    @property
    def kind(self) -> str:
        return self.table.get('kind', 'depth')

    @property
    def pairing(self) -> str:
        return self.table.get('pairing', 'none')

    @property
    def level(self) -> float:
        from gnorm.study.stats import LEVEL  # scipy: where first used
        return float(self.table.get('level', LEVEL))

    @property
    def correction(self) -> str:
        r"""``table.correction``: ``holm`` (default) or ``none``."""
        return str(self.table.get('correction', 'holm'))

    @property
    def margin(self) -> float:
        r"""``table.margin``: the margin of equivalence, in points of the
        score (default :data:`gnorm.study.stats.MARGIN`)."""
        from gnorm.study.stats import MARGIN
        return float(self.table.get('margin', MARGIN))

    @property
    def min_seeds(self) -> int:
        r"""``table.min_seeds``: the seeds a comparison needs to decide
        (default :data:`gnorm.study.stats.MIN_SEEDS`)."""
        from gnorm.study.stats import MIN_SEEDS
        return int(self.table.get('min_seeds', MIN_SEEDS))

    @property
    def own(self) -> bool:
        r"""Whether the spec is one of gnorm's (``conf/experiment/``)."""
        return self.folder is None

    def overrides(self) -> List[str]:
        r"""The overrides that pick this spec's experiment; for a depth
        study also its run folders, one per run named after its overrides
        without the keys that change no result (what gnorm's studies say
        in their ``hydra:`` section, so that a user's spec need not)."""
        found = [f'experiment={self.experiment}']
        if self.folder is not None:
            found.append(f'hydra.searchpath=[file://{self.folder}]')
        if self.kind == 'depth':
            found += RUN_FOLDERS
        return found

    def home(self) -> Path:
        r"""The folder relative paths of the spec are read from: the
        checkout for gnorm's specs, the spec file's folder otherwise."""
        return REPO if self.own else self.source.parent

    def path(self, key: str, default: Path) -> Path:
        r"""The folder ``table.<key>`` names (relative to :meth:`home`),
        else :obj:`default`."""
        given = self.table.get(key)
        return (self.home() / given if given else default).resolve()

    def runs_dir(self) -> Path:
        r"""Where the study's runs go: ``table.runs``, else
        ``experiments/runs/<name>`` for gnorm's specs and
        ``runs/<name>`` beside a user's spec file."""
        default = (REPO / 'experiments' / 'runs' if self.own
                   else self.source.parent / 'runs') / self.name
        return self.path('runs', default)

    def out_dir(self) -> Path:
        r"""Where the study's report goes: ``table.out``, else
        ``experiments/results`` for gnorm's specs and ``results`` beside
        a user's spec file."""
        default = (REPO / 'experiments' / 'results' if self.own
                   else self.source.parent / 'results')
        return self.path('out', default)

    def file(self, key: str) -> Optional[Path]:
        r"""The file ``table.<key>`` names: relative to :meth:`home`, or,
        for a key inherited from one of gnorm's specs, to gnorm's
        checkout; :obj:`None` if the spec names none."""
        given = self.table.get(key)
        if not given:
            return None
        for folder in (self.home(), REPO):
            if (folder / given).exists():
                return folder / given
        raise SpecError(f'{self.name}: table.{key} names {given}, found '
                        f'neither beside the spec nor in {REPO}')


def override_key(item: str) -> str:
    r"""The key of the override :obj:`item` (``+norm.alpha=0.5``:
    ``norm.alpha``)."""
    return item.split('=', 1)[0].lstrip('+~')


def compared_rows(spec: Spec) -> List[str]:
    r"""The rows of ``table.compare`` (both sides), in the table's order."""
    compare = spec.table.get('compare') or {}
    named = set(compare.get('rows', [])) | set(compare.get('against', []))
    return [row for row in spec.table['rows'] if row in named]


def grid(spec: Spec, row: str) -> Dict[str, list]:
    r"""The candidate settings of :obj:`row`: ``table.grid.<row>``."""
    return (spec.table.get('grid') or {}).get(row) or {}


def settings(spec: Spec, row: str) -> List[Dict[str, Any]]:
    r"""Every combination of :obj:`row`'s grid (``[{}]`` without one)."""
    found = grid(spec, row)
    return [dict(zip(found, values))
            for values in itertools.product(*found.values())]


def budget(spec: Spec, row: str) -> int:
    r"""The number of settings :obj:`row` tries (its tuning budget)."""
    return len(settings(spec, row))


def setting_label(setting: Dict[str, Any]) -> str:
    r"""``PN-SI, s=0.5`` for ``{norm.mode: PN-SI, norm.scale: 0.5}``:
    ContraNorm's and PairNorm's scale as ``s``, PairNorm's mode as it is,
    any other key by its last part (``{+norm.factor: 0.5}``: ``factor=0.5``)."""
    def label(key, value):
        if key == 'norm.scale':
            return f's={value:g}'
        if key == 'norm.mode':
            return str(value)
        return f"{key.rsplit('.', 1)[-1]}={value}"
    return ', '.join(label(k, v) for k, v in setting.items())


def config_sets(sets: Sequence[str]) -> List[str]:
    r"""The overrides of :obj:`sets` that change what a run computes (not
    threads, data folders...: :data:`gnorm.results.NOT_CONFIG_KEYS`)."""
    return [s for s in sets
            if s.split('=', 1)[0].lstrip('+~') not in NOT_CONFIG_KEYS]


def set_name(name: str, sets: Sequence[str]) -> str:
    r"""``table3_fair+train.epochs=50``: the name of the runs and report
    of :obj:`name` with the overrides :obj:`sets` (``/`` becomes ``_``);
    :obj:`name` itself without any."""
    return name + ''.join(f"+{s.replace('/', '_')}" for s in sets)
