r"""Table 3 of the ContraNorm paper: the authors' protocol point by point
(experiment=table3_paper), the sound one (table3_fair), the results tool
and the resumable table driver."""
import copy
import csv
import json
import logging
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import is_undirected, to_undirected

from gnorm.results import aggregate, default_keys, load_runs
from gnorm.results import overrides as run_overrides
from gnorm.results import main as results_main
from gnorm.run_keys import NOT_RESULT_KEYS, record_identity
from gnorm.train import build_model, load_data
from conftest import compose_train, experiment, needs_mirror

ROOT = Path(__file__).resolve().parents[1]

table3 = experiment('table3')

PAPER_ROWS = table3.table_spec('paper')['rows']


def _paper(row, *overrides):
    return compose_train('experiment=table3_paper', *PAPER_ROWS[row], *overrides)


def test_paper_recipe():
    cfg = _paper('contranorm')
    assert cfg.select == 'last' and cfg.train.epochs == 200
    assert cfg.train.lr == 0.005 and cfg.train.weight_decay == 0.0005
    assert cfg.model.hidden_channels == 32 and cfg.model.dropout == 0.6
    assert cfg.model.conv == 'row' and cfg.model.init == 'uniform'
    assert cfg.dataset.to_undirected and cfg.test_set == 'rest'
    assert cfg.norm.negatives == 'non_neighbors' and not cfg.norm.layer_norm
    spec = table3.table_spec('paper')
    assert spec['depths'] == [2, 4, 8, 16, 32] and len(spec['seeds']) == 5
    assert spec['grid'] == {
        'pairnorm': {'norm.mode': ['PN', 'PN-SI', 'PN-SCS'],
                     'norm.scale': [0.2, 0.5, 0.8, 1.0]},
        'contranorm': {'norm.scale': [0.2, 0.5, 0.8, 1.0]}}
    assert set(spec['rows']) == {'none', 'layernorm', 'pairnorm',
                                 'contranorm'}


@needs_mirror
@pytest.mark.parametrize('dataset,sizes', [
    ('cora', [140, 500, 2068]),        # not the public 1,000
    ('citeseer', [120, 500, 2707]),
])
def test_paper_test_set_is_every_other_node(tmp_path, dataset, sizes):
    cfg = _paper('none', f'dataset={dataset}', f'data.root={tmp_path}')
    data = load_data(cfg)
    masks = [data.train_mask, data.val_mask, data.test_mask]
    assert [int(m.sum()) for m in masks] == sizes
    assert bool((data.test_mask == ~(data.train_mask | data.val_mask)).all())
    fair = load_data(compose_train('experiment=table3_fair', f'dataset={dataset}',
                              f'data.root={tmp_path}'))
    n = data.num_nodes
    assert int(fair.train_mask.sum()) == pytest.approx(0.6 * n, abs=8)
    assert int(fair.test_mask.sum()) == pytest.approx(0.2 * n, abs=8)


@needs_mirror
def test_paper_symmetrises_chameleon(tmp_path):
    stored = load_data(compose_train('dataset=chameleon', f'data.root={tmp_path}'))
    assert not is_undirected(stored.edge_index)
    data = load_data(_paper('none', 'dataset=chameleon',
                            f'data.root={tmp_path}'))
    assert is_undirected(data.edge_index)
    # A := max(A, A^T): every stored edge and its reverse, once each.
    assert torch.equal(data.edge_index, to_undirected(stored.edge_index))
    sizes = [int(data[f'{s}_mask'].sum()) for s in ('train', 'val', 'test')]
    assert sizes == [1092, 729, 456]  # Geom-GCN split 0: 48/32/20


def _reference_forward(model, x, edge_index, scale, shared_ln):
    r"""The authors' GCN in eval mode, dense: propagate with D^-1 (A + I),
    linear, bias, ContraNorm against non-neighbours, the one shared
    LayerNorm, ReLU; the last layer is a plain convolution."""
    n = x.size(0)
    adj = torch.zeros(n, n, dtype=x.dtype)
    adj[edge_index[1], edge_index[0]] = 1.0
    adj.fill_diagonal_(1.0)  # self-loops (one each, also where stored)
    adj_hat = adj / adj.sum(dim=1, keepdim=True)
    h = x
    for i, conv in enumerate(model.convs):
        h = adj_hat @ (h @ conv.weight.T) + conv.bias
        if i == len(model.convs) - 1:
            break
        if scale > 0:
            hn = F.normalize(h, dim=1)
            sim = (hn @ hn.T).masked_fill(adj > 0, float('-inf'))
            h = (1 + scale) * h - scale * torch.softmax(sim, dim=1) @ h
        if shared_ln:
            h = F.layer_norm(h, (h.size(1), ), model.shared_norm.weight,
                             model.shared_norm.bias)
        h = h.relu()
    return h


