import contextlib
import csv
import json
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch_geometric.loader import DataLoader

import gnorm.train.epoch_log as epoch_log
import gnorm.train.graph as graph
from gnorm.data.molecules import zinc_fixture
from gnorm.errors import ConfigError, GnormError, TrainingError
from gnorm.models import Graphormer
from gnorm.monitor import CollapseMonitor
from gnorm.results import aggregate, load_runs
from gnorm.train import check_choices, check_config, train
from gnorm.train.checkpoints import _generators
from gnorm.train.collapse import GRAPH_METRICS
from gnorm.train.run import train_runs
from conftest import (MIRROR, compose_train, free_port, join_gloo,
                      needs_mirror)

ROOT = Path(__file__).resolve().parents[1]


# A tiny Graphormer on 250 graphs of the ZINC fixture: well under 1 s/epoch.
TINY = ['dataset=zinc_fixture', 'dataset.limit=250', 'model=graphormer',
        'norm=sepnorm',
        'layers=1', 'model.hidden_channels=16', 'model.num_heads=2',
        'model.ffn_channels=16', 'model.max_dist=3', 'train.epochs=3',
        'train.batch_size=50', 'train.warmup_steps=4', 'train.lr=1e-3',
        'train.progress=false', 'device=cpu', 'train.precision=fp32']


def _without_time(curve):
    return {k: v for k, v in curve.items() if k != 'time_s'}


def _as_csv(curve):
    r""":obj:`curve` without times, rounded as ``metrics.csv`` rounds."""
    return {k: [epoch_log.csv_value(v) for v in values]
            for k, values in _without_time(curve).items()}


@needs_mirror
def test_train_graph_writes_results(tmp_path):
    results = train(compose_train(*TINY), output_dir=tmp_path)
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert saved == json.loads(json.dumps(results))
    assert results['status'] == 'ok' and results['task'] == 'graph'
    assert results['metric'] == 'mae'
    assert results['dataset']['split_sizes'] == [250, 250, 250]
    assert (tmp_path / 'checkpoint.pt').is_file()

    curve = results['curve']
    assert curve['epoch'] == [1, 2, 3]
    assert all(len(v) == 3 for v in curve.values())
    best = results['best_epoch']
    assert results['selected_epoch'] == best
    assert curve['val_metric'][best - 1] == min(curve['val_metric'])
    # Tested at the best-validation weights, reloaded.
    assert results['test_metric'] == pytest.approx(
        curve['test_metric'][best - 1], abs=1e-6)
    assert results['val_metric'] == pytest.approx(
        curve['val_metric'][best - 1], abs=1e-6)
    assert math.isfinite(results['test_loss']) and 'test_loss' not in curve
    assert curve['val_metric'][-1] < curve['val_metric'][0]  # it learns
    assert _csv_curve(tmp_path) == _as_csv(curve)
    # collapse_metrics (true by default): the selected weights' per-layer
    # metrics on the validation graphs (250 < graph.COLLAPSE_GRAPHS).
    collapse = results['collapse']
    assert list(collapse) == ['layer', *GRAPH_METRICS, 'graphs']
    assert collapse['layer'] == [1] and collapse['graphs'] == [250]
    assert 1.0 < collapse['effective_rank'][0] <= 16.0
    with open(tmp_path / 'collapse.csv') as f:
        rows = list(csv.DictReader(f))
    assert [(r['step'], r['layer'], r['metric'], r['graphs'])
            for r in rows] == [(str(best), 'layers.0', m, '250')
                               for m in GRAPH_METRICS]
    assert [float(r['value']) for r in rows] == [
        collapse[m][0] for m in GRAPH_METRICS if collapse[m][0] is not None]


