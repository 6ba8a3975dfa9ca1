r"""The GPU queue (``python -m gnorm.study queue``): it takes the cells a
study marks as GPU work (or those selected), in the priority's order,
trains what fits in the budget into run folders the study reads, keeps
what finished when interrupted and trains nothing twice."""
import json
import re
from pathlib import Path

import pytest

from gnorm.bench.report import cpu_name
from gnorm.results import load_runs
from gnorm.results.keys import record_identity
from gnorm.study.cli import main as study
from gnorm.study.queue import command as queue
from gnorm.study.queue import config as queue_config
from gnorm.study.queue import plan as queue_plan
from gnorm.study.queue import run as queue_run
from gnorm.study.runs import cost as queue_cost
from gnorm.study.runs import record as queue_record
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import REPO, SpecError

pytestmark = pytest.mark.usefixtures('one_thread', 'no_committed_runs')


@pytest.fixture
def no_committed_runs(tmp_path, monkeypatch):
    r"""No committed runs give a prior (a test gives its own)."""
    (tmp_path / 'committed').mkdir()
    monkeypatch.setattr(queue_cost, 'RUNS', tmp_path / 'committed')

SPEC = '''# @package _global_
collapse_metrics: false
train:
  epochs: 2
dataset:
  num_nodes: 60
table:
  name: {name}
  kind: depth
  datasets: [csbm]
  depths: [1, 2]
  seeds: [0, 1]
  rows:
    none: [norm=none]
    layernorm: [norm=layernorm]
  not_run:
    - {{depths: [2], why: "GPU work (a test)"}}
'''
NAME = 'tiny_queue'


