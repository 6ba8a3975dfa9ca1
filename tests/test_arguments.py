import pytest

from gnorm.errors import ConfigError
from gnorm.train import CONF_DIR, check_choices, check_keys, help_text


def _check(args):
    # What the command line checks before Hydra starts.
    check_choices(args)
    check_keys(args)


@pytest.mark.parametrize('args,match', [
    # Unknown options of a group.
    (['dataset=pubmed'], "unknown dataset 'pubmed'; pass dataset= one of "
                         "chameleon, chameleon_filtered, citeseer, cora, "
                         "csbm, "),
    (['norm=groupnorm', 'layers=2'], "unknown norm 'groupnorm'"),
    (['-m', 'norm=none,foo', 'seed=0,1'], "unknown norm 'foo'"),
    (['experiment=table9'], "unknown experiment 'table9'"),
    (['+model=graphormer9'], "unknown model 'graphormer9'"),
    # Unknown keys.
    (['layer=3'], r"unknown key 'layer' in layer=3; closest keys: layers$"),
    (['lr=0.1'], r"unknown key 'lr' in lr=0.1; closest keys: train.lr$"),
    (['norm=contranorm', 'norm.scal=0.5'],
     r"unknown key 'norm.scal' .*; closest keys: norm.scale$"),
    # norm=none has no scale: the options that have one are named.
    (['norm.scal=0.5'], r"closest key: norm.scale \(with norm=.*pairnorm\)"),
    (['-m', 'norm=none,pairnorm', 'norm.mod=PN-SI', 'seed=0,1'],
     "closest keys: norm.mode"),
    (['dataset=csbm', 'dataset.num_node=10'], "closest keys: "
                                              "dataset.num_nodes"),
    # A key of other options: those options (not batch_file, set by gnorm).
    (['dataset=cora', 'train.batch_size=64'],
     r"unknown key 'train.batch_size' in train.batch_size=64; only "
     r"dataset=molhiv\|zinc\|zinc_fixture have it$"),
    (['train.bach_size=64'], r"closest key: train.batch_size \(with "
                             r"dataset=molhiv\|zinc\|zinc_fixture\)$"),
    # Hydra would add these keys and nothing would read them.
    (['+layer=3'], r"unknown key 'layer' in \+layer=3 \(a \+ adds a key "
                   r"that nothing reads\); closest keys: layers"),
    (['++train.epoch=3'], 'closest keys: train.epochs'),
    (['+layers=3'], r"layers is in the config already; pass layers=3 "
                    r"without the \+"),
    # A key of other options is declared there, not unread.
    (['dataset=cora', '+train.batch_size=64'],
     r"unknown key 'train.batch_size' in \+train.batch_size=64 \(a \+ adds "
     r"a key this config does not declare\); only dataset=molhiv"),
    # Every node dataset declares the metric gnorm.train.node reads.
    (['dataset=csbm', '+dataset.metric=rocauc'],
     r"^dataset.metric is in the config already; pass dataset.metric="
     r"rocauc without the \+$"),
])
def test_bad_arguments(args, match):
    with pytest.raises(ConfigError, match=match):
        _check(args)


def test_valid_arguments_pass():
    _check(['-m', 'dataset=cora,csbm', 'norm=none,pairnorm',
            'norm.mode=PN-SCS', 'layers=32', 'train.lr=0.01',
            'experiment=csbm_demo', 'data.mirror=null',
            'threads=2', 'train.log_every=5', 'model.order=[conv,act,norm]',
            '+label=nothing_like_a_key', '~collapse_metrics',
            'hydra.run.dir=x', 'hydra/launcher=basic', '--cfg', 'job'])


@pytest.mark.parametrize('dataset', ['csbm', 'cora', 'minesweeper'])
def test_the_metric_of_a_node_dataset_is_a_key_it_reads(dataset):
    _check([f'dataset={dataset}', 'dataset.metric=rocauc'])
    _check(['-m', 'dataset=cora,csbm', 'dataset.metric=acc,rocauc'])


def test_help_lists_every_key_of_the_primary_config():
    text = help_text()
    lines = text.splitlines()
    for key in ('layers', 'seed', 'threads', 'select', 'data.root',
                'train.epochs', 'train.log_every', 'collapse_metrics'):
        line = next(l for l in lines if l.split()[:1] == [key])
        assert len(line.split(']', 1)[1].strip()) > 5, line  # its comment
    norm = next(l for l in lines if l.split()[:1] == ['norm'])
    assert 'none (default)' in norm and 'contranorm' in norm
    assert 'defaults' not in text and 'hydra ' not in text
    assert len(lines) < 70