@needs_mirror
def test_a_graph_run_records_the_uniformity_of_its_node_tokens(tmp_path):
    r"""SepNorm's own metric: every layer's uniformity of each validation
    graph's node tokens, finite, in results.json and collapse.csv, and
    equal to the monitor's on the selected weights."""
    cfg = compose_train(*TINY, 'layers=2', 'train.epochs=2')
    results = train(cfg, output_dir=tmp_path)
    values = results['collapse']['uniformity']
    assert len(values) == 2 and all(-8.0 <= v <= 0.0 for v in values)
    with open(tmp_path / 'collapse.csv') as f:
        rows = [r for r in csv.DictReader(f) if r['metric'] == 'uniformity']
    assert [(r['layer'], float(r['value'])) for r in rows] == [
        ('layers.0', values[0]), ('layers.1', values[1])]
    state = torch.load(tmp_path / 'checkpoint.pt', weights_only=False)
    assert state['best_epoch'] == results['selected_epoch']
    model = graph.build_model(cfg)
    model.load_state_dict(state['best_state'])
    graphs = graph.load_splits(cfg)['valid']
    batch = graph.LayoutCollater(graphs, cfg.model.max_dist)(list(graphs))
    monitor = CollapseMonitor(model.eval(), metrics=['uniformity'],
                              dtype=torch.float64)
    with torch.no_grad(), monitor.record(0):
        graph.forward(model, batch)
    assert [r['value'] for r in monitor.records] == pytest.approx(
        values, rel=1e-9)


@needs_mirror
def test_collapse_metrics_false_records_none(tmp_path):
    results = train(compose_train(*TINY, 'train.epochs=1',
                                  'collapse_metrics=false'),
                    output_dir=tmp_path)
    assert 'collapse' not in results
    assert not (tmp_path / 'collapse.csv').exists()


def _csv_curve(folder):
    r"""metrics.csv of a run folder as a curve (without times)."""
    with open(folder / epoch_log.METRICS_CSV) as f:
        rows = list(csv.DictReader(f))
    return {k: [int(r[k]) if k == 'epoch' else float(r[k]) for r in rows]
            for k in epoch_log.CURVE if k != 'time_s'}


@contextlib.contextmanager
def _stopped_in_epoch_3(monkeypatch):
    r"""Interrupts the training in the block at its fifth evaluation (epoch
    3's validation, after the checkpoint of epoch 2)."""
    calls = []
    evaluate = graph.evaluate_runs

    def stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)
    monkeypatch.setattr(graph, 'evaluate_runs', stop)
    with pytest.raises(KeyboardInterrupt):
        yield
    monkeypatch.setattr(graph, 'evaluate_runs', evaluate)


@needs_mirror
def test_resume_continues_an_interrupted_run(tmp_path, monkeypatch):
    asked = [*TINY, 'train.epochs=4']
    full = train(compose_train(*asked), output_dir=tmp_path / 'full')

    # Stop the second run in epoch 3, after the checkpoint of epoch 2.
    with _stopped_in_epoch_3(monkeypatch):
        train(compose_train(*asked), output_dir=tmp_path / 'cut')
    stopped = json.loads((tmp_path / 'cut' / 'results.json').read_text())
    assert stopped['status'] == 'interrupted'
    assert stopped['curve']['epoch'] == [1, 2]

    resumed = train(compose_train(*asked, 'resume=true'),
                    output_dir=tmp_path / 'cut')
    assert resumed['resumed_from_epoch'] == 2
    assert _without_time(resumed['curve']) == _without_time(full['curve'])
    # metrics.csv holds each epoch once, as the uninterrupted run's.
    assert _csv_curve(tmp_path / 'cut') == _as_csv(full['curve'])
    assert resumed['test_metric'] == full['test_metric']

    # A checkpoint of another config is refused.
    with pytest.raises(ConfigError, match='another config'):
        train(compose_train(*asked, 'resume=true', 'seed=1'),
              output_dir=tmp_path / 'cut')


