import pytest
import torch
from omegaconf import OmegaConf

from gnorm.data import DATASETS, GRAPH_DATASETS, SPLITS
from gnorm.train import CONF_DIR, build_model, check_config
from conftest import compose_train

NORMS = ('none', 'layernorm', 'pairnorm', 'contranorm', 'contranorm_d',
         'contranorm_lin', 'isobn', 'batchnorm')
DEFAULT_SPLIT = {'cora': 'public', 'citeseer': 'public',
                 'chameleon': 'geom_gcn', 'squirrel': 'geom_gcn',
                 'chameleon_filtered': 'platonov',
                 'squirrel_filtered': 'platonov', 'minesweeper': 'platonov',
                 'tolokers': 'platonov', 'csbm': 'random'}


def test_groups_on_disk():
    options = {p.stem for p in (CONF_DIR / 'dataset').glob('*.yaml')}
    assert options == set(DATASETS) | set(GRAPH_DATASETS)
    options = {p.stem for p in (CONF_DIR / 'norm').glob('*.yaml')}
    assert options == set(NORMS) | {'sepnorm'}  # sepnorm: Graphormer only


def test_defaults():
    cfg = compose_train()
    assert cfg.dataset.name == 'cora'
    assert cfg.norm._target_ == 'torch.nn.Identity'
    assert cfg.layers == 2 and cfg.model.num_layers == 2
    assert cfg.seed == 0 and cfg.device == 'auto' and cfg.select == 'best_val'
    assert cfg.split == 'public' and cfg.split_index == 0
    assert cfg.train.epochs == 200 and cfg.train.lr == 0.005
    assert cfg.train.weight_decay == 0.0005
    assert cfg.model.hidden_channels == 32 and cfg.model.dropout == 0.2
    assert cfg.data.root == 'data'


@pytest.mark.parametrize('dataset', DATASETS)
@pytest.mark.parametrize('norm', NORMS)
def test_every_dataset_and_norm_composes(dataset, norm):
    cfg = compose_train(f'dataset={dataset}', f'norm={norm}', 'layers=3')
    check_config(cfg)
    assert cfg.split == DEFAULT_SPLIT[dataset] and cfg.split in SPLITS
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves

    model = build_model(cfg, in_channels=6, out_channels=3)
    assert model.num_layers == 3 and len(model.norms) == 2
    x = torch.randn(10, 6)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    assert model(x, edge_index).shape == (10, 3)


@pytest.mark.parametrize('dataset', DATASETS)
def test_every_node_dataset_declares_its_metric(dataset):
    r"""gnorm.train.node scores a run by its dataset's ``metric``: every
    node dataset's config declares it, with a comment."""
    path = CONF_DIR / 'dataset' / f'{dataset}.yaml'
    assert OmegaConf.load(path).get('metric') in ('acc', 'rocauc')
    line, = [l for l in path.read_text().splitlines()
             if l.startswith('metric:')]
    assert len(line.partition('#')[2].strip()) > 5, line


@pytest.mark.parametrize('classes', [2, 3])
def test_csbm_is_scored_by_roc_auc_when_binary(classes, tmp_path):
    from gnorm.errors import ConfigError
    from gnorm.train import train
    cfg = compose_train('dataset=csbm', 'dataset.num_nodes=60',
                        f'dataset.num_classes={classes}',
                        'dataset.metric=rocauc', 'train.epochs=2',
                        'train.progress=false', 'collapse_metrics=false')
    if classes == 3:
        with pytest.raises(ConfigError, match=r'^dataset.metric=rocauc '
                           r'scores binary labels, and dataset=csbm has 3 '
                           r'classes; pass dataset.metric=acc$'):
            train(cfg, output_dir=tmp_path)
        return
    results = train(cfg, output_dir=tmp_path)
    assert results['metric'] == 'rocauc' and 0 <= results['test_metric'] <= 1


@pytest.mark.parametrize('overrides,check', [
    (['norm=contranorm', 'norm.scale=0.5'],
     lambda m: m.norms[0].scale == 0.5
     and m.norms[0].negatives == 'non_neighbors'),
    (['norm=pairnorm', 'norm.mode=PN-SCS'],
     lambda m: m.norms[0].mode == 'PN-SCS'),
    (['model.residual=true', 'layers=4'], lambda m: m.residual),
    (['model.fusion=gate', 'layers=4'], lambda m: m.fusion.mode == 'gate'),
    (['model.conv=row'], lambda m: m.conv == 'row'),
    (['model.order=[conv,act,norm]', 'norm=layernorm'],
     lambda m: m.order == ('conv', 'act', 'norm')),
    (['layers=32', 'norm=contranorm_d'], lambda m: len(m.convs) == 32),
])
def test_overrides(overrides, check):
    cfg = compose_train(*overrides)
    assert check(build_model(cfg, 6, 3))


