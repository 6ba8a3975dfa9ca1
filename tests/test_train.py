import csv
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import read_write

from gnorm.data import PYG_DATASETS, raw_files
from gnorm.errors import ConfigError, TrainingError
from gnorm.machine import denormals_flushed
from gnorm.metrics import (dirichlet_energy, effective_rank,
                           feature_cosine_similarity, feature_variance)
from gnorm.models import DeepGCN
from gnorm.monitor import METRICS
from gnorm.train import collapse as train_collapse
from gnorm.train.epoch_log import NODE_CURVE, csv_value
from gnorm.train.node_eval import evaluate
from gnorm.train import CONF_DIR, train, write_json
from conftest import MIRROR, compose_train, needs_mirror


# A small, fast CSBM run.
TINY = ['dataset=csbm', 'dataset.num_nodes=200', 'layers=3',
        'train.epochs=5', 'train.progress=false']


pytestmark = pytest.mark.usefixtures('one_thread')


def _read(path):
    with open(path / 'results.json') as f:
        return json.load(f)


def test_train_writes_results(tmp_path):
    results = train(compose_train(*TINY, 'norm=contranorm'), output_dir=tmp_path)
    assert _read(tmp_path) == json.loads(json.dumps(results))
    assert not list(tmp_path.glob('.*.tmp'))
    assert results['status'] == 'ok' and results['error'] is None
    assert results['config']['norm']['_target_'] == 'gnorm.nn.ContraNorm'
    assert results['config']['split'] == 'random'
    assert results['device'] == 'cpu' and results['runtime_s'] > 0
    assert results['dataset']['split_sizes'] == [120, 39, 41]
    counts = results['test_predictions']
    assert sum(counts['class_counts']) == sum(counts['label_counts']) == 41

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
    # the first 4 as before; each layer's mean squared row norm last
    assert list(collapse) == ['layer', *METRICS, 'squared_norm']
    assert collapse['layer'] == [1, 2, 3]
    for key in METRICS:
        assert len(collapse[key]) == 3
    assert 1.0 <= collapse['effective_rank'][-1] <= 3.0  # 3 classes
    # The same values, per layer, in collapse.csv (the monitor's records).
    with open(tmp_path / 'collapse.csv') as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ['step', 'layer', 'metric', 'value', 'graphs']
    assert len(rows) == 3 * len(METRICS)
    assert {int(r['step']) for r in rows} == {best}
    for r in rows:
        i = int(r['layer'].split('.')[1])
        assert float(r['value']) == collapse[r['metric']][i]
    # metrics.csv: the curve per epoch, named as graph runs name theirs.
    with open(tmp_path / 'metrics.csv') as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(NODE_CURVE)
    assert [int(r['epoch']) for r in rows] == curve['epoch']
    for new, old in (('loss', 'loss'), ('train_metric', 'train_acc'),
                     ('val_metric', 'val_acc'), ('val_loss', 'val_loss'),
                     ('test_metric', 'test_acc')):
        assert [float(r[new]) for r in rows] == [
            csv_value(v) for v in curve[old]], new
    assert {r['lr'] for r in rows} == {'0.005'} and \
        {r['time_s'] for r in rows} == {''}
    # The code that made the run: this checkout's commit.
    root = Path(__file__).resolve().parents[1]
    if (root / '.git').exists():
        head = subprocess.run(['git', '-C', str(root), 'rev-parse', 'HEAD'],
                              capture_output=True, text=True).stdout.strip()
        assert results['source']['commit'] == head
        assert isinstance(results['source']['modified'], bool)


@pytest.mark.parametrize('runs', [None, 3])
def test_collapse_values_are_those_of_the_float64_formulas(runs):
    r"""results.json's collapse values (the monitor's, one pass over all
    runs) equal the per-layer formulas gnorm.train used before the monitor:
    each run's layer output in float64 through gnorm.metrics."""
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(0)
    n = 90
    data = Data(x=torch.randn(n, 6, generator=g),
                edge_index=torch.randint(0, n, (2, 300), generator=g),
                y=torch.randint(0, 3, (n, ), generator=g))
    for split in ('train', 'val', 'test'):
        data[f'{split}_mask'] = torch.rand(runs or 1, n, generator=g) < 0.5
    torch.manual_seed(0)
    model = DeepGCN(6, 3, num_layers=4, hidden_channels=8, runs=runs)
    monitor = train_collapse.monitor(model)
    evaluate(model, data, monitor, step=7)
    monitor.remove()
    _, hidden = model(data.x, data.edge_index, return_hidden=True)
    for r in range(runs or 1):
        records = train_collapse.run_records(monitor.records, runs and r, 7)
        field = train_collapse.collapse_field(records)
        assert field['layer'] == [1, 2, 3, 4]
        for i, h in enumerate(hidden):
            h = h.detach().view(-1, n, h.size(-1))[r].double()
            old = {'effective_rank': effective_rank(h),
                   'cosine_similarity': feature_cosine_similarity(h),
                   'variance': feature_variance(h, reduce='mean'),
                   'dirichlet_energy': dirichlet_energy(h, data.edge_index)}
            for key, value in old.items():
                assert field[key][i] == pytest.approx(float(value),
                                                      rel=1e-12), key