@needs_mirror
def test_few_steps_lower_the_loss_on_zinc_fixture():
    batch = next(iter(DataLoader(zinc_fixture(MIRROR, 'val', limit=64),
                                 batch_size=64)))
    torch.manual_seed(0)
    model = Graphormer(1, features='zinc', num_layers=2, hidden_channels=32,
                       num_heads=4, ffn_channels=32, max_dist=5, dropout=0.0,
                       input_dropout=0.0, attention_dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss = graph.batch_loss(graph.forward(model, batch), batch.y, 'mae')
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert min(losses[-3:]) < 0.8 * losses[0]


def test_lr_warmup_then_decay():
    factors = [graph.lr_factor(s, 10, 110, 0.0, 1.0) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == 1.0
    assert factors[10] == 1.0 and factors[60] == pytest.approx(0.5)
    assert factors[110] == 0.0
    assert graph.lr_factor(60, 10, 110, 0.0, 2.0) == pytest.approx(0.25)


@pytest.mark.parametrize('overrides, match', [
    (['dataset=molhiv'], 'dataset=molhiv is a graph-level task; pass '
                         'model=graphormer'),
    (['dataset=molhiv', 'model=graphormer', '+model.conv=row'],
     r'model.conv \(an option of model=gcn\)'),
    (['dataset=zinc', 'model=graphormer', 'model.max_dist=0'],
     'model.max_dist must be an integer >= 1'),
    (['dataset=zinc', 'model=graphormer', 'norm=pairnorm'],
     'not a per-token normaliser'),
    (['dataset=molhiv', 'model=graphormer', 'split=random'],
     'pass split=scaffold'),
    (['dataset=molhiv', 'model=graphormer', 'train.precision=fp16'],
     'train.precision'),
    (['dataset=zinc', 'model=graphormer', 'train.compile=true',
      'norm=contranorm'],
     r'train.compile=true compiles .* norm=contranorm cannot join'),
    (['dataset=zinc', 'model=graphormer', 'train.cuda_graph=true'],
     r'train.cuda_graph replays the full-batch node step'),
    (['dataset=zinc', 'model=graphormer', 'train.compile=maybe'],
     r'train.compile must be true or false'),
    (['dataset=zinc', 'model=graphormer', 'norm=sepnorm',
      'train.batch_size=1'],
     r'train.batch_size=1 trains on one graph per batch, and norm=sepnorm '
     r'normalises the graph token .*; pass train.batch_size >= 2'),
])
def test_bad_config_gives_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match) as info:
        check_config(compose_train(*overrides))
    assert '\n' not in str(info.value)


def test_unknown_dataset_gives_one_line():
    with pytest.raises(ConfigError, match="unknown dataset 'qm9'") as info:
        check_choices(['dataset=qm9', 'model=graphormer'])
    assert '\n' not in str(info.value)


def test_model_errors_give_one_line(tmp_path):
    cfg = compose_train('dataset=zinc_fixture', 'model=graphormer',
                   'model.num_heads=3', 'train.progress=false')
    with pytest.raises(GnormError, match='must divide') as info:
        graph.build_model(cfg)
    assert '\n' not in str(info.value)


@needs_mirror
def test_zinc_offline_cli_names_missing_files(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-m', 'gnorm.train', 'dataset=zinc',
         'model=graphormer', f'data.root={tmp_path}',
         f'hydra.run.dir={tmp_path / "run"}'],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines()
              if line.startswith('error:')]
    assert len(errors) == 1
    assert 'missing train.pickle, val.pickle, test.pickle in' in errors[0]
    assert str(tmp_path / 'zinc' / 'raw') in errors[0]