def test_experiments():
    cfg = compose_train('experiment=table3_paper', 'dataset=squirrel')
    assert cfg.model.conv == 'row' and cfg.select == 'last'
    assert cfg.split == 'geom_gcn' and cfg.split_index == 0
    cfg = compose_train('experiment=table3_fair', 'dataset=squirrel')
    assert cfg.select == 'best_val' and cfg.split == 'random'
    cfg = compose_train('experiment=csbm_demo')
    assert cfg.dataset.name == 'csbm' and cfg.layers == 16
    assert cfg.norm._target_ == 'gnorm.nn.ContraNorm'
    # Command-line overrides beat the overlay.
    cfg = compose_train('experiment=csbm_demo', 'layers=4', 'norm=none')
    assert cfg.layers == 4 and cfg.model.num_layers == 4
    assert cfg.norm._target_ == 'torch.nn.Identity'


def test_the_fidelity_study_shares_table3_fairs_runs():
    r"""contranorm_fidelity's exact row trains table3_fair's own cells: the
    same run identity and the same run folder, so each study's finished
    runs are the other's."""
    from gnorm.results.keys import result_config
    from gnorm.study.spec.load import load_spec
    cell = ('dataset=cora', 'layers=16', 'norm=contranorm', 'norm.scale=0.2',
            'seed=3', 'tag=contranorm')
    fair, fidelity = (OmegaConf.to_container(
        compose_train(f'experiment={name}', *cell), resolve=True)
        for name in ('table3_fair', 'contranorm_fidelity'))
    assert result_config(fair) == result_config(fidelity)
    assert fair['table'] != fidelity['table']
    assert (load_spec('contranorm_fidelity').runs_dir()
            == load_spec('table3_fair').runs_dir())


def test_configs_give_roc_auc_in_percent():
    r"""ROC-AUC reads in % everywhere (summary line, reports): a config's
    comments do not give it as a fraction (``ROC-AUC 0.745``)."""
    import re
    fractions = [f'{path.relative_to(CONF_DIR)}: {m.group(0)}'
                 for path in sorted(CONF_DIR.rglob('*.yaml'))
                 for m in re.finditer(r'ROC-AUC\s*(?:of\s*)?0\.\d+\b'
                                      r'(?!\s*%)', path.read_text(), re.I)]
    assert not fractions


def test_top_level_keys_beat_dataset_defaults():
    cfg = compose_train('dataset=chameleon', 'split=random')
    assert cfg.split == 'random' and cfg.dataset.default_split == 'geom_gcn'


def test_mirror_from_environment(monkeypatch):
    monkeypatch.setenv('GNORM_DATA_MIRROR', '/some/mirror')
    assert compose_train().data.mirror == '/some/mirror'
    monkeypatch.delenv('GNORM_DATA_MIRROR')
    assert compose_train().data.mirror is None
    assert compose_train('data.mirror=/other').data.mirror == '/other'


@pytest.mark.parametrize('overrides,match', [
    (['dataset=csbm', 'norm=sepnorm'], 'norm=sepnorm normalises a graph '
                                       'token'),
    (['dataset=csbm', 'model=graphormer'],
     'is a node-level task and takes model=gcn or model=resgnn, got '
     'model=graphormer$'),
    # What the user typed, not class names.
    (['dataset=molhiv'], r'pass model=graphormer \(got model=gcn\)$'),
    (['dataset=zinc', 'model=graphormer', 'norm=isobn'],
     r'cannot use norm=isobn .*; pass norm=none, layernorm, sepnorm, '),
])
def test_choices_of_another_task(overrides, match):
    from gnorm.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        check_config(compose_train(*overrides))


def test_option_names_what_was_typed():
    from gnorm.train.common import option
    cfg = compose_train('norm=contranorm_d', 'model=graphormer')
    assert option('norm', cfg.norm) == 'norm=contranorm_d'
    assert option('model', cfg.model) == 'model=graphormer'
    cfg = compose_train('norm._target_=my.Norm')
    assert option('norm', cfg.norm) == 'norm._target_=my.Norm'


def test_a_run_made_before_a_key_existed_is_the_same_run():
    from gnorm.results.keys import ADDED_KEYS, result_config
    cfg = OmegaConf.to_container(compose_train('layers=4'), resolve=True)
    old = {**cfg, 'train': {k: v for k, v in cfg['train'].items()
                            if f'train.{k}' not in ADDED_KEYS}}
    assert old['train'] != cfg['train']
    assert result_config(old) == result_config(cfg)
    cfg['train']['precision'] = 'bf16'  # not the value old runs had
    assert result_config(old) != result_config(cfg)


@pytest.mark.parametrize('dataset', ['cora', 'csbm'])
def test_a_run_made_before_its_dataset_declared_a_metric_is_the_same_run(
        dataset):
    r"""Committed runs of accuracy datasets, made when their configs had
    no ``metric``, stay finished runs of today's configs."""
    from gnorm.results.keys import result_config
    cfg = OmegaConf.to_container(compose_train(f'dataset={dataset}'),
                                 resolve=True)
    old = {**cfg, 'dataset': {k: v for k, v in cfg['dataset'].items()
                             if k != 'metric'}}
    assert cfg['dataset']['metric'] == 'acc'
    assert result_config(old) == result_config(cfg)


