r"""Many runs as one model: DeepGCN(runs=R), gnorm.train.run.train_runs,
the batching sweeper and the launchers."""
import functools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch_geometric.utils import to_undirected

from gnorm.models import DeepGCN
from gnorm.nn import ContraNorm, DualContraNorm, IsoBN, PairNorm, Stacked
from gnorm.train import CONF_DIR
from gnorm.train.run import train_runs
from conftest import MIRROR, compose_train, needs_mirror, saved_bytes

ROOT = Path(__file__).resolve().parents[1]
TINY = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=3',
        'train.epochs=4', 'train.progress=false']
NORMS = ['none', 'layernorm', 'pairnorm', 'contranorm', 'contranorm_d',
         'isobn']
FACTORIES = {
    'none': None,
    'contranorm': functools.partial(ContraNorm, negatives='non_neighbors'),
    'contranorm_d': DualContraNorm,
    'pairnorm': PairNorm,
    'isobn': IsoBN,
}


pytestmark = pytest.mark.usefixtures('one_thread')


def _graph(sparse):
    torch.manual_seed(0)
    x = torch.randn(20, 30)
    if sparse:  # 5 % non-zero: the input layer takes the sparse path
        x = x * (torch.rand(20, 30) < 0.05)
    return x, to_undirected(torch.randint(0, 20, (2, 40)))


