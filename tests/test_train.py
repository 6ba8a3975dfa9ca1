import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from gnorm.data import PYG_DATASETS, raw_files
from gnorm.errors import ConfigError, TrainingError
from gnorm.train import CONF_DIR, check_choices, train

MIRROR = os.environ.get('GNORM_DATA_MIRROR')
needs_mirror = pytest.mark.skipif(
    not MIRROR or not Path(MIRROR).is_dir(),
    reason='needs the offline dataset mirror (GNORM_DATA_MIRROR)')

# A small, fast CSBM run.
TINY = ['dataset=csbm', 'dataset.num_nodes=200', 'layers=3',
        'train.epochs=5', 'train.progress=false']


@pytest.fixture(autouse=True)
def _one_thread():
    # The test machines share few cores; one thread avoids oversubscription.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    r"""One data folder for the module: each dataset is processed once."""
    return tmp_path_factory.mktemp('data')


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return compose('train', overrides=list(overrides))


def _read(path):
    with open(path / 'results.json') as f:
        return json.load(f)


def test_train_writes_results(tmp_path):
    results = train(_compose(*TINY, 'norm=contranorm'), output_dir=tmp_path)
    assert _read(tmp_path) == json.loads(json.dumps(results))
    assert not list(tmp_path.glob('.*.tmp'))
    assert results['status'] == 'ok' and results['error'] is None
    assert results['config']['norm']['_target_'] == 'gnorm.nn.ContraNorm'
    assert results['config']['split'] == 'random'
    assert results['device'] == 'cpu' and results['runtime_s'] > 0
    assert results['dataset']['split_sizes'] == [120, 39, 41]

    curve = results['curve']
    assert curve['epoch'] == [1, 2, 3, 4, 5]
    assert all(len(v) == 5 for v in curve.values())
    best = results['best_epoch']
    assert results['select'] == 'best_val'
    assert results['selected_epoch'] == best
    assert curve['val_acc'][best - 1] == max(curve['val_acc'])
    # The reloaded best weights give the accuracies of the best epoch.
    for key in ('train_acc', 'val_acc', 'test_acc'):
        assert results[key] == curve[key][best - 1]

    collapse = results['collapse']
    assert collapse['layer'] == [1, 2, 3]
    for key in ('effective_rank', 'cosine_similarity', 'variance',
                'dirichlet_energy'):
        assert len(collapse[key]) == 3
    assert 1.0 <= collapse['effective_rank'][-1] <= 3.0  # 3 classes


def test_select_last(tmp_path):
    results = train(_compose(*TINY, 'select=last'), output_dir=tmp_path)
    assert results['selected_epoch'] == 5
    assert results['test_acc'] == results['curve']['test_acc'][-1]


def test_same_seed_same_metrics(tmp_path):
    overrides = [*TINY, 'norm=contranorm', 'model.fusion=gate']
    first = train(_compose(*overrides, 'seed=3'), output_dir=tmp_path / 'a')
    second = train(_compose(*overrides, 'seed=3'), output_dir=tmp_path / 'b')
    for key in ('curve', 'collapse', 'test_acc', 'best_epoch'):
        assert first[key] == second[key]
    other = train(_compose(*overrides, 'seed=4'), output_dir=tmp_path / 'c')
    assert other['curve']['loss'] != first['curve']['loss']


def test_nan_loss_fails_the_run(tmp_path):
    with pytest.raises(TrainingError, match='loss became nan at epoch'):
        train(_compose(*TINY, 'train.lr=1e30'), output_dir=tmp_path)
    results = _read(tmp_path)
    assert results['status'] == 'failed'
    assert 'loss became nan' in results['error']
    assert len(results['curve']['epoch']) >= 1