def tiny_spec(folder: Path, name: str = NAME) -> Path:
    r"""A depth study on csbm, 2 rows, depths 1 and 2, 2 seeds, 2 epochs,
    its depth-2 cells marked as GPU work; returns its file."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f'{name}.yaml'
    path.write_text(SPEC.format(name=name))
    return path


@pytest.fixture(scope='module')
def spec(tmp_path_factory):
    return load_spec(str(tiny_spec(tmp_path_factory.mktemp('spec'))))


def write_config(folder: Path, text: str = 'priority: []\n') -> Path:
    path = folder / 'queue.yaml'
    path.write_text(text)
    return path


def args(tmp_path, *more):
    return ['--device', 'cpu', '--work', 'gpu', '--out',
            str(tmp_path / 'out'), '--config', str(write_config(tmp_path)),
            *more]


def cells_of(items):
    return [(i.cell['row'], i.cell['depth']) for i in items]


def test_the_queue_takes_the_cells_marked_gpu_work(spec, tmp_path, capsys):
    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cuda', 'GPU work')
    assert sorted(cells_of(items)) == [('layernorm', 2), ('none', 2)]
    assert all(len(i.left) == 2 for i in items)
    assert queue_plan.pending([spec], out, 'cpu', 'CPU work') == []
    chosen = queue_plan.pending([spec], out, 'cpu', 'CPU work',
                                dict(rows=['none'], depths=[1]))
    assert cells_of(chosen) == [('none', 1)]
    assert queue.main(['--list', *args(tmp_path)], [spec]) == 0
    said = capsys.readouterr().out
    assert '2 cells pending (marked GPU work), 4 runs to train' in said
    assert 'no rate for this device yet' in said
    assert 'last measured GPU: none' in said
    listed = [line.split()[2:5] for line in said.splitlines()
              if NAME in line]
    assert sorted(listed) == [['csbm', 'layernorm', 'L=2'],
                              ['csbm', 'none', 'L=2']]


def test_the_priority_orders_the_cells_and_a_gpu_gives_seconds(
        spec, tmp_path, capsys):
    config = write_config(tmp_path, f'''priority:
  - {{study: {NAME}, rows: [layernorm]}}
calibration: {{"Some GPU": 1.0e-3}}
''')
    conf = queue_config.read_config(config, [NAME])
    items = queue_plan.order(queue_plan.pending([spec], tmp_path, 'cpu',
                                                'GPU work'),
                             conf['priority'])
    assert cells_of(items) == [('layernorm', 2), ('none', 2)]
    assert [i.place for i in items] == [0, 1]
    assert queue.main(['--list', '--device', 'cpu', '--work', 'gpu',
                       '--config', str(config), '--out',
                       str(tmp_path / 'out')], [spec]) == 0
    said = capsys.readouterr().out
    assert 'last measured GPU: Some GPU, 0.001 s per unit' in said
    first, second = [line for line in said.splitlines() if NAME in line]
    assert 'layernorm' in first and 'none' in second
    seconds = 1e-3 * items[0].units
    assert f'{seconds:.0f} s' in first or f'{seconds / 60:.1f} min' in first


def test_studies_that_share_runs_train_them_once(spec, tmp_path):
    r"""A study whose runs folder is another's (table3_fair and
    filtered_heterophily): a run both hold trains once, for the cell
    first in the queue."""
    other = tiny_spec(tmp_path, 'tiny_queue_b')
    other.write_text(other.read_text().replace(
        'kind: depth', f'kind: depth\n  runs: {spec.runs_dir()}'))
    other = load_spec(str(other))
    config = write_config(tmp_path, 'priority: [{study: tiny_queue_b}]\n')
    items = queue_plan.claim(queue_plan.order(
        queue_plan.pending([spec, other], tmp_path / 'out', 'cpu',
                           'GPU work'),
        queue_config.read_config(config,
                                 [NAME, 'tiny_queue_b'])['priority']))
    assert [i.study.spec.name for i in items] == ['tiny_queue_b'] * 2
    assert sum(len(i.left) for i in items) == 4


def test_the_budget_decides_how_many_cells_train(spec, tmp_path,
                                                 monkeypatch, capsys):
    now, trained = [0.0], []
    monkeypatch.setattr(queue_run, 'clock', lambda: now[0])
    real = queue_run.train_cell

    def ten_seconds(item):  # every cell takes 10 s on the queue's clock
        trained.append(item.label)
        now[0] += 10
        return real(item)

    monkeypatch.setattr(queue_run, 'train_cell', ten_seconds)
    out = tmp_path / 'out'
    assert queue.main([*args(tmp_path), '--budget-s', '0'], [spec]) == 0
    assert trained == [] and not load_runs(out)
    assert queue.main([*args(tmp_path), '--budget-s', '15'], [spec]) == 0
    said = capsys.readouterr().out
    assert len(trained) == 1 and said.count(': skipped') == 1
    assert 'trained 1 cells' in said
    assert len(load_runs(out)) == 2  # the cell's two seeds
    record = json.loads((out / '.queue.json').read_text())[cpu_name()]
    cell, = record['cells']  # 10 s: the epochs (steady) and the set-up
    assert cell['seconds'] == 10 and cell['steady_s'] + cell['setup_s'] == 10
    assert record['seconds'] == cell['steady_s'] < 10
    # The record calibrates the next call: 10 s a cell fits in 12.
    assert queue.main([*args(tmp_path), '--budget-s', '12'], [spec]) == 0
    assert len(trained) == 2 and len(load_runs(out)) == 4
    assert 'estimate 10 s' in capsys.readouterr().out


def test_an_interrupt_keeps_the_finished_cell_and_a_rerun_goes_on(
        spec, tmp_path, monkeypatch, capsys):
    import gnorm.train
    real, calls = gnorm.train.train_runs, []

    def stop_at_second_cell(*a):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(gnorm.train, 'train_runs', stop_at_second_cell)
    out = tmp_path / 'out'
    assert queue.main(args(tmp_path), [spec]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'interrupted: the 1 cells finished are kept in {out}; '
                   f'run the same command again to go on']
    assert len(load_runs(out)) == 2
    assert queue.main(args(tmp_path), [spec]) == 0
    assert len(calls) == 3  # only the second cell
    assert queue.main(args(tmp_path), [spec]) == 0
    assert len(calls) == 3  # a rerun trains nothing
    runs = load_runs(out)
    assert len(runs) == 4 and {r['status'] for r in runs} == {'ok'}
    assert {r['device'] for r in runs} == {'cpu'}
    assert {r['machine']['cpu'] for r in runs} == {cpu_name()}
    # <out>/<the study's runs folder>/<run>, named as the study names it
    folders = {Path(r['_path']).parent.relative_to(out).as_posix()
               for r in runs}
    assert folders == {f'{NAME}/dataset=csbm,layers=2,norm={norm},'
                       f'seed={seed},tag={norm}'
                       for norm in ('none', 'layernorm') for seed in (0, 1)}
    # Where the runs folders do not travel (a device), a list of digests.
    listed = tmp_path / 'finished.txt'
    assert queue.main([*args(tmp_path), '--write-finished', str(listed)],
                      [spec]) == 0
    assert len(listed.read_text().split()) == 4
    capsys.readouterr()
    assert queue.main([*args(tmp_path), '--out', str(tmp_path / 'bare'),
                       '--finished', str(listed), '--list'], [spec]) == 0
    assert '0 cells pending' in capsys.readouterr().out


def test_bad_input_is_one_line(tmp_path, capsys):
    assert study(['queue', '--studies', 'nope', '--list']) == 2
    assert capsys.readouterr().err.startswith("error: unknown study 'nope'")
    assert study(['queue', '--budget-s', '-1']) == 2
    assert capsys.readouterr().err == \
        'error: --budget-s must be >= 0 seconds, got -1\n'
    for text, says in (
            ('priority: [{study: nope}]', 'a priority entry takes'),
            ('priority: [{study: strong_depth, datasets: tolokers}]',
             'optional lists datasets'),
            ('calibration: {"a GPU": -1}', 'must be seconds per unit'),
            ('order: []', "unknown key 'order'")):
        with pytest.raises(SpecError, match=says):
            queue_config.read_config(write_config(tmp_path, text + '\n'))


def test_a_selection_names_cells_of_the_studies(spec, tmp_path, capsys):
    assert queue.main([*args(tmp_path), '--list', '--rows', 'mine'],
                      [spec]) == 2
    assert 'error: --rows mine: no study of the queue has it' in \
        capsys.readouterr().err
    assert queue.main(['--list', '--device', 'cpu', '--depths', '1',
                       '--config', str(write_config(tmp_path)), '--out',
                       str(tmp_path / 'out')], [spec]) == 0
    said = capsys.readouterr().out
    assert '2 cells pending (selected: depths 1), 4 runs' in said


def test_a_failing_cell_is_counted_and_the_queue_goes_on(
        spec, tmp_path, monkeypatch, capsys):
    r"""An error of one cell (out of memory, a failed capture) is one line;
    the cells after it train."""
    import gnorm.train
    real, calls = gnorm.train.train_runs, []

    def out_of_memory_first(*a):
        calls.append(a)
        if len(calls) == 1:
            raise RuntimeError('CUDA out of memory.\nTried to allocate 2 GiB')
        return real(*a)

    monkeypatch.setattr(gnorm.train, 'train_runs', out_of_memory_first)
    assert queue.main(args(tmp_path), [spec]) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines()
              if line.startswith('error: ')]
    assert len(errors) == 1 and errors[0].startswith(f'error: {NAME} csbm ')
    assert errors[0].endswith(' L=2: CUDA out of memory. Tried to allocate '
                              '2 GiB')
    assert 'trained 1 cells' in captured.out and '1 failed' in captured.out
    assert len(load_runs(tmp_path / 'out')) == 2


def _graphs_on_the_cpu(m, capture):
    r"""``train.cuda_graph`` allowed on the CPU, with :obj:`capture` as the
    graphs' capture (a stand-in: the CPU has no CUDA graphs), after one
    warm-up epoch (the tiny study trains 2)."""
    import functools
    from gnorm.train import graphed, node, node_loop
    m.setattr(node, 'cuda_graph',
              lambda cfg, device: bool(cfg.train.get('cuda_graph')))
    m.setattr(graphed, 'cuda_capture', lambda generators=None: capture)
    m.setattr(node_loop, 'GraphedStep',
              functools.partial(graphed.GraphedStep, warmup=1))


def _capture_fails(fn):
    raise RuntimeError('operation not permitted when stream is capturing')


def test_a_cell_failing_as_cuda_graphs_trains_again_eagerly(spec, tmp_path,
                                                           capsys):
    r"""``--cuda-graph``: a cell whose step cannot be captured (here: a
    stand-in capture that raises what CUDA raises) trains again eagerly,
    and so does every cell after it; the runs are those an eager call
    trains (same folders), recorded under the eager rate."""
    import gnorm.study.runs.compose
    import gnorm.train
    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cpu', 'GPU work', graphed=True)
    assert [i.graphed for i in items] == [True, True]
    first = items[0]
    assert first.study.composer.config(first.left[0]).train.cuda_graph
    graphed = queue_cost.Rate('cpu (CUDA graphs)')
    eager = queue_cost.Rate('cpu')
    folders = sorted(str(r['dir']) for i in items for r in i.left)
    calls, composed = [], []
    real = gnorm.train.train_runs
    real_compose = gnorm.study.runs.compose.compose_cells

    def counted(*a):
        calls.append(a)
        return real(*a)

    def compose_counted(*a):
        composed.append(a)
        return real_compose(*a)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(gnorm.train, 'train_runs', counted)
        m.setattr(gnorm.study.runs.compose, 'compose_cells', compose_counted)
        _graphs_on_the_cpu(m, _capture_fails)
        counts = queue_run.train(items, graphed, queue_run.INF, out, 'cpu',
                                 eager=eager)
    assert counts == dict(trained=2, failed=0, skipped=0, unreached=0,
                          stopped=0, elsewhere=0)
    # the study's remaining cells composed eagerly at once; the caller's
    # list is left as it was
    assert len(composed) == 1 and len(composed[0][1]) == 2
    assert [i.graphed for i in items] == [True, True]
    said = capsys.readouterr()
    assert said.out.count('failed as CUDA graphs; it and the cells after '
                          'it train eagerly') == 1
    assert 'could not be captured as a CUDA graph: RuntimeError: ' \
        'operation not permitted when stream is capturing' in said.err
    assert len(calls) == 3  # the first cell twice, the second eagerly
    runs = load_runs(out)
    assert len(runs) == 4 and {r['status'] for r in runs} == {'ok'}
    assert sorted(str(Path(r['_path']).parent) for r in runs) == folders
    assert not any(r['config']['train'].get('cuda_graph') for r in runs)
    record = queue_record.read_record(out)
    assert set(record) == {'cpu'} and graphed.cells == []
    assert [c['cuda_graph'] for c in record['cpu']['cells']] == [False] * 2
    with pytest.raises(ValueError, match='need the eager rate'):
        queue_run.train(items, graphed, queue_run.INF, out, 'cpu')


def test_cuda_graphs_need_cuda(tmp_path, spec, capsys):
    assert queue.main([*args(tmp_path), '--cuda-graph'], [spec]) == 2
    assert capsys.readouterr().err == (
        'error: --cuda-graph replays the steps as CUDA graphs and needs '
        '--device cuda, got cpu\n')


def test_a_diverging_cell_is_a_failed_cell_not_a_capture_failure(
        spec, tmp_path, capsys):
    r"""A run whose loss turns NaN under CUDA graphs fails its cell once;
    the queue does not fall back to eager training, trains the next cell
    as graphs, and a cell tried again trains only its unfinished runs
    (the queue resumes)."""
    from gnorm.errors import TrainingError
    import gnorm.train
    from test_cuda import _recorded
    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cpu', 'GPU work', graphed=True)
    real = gnorm.train.train_runs
    calls = []

    def first_diverges(cfgs, *a):
        calls.append([c.train.cuda_graph for c in cfgs])
        if len(calls) == 1:
            real(cfgs[:1], *(x[:1] for x in a))  # one run finishes
            raise TrainingError('the training loss became nan at epoch 2')
        return real(cfgs, *a)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(gnorm.train, 'train_runs', first_diverges)
        _graphs_on_the_cpu(m, _recorded)
        counts = queue_run.train(items, queue_cost.Rate('cpu (CUDA graphs)'),
                                 queue_run.INF, out, 'cpu',
                                 eager=queue_cost.Rate('cpu'))
    assert counts == dict(trained=1, failed=1, skipped=0, unreached=0,
                          stopped=0, elsewhere=0)
    said = capsys.readouterr().out
    assert 'a run diverged (recorded as failed); the queue goes on with ' \
        'CUDA graphs' in said and 'train eagerly' not in said
    assert calls == [[True, True], [True, True]]  # both cells as graphs
    assert 'resume=true' in queue_plan.overrides('cpu', True)
    # tried again, the diverged cell trains only the run it lacks
    again = queue_plan.pending([spec], out, 'cpu', 'GPU work', graphed=False)
    assert [len(i.left) for i in again] == [1]


@pytest.mark.parametrize('text,match', [
    ('priority: [\n', 'is not a YAML mapping: '),
    ('- a\n- b\n', 'is not a YAML mapping of priority and calibration'),
    ('calibration: {H200: .nan}\n', "calibration of 'H200' must be seconds "
                                    'per unit \\(a finite number > 0\\), '
                                    'got nan'),
    ('calibration: {H200: -1}\n', 'got -1'),
])
def test_a_bad_queue_config_is_one_line(tmp_path, text, match):
    path = write_config(tmp_path, text)
    with pytest.raises(SpecError, match=match) as info:
        queue_config.read_config(path)
    assert '\n' not in str(info.value)


def test_a_priority_entry_that_names_nothing_is_refused(spec, tmp_path):
    path = write_config(tmp_path, f'priority:\n  - {{study: {NAME}, '
                        f'datasets: [cbsm]}}\n')
    config = queue_config.read_config(path, [NAME])
    with pytest.raises(SpecError, match=f'priority entry of {NAME} '
                       "names dataset 'cbsm', which the study does not "
                       'have \\(it has csbm\\)'):
        queue_config.check_priority(config['priority'], [spec], path)
    queue_config.check_priority([{'study': NAME, 'depths': [2]}], [spec], path)


def test_interruptions_exit_as_their_signal_says(spec, tmp_path, capsys,
                                                 monkeypatch):
    r"""Ctrl-C while planning: 130, one line, nothing written; SIGTERM
    while training: 143, as gnorm.errors.Interrupted says."""
    import signal
    from gnorm.errors import Interrupted

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(queue, 'prepare', stopped)
    assert queue.main(args(tmp_path), specs=[spec]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ['interrupted while planning; nothing was trained or '
                   'written']
    assert not (tmp_path / 'out').exists()
    monkeypatch.undo()

    def terminated(*a, **k):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(queue_run.Queue, 'run', terminated)
    assert queue.main(args(tmp_path), specs=[spec]) == 143


# ------------------------------------------------ a budget that binds


def committed_run(folder: Path, loop_s: float, runtime_s: float,
                  name: str = None) -> None:
    r"""A committed run of this machine's CPU in :obj:`folder` (the tiny
    study's first cell: csbm, 2 layers, 2 epochs)."""
    run = folder / 'study' / 'run'
    run.mkdir(parents=True)
    (run / 'results.json').write_text(json.dumps(dict(
        status='ok', device='cpu', machine=dict(cpu=name or cpu_name()),
        choices=dict(dataset='csbm', norm='none'), overrides=[],
        config=dict(layers=2, model=dict(hidden_channels=32)),
        curve=dict(epoch=[1, 2]), batch_runs=1, loop_s=loop_s,
        runtime_s=runtime_s)))