@needs_mirror
def test_long_epochs_log_steps_and_the_test_metric(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    train(compose_train(*TINY, 'train.log_steps=2', 'train.epochs=1',
                        'train.log_every=1'), output_dir=tmp_path)
    lines = [r.getMessage() for r in caplog.records]
    steps = [m for m in lines if ' step ' in m]
    assert [m.split(' | ')[0] for m in steps] == [
        'train epoch 1/1 step 2/5', 'train epoch 1/1 step 4/5']
    assert 'graphs/s' in steps[0] and 'lr ' in steps[0]
    epoch = [m for m in lines if m.startswith('train epoch 1/1 |')]
    assert len(epoch) == 1 and 'val_mae' in epoch[0] \
        and 'test_mae' in epoch[0]


@needs_mirror
def test_bucketed_run_evaluates_like_a_shuffled_one(tmp_path):
    results = train(compose_train(*TINY, 'train.bucket_chunk=2',
                                  'train.epochs=1'), output_dir=tmp_path)
    assert results['status'] == 'ok'
    # Evaluation sorted by size gives the metric of the graphs in order.
    cfg = compose_train(*TINY)
    model = graph.build_model(cfg)
    graphs = zinc_fixture(MIRROR, 'test', limit=250)
    plain = DataLoader(graphs, batch_size=50)
    order = torch.tensor([g.num_nodes for g in graphs]).sort().indices
    ordered = DataLoader(graphs, batch_sampler=[b.tolist() for b in
                                                order.split(50)])
    args = ('mae', torch.device('cpu'), False)
    assert graph.evaluate(model, ordered, *args)[0] == pytest.approx(
        graph.evaluate(model, plain, *args)[0], rel=1e-5)


@needs_mirror
@pytest.mark.parametrize('chunk', [0, 2])
def test_a_last_batch_of_one_graph_trains_with_sepnorm(tmp_path, chunk,
                                                       monkeypatch):
    r"""33 training graphs in batches of 8 leave a last batch of one graph,
    from which the graph token's BatchNorm takes no statistics: it joins
    the batch before it, and the epoch trains on every graph."""
    cfg = compose_train(*TINY, 'dataset.limit=33', 'train.batch_size=8',
                        'train.epochs=1', f'train.bucket_chunk={chunk}')
    assert cfg.norm.virtual_norm == 'batch'
    seen = []
    step = graph.Training.step

    def spy(self, batch):
        seen.append(batch.num_graphs)
        return step(self, batch)
    monkeypatch.setattr(graph.Training, 'step', spy)
    results = train(cfg, output_dir=tmp_path)
    assert results['status'] == 'ok'
    assert sorted(seen) == [8, 8, 8, 9]


@needs_mirror
def test_too_few_training_graphs_for_sepnorm_give_one_line(tmp_path):
    cfg = compose_train(*TINY, 'dataset.limit=1', 'train.batch_size=8')
    with pytest.raises(ConfigError, match=r">= 2 graphs per training batch"
                       r", but the run gets 1 training graph") as info:
        train(cfg, output_dir=tmp_path)
    assert '\n' not in str(info.value)


def test_sepnorm_experiments_compose_with_their_table():
    for name in ('sepnorm_molhiv', 'sepnorm_molhiv_cpu',
                 'sepnorm_molhiv_cpu_long'):
        cfg = compose_train(f'experiment={name}')
        check_config(cfg)
        rows = cfg.table.rows
        assert list(rows)[0] == 'sharenorm' and len(rows) == 5
        for row, sets in rows.items():  # every row's overrides compose
            norm = compose_train(f'experiment={name}', *sets).norm
            if row != 'sharenorm':
                assert row == (f"sepnorm_{norm.virtual_norm[0]}n_"
                               f"{norm.token_norm[0]}n")
    assert compose_train('experiment=sepnorm_molhiv').layers == 12


def test_sepnorm_report_is_generated_from_runs(tmp_path):
    from omegaconf import OmegaConf
    from gnorm.study.cli import main as study
    from gnorm.study.runs.runner import run_folder, run_overrides
    from gnorm.study.spec.find import compose
    from gnorm.study.spec.load import load_spec
    from gnorm.train.common import json_safe
    spec = load_spec('sepnorm_molhiv_cpu')
    for row, tests in (('sharenorm', [0.70, 0.74]), ('sepnorm_bn_ln',
                                                      [0.75])):
        for seed, test in enumerate(tests):
            folder = run_folder(tmp_path / 'runs', row, seed)
            folder.mkdir(parents=True)
            config = json_safe(OmegaConf.to_container(
                compose(run_overrides(spec, row, seed, [])), resolve=True))
            (folder / 'results.json').write_text(json.dumps({
                'status': 'ok', 'tag': row, 'test_metric': test,
                'metric': 'rocauc', 'val_metric': 0.5, 'selected_epoch': 1,
                'runtime_s': 10.0, 'device': 'cpu', 'config': config,
                'machine': {'cpu': 'X', 'threads': 1},
                'curve': {'epoch': [1, 2], 'val_metric': [0.4, 0.5]}}))
    # a run without a config is no run of the study
    stray = run_folder(tmp_path / 'runs', 'sharenorm', 2)
    stray.mkdir(parents=True)
    (stray / 'results.json').write_text(json.dumps({
        'status': 'ok', 'tag': 'sharenorm', 'test_metric': 0.1}))
    assert study(['sepnorm_molhiv_cpu', '--report-only', '--runs',
                  str(tmp_path / 'runs'), '--out', str(tmp_path)]) == 0
    md = (tmp_path / 'sepnorm_molhiv_cpu.md').read_text()
    assert '| ShareNorm (LayerNorm) | 2/5 (too few to decide) | 72.00 ± ' \
        '2.00 |' in md
    assert ('| 1/5 (too few to decide) | 75.00 ± 0.00 | 50.00 ± 0.00 | '
            '75.64 | 2 | 1 | 10 s |') in md
    # One paired seed: no interval, not enough to decide; the curves hold
    # no test metric, so no last-epoch difference.
    assert ('| SepNorm BN+LN | 1: 0 | +5.00 | +5.00 (n=1, no interval) |  | '
            'no paired seeds |') in md
    assert 'missing' in md and 'cpu: X, 1 thread (3 runs)' in md
    assert (tmp_path / 'sepnorm_molhiv_cpu_val.png').is_file()


class _CustomNorm(torch.nn.Module):
    r"""A user's norm with a submodule: torch's repr spans lines."""
    def __init__(self, channels):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(channels)

    def forward(self, x, *args, **kwargs):
        return x + 0 * self.bn.weight.sum()


def test_the_model_is_logged_on_one_line(caplog):
    r"""``train.log`` gets the model on one line, even with a custom norm
    whose repr spans several."""
    cfg = compose_train(*TINY)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), _CustomNorm(4))
    assert '\n' in str(model)
    results = {}
    with caplog.at_level(logging.INFO, logger=graph.log.name):
        graph.describe(results, cfg, {'train': [0] * 3, 'valid': [0],
                                      'test': [0]}, model, 1)
    line, = [r.getMessage() for r in caplog.records
             if 'model' in r.getMessage()]
    assert '\n' not in line and '(bn): BatchNorm1d(4, eps=1e-05' in line
    assert line.startswith('zinc_fixture: 3/1/1 graphs; model Sequential(')