def test_help_covers_graph_training():
    lines = help_text().splitlines()
    layers = next(l for l in lines if l.split()[:1] == ['layers'])
    assert 'model=gcn' in layers and 'model=graphormer' in layers
    heading = next(i for i, l in enumerate(lines)
                   if l.startswith('Training keys of dataset=molhiv|zinc'))
    graph = [l.split()[0] for l in lines[heading + 1:] if l.startswith('  ')]
    for key in ('train.epochs', 'train.lr', 'train.batch_size',
                'train.warmup_steps', 'train.precision'):
        assert key in graph



def test_an_output_folder_under_a_file_is_one_line(tmp_path, monkeypatch):
    from gnorm.train.arguments import check_output_folder, output_folder
    afile = tmp_path / 'afile'
    afile.touch()
    for key, argv in (('hydra.run.dir', []), ('hydra.sweep.dir', ['-m'])):
        with pytest.raises(ConfigError, match=f'^{key}={afile}/x: .* lies '
                                              f'under the file {afile}; '):
            check_output_folder([*argv, f'{key}={afile}/x', 'layers=2'])
        check_output_folder([*argv, f'{key}={tmp_path}/x/${{now:%H}}'])
    # The default folder (outputs/... in the working folder).
    monkeypatch.chdir(tmp_path)
    assert output_folder([])[1].startswith('outputs/${dataset.name}/')
    # An experiment's folder may come from the experiment it builds on
    # (table3_fair_protocol), and one whose own keys come last keeps it.
    for name in ('table3_fair', 'contranorm_fidelity'):
        assert output_folder(['-m', f'experiment={name}'])[1].startswith(
            'experiments/runs/table3_fair')
    own = tmp_path / 'conf' / 'experiment'
    own.mkdir(parents=True)
    (own / 'base.yaml').write_text('hydra: {sweep: {dir: base_runs}}\n')
    (own / 'mine.yaml').write_text('defaults: [_self_, base]\n'
                                   'hydra: {sweep: {dir: my_runs}}\n')
    (own / 'last.yaml').write_text('defaults: [base]\n'
                                   'hydra: {sweep: {dir: my_runs}}\n')
    folders = [tmp_path / 'conf', CONF_DIR]
    assert output_folder(['-m', 'experiment=mine'], folders)[1] == 'base_runs'
    assert output_folder(['-m', 'experiment=last'], folders)[1] == 'my_runs'
    check_output_folder([])
    (tmp_path / 'outputs').touch()
    with pytest.raises(ConfigError, match=r'^hydra.run.dir \(default '
                                          r'outputs/.*\): .* is a file'):
        check_output_folder(['dataset=cora'])
    # A read-only working folder (os.access: chmod does not stop root).
    monkeypatch.setattr('os.access', lambda path, mode: False)
    with pytest.raises(ConfigError, match=f'cannot write in {tmp_path} '):
        check_output_folder(['-m', 'seed=0,1'])