@pytest.mark.parametrize('runs,metric', [(None, 'acc'), (3, 'acc'),
                                         (2, 'rocauc')])
def test_test_predictions_count_each_runs_test_nodes(runs, metric):
    r"""evaluate's ``test_predictions``, per run: the test nodes predicted
    in each class and labelled with each, counted node by node from the
    logits of that run alone; the positive rate where ROC-AUC scores."""
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(1)
    n, classes = 70, 2 if metric == 'rocauc' else 4
    data = Data(x=torch.randn(n, 5, generator=g),
                edge_index=torch.randint(0, n, (2, 200), generator=g),
                y=torch.randint(0, classes, (n, ), generator=g))
    for split in ('train', 'val', 'test'):
        data[f'{split}_mask'] = torch.rand(runs or 1, n, generator=g) < 0.4
    torch.manual_seed(0)
    model = DeepGCN(5, classes, num_layers=3, hidden_channels=8, runs=runs)
    found = evaluate(model, data, metric=metric)['test_predictions']
    assert len(found) == (runs or 1)
    with torch.no_grad():
        out = model(data.x, data.edge_index).view(runs or 1, n, classes)
    for r, record in enumerate(found):
        pred, true = [0] * classes, [0] * classes
        for node in range(n):
            if data.test_mask[r, node]:
                pred[int(out[r, node].argmax())] += 1
                true[int(data.y[node])] += 1
        assert record['class_counts'] == pred
        assert record['label_counts'] == true
        if metric == 'rocauc':
            assert record['positive_rate'] == pred[1] / sum(pred)
        else:
            assert 'positive_rate' not in record


def test_select_last(tmp_path):
    torch.set_num_threads(2)
    results = train(compose_train(*TINY, 'select=last', 'threads=1'),
                    output_dir=tmp_path)
    assert torch.get_num_threads() == 1  # the threads key
    assert results['machine']['threads'] == 1
    assert results['selected_epoch'] == 5
    assert results['test_acc'] == results['curve']['test_acc'][-1]


def test_a_cpu_run_flushes_denormals_records_it_and_restores_the_state(
        tmp_path):
    # x86 CPUs compute on denormals many times slower, and ContraNorm-D's
    # nearly one-hot softmax fills its tensors with them: a CPU run flushes
    # them to zero, says so in results.json and leaves the state it found.
    if not torch.set_flush_denormal(False):
        pytest.skip('this CPU cannot flush denormals')
    assert not denormals_flushed()
    results = train(compose_train(*TINY, 'threads=1'), output_dir=tmp_path)
    assert results['machine']['denormals_flushed'] is True
    assert not denormals_flushed()
    torch.set_flush_denormal(True)
    try:
        train(compose_train(*TINY, 'threads=1'), output_dir=tmp_path / 'on')
        assert denormals_flushed()
    finally:
        torch.set_flush_denormal(False)


def test_flushing_denormals_changes_no_bit_of_contranorm_d(tmp_path):
    # Denormals are below float32's resolution next to anything the layer
    # sums them with: its output and input gradient are the same bits with
    # and without flushing, on channels of uneven scale (a softmax with
    # rows near one-hot, whose entries underflow to denormals).
    from gnorm.nn import DualContraNorm
    if not torch.set_flush_denormal(False):
        pytest.skip('this CPU cannot flush denormals')
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(2000, 16, generator=gen) * torch.logspace(-1, 1.5, 16)
    grad = torch.randn(2000, 16, generator=gen)
    norm = DualContraNorm(16)
    outs = []
    for flush in (False, True):
        torch.set_flush_denormal(flush)
        try:
            x = x0.clone().requires_grad_()
            y = norm(x)
            y.backward(grad)
        finally:
            torch.set_flush_denormal(False)
        outs.append((y.detach(), x.grad))
    unit = torch.nn.functional.normalize(x0, dim=-1)
    softmax = torch.softmax(unit.t() @ unit, dim=-1)  # the layer's, tau = 1
    tiny = torch.finfo(torch.float32).tiny
    assert ((softmax > 0) & (softmax < tiny)).any()  # denormals unflushed
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1], outs[1][1])


def test_eval_every_changes_no_last_epoch_result(tmp_path):
    # Evaluating every 2nd epoch (and the last) trains the same weights:
    # the same losses, the same metrics at the evaluated epochs, none at
    # the others (NaN, null in results.json), the same selected last epoch.
    overrides = [*TINY, 'norm=contranorm', 'select=last', 'threads=1']
    every = train(compose_train(*overrides), output_dir=tmp_path / 'a')
    sparse = train(compose_train(*overrides, 'train.eval_every=2'),
                   output_dir=tmp_path / 'b')
    assert sparse['curve']['loss'] == every['curve']['loss']
    for key in ('train_acc', 'val_acc', 'val_loss', 'test_acc'):
        assert sparse[key] == every[key]
        for epoch, value in zip(every['curve']['epoch'], every['curve'][key]):
            got = sparse['curve'][key][epoch - 1]
            assert got == value if epoch in (2, 4, 5) else got is None
    assert sparse['collapse'] == every['collapse']