@pytest.mark.parametrize('metric,shown', [
    ('rocauc', 'rocauc val 78.00% test 75.50%'),  # a fraction, in %
    ('mae', 'mae val 0.7800 test 0.7550'),          # as it is
])
def test_summary_line_units(metric, shown):
    results = {'selected_epoch': 3, 'metric': metric, 'val_metric': 0.78,
               'test_metric': 0.755, 'runtime_s': 2.0, 'device': 'cpu',
               'path': 'out/results.json', 'choices': {'norm': 'sepnorm'}}
    line = graph.summary(results, compose_train(*TINY))
    assert line.split(' | ')[2] == shown


def _count_host_reads(monkeypatch, folder):
    r"""Counts the reads of tensor values by the host (``.item()``,
    ``.tolist()``, ``float()``, ``int()``, ``bool()``) made by the code of
    :obj:`folder`; returns the counter (a list)."""
    reads = []
    for name in ('item', 'tolist', '__float__', '__int__', '__bool__'):
        method = getattr(torch.Tensor, name)

        def read(self, *args, _method=method, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(folder):
                reads.append(1)
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, read)
    return reads


@needs_mirror
@pytest.mark.parametrize('log_steps, expected', [(0, 1), (4, 4), (5, 4)])
def test_an_epoch_reads_the_loss_once_per_log_interval(monkeypatch,
                                                       log_steps, expected):
    cfg = compose_train(*TINY, f'train.log_steps={log_steps}')
    batches = list(DataLoader(zinc_fixture(MIRROR, 'val', limit=64),
                              batch_size=4))  # 16 updates
    training = graph.build_training(cfg, graph.build_model(cfg),
                                    torch.device('cpu'), 0, 1, len(batches))
    reads = _count_host_reads(monkeypatch, str(Path(graph.__file__).parent))
    (loss, ) = graph.train_epoch(training, batches, 1, cfg.train)
    monkeypatch.undo()
    assert len(reads) == expected  # the log steps and the end, not 16
    assert math.isfinite(loss)


