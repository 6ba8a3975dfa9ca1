r"""The package as users get it: the wheel, installed without extras into
a fresh environment, trains on a real dataset; imports inside gnorm run
one way."""
import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import MIRROR, needs_mirror

REPO = Path(__file__).resolve().parents[1]
# What a wheel is built from (a copy, so the checkout gets no build/).
SOURCES = ('pyproject.toml', 'setup.py', 'README.md', 'LICENSE', 'gnorm',
           'conf', 'hydra_plugins')


def _run(*cmd, cwd, env=None):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _requirements(wheel):
    r"""The distributions a plain ``pip install <wheel>`` installs (no
    extras), as installed in this environment."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith('.dist-info/'
                                                           'METADATA'))
        lines = z.read(meta).decode().splitlines()
    todo = [Requirement(l.split(':', 1)[1]) for l in lines
            if l.startswith('Requires-Dist:')]
    found = {}
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found or (req.marker is not None
                             and not req.marker.evaluate({'extra': ''})):
            continue
        found[name] = importlib.metadata.distribution(req.name)
        todo += [Requirement(r) for r in found[name].requires or []]
    return found


def _site_files(dist):
    r"""The files :obj:`dist` installed inside the site folder, as paths
    relative to it; files outside it (scripts) are left out. A legacy
    egg-info install names them in ``installed-files.txt``, relative to its
    metadata folder (``../pkg/mod.py``), which lies in the site folder
    (Python 3.11's ``files`` reads its ``SOURCES.txt``, paths of the source
    tree, instead)."""
    installed = dist.read_text('installed-files.txt')
    if installed is None:
        files = [Path(f).parts for f in dist.files or ()]
    else:
        files = [Path(f).parts[1:] for f in installed.splitlines()
                 if Path(f).parts[:1] == ('..',)]
    return [Path(*parts) for parts in files if parts and parts[0] != '..']


def _top_level(dist):
    return {file.parts[0] for file in _site_files(dist)}


def _fresh_environment(path, wheel):
    r"""A virtual environment at :obj:`path` holding the wheel and the
    distributions it requires, and nothing else: their files are links to
    this environment's copies (an install from a package index, without
    its minutes of downloads and unpacking)."""
    _run(sys.executable, '-m', 'venv', '--without-pip', path, cwd=path.parent)
    python = path / 'bin' / 'python'
    site = Path(_run(python, '-c', 'import sysconfig; print(sysconfig.'
                     'get_paths()["purelib"])', cwd=path).stdout.strip())
    needed = _requirements(wheel)
    owners = {}
    for dist in importlib.metadata.distributions():
        for top in _top_level(dist):
            owners.setdefault(top, set()).add(
                canonicalize_name(dist.metadata['Name']))
    for dist in needed.values():
        for top in _top_level(dist):
            if owners[top] <= set(needed):  # a folder of its own: link it
                if not (site / top).exists():
                    (site / top).symlink_to(dist.locate_file(top))
                continue
            for file in _site_files(dist):  # shared: its files only
                if file.parts[0] == top:
                    (site / file).parent.mkdir(parents=True, exist_ok=True)
                    (site / file).symlink_to(dist.locate_file(file))
    _run(sys.executable, '-m', 'pip', '--python', python, 'install',
         '--no-deps', '--no-index', wheel, cwd=path)
    return python, site


def test_site_files_of_egg_info_and_dist_info(tmp_path):
    egg = tmp_path / 'old-1.0.egg-info'
    egg.mkdir()
    (egg / 'PKG-INFO').write_text('Name: old\nVersion: 1.0\n')
    (egg / 'SOURCES.txt').write_text('setup.py\nsrc/old/__init__.py\n')
    (egg / 'installed-files.txt').write_text(
        '../old/__init__.py\n../old_mod.py\nPKG-INFO\n../../../bin/old\n')
    wheel = tmp_path / 'new-1.0.dist-info'
    wheel.mkdir()
    (wheel / 'METADATA').write_text('Name: new\nVersion: 1.0\n')
    (wheel / 'RECORD').write_text(
        'new/__init__.py,,\nnew-1.0.dist-info/RECORD,,\n../../../bin/new,,\n')
    old = importlib.metadata.PathDistribution(egg)
    assert _top_level(old) == {'old', 'old_mod.py'}
    assert [old.locate_file(f) for f in _site_files(old)] == [
        tmp_path / 'old' / '__init__.py', tmp_path / 'old_mod.py']
    new = importlib.metadata.PathDistribution(wheel)
    assert _top_level(new) == {'new', 'new-1.0.dist-info'}


@needs_mirror
def test_wheel_without_extras_trains_on_cora(tmp_path):
    # Build the wheel from a copy of the sources.
    src = tmp_path / 'src'
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, src / name,
             **({'ignore': shutil.ignore_patterns('__pycache__')}
                if (REPO / name).is_dir() else {}))
    _run(sys.executable, '-m', 'pip', 'wheel', '--no-deps',
         '--no-build-isolation', '-w', tmp_path / 'dist', src, cwd=tmp_path)
    wheel, = (tmp_path / 'dist').glob('gnorm-*.whl')
    # The wheel holds what a user imports: no reproduction tooling (the
    # authors' code runners, the benchmarks' cases), nothing of experiments/.
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert not [n for n in names if re.search(
        r'(^|/)(authors\w*|perf|cases|experiments)(/|\.py$)', n)], names

    python, site = _fresh_environment(tmp_path / 'venv', wheel)
    assert (site / 'gnorm' / 'conf' / 'train.yaml').is_file()
    assert (site / 'gnorm' / 'conf' / 'norm' / 'contranorm.yaml').is_file()
    # The extras are not there (ogb would bring scipy along).
    proc = subprocess.run([python, '-c', 'import ogb'], capture_output=True)
    assert proc.returncode != 0

    # Outside the repository, a real dataset: PyG's Planetoid reads
    # pickled scipy matrices, which csbm never needs.
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'GNORM_DATA_MIRROR': MIRROR}
    env.pop('PYTHONPATH', None)
    _run(python.parent / 'gnorm-train', 'dataset=cora',
         'layers=2', 'norm=contranorm', 'train.epochs=2', 'threads=1',
         'hydra.run.dir=a', cwd=elsewhere, env=env)
    assert '"status": "ok"' in (elsewhere / 'a' / 'results.json').read_text()
    help = _run(python, '-m', 'gnorm.train', '--help', cwd=elsewhere,
                env=env).stdout
    assert 'layers' in help and 'cora' in help
    # A study of the user's from the installed package: runs and report
    # beside the spec, nothing inside the installed package.
    (elsewhere / 'tiny.yaml').write_text(
        '# @package _global_\ntrain:\n  epochs: 2\ncollapse_metrics: false\n'
        'table:\n  datasets: [cora]\n  depths: [2]\n  seeds: [0]\n'
        '  rows:\n    none: [norm=none]\n')
    _run(python.parent / 'gnorm-study', 'tiny.yaml', '--threads', '1',
         cwd=elsewhere, env=env)
    assert (elsewhere / 'results' / 'tiny.md').is_file()
    assert len(list((elsewhere / 'runs' / 'tiny').glob('*/results.json'))) \
        == 1
    assert not (site / 'gnorm' / 'experiments').exists()


# gnorm.train's modules, each importing only those before it.
TRAIN_LAYERS = ('scores', 'common', 'hydra_adapter', 'progress', 'collapse',
                'epoch_log', 'graphed', 'checkpoints', 'node_setup', 'node_eval',
                'node_loop', 'node', 'graph_batches', 'graph_config', 'graph',
                'locks', 'run', 'sweep', 'arguments', 'command')
# gnorm's packages and modules, each importing only those before it: the
# errors, the machine's description, the benchmarks' harness (torch alone),
# layers and metrics, data, the run records (gnorm.results: keys, folders,
# the summary), models, the monitor, training and the studies; experiments/
# (this repository's measurements) above them all.
PACKAGE_LAYERS = ('__init__', 'errors', 'machine', 'bench', 'nn', 'metrics',
                  'data', 'results', 'models', 'monitor', 'train', 'study')
# gnorm.study's parts, each importing only those before it: the statistics,
# the spec, the runs, what they show, the queue, the words, the reports, the
# plan of a study and the command.
STUDY_PARTS = ('stats', 'spec', 'runs', 'findings', 'queue', 'words',
               'reports', 'engine', 'cli')
# Within each sub-package of gnorm.study, each module imports only those
# before it; the sub-package's __init__ says its job and imports nothing.
STUDY_INNER = {
    'spec': ('table', 'cache', 'inputs', 'find', 'check', 'load'),
    'runs': ('compose', 'record', 'budget', 'index', 'cost', 'runner',
             'pairing'),
    'findings': ('sanity', 'diagnosis', 'select', 'compare', 'paired',
                 'depth_gain', 'depth'),
    'queue': ('config', 'plan', 'run', 'listing', 'command'),
    'words': ('flags', 'verdicts', 'paired', 'variants'),
    'reports': ('recipe', 'plot', 'curves', 'paired', 'depth'),
}
# Within the packages that split one concern per module: each module
# imports only those before it (the package's __init__ re-exports).
INNER_LAYERS = {
    'bench': ('timing', 'memory', 'process', 'records', 'report', 'check',
              'cli'),
    'metrics': ('checks', 'rows', 'pointwise', 'pairs'),
    'monitor': ('measure', 'table', 'onset', 'plot', 'gradients', 'diagnosis',
                'hooks'),
    'results': ('keys', 'user_code', 'folders', 'summary'),
}


def _imports(path):
    r"""Every module :obj:`path` imports, at any depth of its code."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f'{node.module}.{a.name}' for a in node.names)


