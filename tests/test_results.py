r"""``python -m gnorm.results`` on small multirun folders written here:
labels, numeric sorting, units, refused typos, unreadable files."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gnorm.results import aggregate, code, label, load_runs, main
from gnorm.train import train
from conftest import compose_train

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (2, 4, 8, 16, 32)  # as text: 16, 2, 32, 4, 8


def _node(layers, seed, test_acc, norm='contranorm'):
    r"""A node run's results.json, fields as ``gnorm.train.node`` writes
    them (accuracies as fractions)."""
    return {
        'status': 'ok', 'error': None, 'task': 'node',
        'overrides': ['dataset=cora', f'norm={norm}', f'layers={layers}',
                      f'seed={seed}', 'device=cpu'],
        'choices': {'dataset': 'cora', 'norm': norm, 'model': 'gcn'},
        'config': {'layers': layers, 'seed': seed, 'device': 'cpu',
                   'dataset': {'name': 'cora', 'task': 'node'},
                   'model': {'_target_': 'gnorm.models.DeepGCN',
                             'num_layers': layers},
                   'norm': {'_target_': 'gnorm.nn.ContraNorm', 'scale': 1.0}},
        'dataset': {'name': 'cora', 'num_nodes': 2708, 'split': 'public',
                    'split_sizes': [140, 500, 1000]},
        'model': f'DeepGCN(1433, 7, num_layers={layers}, '
                 'norm=ContraNorm(32, scale=1.0))',
        'train_acc': 1.0, 'val_acc': test_acc + 0.01, 'test_acc': test_acc,
        'val_loss': 1.5, 'runtime_s': 2.0,
    }


def _graph(dataset, metric, seed, test_metric):
    r"""A graph run's results.json as ``gnorm.train.graph`` writes it;
    :obj:`metric` :obj:`None`: one without the ``metric`` field."""
    run = {
        'status': 'ok', 'error': None, 'task': 'graph',
        'overrides': [f'dataset={dataset}', 'model=graphormer',
                      f'seed={seed}'],
        'choices': {'dataset': dataset, 'norm': 'sepnorm',
                    'model': 'graphormer'},
        'config': {'layers': 12, 'seed': seed,
                   'dataset': {'name': dataset, 'task': 'graph'},
                   'model': {'_target_': 'gnorm.models.Graphormer'},
                   'norm': {'_target_': 'gnorm.nn.SepNorm'}},
        'dataset': {'name': dataset, 'split': 'scaffold',
                    'split_sizes': [10, 5, 5]},
        'model': 'Graphormer(\n  (atom_encoder): AtomEncoder(...)\n)',
        'metric': metric, 'val_metric': test_metric, 'test_metric':
        test_metric}
    if metric is None:
        del run['metric']
    return run


def _write(folder: Path, name: str, run) -> Path:
    path = folder / name / 'results.json'
    path.parent.mkdir(parents=True)
    path.write_text(run if isinstance(run, str) else json.dumps(run))
    return path


@pytest.fixture
def multirun(tmp_path):
    r"""Cora at five depths x two seeds (paths sorted as text), one failed
    run, a truncated results.json and one holding ``[1, 2]``."""
    for layers in LAYERS:
        for seed in (0, 1):
            acc = 0.5 + layers / 100 + seed / 10
            _write(tmp_path, f'layers={layers},seed={seed}',
                   _node(layers, seed, acc))
    failed = {**_node(8, 2, 0.0), 'status': 'failed',
              'error': 'loss is nan at epoch 3'}
    del failed['test_acc']
    _write(tmp_path, 'layers=8,seed=2', failed)
    text = json.dumps(_node(4, 2, 0.9))
    _write(tmp_path, 'layers=4,seed=2', text[:len(text) // 2])
    _write(tmp_path, 'layers=4,seed=3', '[1, 2]')
    return tmp_path


def _cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _table(out):
    r"""The markdown table of :obj:`out` as a header and rows of cells."""
    lines = [l for l in out.splitlines() if l.startswith('| ')]
    split = [[c.strip() for c in l.strip('|').split('|')] for l in lines]
    return split[0], split[1:]


def test_unreadable_files_are_failed_runs(multirun, capsys):
    runs = load_runs(multirun, warn=False)
    assert len(runs) == 13
    bad = {Path(r['_path']).parent.name: r for r in runs
           if r['status'] == 'unreadable'}
    assert set(bad) == {'layers=4,seed=2', 'layers=4,seed=3'}
    assert 'not valid JSON' in bad['layers=4,seed=2']['error']
    assert 'list' in bad['layers=4,seed=3']['error']
    load_runs(multirun)
    assert capsys.readouterr().err.count('warning: ') == 2

    code, out, err = _cli(capsys, multirun, '--failed')
    assert code == 0 and err == ''
    lines = out.splitlines()
    assert len(lines) == 4
    listed = {Path(l.split(': ')[1]).parent.name: l for l in lines[:3]}
    assert listed['layers=8,seed=2'].startswith('failed: ')
    assert listed['layers=8,seed=2'].endswith(': loss is nan at epoch 3')
    assert listed['layers=4,seed=2'].startswith('unreadable: ')
    assert 'not valid JSON' in listed['layers=4,seed=2']
    assert listed['layers=4,seed=3'].startswith('unreadable: ')
    assert lines[3] == '13 results.json: 10 ok, 3 failed (2 unreadable)'

    code, out, err = _cli(capsys, multirun)
    assert code == 0 and 'Traceback' not in err
    assert out.splitlines()[-1] == ('13 results.json: 10 ok, 3 failed '
                                    '(2 unreadable); --failed lists them')


def test_failed_without_failures_says_so(tmp_path, capsys):
    _write(tmp_path, 'a', _node(2, 0, 0.8))
    code, out, _ = _cli(capsys, tmp_path, '--failed')
    assert code == 0
    assert out.strip() == 'no failed runs: all 1 results.json have status ok'


def test_table_labels_sorting_and_percent(multirun, capsys):
    code, out, _ = _cli(capsys, multirun)
    assert code == 0
    header, rows = _table(out)
    # Keys from the overrides, seed averaged, device not an axis.
    assert header == ['dataset', 'norm', 'layers', 'runs', 'failed',
                      'test acc (%)', 'val acc (%)']
    assert [r[2] for r in rows] == [str(n) for n in LAYERS]
    assert {(r[0], r[1]) for r in rows} == {('cora', 'contranorm')}
    by_layers = {int(r[2]): r for r in rows}
    assert by_layers[8][3:5] == ['2', '1']
    for layers in LAYERS:
        accs = [100 * (0.5 + layers / 100 + seed / 10) for seed in (0, 1)]
        mean = sum(accs) / 2
        std = abs(accs[0] - accs[1]) / 2  # ddof=0
        assert by_layers[layers][5] == f'{mean:.2f} ± {std:.2f}'
        assert by_layers[layers][6] == f'{mean + 1:.2f} ± {std:.2f}'
    assert 'ddof=0' in out


def test_model_label_is_the_class(multirun, capsys):
    code, out, err = _cli(capsys, multirun, '--by', 'model', 'dataset',
                          '--over', 'seed', 'layers', 'model.num_layers',
                          '--metrics', 'test_acc')
    assert code == 0 and err == ''
    header, rows = _table(out)
    assert header == ['model', 'dataset', 'runs', 'failed', 'test acc (%)']
    assert [r[:4] for r in rows] == [['DeepGCN', 'cora', '10', '1']]


def test_csv_in_the_table_units(multirun, tmp_path, capsys):
    path = tmp_path / 'out' / 't.csv'
    assert _cli(capsys, multirun, '--by', 'layers', '--metrics', 'test_acc',
                'val_loss', '--csv', path)[0] == 0
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ['layers', 'runs', 'failed', 'test acc (%) mean',
                             'test acc (%) std', 'val loss mean',
                             'val loss std']
    assert [r['layers'] for r in rows] == [str(n) for n in LAYERS]
    assert float(rows[0]['test acc (%) mean']) == pytest.approx(57.0)
    assert float(rows[0]['test acc (%) std']) == pytest.approx(5.0)
    assert float(rows[0]['val loss mean']) == pytest.approx(1.5)


def test_csv_that_cannot_be_written_is_one_line(multirun, tmp_path,
                                                 capsys):
    (tmp_path / 'afile').touch()
    path = tmp_path / 'afile' / 't.csv'
    code, out, err = _cli(capsys, multirun, '--csv', path)
    assert code == 2 and out == ''  # refused before the table
    assert err == (f'error: --csv {path}: {path} lies under the file '
                   f'{tmp_path / "afile"}; pass another path\n')


@pytest.mark.parametrize('option,typo,near', [
    ('--by', 'datset.name', 'dataset.name'),
    ('--by', 'layer', 'layers'),
    ('--by', 'scal', 'norm.scale'),
    ('--over', 'sed', 'seed'),
    ('--metrics', 'test_ac', 'test_acc'),
])
def test_typo_is_refused_naming_the_closest(multirun, capsys, option, typo,
                                            near):
    code, out, err = _cli(capsys, multirun, option, typo)
    assert code == 2 and out == ''
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f'error: {option} {typo}: no run has this')
    closest = err.split('closest: ')[1].strip().split(', ')
    assert closest[0] == near


def test_unknown_metric_lists_the_metrics(multirun, capsys):
    code, _, err = _cli(capsys, multirun, '--metrics', 'test_acc', 'erank')
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith('error: --metrics erank: no run has this metric')
    assert 'test_acc' in err and 'val_loss' in err
    # A field of the runs that is not a number is no metric.
    code, _, err = _cli(capsys, multirun, '--metrics', 'task')
    assert code == 2 and 'no run has this metric' in err


def test_graph_metric_named_with_its_unit(tmp_path, capsys):
    for seed, auc in enumerate([0.75, 0.79]):
        _write(tmp_path, f'hiv{seed}', _graph('molhiv', 'rocauc', seed, auc))
    for seed, mae in enumerate([0.2, 0.3]):
        _write(tmp_path, f'zinc{seed}', _graph('zinc', 'mae', seed, mae))
    # No metric field (an older run): taken from the dataset.
    _write(tmp_path, 'zinc_old', _graph('zinc', None, 2, 0.4))
    code, out, _ = _cli(capsys, tmp_path)
    assert code == 0
    header, rows = _table(out)
    assert header == ['dataset', 'model', 'runs', 'failed',
                      'test ROC-AUC (%)', 'test MAE', 'val ROC-AUC (%)',
                      'val MAE']
    hiv, zinc = rows
    assert hiv[:4] == ['molhiv', 'Graphormer', '2', '0']
    assert hiv[4] == '77.00 ± 2.00' and hiv[5] == ''
    assert zinc[:4] == ['zinc', 'Graphormer', '3', '0']
    assert zinc[4] == '' and zinc[5] == '0.3000 ± 0.0816'


def test_aggregate_groups_by_label():
    # Same dataset, other split sizes (e.g. a random split per seed): one
    # configuration, shown by its name.
    runs = [_node(2, 0, 0.5), _node(2, 1, 0.7)]
    runs[1]['dataset']['split_sizes'] = [141, 500, 999]
    for i, run in enumerate(runs):
        run['_path'] = f'run{i}'
    assert label(runs[0], 'dataset') == 'cora'
    assert label(runs[0], 'norm') == 'contranorm'
    assert label(runs[0], 'model') == 'DeepGCN'
    del runs[0]['choices']  # a run trained outside Hydra
    assert label(runs[0], 'norm') == 'ContraNorm'
    rows = aggregate(runs, ['dataset', 'layers'], ['test_acc'])
    assert [(r['dataset'], r['layers'], r['runs']) for r in rows] == [
        ('cora', 2, 2)]
    assert rows[0]['test_acc_mean'] == pytest.approx(0.6)  # a fraction


def test_command_line(multirun):
    r"""``python -m gnorm.results``: one error line, exit status 2."""
    run = subprocess.run([sys.executable, '-m', 'gnorm.results',
                          str(multirun), '--by', 'datset.name'],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ''
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        'error: --by datset.name: no run has this key; closest: dataset.name')
    help_text = subprocess.run([sys.executable, '-m', 'gnorm.results', '-h'],
                               cwd=ROOT, capture_output=True, text=True)
    assert 'ddof=0' in help_text.stdout and '%' in help_text.stdout


def test_table_of_real_runs(tmp_path, capsys):
    r"""Runs written by ``gnorm.train`` (not by this file): labels, depth
    order and accuracy in % as its summary line prints it."""
    accs = {}
    for layers in (16, 2):
        cfg = compose_train('dataset=csbm', 'dataset.num_nodes=60',
                            'train.epochs=2', 'collapse_metrics=false',
                            'train.progress=false', 'device=cpu',
                            'threads=1', f'layers={layers}')
        accs[layers] = train(cfg, tmp_path / f'L{layers}')['test_acc']
    printed = ''.join(capsys.readouterr())
    assert f'test {100 * accs[2]:.2f}' in printed  # the summary line
    code, out, _ = _cli(capsys, tmp_path, '--by', 'dataset', 'model', 'norm',
                        'layers', '--metrics', 'test_acc')
    assert code == 0
    header, rows = _table(out)
    assert header[-1] == 'test acc (%)'
    assert [r[:4] for r in rows] == [['csbm', 'DeepGCN', 'Identity', '2'],
                                     ['csbm', 'DeepGCN', 'Identity', '16']]
    assert rows[0][-1] == f'{100 * accs[2]:.2f} ± 0.00'


# --- Runs of different configs never share a row; each run counts once ---

def _protocol(experiment, dropout, select):
    r"""Runs of one command line (cora, 2 layers, no norm) under another
    protocol: as an experiment file sets it, not on the command line."""
    def run(seed, acc):
        run = _node(2, seed, acc, norm='none')
        run['overrides'].insert(0, f'experiment={experiment}')
        run['choices']['experiment'] = experiment
        run['config']['model']['dropout'] = dropout
        run['config']['select'] = select
        run['config']['device'] = f'cuda:{seed}'  # changes no result
        return run
    return run


def test_runs_of_other_protocols_never_share_a_row(tmp_path, capsys):
    paper, fair = tmp_path / 'paper', tmp_path / 'fair'
    for seed in range(2):
        _write(paper, f's{seed}', _protocol('paper', 0.6, 'last')(
            seed, 0.80 + seed / 100))
        _write(fair, f's{seed}', _protocol('fair', 0.2, 'best_val')(
            seed, 0.86))
    code, out, err = _cli(capsys, paper, fair)
    assert code == 0 and err == ''
    header, rows = _table(out)
    assert header[:5] == ['dataset', 'norm', 'layers', 'experiment', 'runs']
    assert [r[3:6] for r in rows] == [['fair', '2', '0'],
                                      ['paper', '2', '0']]
    assert rows[1][6] == '80.50 ± 0.50'
    # Rows --by asks to merge split, with one line naming the keys.
    code, out, err = _cli(capsys, paper, fair, '--by', 'dataset', 'layers')
    assert code == 0 and len(rows) == 2
    assert err.count('\n') == 1 and err.startswith(
        'note: rows of --by dataset layers split: their runs differ in '
        'model.dropout, select (shown as column experiment;')
    # Without an experiment that tells them apart: the keys themselves.
    for run in load_runs(tmp_path):
        text = Path(run['_path']).read_text().replace('"experiment"', '"x"')
        Path(run['_path']).write_text(text)
    code, out, err = _cli(capsys, paper, fair, '--by', 'dataset', 'layers')
    header, rows = _table(out)
    assert header[:4] == ['dataset', 'layers', 'model.dropout', 'select']
    assert [r[2:5] for r in rows] == [['0.2', 'best_val', '2'],
                                      ['0.6', 'last', '2']]
    assert 'shown as columns model.dropout, select' in err
    # Averaged over a key on request.
    code, out, err = _cli(capsys, paper, fair, '--by', 'dataset', '--over',
                          'seed', 'model.dropout', 'select')
    assert err == '' and [r[1] for r in _table(out)[1]] == ['4']


def test_overlapping_folders_count_each_run_once(multirun, capsys):
    inside = multirun / 'layers=2,seed=0'
    assert len(load_runs(multirun, inside, inside / 'results.json',
                         warn=False)) == 13
    code, out, _ = _cli(capsys, multirun, inside, f'{multirun}/../'
                        f'{multirun.name}')
    assert code == 0
    assert out.splitlines()[-1].startswith('13 results.json: 10 ok')
    assert _table(out)[1][0][3] == '2'  # layers=2: seeds 0 and 1


def test_a_file_is_not_a_folder(tmp_path, capsys):
    readme = tmp_path / 'README.md'
    readme.write_text('# not runs')
    code, out, err = _cli(capsys, readme)
    assert code == 2 and out == ''
    assert err == f'error: {readme} is not a folder\n'


def test_logging_keys_are_no_columns(tmp_path, capsys):
    for seed, steps in enumerate([10, 50]):
        run = _graph('molhiv', 'rocauc', seed, 0.7)
        run['overrides'] += [f'train.log_steps={steps}',
                             f'train.tensorboard={bool(seed)}']
        run['config']['train'] = {'log_steps': steps,
                                  'tensorboard': bool(seed)}
        _write(tmp_path, f's{seed}', run)
    code, out, err = _cli(capsys, tmp_path)
    header, rows = _table(out)
    assert header[:3] == ['dataset', 'model', 'runs'] and len(rows) == 1


def test_code_says_which_code_made_the_runs():
    older = {'status': 'ok'}  # no batch_runs: before per-run generators
    plain = {'status': 'ok', 'batch_runs': 5, 'source': None}
    named = [{'status': 'ok', 'batch_runs': 1,
              'source': {'commit': c, 'modified': m}}
             for c, m in (('a' * 40, False), ('a' * 40, True),
                          ('b' * 40, False))]
    assert code([plain]) == ''
    said = code([older, plain, *named])
    assert said.startswith('3 runs name the commit that made them '
                           '(2 commits, 1 run with modified code); 1 run '
                           'made before every run had its own random '
                           'generators')


def test_a_norm_is_shown_by_what_trains():
    # norm=none norm._target_=mynorm.HalfLN: results.json records Hydra's
    # choice and the run's name (gnorm.train.common.run_name).
    runs = [_node(2, 0, 0.5, norm='none'), _node(2, 1, 0.7, norm='none'),
            _node(2, 0, 0.6, norm='halfln')]
    for i, run in enumerate(runs):
        run['_path'] = f'run{i}'
        run['config']['norm'] = {'_target_': 'mynorm.HalfLN'}
        run['names'] = {**run['choices'], 'norm': run['choices']['norm']}
    for run in runs[:2]:
        run['names']['norm'] = 'HalfLN'
    assert label(runs[0], 'norm') == 'HalfLN'
    assert label(runs[2], 'norm') == 'halfln'
    rows = aggregate(runs, ['norm'], ['test_acc'])
    assert [(r['norm'], r['runs']) for r in rows] == [('HalfLN', 2),
                                                     ('halfln', 1)]
    del runs[0]['names']  # a record made before names: Hydra's choice
    assert label(runs[0], 'norm') == 'none'


def test_a_layer_of_the_collapse_field_is_a_metric(tmp_path, capsys):
    r"""``--metrics collapse.<metric>.<layer>``: a layer's value of the
    runs' per-layer collapse metrics (first, last, or its number)."""
    for seed, last in ((0, 2.0), (1, 4.0)):
        run = _node(2, seed, 0.5)
        run['collapse'] = {'layer': [1, 2], 'effective_rank': [9.0, last],
                           'mad_gap': [0.5, None]}
        _write(tmp_path, f'seed={seed}', run)
    code, out, _ = _cli(capsys, tmp_path, '--by', 'layers', '--metrics',
                        'collapse.effective_rank.last',
                        'collapse.effective_rank.1')
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith('| 2'))
    assert '3.0000 ± 1.0000' in row and '9.0000 ± 0.0000' in row
    rows = aggregate(load_runs(tmp_path), ['layers'],
                     ['collapse.effective_rank.2', 'collapse.mad_gap.last'])
    assert rows[0]['collapse.effective_rank.2_mean'] == 3.0
    assert 'collapse.mad_gap.last_mean' not in rows[0]  # null: undefined
    code, _, err = _cli(capsys, tmp_path, '--metrics',
                        'collapse.effective_rank.3')
    assert code == 2 and 'closest: collapse.effective_rank.last' in err