@pytest.mark.parametrize('row,scale,shared_ln', [
    ('contranorm', 0.5, True), ('layernorm', 0.0, True),
    ('none', 0.0, False)])
def test_paper_model_equals_reference(row, scale, shared_ln):
    torch.manual_seed(0)
    overrides = ['layers=4', 'model.dropout=0.0']
    if row == 'contranorm':
        overrides.append(f'norm.scale={scale}')
    model = build_model(_paper(row, *overrides), 5, 3).double().eval()
    # The one LayerNorm is one module (one gamma/beta) used by every layer.
    assert (model.shared_norm is not None) == shared_ln
    lns = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(lns) == int(shared_ln)
    if shared_ln:
        with torch.no_grad():  # make gamma/beta matter
            model.shared_norm.weight.uniform_(0.5, 1.5)
            model.shared_norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(12, 5, dtype=torch.double)
    edge_index = to_undirected(torch.randint(0, 12, (2, 20)))
    expected = _reference_forward(model, x, edge_index, scale, shared_ln)
    assert torch.allclose(model(x, edge_index), expected, atol=1e-10)


def test_paper_init_is_uniform_in_fan_out():
    torch.manual_seed(0)
    model = build_model(_paper('none', 'layers=3'), 200, 7)
    for conv in model.convs:
        bound = conv.out_channels ** -0.5
        for p in (conv.weight, conv.bias):
            assert float(p.abs().max()) <= bound
            assert float(p.abs().min()) < 0.5 * bound < float(p.abs().max())
        assert float(conv.weight.abs().max()) > 0.95 * bound
    fair = build_model(compose_train('experiment=table3_fair', 'layers=3'), 200, 7)
    assert all(float(c.bias.abs().max()) == 0 for c in fair.convs)
    assert fair.shared_norm is None


def test_layernorm_row_is_contranorm_at_zero_scale():
    x = torch.randn(15, 6)
    edge_index = to_undirected(torch.randint(0, 15, (2, 30)))
    outs = []
    for overrides in (PAPER_ROWS['layernorm'],
                      ['norm=none', 'model.shared_layer_norm=true']):
        torch.manual_seed(3)
        cfg = compose_train('experiment=table3_paper', *overrides, 'layers=5')
        outs.append(build_model(cfg, 6, 3).eval()(x, edge_index))
    assert torch.equal(outs[0], outs[1])
    pairnorm = build_model(_paper('pairnorm', 'layers=3'), 6, 3)
    assert pairnorm.shared_norm is None
    assert pairnorm.norms[0].mode == 'PN' and pairnorm.norms[0].scale == 1.0


def _run(path, seed, test_acc, val_acc, **config):
    path.mkdir(parents=True)
    run = {'status': 'ok', 'test_acc': test_acc, 'val_acc': val_acc,
           'overrides': [f'{k}={v}' for k, v in config.items()] +
           [f'seed={seed}'],
           'config': {**config, 'seed': seed}}
    (path / 'results.json').write_text(json.dumps(run))


def test_results_tool_mean_and_std(tmp_path, capsys):
    for seed, acc in enumerate([0.5, 0.7]):
        _run(tmp_path / f'a{seed}', seed, acc, 0.1, layers=2)
    _run(tmp_path / 'b0', 0, 0.9, 0.2, layers=4)
    (tmp_path / 'c').mkdir()
    (tmp_path / 'c' / 'results.json').write_text(json.dumps(
        {'status': 'failed', 'error': 'boom', 'overrides': ['layers=4'],
         'config': {'layers': 4}}))
    runs = load_runs(tmp_path)
    assert default_keys(runs) == ['layers']
    rows = aggregate(runs, ['layers'], ['test_acc'])
    assert [(r['layers'], r['runs'], r['failed']) for r in rows] == [
        (2, 2, 0), (4, 1, 1)]
    assert rows[0]['test_acc_mean'] == pytest.approx(0.6)
    assert rows[0]['test_acc_std'] == pytest.approx(0.1)  # ddof=0
    assert results_main([str(tmp_path)]) == 0
    assert '| layers | runs | failed |' in capsys.readouterr().out
    assert results_main([str(tmp_path), '--failed']) == 0
    assert 'boom' in capsys.readouterr().out
    assert results_main([str(tmp_path / 'nope')]) == 2