def test_eval_every_picks_the_best_evaluated_epoch(tmp_path):
    results = train(compose_train(*TINY, 'train.eval_every=2'),
                    output_dir=tmp_path)
    val = results['curve']['val_acc']
    assert val[0] is None and val[2] is None
    assert results['best_epoch'] in (2, 4, 5)
    assert val[results['best_epoch'] - 1] == max(val[1], val[3], val[4])
    assert results['val_acc'] == val[results['best_epoch'] - 1]


def test_eval_every_is_no_result_key_of_a_last_epoch_run():
    from gnorm.results.keys import result_config
    config = {'select': 'last', 'seed': 0, 'train': {'eval_every': 10}}
    assert result_config(config) == result_config(
        {'select': 'last', 'seed': 0, 'train': {}})
    best = dict(config, select='best_val')
    assert result_config(best) != result_config(dict(best, train={}))
    assert result_config(dict(best, train={'eval_every': 1})) == \
        result_config(dict(best, train={}))


def test_same_seed_same_metrics(tmp_path):
    # On the CPU with one thread, a fixed seed gives bitwise-equal results.
    overrides = [*TINY, 'norm=contranorm', 'model.fusion=gate', 'threads=1']
    first = train(compose_train(*overrides, 'seed=3'), output_dir=tmp_path / 'a')
    second = train(compose_train(*overrides, 'seed=3'), output_dir=tmp_path / 'b')
    for key in ('curve', 'collapse', 'test_acc', 'best_epoch', 'best'):
        assert first[key] == second[key]
    other = train(compose_train(*overrides, 'seed=4'), output_dir=tmp_path / 'c')
    assert other['curve']['loss'] != first['curve']['loss']


def _repeatable(results):
    r"""What two runs of one config must share bit for bit."""
    return {k: v for k, v in results.items()
            if k not in ('runtime_s', 'loop_s', 'peak_memory', 'path')} | {
        'curve': {k: v for k, v in results['curve'].items()
                  if k != 'time_s'}}