def _part(module, prefix):
    return module[len(prefix):].split('.')[0] \
        if module.startswith(prefix) else None


def test_imports_run_one_way():
    gnorm = REPO / 'gnorm'
    assert {p.name.removesuffix('.py') for p in gnorm.iterdir()
            if p.suffix == '.py' or (p / '__init__.py').is_file()} == \
        set(PACKAGE_LAYERS)
    for path in gnorm.rglob('*.py'):
        rel = path.relative_to(gnorm)
        part = rel.parts[0].removesuffix('.py')
        mine = PACKAGE_LAYERS.index(part)
        for module in _imports(path):
            assert module.split('.')[0] != 'experiments', (rel, module)
            other = _part(module, 'gnorm.')
            if other in PACKAGE_LAYERS:
                assert PACKAGE_LAYERS.index(other) <= mine, (rel, module)
    for package, layers in INNER_LAYERS.items():
        folder = gnorm / package
        assert {p.stem for p in folder.glob('*.py')} - {
            '__init__', '__main__'} == set(layers), package
        for name in layers:
            for module in _imports(folder / f'{name}.py'):
                assert module != f'gnorm.{package}', (name, 'the package')
                other = _part(module, f'gnorm.{package}.')
                if other in layers:
                    assert layers.index(other) < layers.index(name), \
                        (package, name, module)
    train = gnorm / 'train'
    assert {p.stem for p in train.glob('*.py')} == {
        *TRAIN_LAYERS, '__init__', '__main__'}
    for name in TRAIN_LAYERS:
        for module in _imports(train / f'{name}.py'):
            assert module != 'gnorm.train', (name, 'imports the package')
            other = _part(module, 'gnorm.train.')
            if other in TRAIN_LAYERS:
                assert TRAIN_LAYERS.index(other) < TRAIN_LAYERS.index(name), \
                    (name, module)
    _study_imports_run_one_way(gnorm / 'study')
    plugin = REPO / 'hydra_plugins' / 'gnorm_sweeper' / 'gnorm_sweeper.py'
    assert {m for m in _imports(plugin) if m.startswith('gnorm')} == {
        'gnorm.train.sweep', 'gnorm.train.sweep.BatchedSweeper'}