@needs_mirror
def test_a_nan_loss_is_seen_at_the_end_of_its_log_interval(monkeypatch):
    cfg = compose_train(*TINY, 'train.log_steps=4')
    batches = list(DataLoader(zinc_fixture(MIRROR, 'val', limit=64),
                              batch_size=4))
    training = graph.build_training(cfg, graph.build_model(cfg),
                                    torch.device('cpu'), 0, 1, len(batches))
    calls = []
    loss = graph.batch_loss

    def nan_at_update_6(*args):
        calls.append(1)
        return loss(*args) * (math.nan if len(calls) == 6 else 1.0)
    monkeypatch.setattr(graph, 'batch_loss', nan_at_update_6)
    with pytest.raises(TrainingError, match=r'loss became nan at epoch 1 '
                       r'\(seen at update 8/16\)'):
        graph.train_epoch(training, batches, 1, cfg.train)
    assert len(calls) == 8


@needs_mirror
def test_bf16_trains_under_autocast_on_the_cpu(tmp_path, monkeypatch):
    autocast = []
    forward = graph.forward

    def spy(model, batch):
        autocast.append((torch.is_autocast_enabled('cpu'),
                         torch.get_autocast_dtype('cpu')))
        return forward(model, batch)
    monkeypatch.setattr(graph, 'forward', spy)
    bf16 = train(compose_train(*TINY, 'train.precision=bf16',
                               'train.epochs=2'), output_dir=tmp_path / 'bf16')
    assert bf16['status'] == 'ok' and bf16['curve']['epoch'] == [1, 2]
    assert autocast and set(autocast) == {(True, torch.bfloat16)}
    # Training and evaluation run bf16 products: close to fp32, not equal.
    fp32 = train(compose_train(*TINY, 'train.epochs=2'),
                 output_dir=tmp_path / 'fp32')
    for key in ('loss', 'val_metric'):
        assert bf16['curve'][key] != fp32['curve'][key]
        assert bf16['curve'][key] == pytest.approx(fp32['curve'][key],
                                                    rel=0.05)


def _ddp_rank(rank, world, port, folder, overrides):
    r"""Process :obj:`rank` of :obj:`world` (gloo, CPU): a run of
    :obj:`overrides`, then the same run with a NaN loss at this rank's
    third update when :obj:`rank` is 1; writes each outcome to
    ``<folder>/{clean,nan}_<rank>.txt``."""
    join_gloo(rank, world, port)
    loss = graph.batch_loss
    for run in ('clean', 'nan'):
        calls = []

        def nan_on_rank_1(*args):
            calls.append(1)
            bad = run == 'nan' and rank == 1 and len(calls) == 3
            return loss(*args) * (math.nan if bad else 1.0)
        graph.batch_loss = nan_on_rank_1
        _train_and_say(folder, run, rank, overrides)
    torch.distributed.destroy_process_group()


def _train_and_say(folder, name, rank, overrides):
    r"""Trains :obj:`overrides` into ``<folder>/<name>`` and writes how it
    ended (``ok``, or the error) to ``<folder>/<name>_<rank>.txt``."""
    try:
        train(compose_train(*overrides), output_dir=Path(folder) / name)
        outcome = 'ok'
    except Exception as e:
        outcome = f'{type(e).__name__}: {e}'
    (Path(folder) / f'{name}_{rank}.txt').write_text(outcome)