@pytest.fixture
def multirun_job():
    r"""Job 0 of a multirun over ``norm.scale=0.5,-1``, as Hydra sets it."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict
    from hydra import compose, initialize_config_dir
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        cfg = compose('train', overrides=['norm=contranorm',
                                          'norm.scale=0.5'],
                      return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.mode = 'MULTIRUN'
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    yield
    HydraConfig.instance().cfg = None


def test_a_batch_error_names_the_bad_run_not_the_first(multirun_job):
    from gnorm.train.command import error_line
    bad = ConfigError('/sweep/1-cora-contranorm-L2,norm.scale=-1,seed=0: '
                      'norm.scale must be a number >= 0, got -1')
    assert error_line(bad) == f'error: job 0 (norm=contranorm ' \
                              f'norm.scale=0.5): {bad}'  # a job of one run
    runs = [{'dir': f'/sweep/{k}-cora-contranorm-L2,norm.scale={s},seed=0',
             'hydra': {'job': {'num': k}},
             'info': {'overrides': ['norm=contranorm', f'norm.scale={s}']}}
            for k, s in enumerate(('0.5', '-1'))]
    assert error_line(bad, runs) == (
        'error: job 1 (norm=contranorm norm.scale=-1): norm.scale must be a '
        'number >= 0, got -1')


def test_launchers_not_installed_name_the_extra(monkeypatch):
    from gnorm.train import arguments
    from gnorm.train.arguments import check_launchers, launchers
    assert {'basic', 'joblib', 'processes', 'slurm'} <= set(launchers())
    check_launchers(['-m', 'hydra/launcher=processes'])
    with pytest.raises(ConfigError, match="unknown hydra/launcher 'k8s'; "
                                          "pass hydra/launcher= one of "):
        check_launchers(['-m', 'hydra/launcher=k8s'])
    # As without the [launchers] extra.
    monkeypatch.setattr(arguments, '_installed', lambda module: False)
    assert launchers() == ['basic']
    for name in ('joblib', 'processes'):
        with pytest.raises(ConfigError, match=(
                f'^hydra/launcher={name} needs hydra-joblib-launcher, which '
                r'is not installed: pip install "gnorm\[launchers\]"')):
            check_launchers(['-m', f'hydra/launcher={name}', 'seed=0,1'])
    with pytest.raises(ConfigError, match='needs hydra-submitit-launcher'):
        check_launchers(['-m', 'hydra/launcher=slurm'])


@pytest.mark.parametrize('argv0,code', [('-m', 130),
                                        ('/venv/bin/gnorm-train', 130),
                                        ('my_script.py', -2)])
def test_ctrl_c_while_the_command_imports_is_one_line(argv0, code):
    import subprocess
    import sys
    # Ctrl-C as torch is imported, as `python -m gnorm.train` (sys.argv[0]
    # is -m while its package imports) or gnorm-train would get it; a
    # program importing gnorm.train gets the KeyboardInterrupt.
    program = f'''
import sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == 'torch':
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv[0] = {argv0!r}
import gnorm.train
'''
    proc = subprocess.run([sys.executable, '-c', program],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code
    if code == 130:
        assert proc.stderr == 'interrupted while starting: nothing ran\n'
    else:
        assert 'KeyboardInterrupt' in proc.stderr


def test_options_of_the_search_path(user_norm, monkeypatch):
    # Hydra's way to add an option: the folder on hydra.searchpath (or
    # --config-dir); its options and keys count with gnorm's.
    path = f'hydra.searchpath=[file://{user_norm}/conf]'
    _check(['norm=halfln', path])
    _check(['norm=halfln', 'norm.factor=0.25', path])
    _check(['-m', 'norm=none,halfln', 'seed=0,1', path])
    _check(['norm=halfln', '--config-dir', str(user_norm / 'conf')])
    _check(['norm=halfln', f'-cd={user_norm}/conf'])
    # A launcher of the search path (gnorm's check_launchers).
    from gnorm.train.arguments import check_launchers
    launcher = user_norm / 'conf' / 'hydra' / 'launcher'
    launcher.mkdir(parents=True)
    (launcher / 'mine.yaml').write_text('defaults:\n  - basic\n')
    check_launchers(['-m', 'hydra/launcher=mine', path])
    with pytest.raises(ConfigError, match="hydra/launcher= one of .*mine"):
        check_launchers(['-m', 'hydra/launcher=mien', path])
    monkeypatch.chdir(user_norm)  # a relative path, as Hydra reads it
    _check(['norm=halfln', 'hydra.searchpath=[file://conf]'])
    _check(['norm=halfln', 'hydra.searchpath=[conf]'])
    for args, match in [
            (['norm=halfnl', path], "unknown norm 'halfnl'; pass norm= one "
                                    "of batchnorm, contranorm, contranorm_d, "
                                    "contranorm_lin, halfln, "),
            (['norm=halfln', 'norm.facter=1', path],
             "unknown key 'norm.facter' .*; closest keys: norm.factor$"),
            (['norm.factr=1', path],
             r"closest key: norm.factor \(with norm=halfln\)$"),
            (['norm=halfln', 'norm.scale=1', path],
             r"unknown key 'norm.scale' .*; only norm=.*pairnorm have it$"),
            (['norm=halfln'], "unknown norm 'halfln'; pass norm= one of "
                              "batchnorm, contranorm, contranorm_d, "
                              "contranorm_lin, isobn, ")]:
        with pytest.raises(ConfigError, match=match):
            _check(args)


def test_options_of_a_package_on_the_search_path(user_norm):
    # pkg://: a package whose configs lie in a folder.
    package = user_norm / 'myconf'
    (package / 'norm').mkdir(parents=True)
    (package / '__init__.py').touch()
    (package / 'norm' / 'quarterln.yaml').write_text(
        '_target_: mynorm.HalfLN\nfactor: 0.25\n')
    path = 'hydra.searchpath=[pkg://myconf]'
    _check(['norm=quarterln', path])
    with pytest.raises(ConfigError, match="pass norm= one of .*pairnorm, "
                                          "quarterln, sepnorm$"):
        _check(['norm=quarterl', path])
    # Sources that are no folder here (another primary config folder, a
    # package that does not import): Hydra alone checks.
    _check(['norm=anything', 'hydra.searchpath=[pkg://no_such_package]'])
    _check(['norm=anything', '--config-path', str(user_norm / 'conf')])


def test_a_config_that_does_not_compose_is_left_to_hydra():
    # norm is in the defaults list already: Hydra says so itself.
    _check(['+norm=layernorm', 'layer=3'])