def test_deep_gcn_defaults_are_the_command_lines():
    r"""Every key of conf/model/gcn.yaml has DeepGCN's default (dropout
    included), but ``cached``: the training loop asks for it, the library
    caches only when asked (as PyG's GCNConv)."""
    import inspect
    from gnorm.models import DeepGCN
    cfg = compose_train()
    params = inspect.signature(DeepGCN).parameters
    model = OmegaConf.to_container(cfg.model, resolve=True)
    differ = {k: (v, params[k].default) for k, v in model.items()
              if k not in ('_target_', 'num_layers') and
              v != (list(params[k].default) if k == 'order'
                    else params[k].default)}
    assert differ == {'cached': (True, False)}
    assert model['dropout'] == DeepGCN(4, 2, num_layers=2).dropout == 0.2


@pytest.mark.parametrize('overrides,match', [
    (['model.hidden_channels=0'], 'model.hidden_channels must be an integer '
                                  '>= 1, got 0'),
    (['model.hidden_channels=-3'], 'got -3'),
    (['model=graphormer', 'dataset=zinc_fixture',
      'model.hidden_channels=0'], 'model.hidden_channels must be'),
    (['dataset=zinc_fixture', 'model=graphormer', 'dataset.limit=0'],
     r'dataset.limit must be an integer >= 1 or null, got 0;'),
    (['dataset=zinc_fixture', 'model=graphormer', 'dataset.limit=-5'],
     'got -5'),
    (['dataset=zinc_fixture', 'model=graphormer', 'dataset.limit=abc'],
     "got 'abc'"),
    # Refused by the model's constructor, before the data is processed.
    (['dataset=molhiv', 'model=graphormer', 'norm=sepnorm',
      'norm.virtual_norm=foo'], 'cannot build the model: .*foo'),
])
def test_bad_values_are_refused_before_training(overrides, match):
    from gnorm.errors import ConfigError
    with pytest.raises(ConfigError, match=match) as info:
        check_config(compose_train(*overrides))
    assert '\n' not in str(info.value)


def test_data_root_under_a_file(tmp_path):
    from gnorm.errors import ConfigError
    (tmp_path / 'afile').touch()
    root = tmp_path / 'afile' / 'data'
    with pytest.raises(ConfigError, match=f'data.root={root}: .* lies under '
                                          f'the file {tmp_path / "afile"}'):
        check_config(compose_train(f'data.root={root}'))
    check_config(compose_train(f'data.root={tmp_path / "new" / "data"}'))


def test_folder_checks(tmp_path, monkeypatch):
    from gnorm.errors import ConfigError
    from gnorm.results.folders import check_file, check_folder
    (tmp_path / 'afile').touch()
    check_folder(tmp_path / 'a' / 'b', 'x')
    check_file(tmp_path / 'a' / 'b.csv', 'x')
    with pytest.raises(ConfigError, match=r'^--out y: .*/afile is a file; '):
        check_folder(tmp_path / 'afile', '--out y')
    with pytest.raises(ConfigError, match='is a folder; pass a file name'):
        check_file(tmp_path, 'x')
    with pytest.raises(ConfigError, match='lies under the file'):
        check_file(tmp_path / 'afile' / 'b.csv', 'x')
    # A read-only folder (chmod does not stop root: os.access says so).
    monkeypatch.setattr('os.access', lambda path, mode: False)
    with pytest.raises(ConfigError, match=f'cannot write in {tmp_path} '
                                          r'\(read-only\)'):
        check_folder(tmp_path / 'new', 'x')
    check_folder(tmp_path, 'x', write=False)  # existing data may be read-only


@pytest.mark.parametrize('task', [
    ['dataset=csbm'], ['dataset=zinc_fixture', 'model=graphormer']])
def test_keys_of_another_norm_option_are_one_line(user_norm, task):
    # LayerNorm's eps and elementwise_affine with a class that takes
    # neither: which keys, and both fixes.
    from gnorm.errors import ConfigError
    from gnorm.train.graph_config import build_model as build_graph_model
    cfg = compose_train(*task, 'norm=layernorm',
                        'norm._target_=mynorm.HalfLN')
    build = (build_graph_model if 'model=graphormer' in task else
             lambda cfg: build_model(cfg, in_channels=8, out_channels=3))
    with pytest.raises(ConfigError, match=(
            r'^cannot build the model: norm._target_=mynorm.HalfLN takes no '
            r'norm.eps, norm.elementwise_affine; pass norm=none '
            r'norm._target_=mynorm.HalfLN \(an option without keys\), or '
            r'drop them: ~norm.eps ~norm.elementwise_affine$')):
        build(cfg)
    cfg = compose_train(*task, 'norm=layernorm', '~norm.eps',
                        'norm._target_=mynorm.HalfLN')
    with pytest.raises(ConfigError, match=r'takes no norm.elementwise_affine;'
                                          r' .* drop it: ~norm.elementwise_'
                                          r'affine$'):
        build(cfg)
    # Both fixes build it.
    for fix in (['norm=none'], ['norm=layernorm', '~norm.eps',
                                '~norm.elementwise_affine']):
        cfg = compose_train(*task, *fix, 'norm._target_=mynorm.HalfLN')
        assert 'HalfLN' in str(build(cfg))