@pytest.mark.parametrize('overrides,match', [
    (['layers=0'], 'layers must be an integer >= 1'),
    (['norm=contranorm', 'norm.scale=-0.5'],
     'norm.scale must be a number >= 0'),
    (['norm=pairnorm', 'norm.scale=-1'], 'norm.scale must be a number >= 0'),
    (['select=first'], "unknown select='first'"),
    (['split=public'], "'csbm' has no public split"),
    (['model.conv=cheb'], "cannot build the model: DeepGCN got conv='cheb'"),
    (['norm=contranorm', 'norm.temperature=0'], 'temperature must be > 0'),
])
def test_bad_config(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        train(_compose(*TINY, *overrides), output_dir=tmp_path)


def _cli(*args, cwd, env=None):
    env = {**os.environ, 'OMP_NUM_THREADS': '1', **(env or {})}
    return subprocess.run([sys.executable, '-m', 'gnorm.train', *args],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


# One command per way an error reaches the command line: before Hydra
# composes (unknown option), inside train() (bad value, missing data).
@pytest.mark.parametrize('args,match', [
    (['dataset=pubmed'], "error: unknown dataset 'pubmed'"),
    (['norm=contranorm', 'norm.scale=-1'], 'error: norm.scale must be'),
    (['dataset=citeseer', 'data.mirror=EMPTY', 'data.root=ROOT'],
     "error: dataset 'citeseer': the mirror lacks 8 raw file(s)"),
])
def test_cli_errors(tmp_path, args, match):
    (tmp_path / 'empty').mkdir()
    args = [a.replace('EMPTY', str(tmp_path / 'empty'))
            .replace('ROOT', str(tmp_path / 'data')) for a in args]
    proc = _cli(*args, 'hydra.run.dir=run', cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(match)
    assert 'Traceback' not in proc.stdout + proc.stderr


@pytest.mark.parametrize('args,match', [
    (['dataset=pubmed'], "unknown dataset 'pubmed'; pass dataset= one of "
                         "chameleon, citeseer, cora, csbm, squirrel"),
    (['norm=batchnorm', 'layers=2'], "unknown norm 'batchnorm'"),
    (['-m', 'norm=none,foo', 'seed=0,1'], "unknown norm 'foo'"),
    (['experiment=table9'], "unknown experiment 'table9'"),
    (['+model=graphormer'], "unknown model 'graphormer'"),
])
def test_check_choices(args, match):
    with pytest.raises(ConfigError, match=match):
        check_choices(args)


def test_check_choices_accepts_known_options():
    check_choices(['-m', 'dataset=cora,csbm', 'norm=contranorm',
                   'experiment=null', 'layers=32', 'norm.scale=0.5',
                   '--cfg', 'job', 'hydra.run.dir=x'])


def test_cli_multirun(tmp_path):
    proc = _cli('-m', *TINY, 'layers=2', 'train.epochs=2', 'seed=0,1',
                'hydra.sweep.dir=sweep', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folders = sorted((tmp_path / 'sweep').iterdir())
    folders = [f for f in folders if f.is_dir()]
    assert [f.name for f in folders] == ['0-csbm-none-L2-seed0',
                                         '1-csbm-none-L2-seed1']
    for seed, folder in enumerate(folders):
        results = _read(folder)
        assert results['config']['seed'] == seed
        assert results['choices']['norm'] == 'none'
        assert f'seed={seed}' in results['overrides']
        assert (folder / '.hydra' / 'config.yaml').is_file()
    summary = [l for l in proc.stdout.splitlines() if l.startswith('csbm L=2')]
    assert len(summary) == 2 and 'results.json' in summary[0]


@needs_mirror
@pytest.mark.parametrize('dataset,sizes', [
    ('cora', [140, 500, 1000]),
    ('citeseer', [120, 500, 1000]),
    ('chameleon', [1092, 729, 456]),
    ('squirrel', [2496, 1664, 1041]),
])
def test_real_datasets_through_the_mirror(tmp_path, data_root, dataset,
                                          sizes):
    cfg = _compose(f'dataset={dataset}', 'layers=2', 'norm=contranorm',
                   'train.epochs=3', 'train.progress=false',
                   f'data.root={data_root}', f'data.mirror={MIRROR}')
    results = train(cfg, output_dir=tmp_path)
    assert results['status'] == 'ok'
    assert results['dataset']['split_sizes'] == sizes
    assert len(results['curve']['epoch']) == 3
    assert 0.0 <= results['test_acc'] <= 1.0
    raw = data_root / PYG_DATASETS[dataset][2]
    assert sorted(p.name for p in raw.iterdir()) == sorted(raw_files(dataset))