def _study_imports_run_one_way(study):
    r"""gnorm.study's parts (:data:`STUDY_PARTS`) and the modules within
    each sub-package (:data:`STUDY_INNER`) import only those before them;
    a sub-package's ``__init__`` holds its paragraph and no import."""
    assert {p.stem for p in study.glob('*.py')} | {
        p.name for p in study.iterdir() if (p / '__init__.py').is_file()} \
        == {*STUDY_PARTS, '__init__', '__main__'}
    for path in study.rglob('*.py'):
        rel = path.relative_to(study).with_suffix('').parts
        if rel[0] in ('__init__', '__main__'):
            continue
        mine = STUDY_PARTS.index(rel[0])
        for module in _imports(path):
            other = _part(module, 'gnorm.study.')
            if other in STUDY_PARTS:
                assert STUDY_PARTS.index(other) <= mine, (rel, module)
    for package, layers in STUDY_INNER.items():
        folder = study / package
        assert {p.stem for p in folder.glob('*.py')} == {*layers,
                                                          '__init__'}
        init = ast.parse((folder / '__init__.py').read_text())
        assert ast.get_docstring(init) and len(init.body) == 1, package
        for name in layers:
            for module in _imports(folder / f'{name}.py'):
                other = _part(module, f'gnorm.study.{package}.')
                if other in layers:
                    assert layers.index(other) < layers.index(name), \
                        (package, name, module)