@pytest.mark.slow
@needs_mirror
@pytest.mark.parametrize('world', [2, 4])
def test_ddp_ranks_with_unequal_buckets_finish_or_fail_together(tmp_path,
                                                                 world):
    # 250 graphs, batches of 20 in chunks of 2: 13 batches, which no
    # world divides ([7, 6] or [4, 3, 3, 3] before padding).
    overrides = [*TINY, 'train.bucket_chunk=2', 'train.batch_size=20',
                 'train.epochs=2', 'train.log_steps=2']
    context = torch.multiprocessing.spawn(
        _ddp_rank, args=(world, free_port(), str(tmp_path), overrides),
        nprocs=world, join=False)
    end = time.monotonic() + 150
    while not context.join(timeout=1):
        if time.monotonic() > end:
            for process in context.processes:
                process.kill()
            pytest.fail(f'{world} DDP processes still running after 150 s')
    clean = [(tmp_path / f'clean_{r}.txt').read_text() for r in range(world)]
    assert clean == ['ok'] * world
    saved = json.loads((tmp_path / 'clean' / 'results.json').read_text())
    assert saved['world_size'] == world and saved['curve']['epoch'] == [1, 2]
    nan = [(tmp_path / f'nan_{r}.txt').read_text() for r in range(world)]
    # Rank 1's loss is NaN at update 3: every rank stops at the read of
    # update 4 with the same error.
    assert nan == [nan[0]] * world
    assert nan[0].startswith('TrainingError: the training loss became nan '
                             'at epoch 1 (seen at update 4/')



def _world_of_2(rank, world, port, folder, overrides):
    r"""Process :obj:`rank` of 2 (gloo, CPU): asks to resume the 1-process
    run in ``one`` and the 1-process checkpoint in ``cut``, then trains
    ``two``; writes each outcome to ``<folder>/<name>_<rank>.txt``."""
    join_gloo(rank, world, port)
    for name, extra in (('one', ['resume=true']), ('cut', ['resume=true']),
                        ('two', [])):
        _train_and_say(folder, name, rank, [*overrides, *extra])
    torch.distributed.destroy_process_group()


@pytest.mark.slow
@needs_mirror
def test_two_processes_are_another_result_than_one(tmp_path):
    overrides = [*TINY, 'train.epochs=2']
    train(compose_train(*overrides), output_dir=tmp_path / 'one')
    # A checkpoint of one process, its run unfinished.
    (tmp_path / 'cut').mkdir()
    (tmp_path / 'cut' / 'checkpoint.pt').write_bytes(
        (tmp_path / 'one' / 'checkpoint.pt').read_bytes())
    torch.multiprocessing.spawn(
        _world_of_2, args=(2, free_port(), str(tmp_path), overrides),
        nprocs=2, join=True)

    def outcomes(name):
        return {(tmp_path / f'{name}_{r}.txt').read_text() for r in (0, 1)}
    (one, ) = outcomes('one')
    assert one.startswith('ConfigError: ') and one.endswith(
        'holds a finished run of another config (world_size 1 vs 2: '
        'another number of processes); pass resume=false or another output '
        'folder')
    (cut, ) = outcomes('cut')
    assert cut.startswith('ConfigError: ') and \
        'checkpoint.pt belongs to another config (world_size 1 vs 2' in cut
    assert outcomes('two') == {'ok'}
    rows = aggregate(load_runs(tmp_path / 'one', tmp_path / 'two'),
                     ['world_size'], ['test_metric'])
    assert [(r['world_size'], r['runs']) for r in rows] == [(1, 1), (2, 1)]


def _runs(tmp_path, name, seeds, *overrides):
    cfgs = [compose_train(*TINY, 'train.data_seed=7', f'seed={s}', *overrides)
            for s in seeds]
    return train_runs(cfgs, [str(tmp_path / name / f'seed{s}')
                             for s in seeds])


def _same_run(a, b):
    assert a['status'] == b['status'] == 'ok'
    for key, values in _without_time(a['curve']).items():
        assert b['curve'][key] == pytest.approx(values, abs=1e-5), key
    assert b['best_epoch'] == a['best_epoch']
    assert b['test_metric'] == pytest.approx(a['test_metric'], abs=1e-5)