def _cell(row, settings, results, seeds=(0, 1)):
    r"""A composed cell of :obj:`settings` and its finished runs:
    ``results[k]`` = (val_acc, test_acc) of setting k, for every seed."""
    cell = dict(dataset='cora', row=row, depth=16, settings=settings,
                expected=len(seeds), runs=[])
    found = {}
    for setting, (val, test) in zip(settings, results):
        for seed in seeds:
            key = f'{setting}-{seed}'
            cell['runs'].append(dict(key=key, seed=seed,
                                     setting=table3.setting_label(setting)))
            found[key] = {'status': 'ok', 'val_acc': val, 'test_acc': test}
    return cell, found


def test_setting_chosen_by_validation_not_test():
    cell, found = _cell('contranorm', table3.settings(
        {'grid': {'contranorm': {'norm.scale': [0.2, 1.0]}}}, 'contranorm'),
        [(0.70, 0.50), (0.60, 0.65)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    by = {r['selection']: r for r in table3.summarise([cell], found, paper)}
    assert by['val']['setting'] == 's=0.2' and by['val']['test_mean'] == 50.0
    assert by['test']['setting'] == 's=1' and by['test']['test_mean'] == 65.0
    assert by['val']['diff'] == pytest.approx(50.0 - 68.75)
    assert by['val']['runs'] == 2 and by['val']['expected'] == 2
    # A run whose config is not one of the cell's is never counted.
    found['stranger'] = {'status': 'ok', 'val_acc': 0.99, 'test_acc': 0.0}
    assert table3.summarise([cell], found, paper)[0]['test_mean'] == 50.0


def test_a_tie_goes_to_the_first_setting_of_the_grid_and_is_shown():
    r"""Mean validation accuracies equal but for the last bits (the same
    correct nodes summed in another order) tie: the setting listed first
    in the grid (the smaller s) is chosen, and the cell names the other
    with its test accuracy."""
    settings = table3.settings({'grid': {'contranorm': {
        'norm.scale': [0.2, 0.5, 1.0]}}}, 'contranorm')
    cell, found = _cell('contranorm', settings, [
        (0.7, 0.50), (0.6, 0.90), (0.7 + 1e-12, 0.65)])
    by = {r['selection']: r for r in table3.summarise([cell], found, {})}
    assert by['val']['setting'] == 's=0.2' and by['val']['test_mean'] == 50.0
    assert by['val']['ties'] == 's=1: 65.00 ± 0.00'
    assert 'tie, not chosen: s=1: 65.00 ± 0.00' in table3._cell(by['val'])
    assert by['test']['setting'] == 's=0.5' and by['test']['ties'] == ''
    assert 'tie' not in table3._cell(by['test'])
    # The grid's order decides, not the order the runs were found in.
    cell['runs'].reverse()
    by = {r['selection']: r for r in table3.summarise([cell], found, {})}
    assert by['val']['setting'] == 's=0.2'
    assert 'the tie goes to the setting listed first' in table3.TIE_RULE


def test_pairnorm_grid_picks_variant_and_scale():
    spec = {'grid': {'pairnorm': {'norm.mode': ['PN', 'PN-SI'],
                                  'norm.scale': [0.5, 1.0]}}}
    settings = table3.settings(spec, 'pairnorm')
    assert settings[1] == {'norm.mode': 'PN', 'norm.scale': 1.0}
    assert [table3.setting_label(s) for s in settings] == [
        'PN, s=0.5', 'PN, s=1', 'PN-SI, s=0.5', 'PN-SI, s=1']
    cell, found = _cell('pairnorm', settings, [
        (0.5, 0.9), (0.6, 0.2), (0.8, 0.4), (0.7, 0.5)])
    by = {r['selection']: r for r in table3.summarise([cell], found, {})}
    assert by['val']['setting'] == 'PN-SI, s=0.5'
    assert by['val']['test_mean'] == pytest.approx(40.0)
    assert by['test']['setting'] == 'PN, s=0.5'


def test_flagged_cells_get_their_explanation():
    cell, found = _cell('contranorm', [{}], [(0.5, 0.52)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    notes = {('cora', 'contranorm', 16): 'known'}
    record, = table3.summarise([cell], found, paper, flag, notes)
    assert record['note'] == notes['cora', 'contranorm', 16]
    found = {k: {**r, 'test_acc': 0.68} for k, r in found.items()}
    record, = table3.summarise([cell], found, paper, flag, notes)
    assert record['note'] is None  # within 2 paper stds


def test_a_note_without_layers_covers_every_depth():
    cell, found = _cell('contranorm', [{}], [(0.9, 0.95)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    notes = table3.read_notes(ROOT / table3.table_spec('fair')['notes'])
    assert 'not comparable' in notes['cora', 'contranorm', None]
    # Both the paper's text (60/20/20) and the authors' code (public split).
    assert "The paper's Setup paragraph (Section 4.3) says it used 60/20/20 " \
        "splits too, but the authors' published GCN code trains on the " \
        'public split' in notes['cora', 'contranorm', None]
    record, = table3.summarise([cell], found, paper, flag, notes)
    assert record['note'] == notes['cora', 'contranorm', None]
    # A line for the depth itself wins over the line for every depth.
    notes['cora', 'contranorm', 16] = 'this depth'
    record, = table3.summarise([cell], found, paper, flag, notes)
    assert record['note'] == 'this depth'


def _result_overrides(run):
    return {k: v for k, v in run_overrides(run).items()
            if k not in NOT_RESULT_KEYS}


def test_composed_runs_are_those_of_the_committed_multirun():
    r"""The in-process composition gives the configs and run folders that
    ``python -m gnorm.train -m`` gave the committed runs."""
    spec = table3.table_spec('paper')
    runs_dir = ROOT / 'experiments' / 'runs' / 'table3_paper'
    todo = table3.cells({**spec, 'datasets': ['cora'], 'depths': [2]},
                        rows=['none', 'contranorm'])
    composer = table3.compose_cells('paper', todo, spec, [], runs_dir)
    runs = [r for c in todo for r in c['runs']]
    assert len(runs) == 5 + 4 * 5
    for run in runs:
        stored = json.loads((run['dir'] / 'results.json').read_text())
        assert table3.run_key(record_identity(stored)) == run['key']
        # The same overrides, but for keys that do not change a result
        # (a unit of several runs was made with batch_runs=5).
        assert _result_overrides(stored) == _result_overrides(run['info'])
    run = runs[-1]
    assert (composer.config(run) == compose_train(*run['info']['overrides']))
    # A run with a result-changing override is another run.
    cell, = table3.cells({**spec, 'datasets': ['cora'], 'depths': [2]},
                         rows=['none'])
    table3.compose_cells('paper', [cell], spec, ['train.epochs=5'], runs_dir)
    assert not {r['key'] for r in cell['runs']} & {r['key'] for r in runs}
    assert all('train.epochs=5' in r['dir'].name for r in cell['runs'])


def test_table_resumes_without_redoing_finished_runs(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    args = ['paper', '--datasets', 'csbm', '--rows', 'none', 'contranorm',
            '--depths', '2', '--seeds', '0', '1', '--set', 'train.epochs=2',
            'collapse_metrics=false', 'dataset.num_nodes=60',
            '--runs', str(runs), '--out', str(out), '--threads', '1']
    assert table3.main(args) == 0
    paths = sorted(runs.rglob('results.json'))
    assert len(paths) == 2 + 2 * 4  # none: 2 seeds; contranorm: 2 x 4 scales
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    lost = next(p for p in paths if 'norm.scale=0.5' in str(p)
                and 'seed=1' in str(p))
    lost.unlink()  # as if interrupted before this run finished

    assert table3.main(args) == 0
    assert lost.is_file()
    for p in paths:
        if p != lost:
            assert p.stat().st_mtime_ns == stamps[p], f'{p} was redone'
    name = ('table3_paper+train.epochs=2+collapse_metrics=false'
            '+dataset.num_nodes=60')  # the protocol plus --set
    report = (out / f'{name}.md').read_text()
    assert '## csbm' in report and 'missing' not in report.split('## csbm')[1]
    assert (out / f'{name}.csv').is_file()
    assert (out / f'{name}_depth.png').stat().st_size > 0
    # collapse_metrics=false: no effective ranks, so no (empty) plot of them
    assert not (out / f'{name}_erank.png').exists()
    assert 'No run of this report recorded effective ranks' in report


TINY = ['--datasets', 'csbm', '--depths', '2', '--seeds', '0', '--set',
        'train.epochs=2', 'collapse_metrics=false', 'dataset.num_nodes=60',
        '--threads', '1']
TINY_NAME = ('table3_paper+train.epochs=2+collapse_metrics=false'
             '+dataset.num_nodes=60')


def test_bad_selection_is_refused_before_anything_runs(tmp_path, capsys):
    for bad in (['--datasets', 'pubmed'], ['--depths', '0'],
                ['--seeds', '-1'], ['--rows', 'batchnorm'],
                ['--set', 'layers=3'], ['--set', 'train.epochs'],
                ['--launcher', 'kubernetes']):
        assert table3.main(['paper', *bad, '--runs',
                            str(tmp_path / 'runs')]) == 2
        err = capsys.readouterr().err
        assert err.startswith('error: ') and err.count('\n') == 1, err
    assert not list(tmp_path.iterdir())


def test_bad_places_and_typos_are_one_line(tmp_path, capsys):
    (tmp_path / 'afile').touch()
    missing = tmp_path / 'missing'
    cases = [
        (['fair', '--report-only', '--runs', str(missing)],
         f'error: --report-only: no runs folder {missing}; pass --runs '),
        (['paper', '--runs', str(tmp_path / 'runs'), '--out',
          str(tmp_path / 'afile' / 'out')],
         f'error: --out {tmp_path}/afile/out: {tmp_path}/afile/out lies '
         f'under the file {tmp_path}/afile; pass a folder'),
        (['paper', '--runs', str(tmp_path / 'afile' / 'runs')],
         f'error: --runs {tmp_path}/afile/runs: '),
        (['paper', '--set', 'train.epoch=3', '--runs', str(missing)],
         "error: --set: unknown key 'train.epoch' in train.epoch=3; "
         "closest keys: train.epochs"),
        (['paper', '--rows', 'none', '--set', 'norm.scal=0.5', '--runs',
          str(missing)], "error: --set: unknown key 'norm.scal'"),
    ]
    for args, start in cases:
        assert table3.main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(start) and err.count('\n') == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['afile']
    # A key of ContraNorm's is fine for its row.
    assert table3.main(['paper', '--datasets', 'csbm', '--depths', '2',
                        '--rows', 'contranorm', '--set',
                        'norm.temperature=2', '--runs',
                        str(missing), '--dry-run']) == 0


def test_help_of_every_option_and_installed_launchers(monkeypatch, capsys):
    from gnorm.train import arguments
    for script, name in ((table3, 'python experiments/table3.py'),
                         (_sepnorm(), 'python experiments/sepnorm.py')):
        with pytest.raises(SystemExit):
            script.main(['--help'])
        text = capsys.readouterr().out
        assert text.startswith(f'usage: {name}')
        description = text.split('\n\n')[1]
        assert description.rstrip().endswith('.'), description
        options = [line for line in text.splitlines()
                   if line.startswith('  -') or line.startswith('  {')]
        for line in options:  # a help text on the line or the next one
            following = text.split(line, 1)[1].split('\n', 2)[1]
            assert len(line.split('  ')) > 2 or \
                following.startswith(' ' * 10), f'{name}: {line}'
    assert 'installed: basic, joblib, processes, slurm' in \
        ' '.join(_help(table3).split())
    monkeypatch.setattr(arguments, '_installed', lambda module: False)
    assert 'installed: basic\n' in _help(table3).replace(' ' * 24, '')
    assert table3.main(['paper', '--launcher', 'processes']) == 2
    assert 'hydra/launcher=processes needs hydra-joblib-launcher, which is ' \
        'not installed: pip install "gnorm[launchers]"' in \
        capsys.readouterr().err


def _sepnorm():
    return experiment('sepnorm')


def _help(script) -> str:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        script.main(['--help'])
    return out.getvalue()


def test_set_runs_are_a_table_of_their_own(tmp_path, capsys):
    committed = ROOT / 'experiments' / 'results' / 'table3_paper.md'
    stamp = committed.stat().st_mtime_ns
    runs = tmp_path / 'runs'
    base = ['paper', *TINY, '--rows', 'none', '--runs', str(runs)]
    assert table3.main(base) == 0
    report = tmp_path / 'runs-report' / f'{TINY_NAME}.csv'
    before = report.read_text()
    assert table3.main([*base, '--set', 'train.lr=0.05']) == 0
    assert len(list(runs.rglob('results.json'))) == 2
    other = tmp_path / 'runs-report' / f'{TINY_NAME}+train.lr=0.05.md'
    title = other.read_text().splitlines()[0]
    assert title.startswith('# table3_paper') and 'train.lr=0.05' in title
    capsys.readouterr()
    assert table3.main([*base, '--dry-run']) == 0
    assert '1 runs in 1 cells, 1 done' in capsys.readouterr().out
    assert table3.main([*base, '--report-only']) == 0
    assert report.read_text() == before  # the same one run, not the mix
    assert committed.stat().st_mtime_ns == stamp
    assert table3.main([*base, '--report-only', '--out',
                        str(ROOT / 'experiments' / 'results')]) == 2


def test_table_trains_its_cells_in_this_process(tmp_path, monkeypatch,
                                                capsys):
    import subprocess
    popen = subprocess.Popen

    def no_training_process(args, *rest, **kwargs):
        assert 'gnorm.train' not in ' '.join(map(str, args)), args
        return popen(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, 'Popen', no_training_process)
    runs = tmp_path / 'runs'
    assert table3.main(['paper', *TINY, '--rows', 'none', 'layernorm',
                        '--runs', str(runs)]) == 0
    # Each run's epochs show as they pass (nohup, a terminal alike).
    epochs = re.findall(r'^  \d\d:\d\d:\d\d train epoch (\d+)/(\d+) \| loss ',
                        capsys.readouterr().out, re.M)
    assert epochs and epochs[-1][0] == epochs[-1][1]
    assert not logging.getLogger('gnorm.train.progress').handlers
    paths = sorted(runs.glob('*/results.json'))
    assert len(paths) == 2  # two cells, one run each
    for path in paths:
        assert (path.parent / '.hydra' / 'config.yaml').is_file()
        assert (path.parent / '.hydra' / 'overrides.yaml').is_file()
        run = json.loads(path.read_text())
        assert run['status'] == 'ok'
        assert run['overrides'][0] == 'experiment=table3_paper'
        assert path.parent.name == ','.join(sorted(
            o for o in run['overrides'][1:]
            if o.split('=')[0] not in table3.NOT_CONFIG_KEYS))


def test_tiny_pairnorm_row_chooses_variant_and_scale_by_validation(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    assert table3.main(['paper', *TINY, '--rows', 'pairnorm', '--runs',
                        str(runs), '--out', str(out)]) == 0
    done = load_runs(runs)
    assert sorted({(r['config']['norm']['mode'], r['config']['norm']['scale'])
                   for r in done}) == sorted(
        (m, s) for m in ('PN', 'PN-SI', 'PN-SCS') for s in (0.2, 0.5, 0.8, 1.0))
    with open(out / f'{TINY_NAME}.csv') as f:
        by = {r['selection']: r for r in csv.DictReader(f)}
    for selection in ('val', 'test'):
        best = max(r[f'{selection}_acc'] for r in done)
        chosen = [r for r in done if table3.setting_label(
            {'norm.mode': r['config']['norm']['mode'],
             'norm.scale': r['config']['norm']['scale']})
            == by[selection]['setting']]
        assert len(chosen) == 1 and chosen[0][f'{selection}_acc'] == best
        assert float(by[selection]['test_mean']) == pytest.approx(
            100 * chosen[0]['test_acc'], abs=1e-4)
    report = (out / f'{TINY_NAME}.md').read_text()
    line = next(x for x in report.splitlines()
                if x.startswith('| pairnorm (chosen by val)'))
    assert by['val']['setting'] in line


def test_interrupted_table_keeps_finished_cells(tmp_path, monkeypatch):
    import gnorm.train
    real, calls = gnorm.train.train_runs, []

    def stop_at_second_cell(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(gnorm.train, 'train_runs', stop_at_second_cell)
    runs = tmp_path / 'runs'
    args = ['paper', *TINY, '--rows', 'none', 'layernorm', '--runs',
            str(runs)]
    assert table3.main(args) == 130
    first = list(runs.glob('*/results.json'))
    assert len(first) == 1
    stamp = first[0].stat().st_mtime_ns
    assert table3.main(args) == 0
    assert len(list(runs.glob('*/results.json'))) == 2
    assert first[0].stat().st_mtime_ns == stamp
    assert len(calls) == 3  # the rerun trained only the missing cell


def _record(row, depth, mean, std, complete=True):
    return dict(dataset='cora', row=row, layers=depth, selection='',
                test_mean=mean, test_std=std, complete=complete,
                settings_run=4 if complete else 1, settings=4,
                cell_runs=20 if complete else 5, cell_expected=20)


def test_contranorm_beats_a_row_only_by_more_than_the_seeds_spread():
    records = [_record('contranorm', 2, 80.0, 1.0),
               _record('pairnorm', 2, 77.0, 2.0),     # +3 > 2: beats
               _record('layernorm', 2, 78.5, 2.0),    # +1.5 <= 2: within
               _record('contranorm', 4, 70.0, 0.5),
               _record('pairnorm', 4, 72.0, 1.0),     # -2 < -1: loses
               _record('layernorm', 4, 50.0, 1.0, complete=False)]
    lines = table3.comparison(records)
    assert 'larger of the two seeds\' standard deviations' in ' '.join(lines)
    two = next(x for x in lines if x.startswith('| cora | 2 |'))
    four = next(x for x in lines if x.startswith('| cora | 4 |'))
    assert two == ('| cora | 2 | **beats** (Δ +3.00, spread 2.00) | within '
                   'the spread (Δ +1.50, spread 2.00) |')
    assert four == ('| cora | 4 | **loses** (Δ -2.00, spread 1.00) | not '
                    'compared: layernorm partial (1 of 4 settings) |')
    assert lines[-1] == (
        'In words: against pairnorm, contranorm beats at cora L=2; loses at '
        'cora L=4. Against layernorm, contranorm within the spread at cora '
        'L=2 (not compared yet, incomplete: cora L=4).')
    assert table3.comparison([r for r in records
                              if r['row'] != 'contranorm']) == []


def test_partial_cells_are_counted_and_not_points_of_the_curve(
        tmp_path, monkeypatch):
    settings = [{'norm.scale': 0.2}, {'norm.scale': 1.0}]
    full, found = _cell('contranorm', settings, [(0.7, 0.5), (0.6, 0.65)])
    partial, some = _cell('contranorm', settings[:1], [(0.7, 0.4)],
                          seeds=(5, 6))
    partial.update(depth=32, settings=settings)  # 1 of its 2 settings run
    empty, _ = _cell('contranorm', settings, [])
    empty.update(depth=64)
    records = table3.summarise([full, partial, empty], {**found, **some}, {})
    by = {r['layers']: r for r in records if r['selection'] == 'val'}
    assert [by[d]['complete'] for d in (16, 32, 64)] == [True, False, False]
    assert (by[32]['settings_run'], by[32]['settings']) == (1, 2)
    assert (by[32]['cell_runs'], by[32]['cell_expected']) == (2, 4)
    assert table3.completeness(records).startswith(
        '**1 of 3 cells complete** (every setting of the grid run with '
        'every seed), 1 partial, 1 missing; 6 of 12 runs of the grid done '
        '(3 of 6 settings with runs)')
    figures = []
    monkeypatch.setattr(table3, 'save_figure',
                        lambda fig, path: figures.append(fig))
    table3.plot_depth(records, tmp_path / 'depth.png', paper_lines=False)
    ax, = figures[0].axes
    curve = next(line for line in ax.lines if line.get_linestyle() == '-')
    y = list(curve.get_ydata())
    assert y[0] == pytest.approx(50.0) and y[1] != y[1] and y[2] != y[2]
    open_markers = [line for line in ax.lines
                    if line.get_markerfacecolor() == 'white']
    assert [list(m.get_xdata()) for m in open_markers] == [[32]]
    assert [t.get_text() for t in ax.texts] == [
        '1 of 2 settings', 'contranorm: no runs at L=64']
    assert not [line for line in ax.lines if line.get_marker() == 'x']
    # The authors' code: a diamond per scale run, at its cell's depth.
    figures.clear()
    authors = {('cora', 'contranorm', 16): [
        dict(scale=1.0, mean=51.0), dict(scale=0.2, mean=26.0)]}
    table3.plot_depth(records, tmp_path / 'depth.png', paper_lines=True,
                      authors=authors)
    ax, = figures[0].axes
    diamond, = [line for line in ax.lines if line.get_marker() == 'D']
    assert list(diamond.get_xdata()) == [16, 16]
    assert list(diamond.get_ydata()) == [51.0, 26.0]


def _tiny_spec(protocol):
    r"""A whole table small enough to train in seconds: csbm, depths 2
    and 4, one seed, none and ContraNorm (two scales)."""
    tiny = ['train.epochs=2', 'collapse_metrics=false',
            'dataset.num_nodes=60']
    spec = copy.deepcopy(table3.table_spec(protocol))
    spec.update(datasets=['csbm'], depths=[2, 4], seeds=[0],
                rows={row: [*spec['rows'][row], *tiny]
                      for row in ('none', 'contranorm')},
                grid={'contranorm': {'norm.scale': [0.5, 1.0]}})
    return spec


def test_committed_report_is_the_same_bytes_from_the_same_runs(
        tmp_path, monkeypatch):
    spec = _tiny_spec('paper')
    monkeypatch.setattr(table3, 'table_spec', lambda protocol: spec)
    monkeypatch.setattr(table3, 'RUNS', tmp_path / 'runs')
    monkeypatch.setattr(table3, 'RESULTS', tmp_path / 'results')
    results = tmp_path / 'results'
    assert table3.main(['paper', '--depths', '2', '--threads', '1']) == 0
    report = (results / 'table3_paper.md').read_text()
    assert '**2 of 4 cells complete**' in report  # depth 4 not run yet
    assert table3.main(['paper', '--threads', '1']) == 0

    def files():
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(results.iterdir())}

    first = files()
    assert set(first) == {'table3_paper.md', 'table3_paper.csv',
                          'table3_paper_depth.png'}
    report = first['table3_paper.md'][0].decode()
    assert '**4 of 4 cells complete**' in report
    assert 'Generated by `python experiments/table3.py paper --report-only`' \
        in report
    assert not re.search(r'\d{4}-\d\d-\d\d', report)  # no date
    with open(results / 'table3_paper.csv') as f:
        rows = list(csv.DictReader(f))
    assert {(r['settings_run'], r['settings'], r['complete'])
            for r in rows if r['row'] == 'contranorm'} == {('2', '2', 'True')}
    assert table3.main(['paper', '--report-only']) == 0
    assert files() == first  # the same bytes, not even rewritten
    # A selection neither narrows nor rewrites the committed report.
    assert table3.main(['paper', '--report-only', '--datasets', 'csbm',
                        '--depths', '2', '--rows', 'none']) == 0
    assert files() == first


def test_the_authors_runs_lead_the_footnote_of_their_cell(tmp_path):
    r"""A record of experiments/authors_gcn.py becomes the first sentence
    of its cell's note, its numbers read from the record; other cells keep
    their notes."""
    def record(dataset, layers, scale, accuracies):
        return {'config': {'dataset': dataset, 'layers': layers,
                           'scale': scale, 'norm_mode': 'CN'},
                'runs': {str(seed): {'test_acc_last': a / 100}
                         for seed, a in enumerate(accuracies)},
                # rounded as authors_gcn.py writes it: not read back
                'summary': {'n': len(accuracies), 'test_acc_last_pct':
                            {'mean': 54.755, 'std': 6.5241}},
                'authors': {'commit': 'c9bed6a67bedb813717de07a'}}
    # mean 54.75499...: 54.75, not 54.76 from the rounded summary
    (tmp_path / 'cora_L16_s0.2.json').write_text(json.dumps(record(
        'cora', 16, 0.2, [53.62669245647969, 63.2495164410058,
                          47.38878143133462])))
    notes = {('cora', 'contranorm', 16): 'known before',
             ('citeseer', 'contranorm', 8): 'untouched'}
    notes = table3.with_authors_runs(notes, table3.read_authors(tmp_path))
    assert notes['cora', 'contranorm', 16] == (
        "the authors' published GCN code (PKU-ML/ContraNorm c9bed6a, their "
        "recipe, run by experiments/authors_gcn.py; last-epoch test "
        f"accuracy) gives 54.75 ± 6.52 at s = 0.2 (3 seeds, "
        f"{tmp_path / 'cora_L16_s0.2.json'}); known before")
    assert notes['citeseer', 'contranorm', 8] == 'untouched'
    assert table3.read_authors(tmp_path / 'none') == {}


def test_the_authors_runs_are_held_against_the_paper(tmp_path):
    r"""With the paper's value, the footnote says which of the authors'
    scales come within the flag's paper stds of it, highest scale first."""
    for scale, accuracy in ((0.2, 40.0), (1.0, 67.0), (0.5, 60.0)):
        (tmp_path / f'cora_L16_s{scale}.json').write_text(json.dumps({
            'config': {'dataset': 'cora', 'layers': 16, 'scale': scale,
                       'norm_mode': 'CN'},
            'runs': {str(seed): {'test_acc_last': (accuracy + d) / 100}
                     for seed, d in enumerate((-1.0, 0.0, 1.0))},
            'authors': {'commit': 'c9bed6a67bedb813717de07a'}}))
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    note = table3.with_authors_runs({}, table3.read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16]
    assert note.index('at s = 1 ') < note.index('at s = 0.5 ') \
        < note.index('at s = 0.2 ')
    assert note.endswith(": of these 3 scales, s = 1 comes within 2 paper "
                         "stds of the paper's 68.75 ± 2.10")
    paper = {('cora', 'contranorm', 16): (80.0, 2.0)}
    assert table3.with_authors_runs({}, table3.read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16].endswith(
        ": of these 3 scales, none comes within 2 paper stds of the "
        "paper's 80.00 ± 2.00")
    for path in sorted(tmp_path.glob('*_s0.[25].json')):
        path.unlink()
    assert table3.with_authors_runs({}, table3.read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16].endswith(
        ": this does not come within 2 paper stds of the paper's "
        "80.00 ± 2.00")


def test_a_footnote_gives_gnorm_at_the_scales_the_authors_ran():
    cell, found = _cell('contranorm', table3.settings(
        {'grid': {'contranorm': {'norm.scale': [0.2, 0.5, 1.0]}}},
        'contranorm'), [(0.70, 0.50), (0.60, 0.40), (0.65, 0.55)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    authors = {('cora', 'contranorm', 16): [
        dict(scale=1.0, mean=51.0, std=7.7, n=3, path='a', commit='c'),
        dict(scale=0.8, mean=54.4, std=2.2, n=3, path='b', commit='c'),
        dict(scale=0.2, mean=26.2, std=6.3, n=3, path='c', commit='c')]}
    notes = table3.with_authors_runs({}, authors, paper)
    record = table3.summarise([cell], found, paper, flag, notes,
                              authors)[0]
    assert record['note'].startswith(notes['cora', 'contranorm', 16])
    assert record['note'].endswith(  # gnorm ran no s = 0.8
        '; gnorm at the same scales: 55.00 ± 0.00 at s = 1 (2 seeds); '
        '50.00 ± 0.00 at s = 0.2 (2 seeds) (seed by seed, with a '
        'permutation test: experiments/results/authors_vs_gnorm.md)')