def test_a_long_study_module_says_why():
    r"""A module of gnorm.study over 400 lines says why it stays one in
    its opening docstring (a paragraph starting "One module")."""
    for path in (REPO / 'gnorm' / 'study').rglob('*.py'):
        text = path.read_text()
        if len(text.splitlines()) > 400:
            doc = ast.get_docstring(ast.parse(text)) or ''
            assert '\n\nOne module' in doc, path


def _modules():
    r"""Every module of gnorm and the sweeper plugin by dotted name."""
    for folder in ('gnorm', 'hydra_plugins'):
        for path in (REPO / folder).rglob('*.py'):
            parts = path.relative_to(REPO).with_suffix('').parts
            yield '.'.join(parts[:-1] if parts[-1] == '__init__' else parts), \
                path


def test_no_module_imports_another_modules_private_names():
    found = []
    for name, path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.startswith('gnorm') and node.module != name:
                found += [f'{name}: {node.module}.{a.name}'
                          for a in node.names if a.name.startswith('_')]
    assert not found


def test_no_import_circle():
    r"""The modules' imports (at any depth of their code, a function's
    too) form no circle."""
    modules = dict(_modules())
    edges = {name: {m for m in _imports(path) if m in modules and m != name}
             for name, path in modules.items()}
    done, path = set(), []

    def visit(name):
        assert name not in path, ' -> '.join(path[path.index(name):] +
                                             [name])
        if name in done:
            return
        path.append(name)
        for other in sorted(edges[name]):
            visit(other)
        path.pop()
        done.add(name)

    for name in sorted(modules):
        visit(name)


def test_hydra_internals_only_in_the_adapter():
    users = {path.relative_to(REPO).as_posix()
             for folder in ('gnorm', 'hydra_plugins')
             for path in (REPO / folder).rglob('*.py')
             if any(m.startswith('hydra._internal') for m in _imports(path))}
    assert users == {'gnorm/train/hydra_adapter.py'}


# One name per concept: the machine (one dict, rendered in words), a run's
# identity (of a config, of a record, flattened), a ratio.
CONCEPTS = ('machine', 'identity', 'ratio')


def _top_level_functions():
    r"""(name, module path) of every function defined at the top of a
    module of gnorm."""
    for path in (REPO / 'gnorm').rglob('*.py'):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name, path.relative_to(REPO).as_posix()


def test_one_function_per_concept_and_no_test_names():
    r"""A function whose name holds one of :data:`CONCEPTS` is defined
    once across gnorm (a former name stays as an alias, not a second
    definition), and none is named ``test_*`` (pytest would collect it
    where a test module imports it)."""
    seen = {}
    for name, path in _top_level_functions():
        assert not name.startswith('test_'), (path, name)
        if any(concept in name for concept in CONCEPTS):
            assert name not in seen, (name, seen.get(name), path)
            seen[name] = path
    assert seen['this_machine'] == seen['machine_words'] == 'gnorm/machine.py'


# A study computes its findings as data, then renders them: these modules
# compute (statistics, comparisons, pairing) and these render (words,
# reports, plots).
COMPUTING = ('stats', 'findings/diagnosis', 'runs/pairing', 'findings/compare',
             'findings/depth', 'findings/paired')
RENDERING = ('words', 'reports')


def _sentences(tree):
    r"""The string constants of :obj:`tree`'s function bodies with two or
    more spaces (words, not a key or a code), apart from docstrings and the
    messages of raised errors."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, 'body', None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Raise):
            skip |= {id(n) for n in ast.walk(node)}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Constant) and isinstance(
                        node.value, str) and node.value.count(' ') >= 2 \
                        and id(node) not in skip:
                    yield function.name, node.value


def test_statistics_compute_and_never_word():
    r"""The rule: a module that computes a study's findings imports no
    module that renders them, and none of its functions builds a sentence
    (its verdicts and reasons are codes, worded by the renderers)."""
    study = REPO / 'gnorm' / 'study'
    for name in COMPUTING:
        tree = ast.parse((study / f'{name}.py').read_text())
        imported = {_part(m, 'gnorm.study.') for m in _imports(study /
                                                               f'{name}.py')}
        assert not imported & set(RENDERING), (name, imported)
        assert not list(_sentences(tree)), (name, list(_sentences(tree)))