def test_a_linear_time_contranorm_costs_its_kernel_not_n_squared():
    r"""Per layer and epoch, the Nystrom kernel adds a unit per node and
    landmark (its own k where the row sets one), ContraNorm-D's channel
    softmax DUAL_UNITS per node, the exact layer a sixth per node pair;
    a zero scale (the identity) adds nothing."""
    from gnorm.study.runs import compose
    nodes, edges = compose._SIZE['minesweeper']
    plain = compose.cost('minesweeper', 3, ['norm=batchnorm'])
    assert plain == 3 * (edges + 32 * nodes)
    extra = {('norm=contranorm_lin',): 3 * nodes * compose.LANDMARKS,
             ('norm=contranorm_lin', 'norm.landmarks=16'): 3 * nodes * 16,
             ('norm=contranorm', 'norm.kernel=nystrom'):
                 3 * nodes * compose.LANDMARKS,
             ('norm=contranorm_lin', 'norm.kernel=exact'):
                 3 * (nodes * nodes // 6),
             ('norm=contranorm',): 3 * (nodes * nodes // 6),
             ('norm=contranorm', 'norm.scale=0.0'): 0,
             ('norm=contranorm_d',): 3 * nodes * compose.DUAL_UNITS}
    for base, more in extra.items():
        assert compose.cost('minesweeper', 3, list(base)) == plain + more, \
            base
    assert compose.cost('minesweeper', 3, ['norm=contranorm_lin'], 64, 10) \
        == 20 * (plain + extra[('norm=contranorm_lin',)])


def test_the_cost_units_fit_the_committed_minesweeper_runs():
    r"""Seconds per unit of tuned_depth's committed Minesweeper runs, the
    median over each row's runs: the linear-time ContraNorms' within a
    factor 1.5 of batchnorm's (their units count their kernels; without
    them the Nystrom row took 2.6 times batchnorm's seconds per unit)."""
    from gnorm.study.runs.index import run_seconds, run_units
    per_unit = {}
    for path in (REPO / 'experiments' / 'runs' / 'tuned_depth').glob(
            '*minesweeper*/results.json'):
        run = json.loads(path.read_text())
        if run.get('status') == 'ok':
            per_unit.setdefault(run['choices']['norm'], []).append(
                run_seconds(run)['steady_s'] / run_units(run))
    median = {norm: sorted(v)[len(v) // 2] for norm, v in per_unit.items()}
    for norm in ('contranorm_lin', 'contranorm_d'):
        assert 1 / 1.5 < median[norm] / median['batchnorm'] < 1.5, median


def test_committed_runs_give_a_steady_rate_and_their_set_up_apart(
        tmp_path):
    from gnorm.study.runs.compose import cost
    committed_run(tmp_path / 'runs', loop_s=3.0, runtime_s=5.0)
    found = queue_cost.committed_rates(tmp_path / 'runs')[cpu_name()]
    units = cost('csbm', 2, ['norm=none'], 32, 2)
    assert found['seconds_per_unit'] == pytest.approx(3.0 / units)
    assert found['setup_s'] == pytest.approx(2.0) and found['runs'] == 1
    rate = queue_cost.rate_of(tmp_path, cpu_name(), 'cpu', {},
                              committed={cpu_name(): found})
    assert rate.prior == pytest.approx(queue_cost.PRIOR_SCALE * 3 / units)
    assert rate.said().endswith(f'(prior: 1 committed runs on {cpu_name()}'
                                f', x{queue_cost.PRIOR_SCALE:g})')
    gpu = queue_cost.rate_of(tmp_path, 'Some GPU', 'cuda', {'GPU A': 1e-9},
                             committed={})
    assert gpu.prior == 1e-9 * queue_cost.OTHER_GPU_SCALE
    assert 'the rate of GPU A' in gpu.said()
    none = queue_cost.rate_of(tmp_path, 'Some GPU', 'cuda', {}, committed={})
    assert none.estimate(1e6) is None
    assert none.said().startswith('no rate for this device yet')


def test_before_any_calibration_a_prior_from_committed_runs_binds(
        spec, tmp_path, monkeypatch, capsys):
    r"""No calibration and no record: the committed runs of this CPU give
    a prior (said), and a cell it does not fit in the budget does not
    start (it started unchecked, as the calibrating cell)."""
    committed_run(tmp_path / 'committed', loop_s=40.0, runtime_s=50.0)
    now, trained = [0.0], []
    monkeypatch.setattr(queue_run, 'clock', lambda: now[0])
    monkeypatch.setattr(queue_run, 'train_cell',
                        lambda item: trained.append(item) or 'ok')
    assert queue.main([*args(tmp_path), '--budget-s', '60'], [spec]) == 0
    said = capsys.readouterr().out
    assert f'prior: 1 committed runs on {cpu_name()}, x2' in said
    assert trained == [] and said.count(': skipped') == 2


def _sleeps(seconds):
    r"""A stand-in trainer that trains for :obj:`seconds` (a cell that
    runs long); the deadline's alarm stops it."""
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)
    return 'ok'


def test_a_failed_calibration_then_the_cheapest_and_a_deadline_that_binds(
        spec, tmp_path, monkeypatch, capsys):
    r"""No rate at all: the cheapest cell calibrates and fails; the cells
    left go cheapest first (not the most wanted, unchecked), and the one
    that then runs long is stopped at the deadline: the call ends within
    the budget and the margin."""
    import time
    calls = []

    def first_fails_then_long(item):
        calls.append(item.cell['depth'])
        return 'failed' if len(calls) == 1 else _sleeps(60)

    monkeypatch.setattr(queue_run, 'train_cell', first_fails_then_long)
    items = queue_plan.order(
        queue_plan.pending([spec], tmp_path / 'out', 'cpu', 'GPU work',
                           dict(depths=[1, 2])),
        [{'study': NAME, 'depths': [2]}])
    assert [i.cell['depth'] for i in items] == [2, 2, 1, 1]
    began = time.monotonic()
    counts = queue_run.train(items, queue_cost.Rate(cpu_name()),
                             began + 1.5, tmp_path / 'out', 'cpu')
    took = time.monotonic() - began
    assert calls == [1, 1]  # cheapest first after the failure
    assert counts['failed'] == 1 and counts['stopped'] == 1
    assert counts['unreached'] == 2
    assert 1.5 <= took < 1.5 + queue_run.MARGIN_S and took < 10
    assert 'stopped at the deadline' in capsys.readouterr().out


def test_after_a_graph_fallback_the_eager_prior_binds(spec, tmp_path,
                                                      capsys):
    r"""A cell that cannot be captured falls back to eager steps, whose
    rate (no cell measured yet) is the committed runs' prior: cells it
    does not fit are skipped (they trained unchecked)."""
    import time
    committed_run(tmp_path / 'rates', loop_s=400.0, runtime_s=500.0)
    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cpu', 'GPU work', graphed=True)
    eager = queue_cost.rate_of(out, cpu_name(), 'cpu', {}, committed=(
        queue_cost.committed_rates(tmp_path / 'rates')))
    with pytest.MonkeyPatch.context() as m:
        _graphs_on_the_cpu(m, _capture_fails)
        counts = queue_run.train(items, queue_cost.Rate('cpu (CUDA graphs)'),
                                 time.monotonic() + 100, out, 'cpu',
                                 eager=eager)
    assert counts['trained'] == 0 and counts['skipped'] == 2
    said = capsys.readouterr().out
    assert said.count('failed as CUDA graphs') == 1
    assert said.count(': skipped') == 2


def test_a_run_held_by_another_process_is_not_waited_for_past_the_deadline(
        spec, tmp_path, monkeypatch, capsys):
    r"""A cell whose runs another process trains now (their folders'
    locks) is that process's; one taken after the check (a race) is
    waited for only until the deadline, and the run this process finished
    meanwhile is kept."""
    import time
    from gnorm.train.locks import lock_folder, release
    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cpu', 'GPU work')
    held = [lock_folder(Path(r['dir'])) for r in items[0].left]
    counts = queue_run.train(items[:1], queue_cost.Rate(cpu_name()),
                             queue_run.INF, out, 'cpu')
    assert counts['elsewhere'] == 1 and counts['trained'] == 0
    release(held[0])
    monkeypatch.setattr(queue_run, 'busy', lambda run: False)  # the race
    began = time.monotonic()
    counts = queue_run.train(items[:1], queue_cost.Rate(cpu_name()),
                             began + 4, out, 'cpu')
    took = time.monotonic() - began
    release(held[1])
    assert counts['stopped'] == 1 and 4 <= took < 4 + queue_run.MARGIN_S
    assert [r['status'] for r in load_runs(out)] == ['ok']
    assert queue_record.read_record(out) == {}  # a stopped cell: no rate


# ------------------------------------------------ one record, many writers


def test_concurrent_writers_lose_no_cell_of_the_record(tmp_path):
    import threading
    tmp_path = tmp_path / 'out'

    def write(k):
        for i in range(15):
            queue_record.add_cell(tmp_path, 'a CPU', 'cpu', dict(
                seconds=1.0, steady_s=0.5, setup_s=0.5, units=10, who=k))
    threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = queue_record.read_record(tmp_path)['a CPU']
    assert len(record['cells']) == 45 and record['units'] == 450
    assert record['seconds'] == 22.5 and record['setup_s'] == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        queue_record.RECORD, queue_record.LOCK]  # no tmp file left


def test_two_queues_on_one_folder_train_each_run_once(spec, tmp_path,
                                                      monkeypatch):
    r"""Two queues planned alike (a stale plan each) train into one folder
    at once: each cell trains once, by one of them, and the record holds
    each cell once, as the runs on disk say."""
    import threading
    import time
    out = tmp_path / 'out'

    trained = []

    def trains(item):  # a stand-in: 0.3 s, then each run's results
        time.sleep(0.3)
        for r in item.left:
            trained.append(r['key'])
            path = Path(r['dir']) / 'results.json'
            path.parent.mkdir(parents=True, exist_ok=True)
            found = dict(status='ok', loop_s=0.2, batch_runs=len(item.left),
                         config=json.loads(r['key']))  # a run of its own
            path.write_text(json.dumps(found))
            item.study.found[r['key']] = found
        return 'ok'

    monkeypatch.setattr(queue_run, 'train_cell', trains)
    plans = [queue_plan.pending([spec], out, 'cpu', 'GPU work')
             for _ in range(2)]
    rates = [queue_cost.Rate(cpu_name()) for _ in range(2)]
    counts = [None, None]

    def queue_k(k):
        counts[k] = queue_run.train(plans[k], rates[k], queue_run.INF, out,
                                    'cpu')
    threads = [threading.Thread(target=queue_k, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(trained) == sorted(r['key'] for i in plans[0]
                                     for r in i.left)  # each run once
    cells = queue_record.read_record(out)[cpu_name()]['cells']
    assert len(cells) == sum(c['trained'] for c in counts)
    assert sum(c['runs'] for c in cells) == len(
        list(out.glob('*/*/results.json'))) == 4
    assert max(len(r.cells) for r in rates) == len(cells)  # the last: all


def test_a_run_that_failed_twice_is_not_queued_again(spec, tmp_path,
                                                     capsys):
    out = tmp_path / 'out'
    first = queue_plan.pending([spec], out, 'cpu', 'GPU work')[0]
    key = first.left[0]['key']
    for k in range(queue_plan.MAX_FAILURES):
        counts = queue_record.add_failures(out, [key])
    assert counts == {queue_record.run_digest(key): 2}
    again = queue_plan.pending([spec], out, 'cpu', 'GPU work',
                               failed=queue_record.failures(out))
    assert [len(i.left) for i in again] == [1, 2]
    assert [len(i.given_up) for i in again] == [1, 0]
    assert queue.main(['--list', *args(tmp_path)], [spec]) == 0
    said = capsys.readouterr().out
    assert f'given up: {first.label}: 1 runs failed 2 times' in said
    assert '2 cells pending (marked GPU work), 3 runs to train' in said


def test_the_list_shows_cpu_and_gpu_work_with_seconds_here(
        spec, tmp_path, capsys):
    r"""``--list`` without ``--work``: both kinds, each with its counts,
    its seconds on this CPU (the committed runs' prior) and, for CPU
    work, the command that trains it here in the background."""
    committed_run(tmp_path / 'committed', loop_s=4.0, runtime_s=5.0)
    cpu = tiny_spec(tmp_path, 'tiny_queue_cpu')
    cpu.write_text(cpu.read_text().replace('depths: [2], why: "GPU work',
                                           'depths: [1], why: "CPU work'))
    assert queue.main(['--list', '--device', 'cpu', '--out',
                       str(tmp_path / 'out'), '--config',
                       str(write_config(tmp_path))],
                      [spec, load_spec(str(cpu))]) == 0
    said = capsys.readouterr().out
    assert '2 cells pending (marked CPU work), 4 runs to train, ' in said
    assert '2 cells pending (marked GPU work), 4 runs to train, ' in said
    assert said.index('CPU work') < said.index('GPU work')
    assert 'nohup python -m gnorm.study queue --device cpu --work cpu' in said
    marked = said.split('(marked CPU work)')[1].split('\n\n')[0]
    cpu_rows = [line for line in marked.splitlines()
                if 'tiny_queue_cpu' in line]
    assert len(cpu_rows) == 2 and all(line.split()[-2] != '-'
                                      for line in cpu_rows)


LISTING = '(not marked by table.not_run: CPU work, at most 6.0 h a cell ' \
    "on this machine's CPU), "


def columns(line):
    r"""The columns of a line of ``--list``'s tables (two spaces or more
    apart)."""
    return re.split(r'\s{2,}', line.strip())


def section(said, head):
    r"""The rows of the cells of the section of ``--list``'s output
    :obj:`said` that begins with :obj:`head`: #, cell, runs, units, here,
    last GPU."""
    found = said.split(head)[1].split('\n\n')[0]
    return [columns(line) for line in found.splitlines() if NAME in line]


def totals(said):
    r"""The totals per kind of work of ``--list``'s output :obj:`said`:
    its cells and runs by kind."""
    lines = said.split('what is listed, by kind of work')[1].splitlines()
    return {c[1]: (int(c[0]), int(c[2]))
            for c in map(columns, lines[2:5])}


def test_the_list_shows_the_cells_no_entry_marks_and_totals_per_kind(
        spec, tmp_path, capsys):
    r"""``--list`` without ``--work`` lists every cell with unfinished
    runs: the tiny study's depth 1, which no ``table.not_run`` entry
    marks, too, each with its estimate here, as CPU work (this CPU's
    estimate is under :data:`gnorm.study.queue.plan.CPU_WORK_S`); and the
    totals per kind of work."""
    committed_run(tmp_path / 'committed', loop_s=4.0, runtime_s=5.0)
    assert queue.main(['--list', '--device', 'cpu', '--out',
                       str(tmp_path / 'out'), '--config',
                       str(write_config(tmp_path))], [spec]) == 0
    said = capsys.readouterr().out
    assert f'2 cells pending {LISTING}4 runs to train, ' in said
    rows = section(said, LISTING)
    assert sorted(r[1] for r in rows) == [f'{NAME} csbm layernorm L=1',
                                          f'{NAME} csbm none L=1']
    assert all(r[4] != '-' for r in rows)  # seconds here
    assert 'the queue trains these when selected' in said
    assert totals(said) == {'GPU work': (2, 4), 'CPU work': (2, 4),
                            'to remake': (0, 0)}
    # --work takes the marked cells alone, for a list as for training.
    assert queue.main(['--list', *args(tmp_path)], [spec]) == 0
    said = capsys.readouterr().out
    assert LISTING not in said
    assert totals(said) == {'GPU work': (2, 4), 'CPU work': (0, 0),
                            'to remake': (0, 0)}


def test_an_unmarked_cell_is_cpu_work_where_this_cpu_takes_it_in_time(
        spec, tmp_path):
    items = queue_plan.pending([spec], tmp_path / 'out', 'cpu', None)
    unmarked = [i for i in items if i.mark is None]
    assert sorted(cells_of(unmarked)) == [('layernorm', 1), ('none', 1)]
    item, limit = unmarked[0], queue_plan.CPU_WORK_S
    fast = queue_cost.Rate('cpu', prior=0.5 * limit / item.units)
    slow = queue_cost.Rate('cpu', prior=2 * limit / item.units)
    assert queue_plan.classed(item, fast) == 'CPU work'
    assert queue_plan.classed(item, slow) == 'GPU work'
    assert queue_plan.classed(item, queue_cost.Rate('cpu')) == 'GPU work'
    gpu = next(i for i in items if i.mark)  # a mark wins over the estimate
    assert queue_plan.classed(gpu, fast) == 'GPU work'


def test_runs_of_uncommitted_code_are_listed_to_remake(spec, tmp_path,
                                                       capsys):
    r"""A cell whose finished runs were made by uncommitted code
    (``source.modified``: the reports do not quote them) is listed to
    remake, with its estimate; the list reads each ``results.json``
    again once its bytes changed."""
    committed_run(tmp_path / 'committed', loop_s=4.0, runtime_s=5.0)
    out, config = tmp_path / 'out', str(write_config(tmp_path))
    assert queue.main(['--device', 'cpu', '--depths', '1', '--out',
                       str(out), '--config', config], [spec]) == 0

    def made_by(norm, code):
        for path in out.glob(f'{NAME}/*,norm={norm},*/results.json'):
            run = json.loads(path.read_text())
            run.setdefault('source', {})['modified'] = code == 'modified'
            path.write_text(json.dumps(run))
    made_by('none', 'committed')
    made_by('layernorm', 'committed')
    listing = ['--list', '--device', 'cpu', '--out', str(out), '--config',
               config]
    assert queue.main(listing, [spec]) == 0
    said = capsys.readouterr().out
    assert '0 cells to remake' in said
    made_by('layernorm', 'modified')
    assert queue.main(listing, [spec]) == 0
    said = capsys.readouterr().out
    head = '(runs of uncommitted code: source.modified), '
    assert f'1 cells to remake {head}2 runs to train again, ' in said
    row, = section(said, head)
    assert row[1:3] == [f'{NAME} csbm layernorm L=1', '2'] and row[4] != '-'
    assert 'move the run folders aside' in said
    assert totals(said)['to remake'] == (1, 2)


def test_a_deadline_off_the_main_thread_is_refused_in_one_line():
    r"""SIGALRM reaches the main thread only: a deadline asked for in
    another thread is refused, not silently ignored; without a deadline
    any thread runs."""
    import threading

    from gnorm.errors import GnormError
    from gnorm.study.queue import run as queue_run
    found = []

    def call(deadline):
        try:
            with queue_run.stops_at(deadline):
                found.append('ran')
        except GnormError as e:
            found.append(str(e))
    for deadline in (queue_run.clock() + 60, queue_run.INF):
        worker = threading.Thread(target=call, args=(deadline, ))
        worker.start()
        worker.join()
    assert found[0].startswith('a queue deadline binds on the main thread')
    assert '\n' not in found[0] and found[1] == 'ran'


def test_claims_are_removed_when_released(tmp_path):
    r"""A claim locks its run while held (a second claim gets nothing) and
    its file is gone once released; the run can be claimed again."""
    folder = tmp_path / queue_record.CLAIMS
    held = queue_record.claim_runs(tmp_path, ['a', 'b'])
    assert set(held) == {'a', 'b'} and len(list(folder.iterdir())) == 2
    assert queue_record.claim_runs(tmp_path, ['a']) == {}
    queue_record.release_runs(held)
    assert list(folder.iterdir()) == []
    again = queue_record.claim_runs(tmp_path, ['a'])
    assert set(again) == {'a'}
    queue_record.release_runs(again)
    assert list(folder.iterdir()) == []


def test_an_alarm_during_a_results_write_waits_for_the_file(tmp_path,
                                                            monkeypatch):
    r"""The deadline's SIGALRM falling while results.json is written is held
    until the file is in place: the run is kept whole, and the alarm then
    stops the cell."""
    import signal

    from gnorm.train import common

    class Alarm(Exception):
        pass

    def ring(signum, frame):
        raise Alarm
    real = common._dumps

    def slow(obj, *args):
        if not args:  # the outermost call: the deadline, mid-write
            signal.raise_signal(signal.SIGALRM)
        return real(obj, *args)
    previous = signal.signal(signal.SIGALRM, ring)
    monkeypatch.setattr(common, '_dumps', slow)
    try:
        with pytest.raises(Alarm):
            common.write_json(tmp_path / 'results.json', {'status': 'ok'})
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert json.loads((tmp_path / 'results.json').read_text()) == \
        {'status': 'ok'}
    assert not (tmp_path / '.results.json.tmp').exists()


# ------------------------------------------- a window finishes what it stops


def _spec_of(folder: Path, **train):
    r"""The tiny study (:data:`SPEC`, its name) with the training keys
    :obj:`train` in place of its 2 epochs, in a file of :obj:`folder`."""
    text = SPEC.format(name=NAME).replace('  epochs: 2\n', ''.join(
        f'  {key}: {value}\n' for key, value in train.items()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f'{NAME}.yaml').write_text(text)
    return load_spec(str(folder / f'{NAME}.yaml'))


def _each_epoch(m, now, stop=None):
    r"""Each node epoch takes a second of the queue's clock :obj:`now`;
    the deadline falls in epoch :obj:`stop` (counted from the patch)."""
    from gnorm.train import node_loop
    real, calls = node_loop.Step.__call__, []

    def step(self, *args, **kwargs):
        calls.append(1)
        now[0] += 1
        if len(calls) == stop:
            raise queue_run.Deadline()
        return real(self, *args, **kwargs)
    m.setattr(node_loop.Step, '__call__', step)


def _same_runs(a, b):
    r"""The runs :obj:`a` and :obj:`b` (load_runs) by folder name: the same
    curve, selected epoch and scores."""
    def by_name(runs):
        return {Path(r['_path']).parent.name: r for r in runs}
    a, b = by_name(a), by_name(b)
    assert sorted(a) == sorted(b)
    for name, run in a.items():
        for key in ('curve', 'best_epoch', 'selected_epoch', 'test_acc',
                    'val_acc', 'train_acc'):
            assert run[key] == b[name][key], (name, key)


def test_a_cell_stopped_at_the_deadline_resumes_next_call(tmp_path,
                                                          monkeypatch,
                                                          capsys):
    r"""A cell stopped at the deadline keeps its runs' checkpoints; its
    seconds and the share of its epochs it kept make the next call's
    estimate of it (the rest at that pace: no rate had none), and the
    call after that resumes it and finishes it with the results of an
    uninterrupted call."""
    spec = _spec_of(tmp_path / 'spec', epochs=40, checkpoint_every=10)
    now = [0.0]
    monkeypatch.setattr(queue_run, 'clock', lambda: now[0])
    one = [*args(tmp_path), '--rows', 'none', '--depths', '2']
    out = tmp_path / 'out'
    with pytest.MonkeyPatch.context() as m:
        _each_epoch(m, now, stop=25)
        assert queue.main([*one, '--budget-s', '1000'], [spec]) == 0
    said = capsys.readouterr().out
    assert 'stopped at the deadline after 25 s; its finished runs are ' \
        'kept, and its checkpoints (50% of its epochs kept, 50% left: the ' \
        'next call resumes them)' in said
    stopped = [r for r in load_runs(out)]
    assert [r['status'] for r in stopped] == ['interrupted'] * 2
    assert [r['checkpoint_epoch'] for r in stopped] == [20, 20]
    label = f'{NAME} csbm none L=2'
    entry = queue_record.stopped_cells(out)[label]
    assert (entry['seconds'], entry['kept'], entry['left']) == (25, .5, .5)
    # no rate: the stopped training's pace says 25 s for the rest
    now[0] = 0.0
    assert queue.main([*one, '--budget-s', '20'], [spec]) == 0
    assert 'estimate 25 s, 20 s left: skipped' in capsys.readouterr().out
    # --list gives the cell the estimate a call that trains plans with
    assert queue.main([*one, '--list'], [spec]) == 0
    listed = [' '.join(line.split()) for line in
              capsys.readouterr().out.splitlines()
              if line.lstrip().startswith(('1 ', 'total '))]
    assert len(listed) == 4 and all(' 25 s ' in f'{line} '
                                    for line in listed), listed
    now[0] = 0.0
    with pytest.MonkeyPatch.context() as m:
        _each_epoch(m, now)
        assert queue.main([*one, '--budget-s', '1000'], [spec]) == 0
        assert 'trained 1 cells' in capsys.readouterr().out
        whole = tmp_path / 'whole'
        assert queue.main([*one, '--out', str(whole)], [spec]) == 0
    resumed = load_runs(out)
    assert [r['resumed_from_epoch'] for r in resumed] == [20, 20]
    _same_runs(resumed, load_runs(whole))
    assert label not in queue_record.stopped_cells(out)
    cell, = queue_record.rate_cells(out, cpu_name())  # the epochs trained
    assert cell['units'] == queue_record.rate_cells(
        whole, cpu_name())[0]['units'] / 2


def test_a_cell_refused_before_training_is_tried_again(spec, tmp_path,
                                                       monkeypatch, capsys):
    r"""Runs refused before they train (here: their dataset missing) fail
    their cell for the call, said in one line, but count no failure of
    the runs: once the data is there, every cell trains (it used to be
    given up after two calls)."""
    from gnorm.errors import DataError
    from gnorm.train import node

    def missing(*a, **k):
        raise DataError('csbm: no raw files in the mirror; pass '
                        'data.mirror=DIR')

    with pytest.MonkeyPatch.context() as m:
        m.setattr(node, 'load_data', missing)
        for _ in range(queue_plan.MAX_FAILURES):
            assert queue.main(args(tmp_path), [spec]) == 1
            said = capsys.readouterr()
            assert said.out.count('refused before training (the error '
                                  'above): not a failure of its runs') == 2
            assert said.err.count('csbm: no raw files in the mirror') == 2
    assert queue_record.failures(tmp_path / 'out') == {}
    assert queue.main(args(tmp_path), [spec]) == 0
    said = capsys.readouterr().out
    assert said.startswith('2 cells pending') and 'trained 2 cells' in said


def test_a_given_up_run_says_where_its_reason_is(spec, tmp_path, capsys):
    out = tmp_path / 'out'
    first = queue_plan.pending([spec], out, 'cpu', 'GPU work')[0]
    run = first.left[0]
    for _ in range(queue_plan.MAX_FAILURES):
        queue_record.add_failures(out, [run['key']])
    assert queue.main(['--list', *args(tmp_path)], [spec]) == 0
    assert (f'given up: {first.label}: 1 runs failed 2 times; not queued '
            'again (no results.json says why; delete their counts under '
            '"failed runs" in the .queue.json of --out to queue them '
            'again)') in capsys.readouterr().out
    Path(run['dir']).mkdir(parents=True)
    (Path(run['dir']) / 'results.json').write_text('{"status": "failed"}')
    assert queue.main(['--list', *args(tmp_path)], [spec]) == 0
    assert f"not queued again ({run['dir']}/results.json says why)" in \
        capsys.readouterr().out


def test_a_run_of_another_config_in_its_folder_trains_again(tmp_path,
                                                           capsys):
    r"""A spec whose runs changed (more epochs) but whose folder names did
    not: its finished runs of the old config are not this config's, so
    the queue trains over them (one line per cell says so), and never
    counts them as trained by another process."""
    old = _spec_of(tmp_path / 'old', epochs=2)
    assert queue.main(args(tmp_path), [old]) == 0
    capsys.readouterr()
    new = _spec_of(tmp_path / 'new', epochs=3)
    assert queue.main(args(tmp_path), [new]) == 0
    said = capsys.readouterr().out
    assert said.count('2 runs of another config in their folders (differs '
                      'in train.epochs): trained again') == 2
    assert 'trained 2 cells' in said and '0 trained by another process' \
        in said
    runs = load_runs(tmp_path / 'out')
    assert len(runs) == 4 and {r['status'] for r in runs} == {'ok'}
    assert {r['config']['train']['epochs'] for r in runs} == {3}


def test_the_finished_sibling_of_a_diverged_run_is_no_failure(spec,
                                                              tmp_path):
    r"""Two runs train as one model; one diverges (NaN loss in epoch 2):
    it alone counts a failure, its sibling is finished and kept."""
    from gnorm.train import node_loop
    real, calls = node_loop.Step.__call__, []

    def second_run_diverges(self, *a, **k):
        calls.append(1)
        losses, metrics = real(self, *a, **k)
        if len(calls) == 2:
            losses = losses.clone()
            losses[1] = float('nan')
        return losses, metrics

    out = tmp_path / 'out'
    items = queue_plan.pending([spec], out, 'cpu', 'GPU work')
    with pytest.MonkeyPatch.context() as m:
        m.setattr(node_loop.Step, '__call__', second_run_diverges)
        counts = queue_run.train(items, queue_cost.Rate(cpu_name()),
                                 queue_run.INF, out, 'cpu')
    assert counts['failed'] == 1 and counts['trained'] == 1
    runs = load_runs(out)
    failed = [r for r in runs if r['status'] == 'failed']
    assert len(failed) == 1 and len(runs) == 4
    assert queue_record.failures(out) == {queue_record.run_digest(
        json.dumps(record_identity(failed[0]), sort_keys=True)): 1}
    again = queue_plan.pending([spec], out, 'cpu', 'GPU work')
    assert [len(i.left) for i in again] == [1]