@pytest.mark.parametrize('overrides', [
    [*TINY, 'norm=contranorm', 'threads=1'],
    # Batched runs (seeds as one model) and the Graphormer's attention.
    pytest.param(['dataset=zinc_fixture', 'dataset.limit=40',
                  'model=graphormer', 'norm=sepnorm', 'layers=1',
                  'model.hidden_channels=16', 'model.num_heads=2',
                  'model.ffn_channels=16', 'model.max_dist=3',
                  'train.epochs=2', 'train.batch_size=20',
                  'train.progress=false', 'device=cpu'],
                 marks=needs_mirror),
])
def test_deterministic_runs_are_bitwise_equal(tmp_path, overrides):
    from gnorm.train.run import seed_everything
    try:
        first, second = (train(compose_train(*overrides,
                                             'train.deterministic=true'),
                               output_dir=tmp_path / name)
                         for name in ('a', 'b'))
        # No op may fall back to a nondeterministic kernel with a warning.
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert os.environ['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
    finally:
        seed_everything(0, deterministic=False)
    assert _repeatable(first) == _repeatable(second)


def test_deterministic_kernels_pick_math_attention_on_cuda():
    # Only flags: runs without a GPU.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from gnorm.train.run import deterministic_kernels
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        with deterministic_kernels(torch.device('cuda')):
            assert torch.backends.cuda.math_sdp_enabled()
            assert not torch.backends.cuda.flash_sdp_enabled()
            assert not torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        with deterministic_kernels(torch.device('cpu')):  # CPU: as it was
            assert torch.backends.cuda.flash_sdp_enabled()
        with deterministic_kernels(torch.device('cuda'), enabled=False):
            assert torch.backends.cuda.flash_sdp_enabled()


def test_nan_loss_fails_the_run(tmp_path):
    with pytest.raises(TrainingError, match='loss became nan at epoch'):
        train(compose_train(*TINY, 'train.lr=1e30'), output_dir=tmp_path)
    results = _read(tmp_path)
    assert results['status'] == 'failed'
    assert 'loss became nan' in results['error']
    assert len(results['curve']['epoch']) >= 1
    assert results['best_epoch'] == 1 and 'test_acc' in results['best']


# A node run that checkpoints: dropout (its generator's state), gradient
# records and log flushes that do not fall on the checkpoints' epochs.
RESUMABLE = [*TINY, 'train.epochs=12', 'train.checkpoint_every=4',
             'train.log_every=5', 'train.grad_every=3', 'model.dropout=0.5',
             'resume=true']
# What an interrupted and resumed node run must give as the whole run did.
SAME = ('curve', 'best_epoch', 'best', 'selected_epoch', 'train_acc',
        'val_acc', 'val_loss', 'test_acc', 'test_predictions', 'gradients',
        'collapse')


def _stopped_in_epoch(stop):
    r"""Ctrl-C in the node step of epoch :obj:`stop` (counted over the
    calls made inside the block)."""
    import contextlib
    from gnorm.train import node_loop
    real, calls = node_loop.Step.__call__, []

    def step(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == stop:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    @contextlib.contextmanager
    def stopped():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(node_loop.Step, '__call__', step)
            with pytest.raises(KeyboardInterrupt):
                yield
    return stopped()


def _node_runs(folder, seeds, *overrides):
    from gnorm.train import train_runs
    cfgs = [compose_train(*RESUMABLE, f'seed={s}', *overrides)
            for s in seeds]
    return train_runs(cfgs, [str(folder / f'seed{s}') for s in seeds],
                      [{}] * len(seeds))


def _same_results(a, b):
    for key in SAME:
        assert a.get(key) == b.get(key), key


def test_a_node_run_resumes_from_its_checkpoint_as_if_uninterrupted(
        tmp_path):
    r"""With resume=true a node run writes checkpoint.pt every
    train.checkpoint_every epochs; stopped after one, it continues from it
    with the results of the uninterrupted run: the curve, the selected
    best-validation epoch and its metrics, the dropout masks (generator
    state) and the gradient records, and metrics.csv holds each epoch
    once."""
    full = train(compose_train(*RESUMABLE), output_dir=tmp_path / 'full')
    assert full['checkpoint_epoch'] == 8 and 'resumed_from_epoch' not in full
    with _stopped_in_epoch(11):
        train(compose_train(*RESUMABLE), output_dir=tmp_path / 'cut')
    stopped = _read(tmp_path / 'cut')
    assert stopped['status'] == 'interrupted'
    assert stopped['checkpoint_epoch'] == 8
    assert stopped['curve']['epoch'] == list(range(1, 11))
    resumed = train(compose_train(*RESUMABLE), output_dir=tmp_path / 'cut')
    assert resumed['resumed_from_epoch'] == 8
    _same_results(full, resumed)
    assert (tmp_path / 'cut' / 'metrics.csv').read_text() == \
        (tmp_path / 'full' / 'metrics.csv').read_text()
    # Without resume=true, no checkpoint is written or read.
    plain = train(compose_train(*RESUMABLE, 'resume=false'),
                  output_dir=tmp_path / 'plain')
    assert not (tmp_path / 'plain' / 'checkpoint.pt').exists()
    _same_results(full, plain)
    # A checkpoint of another config is refused, in one line.
    with _stopped_in_epoch(6):
        train(compose_train(*RESUMABLE), output_dir=tmp_path / 'other')
    with pytest.raises(ConfigError, match='belongs to another config '
                       r'\(differs in train.epochs\)'):
        train(compose_train(*RESUMABLE, 'train.epochs=13'),
              output_dir=tmp_path / 'other')


def test_stacked_node_runs_resume_together_alone_or_apart(tmp_path):
    r"""Runs trained as one model resume as one model with the results of
    the uninterrupted runs; a run of the stack resumes alone (its
    checkpoint names its weights as a run alone); runs stopped at
    different epochs (one without a checkpoint) train apart."""
    full = _node_runs(tmp_path / 'full', [0, 1])
    assert [r['batch_runs'] for r in full] == [2, 2]
    with _stopped_in_epoch(7):
        _node_runs(tmp_path / 'cut', [0, 1])
    resumed = _node_runs(tmp_path / 'cut', [0, 1])
    assert [r['resumed_from_epoch'] for r in resumed] == [4, 4]
    for a, b in zip(full, resumed):
        _same_results(a, b)
    alone = _node_runs(tmp_path / 'alone', [1])[0]
    with _stopped_in_epoch(10):
        _node_runs(tmp_path / 'cut2', [0, 1])
    (one, ) = _node_runs(tmp_path / 'cut2', [1])
    assert one['resumed_from_epoch'] == 8 and one['batch_runs'] == 1
    assert one['best_epoch'] == alone['best_epoch']
    assert one['test_acc'] == pytest.approx(alone['test_acc'], abs=0.03)
    assert one['curve']['loss'] == pytest.approx(alone['curve']['loss'],
                                                 rel=1e-4)
    apart = _node_runs(tmp_path / 'cut2', [0, 2])
    assert [r['batch_runs'] for r in apart] == [1, 1]
    assert apart[0]['resumed_from_epoch'] == 8
    assert 'resumed_from_epoch' not in apart[1]
    _same_results(_node_runs(tmp_path / 'seed2', [2])[0], apart[1])


def test_crash_fails_the_run(tmp_path, monkeypatch):
    # An unexpected exception: one line, the traceback in results.json.
    def crash(*args, **kwargs):
        raise RuntimeError('boom\nsecond line')

    monkeypatch.setattr('gnorm.train.node.evaluate', crash)
    with pytest.raises(TrainingError, match=r'^RuntimeError: boom second '
                                            r'line \(traceback in .*\)$'):
        train(compose_train(*TINY), output_dir=tmp_path)
    results = _read(tmp_path)
    assert results['status'] == 'failed'
    assert results['error'] == 'RuntimeError: boom second line'
    assert 'in crash' in results['traceback']
    assert results['config']['dataset']['name'] == 'csbm'


@pytest.mark.parametrize('overrides,match', [
    (['layers=0'], 'layers must be an integer >= 1'),
    (['norm=contranorm', 'norm.scale=-0.5'],
     'norm.scale must be a number >= 0'),
    (['norm=pairnorm', 'norm.scale=-1'], 'norm.scale must be a number >= 0'),
    (['select=first'], "unknown select='first'"),
    (['split=public'], "'csbm' has no public split"),
    (['model.conv=cheb'], "cannot build the model: DeepGCN got conv='cheb'"),
    (['norm=contranorm', 'norm.temperature=0'], 'temperature must be > 0'),
    (['threads=0'], 'threads must be an integer >= 1 or null'),
    (['train.log_every=-1'], 'train.log_every must be an integer >= 0'),
    (['train.eval_every=0'], 'train.eval_every must be an integer >= 1'),
    (['split_index=3'], 'split_index=3 picks a Geom-GCN split, and '
                        'split=random is drawn from the seed'),
    (['train.deterministic=yes'], 'train.deterministic must be true or '
                                  "false, got 'yes'"),
])
def test_bad_config(tmp_path, overrides, match):
    # Refused before training starts: no run folder, nothing written.
    with pytest.raises(ConfigError, match=match):
        train(compose_train(*TINY, *overrides), output_dir=tmp_path / 'run')
    assert not (tmp_path / 'run').exists()


def test_results_keep_float32_values_short(tmp_path):
    written = write_json(tmp_path / 'r.json', {
        'acc': float(np.float32(0.1)), 'exact': 1 / 3, 'nan': math.nan,
        'curve': [float(np.float32(0.798)), 2.5]})
    text = (tmp_path / 'r.json').read_text()
    assert '"acc": 0.1,' in text and '0.10000000149011612' not in text
    assert '"exact": 0.3333333333333333' in text  # a float64 stays as is
    assert '"curve": [0.798, 2.5]' in text and '"nan": null' in text
    assert written == json.loads(text)


# The command line in a subprocess imports gnorm from this checkout (not
# from wherever the environment's install points).
ENV = {**os.environ, 'OMP_NUM_THREADS': '1',
       'PYTHONPATH': os.pathsep.join([str(Path(__file__).parents[1]),
                                      os.environ.get('PYTHONPATH', '')])}


def _cli(*args, cwd, env=None):
    env = {**ENV, **(env or {})}
    return subprocess.run([sys.executable, '-m', 'gnorm.train', *args],
                          cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


# One command per way an error reaches the command line: before Hydra
# composes (unknown option, unknown key), before training starts (bad
# value, no such device, a model of another task, missing data). None of
# them leaves a run folder.
@pytest.mark.parametrize('args,code,match', [
    (['dataset=pubmed'], 2, "error: unknown dataset 'pubmed'"),
    (['layer=3'], 2, "error: unknown key 'layer' in layer=3; closest keys: "
                     "layers"),
    (['layers=-1'], 2, 'error: layers must be an integer >= 1, got -1'),
    (['dataset=cora', 'split_index=12'], 2,
     'error: split_index=12 picks a Geom-GCN split, and split=public has '
     'one split only; leave split_index at 0 or pass split=geom_gcn'),
    (['dataset=cora', 'model=graphormer'], 2,
     'error: dataset=cora is a node-level task and takes model=gcn or '
     'model=resgnn, got '
     'model=graphormer'),
    (['dataset=cora', 'norm._target_=mynorm.HalfLN'], 2,
     "error: norm._target_=mynorm.HalfLN does not import "
     "(ModuleNotFoundError: No module named 'mynorm'); is its module on "
     "PYTHONPATH?"),
    (['dataset=citeseer', 'data.mirror=EMPTY', 'data.root=ROOT'], 1,
     "error: dataset 'citeseer': the mirror lacks 8 raw file(s)"),
    pytest.param(['device=cuda'], 2, 'error: device=cuda but no CUDA device',
                 marks=pytest.mark.skipif(torch.cuda.is_available(),
                                          reason='a GPU is visible')),
])
def test_cli_errors(tmp_path, args, code, match):
    (tmp_path / 'empty').mkdir()
    args = [a.replace('EMPTY', str(tmp_path / 'empty'))
            .replace('ROOT', str(tmp_path / 'data')) for a in args]
    proc = _cli(*args, cwd=tmp_path)
    assert proc.returncode == code
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(match)
    assert 'Traceback' not in proc.stdout + proc.stderr
    assert not (tmp_path / 'outputs').exists()  # no run folder


def test_resume_note_of_a_single_node_run(tmp_path):
    from gnorm.train.command import resume_note
    cfg = compose_train(*TINY, 'resume=true')
    note = resume_note(cfg, tmp_path)
    assert note.startswith(f'note: resume=true: {tmp_path} holds no '
                           'results.json and no checkpoint.pt')
    assert '\n' not in note
    (tmp_path / 'checkpoint.pt').write_text('')  # train_runs decides
    assert resume_note(cfg, tmp_path) is None
    (tmp_path / 'checkpoint.pt').unlink()
    (tmp_path / 'results.json').write_text('{}')
    assert resume_note(cfg, tmp_path) is None
    assert resume_note(compose_train(*TINY), tmp_path / 'new') is None


@pytest.mark.slow
def test_cli_says_a_new_node_run_has_nothing_to_resume(tmp_path):
    proc = _cli(*TINY, 'train.epochs=1', 'resume=true', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = [l for l in proc.stderr.splitlines() if l.startswith('note:')]
    assert len(notes) == 1 and notes[0].startswith('note: resume=true: ')
    assert notes[0].endswith('this run trains from the start')


@pytest.mark.parametrize('sig,code', [(signal.SIGINT, 130),
                                      (signal.SIGTERM, 143)])
def test_cli_signal_stops_cleanly(tmp_path, sig, code):
    # A real run, stopped once its log shows training: no traceback, exit
    # status 128 + signal, results.json with the curve so far.
    env = ENV
    proc = subprocess.Popen(
        [sys.executable, '-m', 'gnorm.train', 'dataset=csbm',
         'dataset.num_nodes=200', 'layers=2', 'train.epochs=100000',
         'train.log_every=1', 'hydra.run.dir=run'], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # As from a terminal: a test runner started in the background
        # ignores SIGINT, and its children would inherit that (gnorm keeps
        # an ignored signal ignored, as Python does).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if 'train epoch 2/100000' in line:
                break
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert 'Traceback' not in out + err and err == ''
    name = signal.Signals(sig).name
    assert f'interrupted by {name} after' in out

    results = _read(tmp_path / 'run')
    assert results['status'] == 'interrupted'
    assert results['error'].startswith(f'interrupted by {name} after')
    curve = results['curve']
    epochs = len(curve['epoch'])
    assert epochs >= 2 and curve['epoch'] == list(range(1, epochs + 1))
    assert all(len(v) == epochs for v in curve.values())
    best = results['best_epoch']
    assert curve['val_acc'][best - 1] == max(curve['val_acc'])
    assert results['best']['test_acc'] == curve['test_acc'][best - 1]
    # Hydra's job log has the progress lines too (the signal may cut the
    # last one short, between the console and the file).
    log = (tmp_path / 'run' / 'train.log').read_text()
    assert 'train epoch 1/100000 | loss ' in log


def _hydra_job(*overrides):
    r"""Sets the process's Hydra job (as ``python -m gnorm.train`` holds
    it) to the config of :obj:`overrides`; returns that config."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        cfg = compose('train', overrides=list(overrides),
                      return_hydra_config=True)
    with read_write(cfg.hydra):
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


@pytest.fixture
def hydra_job():
    r""":func:`_hydra_job`, the process left without a Hydra job after."""
    yield _hydra_job
    HydraConfig.instance().cfg = None


def test_train_with_a_folder_records_no_other_jobs_choices(tmp_path,
                                                           hydra_job):
    # A Hydra job of another config is set (a notebook, an earlier run):
    # train(cfg, folder) does not label its run with that job's choices.
    hydra_job('norm=pairnorm', 'seed=7')
    results = train(compose_train(*TINY), output_dir=tmp_path)
    assert 'choices' not in results and 'overrides' not in results
    assert results['config']['norm']['_target_'] == 'torch.nn.Identity'


def _run_dirs(hydra_job, *overrides):
    r"""The folder of a single run and of job 0 of a multirun."""
    cfg = hydra_job(*overrides)
    return (Path(cfg.hydra.run.dir).parent.relative_to('outputs'),
            cfg.hydra.sweep.subdir)


def test_run_folders_tell_runs_apart(hydra_job):
    runs = {
        ('norm=pairnorm', ): 'cora/pairnorm/L2,seed=0',
        ('norm=pairnorm', 'norm.mode=PN-SCS'):
            'cora/pairnorm/L2,norm.mode=PN-SCS,seed=0',
        ('norm=pairnorm', 'train.lr=0.01', 'seed=3', 'layers=8'):
            'cora/pairnorm/L8,train.lr=0.01,seed=3',
        # Where data comes from and how the run is shown change nothing.
        ('norm=pairnorm', 'data.mirror=/m', 'data.root=/r', 'device=cpu',
         'threads=1', 'resume=true', 'train.progress=false'):
            'cora/pairnorm/L2,seed=0',
        ('dataset=molhiv', 'model=graphormer', 'train.log_steps=10',
         'train.tensorboard=true', 'train.log_every=5'):
            'molhiv/none/L2,model=graphormer,seed=0',
        ('experiment=csbm_demo', 'model.fusion=gate'):
            'csbm/contranorm/L16,experiment=csbm_demo,model.fusion=gate,'
            'seed=0',
    }
    for overrides, folder in runs.items():
        run, job = _run_dirs(hydra_job, *overrides)
        assert str(run) == folder
        assert job == '0-' + folder.replace('/', '-')


def test_cli_multirun(tmp_path):
    # Job 1 fails: the others still run, its folder records the failure and
    # its error line names it.
    proc = _cli('-m', 'dataset=csbm', 'dataset.num_nodes=200', 'layers=2',
                'train.epochs=2', 'seed=0', 'train.lr=0.01,1e30',
                'hydra.sweep.dir=sweep', cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        'error: job 1 (dataset=csbm dataset.num_nodes=200 layers=2 '
        'train.epochs=2 seed=0 train.lr=1e+30): the training loss became nan '
        'at epoch 2; lower train.lr, change the norm or its scale')
    folders = sorted(f for f in (tmp_path / 'sweep').iterdir() if f.is_dir())
    assert [f.name for f in folders] == [
        f'{i}-csbm-none-L2,dataset.num_nodes=200,train.epochs=2,'
        f'train.lr={lr},seed=0' for i, lr in enumerate(['0.01', '1e+30'])]
    for folder, status in zip(folders, ['ok', 'failed']):
        results = _read(folder)
        assert results['status'] == status
        assert results['choices']['norm'] == 'none'
        assert 'seed=0' in results['overrides']
        assert (folder / '.hydra' / 'config.yaml').is_file()
    summary = [l for l in proc.stdout.splitlines() if l.startswith('csbm L=2')]
    assert len(summary) == 1 and 'results.json' in summary[0]


@needs_mirror
@pytest.mark.parametrize('dataset,sizes', [
    ('cora', [140, 500, 1000]),
    ('citeseer', [120, 500, 1000]),
    ('chameleon', [1092, 729, 456]),
    ('squirrel', [2496, 1664, 1041]),
])
def test_real_datasets_through_the_mirror(tmp_path, data_root, dataset,
                                          sizes):
    cfg = compose_train(f'dataset={dataset}', 'layers=2', 'norm=contranorm',
                   'train.epochs=3', 'train.progress=false',
                   f'data.root={data_root}', f'data.mirror={MIRROR}')
    results = train(cfg, output_dir=tmp_path)
    assert results['status'] == 'ok'
    assert results['dataset']['split_sizes'] == sizes
    assert len(results['curve']['epoch']) == 3
    assert 0.0 <= results['test_acc'] <= 1.0
    raw = data_root / PYG_DATASETS[dataset][2]
    assert sorted(p.name for p in raw.iterdir()) == sorted(raw_files(dataset))


def test_summary_line_gives_accuracies_in_percent():
    from gnorm.train import node
    results = {'selected_epoch': 7, 'train_acc': 0.9857, 'val_acc': 0.158,
               'test_acc': 0.8160, 'runtime_s': 1.25, 'device': 'cpu',
               'path': 'out/results.json', 'choices': {'norm': 'none'},
               'collapse': {'effective_rank': [6.44, 7.18]}}
    assert node.summary(results, compose_train('layers=2')) == (
        'cora L=2 none seed=0 | epoch 7 (best_val) | acc train 98.57% val '
        '15.80% test 81.60% | erank last 7.18 hidden 6.44 | 1.2s cpu | '
        'out/results.json')
    # runs trained as one model share the batch's time, and say so
    results['batch_runs'] = 3
    assert '| 1.2s for 3 runs as one model cpu |' in node.summary(
        results, compose_train('layers=2'))


@pytest.mark.parametrize('choice,target,name', [
    ('pairnorm', 'gnorm.nn.PairNorm', 'pairnorm'),      # the option as is
    ('none', 'mynorm.HalfLN', 'HalfLN'),                 # another class
    ('layernorm', 'mynorm.HalfLN', 'HalfLN'),
    ('halfln', 'mynorm.HalfLN', 'halfln'),               # not gnorm's option
    (None, 'gnorm.nn.PairNorm', 'PairNorm'),             # outside Hydra
])
def test_run_name_is_what_trains(choice, target, name):
    from gnorm.train.common import run_name
    assert run_name('norm', choice, {'_target_': target}) == name


def test_run_name_reads_the_options_of_the_search_path(user_norm):
    from gnorm.train.common import run_name
    sources = [{'schema': 'pkg', 'path': 'hydra.conf'},
               {'schema': 'file', 'path': str(CONF_DIR)},
               {'schema': 'file', 'path': str(user_norm / 'conf')}]
    assert run_name('norm', 'halfln', {'_target_': 'mynorm.HalfLN'},
                    sources) == 'halfln'
    assert run_name('norm', 'halfln', {'_target_': 'other.QuarterLN'},
                    sources) == 'QuarterLN'
    assert run_name('norm', 'none', {'_target_': 'mynorm.HalfLN'},
                    sources) == 'HalfLN'


def test_run_folders_name_what_trains(hydra_job, user_norm):
    path = f'hydra.searchpath=[file://{user_norm}/conf]'
    runs = {
        # norm._target_ set to another class: that class, also in the
        # folder of a multirun job; the _target_ is not repeated.
        ('norm=none', 'norm._target_=mynorm.HalfLN'): 'cora/HalfLN/L2,seed=0',
        ('norm=layernorm', 'norm._target_=mynorm.HalfLN', '~norm.eps',
         '~norm.elementwise_affine'):
            'cora/HalfLN/L2,~norm.elementwise_affine,~norm.eps,seed=0',
        # The option's own class: the option.
        ('norm=layernorm', 'norm._target_=torch.nn.LayerNorm'):
            'cora/layernorm/L2,seed=0',
        # An option of the search path.
        ('norm=halfln', path): 'cora/halfln/L2,seed=0',
        ('norm=halfln', 'norm.factor=0.25', path):
            'cora/halfln/L2,norm.factor=0.25,seed=0',
    }
    for overrides, folder in runs.items():
        run, job = _run_dirs(hydra_job, *overrides)
        assert str(run) == folder
        assert job == '0-' + folder.replace('/', '-')


def test_summary_line_names_what_trains():
    from gnorm.train import node
    results = {'selected_epoch': 7, 'train_acc': 0.9857, 'val_acc': 0.158,
               'test_acc': 0.8160, 'runtime_s': 1.25, 'device': 'cpu',
               'path': 'out/results.json', 'choices': {'norm': 'none'},
               'names': {'norm': 'HalfLN'}}
    cfg = compose_train('layers=2', 'norm._target_=mynorm.HalfLN')
    assert node.summary(results, cfg).startswith('cora L=2 HalfLN seed=0 |')
    del results['names']  # a record of before names: from the choice
    assert node.summary(results, cfg).startswith('cora L=2 HalfLN seed=0 |')
    del results['choices']  # trained outside Hydra: the class
    assert node.summary(results, cfg).startswith('cora L=2 HalfLN seed=0 |')


def test_your_own_norm_as_the_guide_shows_it(user_norm):
    r"""docs/training.rst, "Your own norm", from a folder outside the
    repository with the user's module on PYTHONPATH: an option of
    hydra.searchpath, or norm=none norm._target_=...; each run is named
    by what it trains in its summary line, folder, results.json and
    gnorm.results' rows."""
    from gnorm.results import aggregate, load_runs
    root = Path(__file__).resolve().parents[1]
    env = {'PYTHONPATH': os.pathsep.join([str(user_norm), str(root)])}
    tiny = ['dataset=csbm', 'dataset.num_nodes=120', 'layers=2',
            'train.epochs=2', 'train.progress=false']
    ways = {'halfln': ['norm=halfln', 'hydra.searchpath=[file://conf]'],
            'HalfLN': ['norm=none', 'norm._target_=mynorm.HalfLN']}
    for name, args in ways.items():
        proc = _cli(*tiny, *args, cwd=user_norm, env=env)
        assert proc.returncode == 0, proc.stderr
        line = proc.stdout.splitlines()[-1]
        assert line.startswith(f'csbm L=2 {name} seed=0 |')
        path = Path(line.rsplit(' | ', 1)[1])
        assert user_norm / 'outputs' / 'csbm' / name in path.parents
        assert path.parent.parent.name == \
            'L2,dataset.num_nodes=120,train.epochs=2,seed=0'
        results = json.loads(path.read_text())
        assert results['names']['norm'] == name
        assert results['choices']['norm'] == args[0].split('=')[1]
        assert results['config']['norm']['_target_'] == 'mynorm.HalfLN'
        assert 'HalfLN(' in results['model']
    rows = aggregate(load_runs(user_norm / 'outputs'), ['norm'])
    assert [(r['norm'], r['runs']) for r in rows] == [('HalfLN', 1),
                                                     ('halfln', 1)]
    # LayerNorm's keys with another class: one line, both fixes.
    proc = _cli(*tiny, 'norm=layernorm', 'norm._target_=mynorm.HalfLN',
                cwd=user_norm, env=env)
    assert proc.returncode == 2
    assert proc.stderr == (
        'error: cannot build the model: norm._target_=mynorm.HalfLN takes no '
        'norm.eps, norm.elementwise_affine; '
        'pass norm=none norm._target_=mynorm.HalfLN (an option without '
        'keys), or drop them: ~norm.eps ~norm.elementwise_affine\n')