@needs_mirror
def test_a_seed_alone_equals_the_seed_among_others(tmp_path):
    r"""With train.data_seed, the seeds of a sweep train as one
    StackedGraphormer; each run's curve, selection and metrics are those
    of the run alone (its weights, dropout masks and gradient clipping are
    its own), and the stack's checkpoints resume a run alone."""
    seeds = [0, 1]
    together = _runs(tmp_path, 'together', seeds, 'train.grad_clip=0.05')
    alone = [_runs(tmp_path, 'alone', [s], 'train.grad_clip=0.05')[0]
             for s in seeds]
    assert [r['batch_runs'] for r in together] == [2, 2]
    assert [r['batch_runs'] for r in alone] == [1, 1]
    for a, b in zip(alone, together):
        _same_run(a, b)
        # Run by run; the weights agree to ~1e-5, which the pairwise
        # metrics (MAD: pairs counted above a distance threshold; MADGap:
        # the difference of two close means) amplify to ~1e-3.
        for key, values in a['collapse'].items():
            rel = 1e-2 if key in ('mad', 'mad_gap') else 1e-4
            assert b['collapse'][key] == pytest.approx(values, rel=rel,
                                                       abs=1e-6), key
    # The seeds differ, and the clipping matters here.
    assert alone[0]['curve']['loss'] != alone[1]['curve']['loss']
    unclipped = _runs(tmp_path, 'unclipped', [0])[0]
    assert unclipped['curve']['loss'] != alone[0]['curve']['loss']


@pytest.mark.parametrize('seeds', [[3], [0, 1, 2]])
def test_dropout_masks_reuse_no_numbers_of_the_initial_weights(seeds):
    r"""With train.data_seed, a run's dropout generator (CPU) does not
    start where the weights of any run were drawn from (torch.manual_seed
    of its seed): the first dropout mask is not made of the numbers that
    drew the first weights."""
    cfgs = [compose_train(*TINY, 'train.data_seed=7', 'model.dropout=0.1',
                          f'seed={s}') for s in seeds]
    model = graph.one_model([graph.init_model(c) for c in cfgs], cfgs,
                            torch.device('cpu'))
    drawn = [torch.rand(64, generator=g)
             for g in _generators(model)]
    for s in seeds:
        torch.manual_seed(s)  # what the weights of seed s were drawn from
        weights = torch.rand(64)
        assert not any(torch.equal(weights, d) for d in drawn)
    assert len({tuple(d.tolist()) for d in drawn}) == len(seeds)


@needs_mirror
def test_a_stack_resumes_from_its_checkpoints(tmp_path, monkeypatch):
    seeds = [0, 1]
    full = _runs(tmp_path, 'full', seeds)
    with _stopped_in_epoch_3(monkeypatch):
        _runs(tmp_path, 'cut', seeds)
    # One run resumes alone from the stack's checkpoint, both together.
    (alone, ) = _runs(tmp_path, 'cut', [1], 'resume=true')
    assert alone['resumed_from_epoch'] == 2
    _same_run(full[1], alone)
    resumed = _runs(tmp_path, 'cut', seeds, 'resume=true')
    assert resumed[0]['resumed_from_epoch'] == 2
    for a, b in zip(full, resumed):
        _same_run(a, b)


@pytest.mark.parametrize('overrides, stacks', [
    ([], False), (['train.data_seed=0'], True),
    (['train.data_seed=0', 'norm=layernorm'], True),
    (['train.data_seed=0', 'norm=none'], True),
    (['train.data_seed=0', 'norm._target_=gnorm.nn.NoSuchNorm'], False),
    (['train.data_seed=0', 'norm=contranorm'], False),
    (['train.data_seed=0', 'train.compile=true'], False)])
def test_which_runs_train_as_one_model(overrides, stacks):
    keys = [graph.batch_key(compose_train(*TINY, *overrides, f'seed={s}'))
            for s in (0, 1)]
    assert (keys[0] is not None and keys[0] == keys[1]) == stacks
    other = graph.batch_key(compose_train(*TINY, *overrides, 'seed=0',
                                          'train.lr=0.5'))
    assert other is None or other != keys[0]