def _seeded(seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


@pytest.mark.parametrize('norm', list(FACTORIES))
@pytest.mark.parametrize('sparse,conv,at_once', [
    (False, 'gcn', True), (True, 'row', True), (True, 'gcn', False),
    (False, 'row', False)])
def test_runs_equal_single_models(norm, sparse, conv, at_once):
    r"""DeepGCN(runs=3) is three DeepGCNs: weights, dropout masks, outputs
    and gradients of run r are those of a one-run model with r's
    generator; the norms of all runs at once (vmap, as on a GPU) or one
    after the other (as on the CPU)."""
    x, edge_index = _graph(sparse)
    seeds = [3, 7, 11]
    kwargs = dict(num_layers=3, hidden_channels=8, conv=conv,
                  norm=FACTORIES[norm], shared_layer_norm=norm == 'none')
    batched = DeepGCN(30, 4, runs=3, **kwargs)
    for module in batched.modules():
        if isinstance(module, Stacked):
            module.at_once = at_once
    batched.reset_parameters(_seeded(seeds))
    out = batched.train()(x, edge_index, generators=_seeded(seeds))
    assert out.shape == (3, 20, 4)
    out.pow(2).sum().backward()
    for r, seed in enumerate(seeds):
        single = DeepGCN(30, 4, **kwargs)
        single.reset_parameters(_seeded([seed]))
        for mine, theirs in zip(single.convs, batched.convs):
            assert torch.equal(mine.weight, theirs.weight[r])
        expected = single.train()(x, edge_index, generators=_seeded([seed]))
        assert torch.allclose(out[r], expected, atol=1e-5)
        expected.pow(2).sum().backward()
        for mine, theirs in zip(single.convs, batched.convs):
            assert torch.allclose(theirs.weight.grad[r], mine.weight.grad,
                                  atol=1e-4)
        single.eval()
        assert torch.allclose(batched.eval()(x, edge_index)[r],
                              single(x, edge_index), atol=1e-5)
        batched.train()


def test_runs_options_and_errors():
    x, edge_index = _graph(False)
    model = DeepGCN(30, 4, num_layers=1, runs=2, dropout=0.0)
    assert model(x, edge_index).shape == (2, 20, 4)
    model = DeepGCN(30, 4, num_layers=2, runs=2,
                    norm=[functools.partial(ContraNorm, scale=s)
                          for s in (0.5, 1.0)])
    assert 'runs=2' in str(model) and 'scale=[0.5, 1.0]' in str(model)
    out, hidden = model(x, edge_index, return_hidden=True)
    assert [tuple(h.shape) for h in hidden] == [(2, 20, 32), (2, 20, 4)]
    with pytest.raises(ValueError, match='one per run'):
        DeepGCN(30, 4, num_layers=2, runs=3, norm=[ContraNorm] * 2)
    with pytest.raises(ValueError, match='fusion is not available'):
        DeepGCN(30, 4, num_layers=3, runs=2, fusion='max')
    with pytest.raises(ValueError, match='generators'):
        model(x, edge_index, generators=_seeded([0]))


def _keys(obj, prefix=''):
    r"""Every key path of a JSON object (curves and per-layer lists as
    one key)."""
    if not isinstance(obj, dict):
        return {prefix}
    return set().union(*(_keys(v, f'{prefix}.{k}') for k, v in obj.items()))


def _alone_and_together(tmp_path, overrides, runs):
    cfgs = [compose_train(*overrides, *run) for run in runs]
    alone = [train_runs([c], [str(tmp_path / f'alone{i}')])[0]
             for i, c in enumerate(cfgs)]
    together = train_runs(cfgs, [str(tmp_path / f'batch{i}')
                                 for i in range(len(cfgs))])
    return alone, together


@pytest.mark.parametrize('norm', NORMS)
def test_batch_does_not_change_a_run(tmp_path, norm):
    r"""A run trained alone and inside a batch of 5 gives the same curve,
    selection and metrics, and results.json files of the same format."""
    overrides = [*TINY, f'norm={norm}']
    runs = [[f'seed={s}'] for s in range(5)]
    if norm == 'contranorm':  # each run its own scale, 0 included
        runs = [[f'seed={s}', f'norm.scale={v}']
                for s, v in zip(range(5), (0.0, 0.5, 1.0, 0.2, 0.5))]
    alone, together = _alone_and_together(tmp_path, overrides, runs)
    for a, b in zip(alone, together):
        assert a['status'] == b['status'] == 'ok'
        assert (a['batch_runs'], b['batch_runs']) == (1, 5)
        for key, values in a['curve'].items():
            assert b['curve'][key] == pytest.approx(values, abs=1e-5), key
        assert b['best_epoch'] == a['best_epoch']
        assert b['test_acc'] == pytest.approx(a['test_acc'], abs=1e-6)
        assert b['collapse']['effective_rank'] == pytest.approx(
            a['collapse']['effective_rank'], rel=1e-4)
        early = list(range(1, min(5, a['curve']['epoch'][-1]) + 1))
        assert b['gradients']['epoch'] == a['gradients']['epoch'] == early
        for key in ('output_grad_norm', 'param_grad_norm', 'param_norm',
                    'effective_rank', 'squared_norm'):
            assert b['gradients'][key][0] == pytest.approx(
                a['gradients'][key][0], rel=1e-4), key
        assert b['model'] == a['model'] and b['config'] == a['config']
        assert _keys(a) == _keys(b)
    saved = json.loads((tmp_path / 'batch3' / 'results.json').read_text())
    assert saved['curve'] == together[3]['curve']


@needs_mirror
def test_batch_does_not_change_a_run_sparse_features(tmp_path):
    r"""Cora (bag-of-words input: each run drops its own input entries),
    the authors' protocol, runs differing in seed and scale."""
    overrides = ['dataset=cora', f'data.mirror={MIRROR}',
                 f'data.root={tmp_path / "data"}', 'experiment=table3_paper',
                 'layers=2', 'norm=contranorm', 'train.epochs=3',
                 'train.progress=false', 'collapse_metrics=false']
    runs = [['seed=0', 'norm.scale=0.2'], ['seed=1', 'norm.scale=1.0'],
            ['seed=2', 'norm.scale=0.5']]
    alone, together = _alone_and_together(tmp_path, overrides, runs)
    for a, b in zip(alone, together):
        assert b['curve']['loss'] == pytest.approx(a['curve']['loss'],
                                                   abs=1e-5)
        assert b['test_acc'] == pytest.approx(a['test_acc'], abs=1e-6)


def test_batch_that_does_not_fit_is_split(tmp_path, monkeypatch):
    r"""Out of memory: the batch is trained as halves, then quarters...;
    every run still finishes with the results it has alone."""
    forward = DeepGCN.forward
    sizes = []

    def small_memory(self, *args, **kwargs):
        sizes.append(self.runs or 1)
        if (self.runs or 1) > 2:
            raise torch.OutOfMemoryError('CUDA out of memory (simulated)')
        return forward(self, *args, **kwargs)

    overrides = [*TINY, 'norm=pairnorm', 'batch_runs=5']
    runs = [[f'seed={s}'] for s in range(5)]
    cfgs = [compose_train(*overrides, *run) for run in runs]
    alone = [train_runs([c], [str(tmp_path / f'alone{i}')])[0]
             for i, c in enumerate(cfgs)]
    monkeypatch.setattr(DeepGCN, 'forward', small_memory)
    together = train_runs(cfgs, [str(tmp_path / f'b{i}') for i in range(5)])
    assert sorted(set(sizes)) == [1, 2, 3, 5]  # 5 -> 2 + 3, 3 -> 1 + 2
    for a, b in zip(alone, together):
        assert b['status'] == 'ok'
        assert b['curve']['loss'] == pytest.approx(a['curve']['loss'],
                                                   abs=1e-5)


def test_auto_batch_size_follows_memory(monkeypatch):
    from gnorm.train import node_setup
    cfgs = [compose_train(*TINY, f'seed={s}') for s in range(6)]
    device = torch.device('cpu')
    assert node_setup.max_runs(cfgs, device) == 6  # plenty of memory
    need = node_setup.memory_per_run(cfgs[0], 120, 120 * 32)
    monkeypatch.setattr(node_setup, 'free_memory', lambda device: 5 * need)
    assert node_setup.max_runs(cfgs, device) == 2  # half of the free memory
    assert node_setup.max_runs([compose_train(*TINY, 'batch_runs=3')] * 6, device) == 3


@pytest.mark.parametrize('norm', ['none', 'contranorm', 'contranorm_d',
                                  'contranorm_lin'])
@pytest.mark.parametrize('avg_degree', [4, 190])
def test_memory_estimate_covers_saved_tensors(norm, avg_degree):
    r"""What a run keeps for its backward pass (the bulk of its memory) is
    below the estimate, on a sparse and on an almost complete graph
    (non-neighbour ContraNorm keeps a weight and indices per edge)."""
    from gnorm.train import node_setup
    cfg = compose_train('dataset=csbm', 'dataset.num_nodes=200', 'layers=16',
                        f'dataset.avg_degree={avg_degree}',
                        'dataset.homophily=0.34', f'norm={norm}')
    data = node_setup.load_data(cfg)
    model = node_setup.build_model(cfg, data.num_features,
                             int(data.y.max()) + 1).train()
    saved, _ = saved_bytes(lambda: model(data.x, data.edge_index))
    entries = int((data.x != 0).sum())
    need = node_setup.memory_per_run(cfg, data.num_nodes, entries, data.num_edges)
    assert saved <= need


@pytest.mark.parametrize('value', ['0', 'many', '1.5'])
def test_bad_batch_runs_is_one_line(tmp_path, value):
    from gnorm.errors import ConfigError
    with pytest.raises(ConfigError, match='batch_runs must be auto or an '
                       'integer >= 1'):
        train_runs([compose_train(*TINY, f'batch_runs={value}')], [str(tmp_path)])


def test_batch_key_groups_runs():
    from gnorm.train.node_setup import batch_key
    base = batch_key(compose_train(*TINY, 'norm=contranorm', 'seed=0'))
    assert batch_key(compose_train(*TINY, 'norm=contranorm', 'seed=3',
                              'norm.scale=0.2')) == base
    # How many runs a batch holds is one value for the whole batch.
    assert batch_key(compose_train(*TINY, 'norm=contranorm',
                              'batch_runs=4')) != base
    assert batch_key(compose_train(*TINY, 'norm=contranorm', 'layers=4')) != base
    assert batch_key(compose_train(*TINY, 'norm=contranorm',
                              'train.lr=0.1')) != base
    assert batch_key(compose_train(*TINY, 'model.fusion=max')) is None


def _cli(tmp_path, *args, sweep='sweep', code=0):
    env = dict(os.environ, OMP_NUM_THREADS='1', GNORM_DATA_MIRROR='',
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get(
                   'PYTHONPATH', '')]))
    proc = subprocess.run(
        [sys.executable, '-m', 'gnorm.train', '-m', *TINY,
         f'data.root={tmp_path / "data"}',
         f'hydra.sweep.dir={tmp_path / sweep}', *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == code, proc.stderr[-2000:]
    return proc


def _folders(sweep):
    return {p.parent.name: json.loads(p.read_text())
            for p in Path(sweep).glob('*/results.json')}


def test_sweep_trains_runs_as_one_model(tmp_path):
    r"""`-m` over seeds and scales: one job trains every run, into the
    folders the unbatched sweep gives them, with the same results; a rerun
    with resume=true skips them all."""
    sweep = ['seed=0,1,2', 'norm=contranorm', 'norm.scale=0.5,1.0',
             'collapse_metrics=false']
    proc = _cli(tmp_path, *sweep, sweep='b')
    assert '6 runs in 1 jobs' in proc.stderr + proc.stdout
    summary_proc = proc
    batched = _folders(tmp_path / 'b')
    _cli(tmp_path, *sweep, 'batch_runs=1', sweep='a')
    alone = _folders(tmp_path / 'a')
    assert len(batched) == 6 and set(batched) == set(alone)
    for name, res in batched.items():
        assert res['batch_runs'] == 6 and alone[name]['batch_runs'] == 1
        assert res['overrides'] == [o for o in alone[name]['overrides']
                                    if o != 'batch_runs=1']
        assert res['test_acc'] == pytest.approx(alone[name]['test_acc'],
                                                abs=1e-6)
        # Every run folder is that of a run of its own.
        folder = tmp_path / 'b' / name
        for file in ('config.yaml', 'overrides.yaml', 'hydra.yaml'):
            assert (folder / '.hydra' / file).is_file(), (name, file)
        hydra = OmegaConf.load(folder / '.hydra' / 'hydra.yaml').hydra
        assert hydra.runtime.output_dir == str(folder)
        assert f'seed={res["config"]["seed"]}' in hydra.overrides.task
        log = (folder / 'train.log').read_text()
        assert 'train (mean of 6 runs) epoch 4/4 | loss' in log, name
    # Summary lines give absolute paths, as for a single run.
    summaries = [line.rsplit(' | ', 1)[-1]
                 for line in summary_proc.stdout.splitlines()
                 if line.startswith('csbm L=3')]
    assert sorted(summaries) == sorted(
        str(tmp_path / 'b' / name / 'results.json') for name in batched)
    proc = _cli(tmp_path, *sweep, 'resume=true', sweep='b')
    assert proc.stdout.count('done already') == 6


def test_a_batch_of_your_own_norm_is_named_by_its_class(tmp_path, user_norm):
    # mynorm.py in the working folder (on the path of python -m): the
    # batch's runs are named HalfLN in their folders and results.json.
    proc = _cli(tmp_path, 'seed=0,1', 'norm=none',
                'norm._target_=mynorm.HalfLN')
    assert '2 runs in 1 jobs' in proc.stderr + proc.stdout
    runs = _folders(tmp_path / 'sweep')
    assert sorted(runs) == [
        f'{i}-csbm-HalfLN-L3,dataset.num_nodes=120,train.epochs=4,seed={i}'
        for i in range(2)]
    for res in runs.values():
        assert res['names']['norm'] == 'HalfLN'
        assert res['choices']['norm'] == 'none'
        assert res['batch_runs'] == 2


@pytest.mark.parametrize('text', [
    '/sweep/.batches/0-L12,split_index=$\\{seed\\},seed=0.json',
    "it's", 'a\\', "a\\'b", 'C:\\dir\\', '\\\\'])
def test_quoted_values_read_back_as_they_were(text):
    r"""A quoted override value (a batch file, a run folder) is read back
    by Hydra's parser as it was written, backslashes included (Hydra keeps
    a backslash that precedes no quote)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from gnorm.train.common import quoted
    parser = OverridesParser.create()
    assert parser.parse_override(f'k={quoted(text)}').value() == text
    assert parser.parse_override(
        f'k=[{quoted(text)},{quoted(text)}]').value() == [text, text]


@needs_mirror
def test_the_luo_multirun_runs_as_its_header_documents(tmp_path):
    r"""conf/experiment/luo.yaml's documented multirun, with two seeds and
    two epochs: ``'split_index=${seed}'`` reaches each run of the batch
    (run k trains on split k), through a batch file and run folders named
    with Hydra's escaped ``$\{seed\}``."""
    documented = ("python -m gnorm.train -m experiment=luo "
                  "dataset=minesweeper 'split_index=${seed}' "
                  "seed=0,1,2,3,4,5,6,7,8,9")
    assert f'#   {documented}\n' in (CONF_DIR / 'experiment' /
                                    'luo.yaml').read_text()
    args = [a if not a.startswith('seed=') else 'seed=0,1'
            for a in shlex.split(documented)[1:]]
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get('PYTHONPATH', '')]))
    sweep = tmp_path / 'sweep'
    proc = subprocess.run(
        [sys.executable, *args, 'train.epochs=2', 'threads=1',
         f'data.root={tmp_path / "data"}', f'hydra.sweep.dir={sweep}'],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '2 runs in 1 jobs' in proc.stderr + proc.stdout
    runs = _folders(sweep)
    assert sorted(runs) == [
        f'{k}-minesweeper-batchnorm-L12,experiment=luo,'
        f'split_index=$\\{{seed\\}},train.epochs=2,seed={k}' for k in (0, 1)]
    for res in runs.values():
        assert res['status'] == 'ok' and res['batch_runs'] == 2
        assert res['config']['split_index'] == res['config']['seed']
        assert res['overrides'][2] == 'split_index=$\\{seed\\}'
    assert sorted(r['config']['split_index'] for r in runs.values()) == [0, 1]
    assert len({r['dataset']['split_fingerprint']
                for r in runs.values()}) == 2  # two splits


def test_a_second_sweep_into_the_folder_keeps_the_first_ones_record(
        tmp_path):
    r"""``multirun.yaml`` records the first sweep into a folder; another
    sweep into it is recorded beside it, and the same sweep again adds
    nothing."""
    _cli(tmp_path, 'seed=0')
    _cli(tmp_path, 'seed=1')
    _cli(tmp_path, 'seed=1')
    sweep = tmp_path / 'sweep'
    assert sorted(p.name for p in sweep.glob('multirun*.yaml')) == [
        'multirun.2.yaml', 'multirun.yaml']
    first = OmegaConf.load(sweep / 'multirun.yaml').hydra.overrides.task
    second = OmegaConf.load(sweep / 'multirun.2.yaml').hydra.overrides.task
    assert 'seed=0' in first and 'seed=1' in second


def test_sweep_refused_runs_leave_no_folder(tmp_path):
    r"""Runs refused before training leave no folder: a job whose runs are
    all refused (layers=0), and one run of a batch (norm.scale=-1) whose
    batch-mate trains."""
    proc = _cli(tmp_path, 'norm=contranorm', 'norm.scale=-1,0.5',
                'layers=0,3', 'collapse_metrics=false', code=2)
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 2, proc.stderr
    assert all(e.startswith('error: job ') for e in errors)
    assert ' layers=0 ' in errors[0] and ' layers=3 ' in errors[1]
    assert 'norm.scale=-1' in errors[1] and \
        'norm.scale must be a number >= 0' in errors[1]
    folders = [p.name for p in (tmp_path / 'sweep').iterdir()
               if p.is_dir() and p.name != '.batches']
    assert len(folders) == 1 and 'L3' in folders[0] and \
        'norm.scale=0.5' in folders[0]
    assert _folders(tmp_path / 'sweep')[folders[0]]['status'] == 'ok'


@pytest.mark.slow  # an extra launcher; the study test runs processes
def test_joblib_launcher_runs_batches_in_processes(tmp_path):
    pytest.importorskip('hydra_plugins.hydra_joblib_launcher')
    proc = _cli(tmp_path, 'hydra/launcher=joblib', 'hydra.launcher.n_jobs=2',
                'seed=0,1,2,3', 'batch_runs=2')
    assert 'Joblib.Parallel(n_jobs=2' in proc.stderr + proc.stdout
    results = _folders(tmp_path / 'sweep')
    assert len(results) == 4
    assert {r['batch_runs'] for r in results.values()} == {2}
    # n_jobs processes share the cores: each takes its part of them
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert {r['machine']['threads'] for r in results.values()} == {threads}


@pytest.mark.parametrize('launcher,key,value', [
    ('processes', 'n_jobs', 2),
    ('slurm', 'gpus_per_node', 1),
])
def test_launcher_configs_compose(launcher, key, value):
    pytest.importorskip('hydra_plugins.hydra_submitit_launcher')
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        cfg = compose('train', overrides=[f'hydra/launcher={launcher}'],
                      return_hydra_config=True)
    assert cfg.hydra.launcher[key] == value
    target = cfg.hydra.launcher._target_
    assert target.startswith('hydra_plugins.hydra_')
    if launcher == 'slurm':
        assert target.endswith('SlurmLauncher')
        assert cfg.hydra.launcher.timeout_min == 60


@pytest.fixture
def float64_default():
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(dtype)


def test_batch_differs_from_alone_only_by_rounding(tmp_path, float64_default):
    r"""What differs between a run alone and the same run in a batch is the
    order in which float sums are taken (one batched matrix product or CSR
    kernel per layer instead of one per run), nothing else: in float64,
    where those rounding differences stay below float32's resolution, a
    deep ContraNorm model (16 layers, where float32's differences grow from
    epoch to epoch) gives the same recorded curve, best epoch and metrics
    alone and beside another seed."""
    overrides = ['dataset=csbm', 'dataset.num_nodes=150', 'layers=16',
                 'norm=contranorm', 'train.epochs=20',
                 'train.progress=false', 'collapse_metrics=false']
    alone, together = _alone_and_together(
        tmp_path, overrides, [['seed=0'], ['seed=1']])
    for a, b in zip(alone, together):
        assert b['curve'] == a['curve']
        assert b['best_epoch'] == a['best_epoch']
        assert (b['val_acc'], b['test_acc']) == (a['val_acc'], a['test_acc'])
