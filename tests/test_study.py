r"""The study engine on depth studies (``python -m gnorm.study``, the
ContraNorm paper's Table 3 as ``table3_paper``/``table3_fair``): selection
by validation and its ties, composed runs equal the committed multirun's,
resuming, where runs and reports go, the comparison by intervals, the
footnotes from the authors' runs, bad input in one line."""
import csv
import json
import logging
import re
from pathlib import Path

import pytest

from gnorm.results import label, load_runs
from gnorm.results import overrides as run_overrides
from gnorm.results.keys import NOT_RESULT_KEYS, record_identity
from gnorm.study import stats
from gnorm.study.cli import main as study
from gnorm.study.findings.compare import chosen_by_validation
from gnorm.study.findings.select import summarise
from gnorm.study.reports import plot as study_plot
from gnorm.study.reports.depth import _cell as cell_text, completeness, tie_rule
from gnorm.study.runs.compose import cells, compose_cells, run_key, setting_label
from gnorm.study.spec.inputs import read_authors, read_notes, with_authors_runs
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import Spec, settings as spec_settings
from conftest import USER_NORM, compose_train, needs_mirror, comparison_lines

ROOT = Path(__file__).resolve().parents[1]
NOT_CONFIG_KEYS = (*NOT_RESULT_KEYS, 'experiment')


def _spec(table):
    r"""A spec of :obj:`table` alone (no file), for the pure functions."""
    return Spec('t', 't', Path('t.yaml'), None, table)


def _settings(grid, row):
    return spec_settings(_spec({'grid': grid}), row)


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
                                     setting=setting_label(setting)))
            found[key] = {'status': 'ok', 'val_acc': val, 'test_acc': test}
    return cell, found


def test_setting_chosen_by_validation_not_test():
    cell, found = _cell('contranorm', _settings(
        {'contranorm': {'norm.scale': [0.2, 1.0]}}, 'contranorm'),
        [(0.70, 0.50), (0.60, 0.65)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    by = {r['selection']: r for r in summarise([cell], found, paper)}
    assert by['val']['setting'] == 's=0.2' and by['val']['test_mean'] == 50.0
    assert by['test']['setting'] == 's=1' and by['test']['test_mean'] == 65.0
    assert by['val']['diff'] == pytest.approx(50.0 - 68.75)
    assert by['val']['runs'] == 2 and by['val']['expected'] == 2
    # A run whose config is not one of the cell's is never counted.
    found['stranger'] = {'status': 'ok', 'val_acc': 0.99, 'test_acc': 0.0}
    assert summarise([cell], found, paper)[0]['test_mean'] == 50.0


def test_a_tie_goes_to_the_first_setting_of_the_grid_and_is_shown():
    r"""Mean validation accuracies equal but for the last bits (the same
    correct nodes summed in another order) tie: the setting listed first
    in the grid (the smaller s) is chosen, and the cell names the other
    with its test accuracy."""
    settings = _settings({'contranorm': {
        'norm.scale': [0.2, 0.5, 1.0]}}, 'contranorm')
    cell, found = _cell('contranorm', settings, [
        (0.7, 0.50), (0.6, 0.90), (0.7 + 1e-12, 0.65)])
    by = {r['selection']: r for r in summarise([cell], found, {})}
    assert by['val']['setting'] == 's=0.2' and by['val']['test_mean'] == 50.0
    assert by['val']['ties'] == 's=1: 65.00 ± 0.00'
    assert 'tie, not chosen: s=1: 65.00 ± 0.00' in cell_text(by['val'])
    assert by['test']['setting'] == 's=0.5' and by['test']['ties'] == ''
    assert 'tie' not in cell_text(by['test'])
    # The grid's order decides, not the order the runs were found in.
    cell['runs'].reverse()
    by = {r['selection']: r for r in summarise([cell], found, {})}
    assert by['val']['setting'] == 's=0.2'
    assert "the tie goes to the setting listed first" in tie_rule()


def test_pairnorm_grid_picks_variant_and_scale():
    settings = _settings({'pairnorm': {'norm.mode': ['PN', 'PN-SI'],
                                       'norm.scale': [0.5, 1.0]}}, 'pairnorm')
    assert settings[1] == {'norm.mode': 'PN', 'norm.scale': 1.0}
    assert [setting_label(s) for s in settings] == [
        'PN, s=0.5', 'PN, s=1', 'PN-SI, s=0.5', 'PN-SI, s=1']
    cell, found = _cell('pairnorm', settings, [
        (0.5, 0.9), (0.6, 0.2), (0.8, 0.4), (0.7, 0.5)])
    by = {r['selection']: r for r in summarise([cell], found, {})}
    assert by['val']['setting'] == 'PN-SI, s=0.5'
    assert by['val']['test_mean'] == pytest.approx(40.0)
    assert by['test']['setting'] == 'PN, s=0.5'


def test_flagged_cells_get_their_explanation():
    cell, found = _cell('contranorm', [{}], [(0.5, 0.52)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    notes = {('cora', 'contranorm', 16): 'known'}
    record, = summarise([cell], found, paper, flag, notes)
    assert record['note'] == notes['cora', 'contranorm', 16]
    found = {k: {**r, 'test_acc': 0.68} for k, r in found.items()}
    record, = summarise([cell], found, paper, flag, notes)
    assert record['note'] is None  # within 2 paper stds


def test_a_note_without_layers_covers_every_depth():
    cell, found = _cell('contranorm', [{}], [(0.9, 0.95)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    notes = read_notes(load_spec('table3_fair').file('notes'))
    assert 'not comparable' in notes['cora', 'contranorm', None]
    # Both the paper's text (60/20/20) and the authors' code (public split).
    assert "The paper's Setup paragraph (Section 4.3) says it used 60/20/20 " \
        "splits too, but the authors' published GCN code trains on the " \
        'public split' in notes['cora', 'contranorm', None]
    record, = summarise([cell], found, paper, flag, notes)
    assert record['note'] == notes['cora', 'contranorm', None]
    # A line for the depth itself wins over the line for every depth.
    notes['cora', 'contranorm', 16] = 'this depth'
    record, = summarise([cell], found, paper, flag, notes)
    assert record['note'] == 'this depth'


def _result_overrides(run):
    return {k: v for k, v in run_overrides(run).items()
            if k not in NOT_RESULT_KEYS}


def test_composed_runs_are_those_of_the_committed_multirun():
    r"""The in-process composition gives the configs and run folders that
    ``python -m gnorm.train -m`` gave the committed runs."""
    spec = load_spec('table3_paper')
    runs_dir = ROOT / 'experiments' / 'runs' / 'table3_paper'
    seeds = spec.table['seeds']
    todo = cells(spec, ['cora'], ['none', 'contranorm'], [2], seeds)
    composer = compose_cells(spec, todo, [], runs_dir)
    runs = [r for c in todo for r in c['runs']]
    assert len(runs) == 5 + 4 * 5
    for run in runs:
        stored = json.loads((run['dir'] / 'results.json').read_text())
        assert run_key(record_identity(stored)) == run['key']
        # The same overrides, but for keys that do not change a result
        # (a unit of several runs was made with batch_runs=5).
        assert _result_overrides(stored) == _result_overrides(run['info'])
    run = runs[-1]
    assert (composer.config(run) == compose_train(*run['info']['overrides']))
    # A run with a result-changing override is another run.
    cell, = cells(spec, ['cora'], ['none'], [2], seeds)
    compose_cells(spec, [cell], ['train.epochs=5'], runs_dir)
    assert not {r['key'] for r in cell['runs']} & {r['key'] for r in runs}
    assert all('train.epochs=5' in r['dir'].name for r in cell['runs'])


def test_each_runs_key_is_that_of_composing_it_alone(tmp_path):
    r"""The composer resolves a config once per fixed overrides and sets
    the varying values after, with the values that are exactly their
    interpolation (strong_depth's ``split_index: ${seed}``): each run's key
    is that of its own composition."""
    from omegaconf import OmegaConf
    from gnorm.results.keys import config_identity
    from gnorm.study.runs.compose import late_paths
    for name, dataset in (('strong_depth', 'chameleon_filtered'),
                          ('table3_fair', 'cora')):
        spec = load_spec(name)
        todo = cells(spec, [dataset], list(spec.table['rows']), [2, 4],
                     spec.table['seeds'][:2])
        compose_cells(spec, todo, [], tmp_path)
        runs = [r for c in todo for r in c['runs']]
        for run in runs[::7] + runs[-1:]:
            alone = OmegaConf.to_container(
                compose_train(*run['info']['overrides']), resolve=True)
            assert run['key'] == run_key(config_identity(alone)), run['dir']
    spec = {'seed': 0, 'split_index': '${seed}', 'model': {'layers': 2}}
    assert late_paths(spec, 'seed') == [('seed',), ('split_index',)]
    assert late_paths(spec, 'model.layers') == [('model', 'layers')]
    for other in ('run_${seed}', '${split_index}'):  # read another way
        assert late_paths(dict(spec, name=other), 'seed') is None


def test_table_resumes_without_redoing_finished_runs(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    args = ['table3_paper', '--datasets', 'csbm', '--rows', 'none',
            'contranorm',
            '--depths', '2', '--seeds', '0', '1', '--set', 'train.epochs=2',
            'collapse_metrics=false', 'dataset.num_nodes=60',
            '--runs', str(runs), '--out', str(out), '--threads', '1']
    assert study(args) == 0
    paths = sorted(runs.rglob('results.json'))
    assert len(paths) == 2 + 2 * 4  # none: 2 seeds; contranorm: 2 x 4 scales
    stamps = {p: p.stat().st_mtime_ns for p in paths}
    lost = next(p for p in paths if 'norm.scale=0.5' in str(p)
                and 'seed=1' in str(p))
    lost.unlink()  # as if interrupted before this run finished

    assert study(args) == 0
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
        assert study(['table3_paper', *bad, '--runs',
                            str(tmp_path / 'runs')]) == 2
        err = capsys.readouterr().err
        assert err.startswith('error: ') and err.count('\n') == 1, err
    assert not list(tmp_path.iterdir())


def test_bad_places_and_typos_are_one_line(tmp_path, capsys):
    (tmp_path / 'afile').touch()
    missing = tmp_path / 'missing'
    cases = [
        (['table3_fair', '--report-only', '--runs', str(missing)],
         f'error: --report-only: no runs folder {missing}; pass --runs '),
        (['table3_paper', '--runs', str(tmp_path / 'runs'), '--out',
          str(tmp_path / 'afile' / 'out')],
         f'error: --out {tmp_path}/afile/out: {tmp_path}/afile/out lies '
         f'under the file {tmp_path}/afile; pass a folder'),
        (['table3_paper', '--runs', str(tmp_path / 'afile' / 'runs')],
         f'error: --runs {tmp_path}/afile/runs: '),
        (['table3_paper', '--set', 'train.epoch=3', '--runs', str(missing)],
         "error: --set: unknown key 'train.epoch' in train.epoch=3; "
         "closest keys: train.epochs"),
        (['table3_paper', '--rows', 'none', '--set', 'norm.scal=0.5', '--runs',
          str(missing)], "error: --set: unknown key 'norm.scal'"),
    ]
    for args, start in cases:
        assert study(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(start) and err.count('\n') == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['afile']
    # A key of ContraNorm's is fine for its row.
    assert study(['table3_paper', '--datasets', 'csbm', '--depths', '2',
                        '--rows', 'contranorm', '--set',
                        'norm.temperature=2', '--runs',
                        str(missing), '--dry-run']) == 0


def _help() -> str:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        study(['--help'])
    return out.getvalue()


def test_help_of_every_option_and_installed_launchers(monkeypatch, capsys):
    from gnorm.train import arguments
    text = _help()
    assert text.startswith('usage: python -m gnorm.study')
    description = text.split('\n\n')[1]
    assert description.rstrip().endswith('.'), description
    options = [line for line in text.splitlines()
               if line.startswith('  -') or line.startswith('  {')]
    for line in options:  # a help text on the line or the next one
        following = text.split(line, 1)[1].split('\n', 2)[1]
        assert len(line.split('  ')) > 2 or \
            following.startswith(' ' * 10), line
    for name in ('table3_paper', 'table3_fair', 'sepnorm_molhiv,',
                 'sepnorm_molhiv_cpu,', 'sepnorm_molhiv_cpu_long'):
        assert name in ' '.join(text.split())
    assert 'installed: basic, joblib, processes, slurm' in \
        ' '.join(text.split())
    monkeypatch.setattr(arguments, '_installed', lambda module: False)
    assert 'installed: basic\n' in _help().replace(' ' * 24, '')
    assert study(['table3_paper', '--launcher', 'processes']) == 2
    assert 'hydra/launcher=processes needs hydra-joblib-launcher, which is ' \
        'not installed: pip install "gnorm[launchers]"' in \
        capsys.readouterr().err


def test_the_old_scripts_are_aliases(tmp_path, capsys):
    from conftest import experiment
    table3, sepnorm = experiment('table3'), experiment('sepnorm')
    assert table3.main(['fair', '--datasets', 'cora', '--depths', '64',
                        '--rows', 'none', '--dry-run']) == 0
    assert 'experiment=table3_fair' in capsys.readouterr().out
    assert sepnorm.main(['long', 'train.epochs=2', '--rows', 'sharenorm',
                         '--seeds', '0', '--dry-run', '--scratch',
                         str(tmp_path)]) == 0
    said = capsys.readouterr().out
    assert 'experiment=sepnorm_molhiv_cpu_long' in said
    assert 'train.epochs=2' in said
    for script in (table3, sepnorm):
        assert script.main(['nope']) == 2
        assert capsys.readouterr().err.startswith('usage: ')


def test_set_runs_are_a_study_of_their_own(tmp_path, capsys):
    r"""``--set`` runs and their report go to the scratch folder, each
    config apart; the study's own runs folder and report stay as they
    were."""
    committed = ROOT / 'experiments' / 'results' / 'table3_paper.md'
    stamp = committed.stat().st_mtime_ns
    scratch = tmp_path / 'scratch'
    base = ['table3_paper', *TINY, '--rows', 'none', '--scratch',
            str(scratch)]
    assert study(base) == 0
    own = scratch / TINY_NAME
    assert len(list((own / 'runs').rglob('results.json'))) == 1
    report = own / f'{TINY_NAME}.csv'
    before = report.read_text()
    assert study([*base, '--set', 'train.lr=0.05']) == 0
    other = scratch / f'{TINY_NAME}+train.lr=0.05'
    assert len(list((other / 'runs').rglob('results.json'))) == 1
    title = (other / f'{TINY_NAME}+train.lr=0.05.md').read_text(
        ).splitlines()[0]
    assert title.startswith('# table3_paper') and 'train.lr=0.05' in title
    capsys.readouterr()
    assert study([*base, '--dry-run']) == 0
    assert '1 runs in 1 cells, 1 done' in capsys.readouterr().out
    assert study([*base, '--report-only']) == 0
    assert report.read_text() == before  # the same one run, not the mix
    assert committed.stat().st_mtime_ns == stamp
    assert study([*base, '--report-only', '--out',
                  str(ROOT / 'experiments' / 'results')]) == 2
    assert 'holds the report of the whole study' in capsys.readouterr().err


def test_table_trains_its_cells_in_this_process(tmp_path, monkeypatch,
                                                capsys):
    import subprocess
    popen = subprocess.Popen

    def no_training_process(args, *rest, **kwargs):
        assert 'gnorm.train' not in ' '.join(map(str, args)), args
        return popen(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, 'Popen', no_training_process)
    runs = tmp_path / 'runs'
    assert study(['table3_paper', *TINY, '--rows', 'none', 'layernorm',
                  '--runs', str(runs), '--scratch',
                  str(tmp_path / 'scratch')]) == 0
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
            if o.split('=')[0] not in NOT_CONFIG_KEYS))


def test_tiny_pairnorm_row_chooses_variant_and_scale_by_validation(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    assert study(['table3_paper', *TINY, '--rows', 'pairnorm', '--runs',
                  str(runs), '--out', str(out)]) == 0
    done = load_runs(runs)
    assert sorted({(r['config']['norm']['mode'], r['config']['norm']['scale'])
                   for r in done}) == sorted(
        (m, s) for m in ('PN', 'PN-SI', 'PN-SCS') for s in (0.2, 0.5, 0.8, 1.0))
    with open(out / f'{TINY_NAME}.csv') as f:
        by = {r['selection']: r for r in csv.DictReader(f)}
    for selection in ('val', 'test'):
        best = max(r[f'{selection}_acc'] for r in done)
        chosen = [r for r in done if setting_label(
            {'norm.mode': r['config']['norm']['mode'],
             'norm.scale': r['config']['norm']['scale']})
            == by[selection]['setting']]
        assert len(chosen) == 1 and chosen[0][f'{selection}_acc'] == best
        assert float(by[selection]['test_mean']) == pytest.approx(
            100 * chosen[0]['test_acc'], abs=1e-4)
    report = (out / f'{TINY_NAME}.md').read_text()
    line = next(x for x in report.splitlines()
                if x.startswith('| pairnorm (chosen by val, 12 settings)'))
    assert by['val']['setting'] in line


def test_interrupted_table_keeps_finished_cells_and_reports_them(
        tmp_path, monkeypatch, capsys):
    import gnorm.train
    real, calls = gnorm.train.train_runs, []

    def stop_at_second_cell(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(gnorm.train, 'train_runs', stop_at_second_cell)
    runs = tmp_path / 'runs'
    args = ['table3_paper', *TINY, '--rows', 'none', 'layernorm', '--runs',
            str(runs), '--scratch', str(tmp_path / 'scratch')]
    assert study(args) == 130
    first = list(runs.glob('*/results.json'))
    assert len(first) == 1
    # The report of what finished, before the exit status 130.
    said = capsys.readouterr()
    assert 'interrupted: finished runs are kept' in said.err
    report = tmp_path / 'runs-report' / f'{TINY_NAME}.md'
    assert 'report: ' in said.out and report.is_file()
    assert '**1 of 2 cells complete**' in report.read_text()
    stamp = first[0].stat().st_mtime_ns
    assert study(args) == 0
    assert len(list(runs.glob('*/results.json'))) == 2
    assert first[0].stat().st_mtime_ns == stamp
    assert len(calls) == 3  # the rerun trained only the missing cell


def test_the_erank_plot_draws_every_depth_and_a_partial_cell_dotted(
        tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(study_plot, 'save_figure',
                        lambda fig, path: figures.append(fig))
    records = [dict(dataset='cora', row=row, layers=16, selection='val',
                    complete=complete, settings_run=1 + complete, settings=2,
                    cell_runs=2 + 2 * complete, cell_expected=4,
                    erank=[8.0, 4.0], erank_min=[7.0, 3.0],
                    erank_max=[9.0, 5.0])
               for row, complete in (('none', True), ('contranorm', False))]
    shallow = dict(records[0], layers=2, erank=[6.0, 3.0],
                   erank_min=[5.0, 2.0], erank_max=[7.0, 4.0])
    assert study_plot.plot_erank(chosen_by_validation([shallow, *records]),
                                 tmp_path / "erank.png")
    two, sixteen = figures[0].axes  # a panel per depth, shallow first
    assert [ax.get_title() for ax in (two, sixteen)] == [
        'cora, 2 layers', 'cora, 16 layers']
    assert [list(line.get_ydata()) for line in two.lines] == [[6.0, 3.0]]
    assert [line.get_linestyle() for line in sixteen.lines] == ['-', ':']
    assert 'partial cell, dotted: contranorm (1 of 2 settings)' in \
        sixteen.texts[0].get_text()


def _record(row, depth, by_seed, complete=True):
    return dict(dataset='cora', row=row, layers=depth, selection='',
                test_by_seed=by_seed, complete=complete,
                settings_run=4 if complete else 1, settings=4,
                cell_runs=20 if complete else 5, cell_expected=20)


def _t_half(values, level=0.95):
    r"""Half the t interval of the mean of :obj:`values`, by hand."""
    from scipy.stats import t
    n = len(values)
    mean = sum(values) / n
    s = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return t.ppf((1 + level) / 2, n - 1) * s / n ** 0.5


def _welch_half(a, b, level=0.95):
    r"""Half Welch's interval of mean(b) - mean(a), by hand."""
    from scipy.stats import t

    def var(v):
        m = sum(v) / len(v)
        return sum((x - m) ** 2 for x in v) / (len(v) - 1)
    sa, sb = var(a) / len(a), var(b) / len(b)
    df = (sa + sb) ** 2 / (sa ** 2 / (len(a) - 1) + sb ** 2 / (len(b) - 1))
    return t.ppf((1 + level) / 2, df) * (sa + sb) ** 0.5


OURS = {0: 80.0, 1: 82.0, 2: 81.0}
OTHER = {0: 78.0, 1: 80.5, 2: 79.0}   # below OURS on every seed


def test_beats_when_the_interval_excludes_0_paired_or_welch():
    r"""Seed by seed OURS is 1.5-2 points above OTHER: paired, the
    interval lies above 0; unpaired (Welch), the seeds' spread hides it.
    The rule of earlier reports (Δ beyond the larger std) says beats."""
    diffs = [OURS[s] - OTHER[s] for s in OURS]
    mean = sum(diffs) / 3
    half = _t_half(diffs)
    paired = stats.compare(OTHER, OURS, 'seed')
    assert paired.diff == pytest.approx(mean)
    assert (paired.lo, paired.hi) == pytest.approx((mean - half,
                                                    mean + half))
    assert paired.verdict == 'beats' and paired.n == '3'
    welch = stats.compare(OTHER, OURS, 'none')
    half = _welch_half(list(OTHER.values()), list(OURS.values()))
    assert (welch.lo, welch.hi) == pytest.approx((mean - half, mean + half))
    assert welch.verdict == 'not distinguishable' and welch.n == '3+3'

    records = [_record('contranorm', 2, OURS),
               _record('pairnorm', 2, OTHER),
               _record('layernorm', 2, {0: 90.0, 1: 91.0, 2: 92.0}),
               _record('contranorm', 4, OURS),
               _record('pairnorm', 4, OURS),
               _record('layernorm', 4, OTHER, complete=False)]
    lines = comparison_lines(records, 'contranorm',
                                     ['pairnorm', 'layernorm'], 'seed',
                                     0.95, spread_rule=True)
    assert 'per-seed differences' in ' '.join(lines)
    two = next(x for x in lines if x.startswith('| cora | 2 |'))
    four = next(x for x in lines if x.startswith('| cora | 4 |'))
    # a family of 4 planned comparisons, 3 with a test (the partial cell
    # counts as p = 1): Holm multiplies the smallest p by 4, the next by 3
    assert two == ('| cora | 2 | **beats** (Δ +1.83 [+1.12, +2.55], n=3, '
                   'p=0.0082, Holm 0.0245) | **loses** (Δ \u221210.00 '
                   '[\u221212.48, \u22127.52], n=3, p=0.0033, Holm 0.0133) |')
    # equal on every seed: equivalent within the margin, family-wise
    assert four == ('| cora | 4 | **equivalent** (Δ +0.00 [+0.00, +0.00], n=3, '
                    'p=1.0000, Holm 1.0000; within ±1: p=<0.0001, Holm '
                    '<0.0001) | not compared: layernorm partial (1 of 4 '
                    'settings) |')
    assert next(x for x in lines if x.startswith('In words')) == (
        'In words (Holm-adjusted over a family of 4 planned, 3 run): '
        'against pairnorm, '
        'contranorm beats at cora L=2; is equivalent within ±1 at cora L=4. '
        'Against layernorm, contranorm loses at cora L=2 (not compared yet, '
        'incomplete: cora L=4).')
    assert lines[-1].endswith('reads every compared cell as the verdict '
                              'does.')
    welch_lines = comparison_lines(
        records, 'contranorm', ['pairnorm'], 'none', 0.95, spread_rule=True)
    assert "Welch's" in ' '.join(welch_lines)
    assert welch_lines[-1].endswith(
        'reads 1 compared cell otherwise: cora L=2 vs pairnorm: beats, the '
        'verdict: undecided.')
    assert comparison_lines(
        [r for r in records if r['row'] != 'contranorm'], 'contranorm',
        ['pairnorm'], 'seed', 0.95) == []


def _depth_panel(records, tmp_path, figures):
    r"""The one panel of :func:`plot_depth` of :obj:`records` (its figure
    caught in :obj:`figures`) and its first solid line."""
    study_plot.plot_depth(chosen_by_validation(records),
                          tmp_path / 'depth.png', paper_lines=False)
    ax, = figures[-1].axes
    return ax, next(line for line in ax.lines if line.get_linestyle() == '-')


def test_partial_cells_are_counted_and_not_points_of_the_curve(
        tmp_path, monkeypatch):
    settings = [{'norm.scale': 0.2}, {'norm.scale': 1.0}]
    full, found = _cell('contranorm', settings, [(0.7, 0.5), (0.6, 0.65)])
    partial, some = _cell('contranorm', settings[:1], [(0.7, 0.4)],
                          seeds=(5, 6))
    partial.update(depth=32, settings=settings)  # 1 of its 2 settings run
    empty, _ = _cell('contranorm', settings, [])
    empty.update(depth=64)
    records = summarise([full, partial, empty], {**found, **some}, {})
    by = {r['layers']: r for r in records if r['selection'] == 'val'}
    assert [by[d]['complete'] for d in (16, 32, 64)] == [True, False, False]
    assert (by[32]['settings_run'], by[32]['settings']) == (1, 2)
    assert (by[32]['cell_runs'], by[32]['cell_expected']) == (2, 4)
    assert completeness(records).startswith(
        '**1 of 3 cells complete** (every setting of the grid run with '
        'every seed), 1 partial, 1 missing; 6 of 12 runs of the grid done '
        '(3 of 6 settings with runs)')
    figures = []
    monkeypatch.setattr(study_plot, 'save_figure',
                        lambda fig, path: figures.append(fig))
    ax, curve = _depth_panel(records, tmp_path, figures)
    assert list(curve.get_xdata()) == [16]  # the complete cell only
    assert list(curve.get_ydata()) == [pytest.approx(50.0)]
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
    study_plot.plot_depth(chosen_by_validation(records), tmp_path / 'depth.png',
                          paper_lines=True,
                      authors=authors)
    ax, = figures[0].axes
    diamond, = [line for line in ax.lines if line.get_marker() == 'D']
    assert list(diamond.get_xdata()) == [16, 16]
    assert list(diamond.get_ydata()) == [51.0, 26.0]


def test_partial_labels_at_one_depth_clear_every_marker_and_each_other(
        tmp_path, monkeypatch):
    # Three rows side by side at L=32, two of them partial with nearly
    # equal scores: each label sits right of the rightmost row's marker and
    # the two are about LABEL_STEP points apart, not on top of each other.
    settings = [{'norm.scale': 0.2}, {'norm.scale': 1.0}]
    cells, found = [], {}
    for row, test, run in (('contranorm', 0.500, 1), ('pairnorm', 0.503, 1),
                           ('layernorm', 0.600, 2)):
        for depth in (16, 32):
            cell, runs = _cell(row, settings[:run], [(0.7, test)] * run)
            cell.update(depth=depth, settings=settings[:2 if depth == 32
                                                         else run])
            for r in cell['runs']:
                r['key'] = f"{row}-{depth}-{r['key']}"
            cells.append(cell)
            found.update({f'{row}-{depth}-{k}': v for k, v in runs.items()})
    records = summarise(cells, found, {})
    figures = []
    monkeypatch.setattr(study_plot, 'save_figure',
                        lambda fig, path: figures.append(fig))
    ax, _ = _depth_panel(records, tmp_path, figures)
    labels = [t for t in ax.texts if t.get_text() == '1 of 2 settings']
    assert len(labels) == 2
    markers = [x for line in ax.lines for x in line.get_xdata()]
    assert all(t.xy[0] >= max(x for x in markers if x > 24) for t in labels)
    assert all(t.get_position()[0] > 0 for t in labels)  # to the right
    (high, y_high), (low, y_low) = sorted(
        ((t.xy[1], t.get_position()[1]) for t in labels), reverse=True)
    low_, top = ax.get_ylim()
    points = ax.bbox.height * 72 / ax.figure.dpi / (top - low_)
    gap = (high - low) * points + y_high - y_low
    # the layout resizes the panel after labelling: about LABEL_STEP,
    # never less than the labels' 6-point type
    assert 6 <= gap <= study_plot.LABEL_STEP * 1.2


def test_the_curve_joins_complete_cells_across_a_missing_depth(
        tmp_path, monkeypatch):
    settings = [{'norm.scale': 1.0}]
    shallow, found = _cell('contranorm', settings, [(0.7, 0.5)])
    deep, more = _cell('contranorm', settings, [(0.7, 0.6)], seeds=(3, 4))
    deep.update(depth=64)
    gap, _ = _cell('contranorm', settings, [])
    gap.update(depth=32)
    records = summarise([shallow, gap, deep], {**found, **more}, {})
    figures = []
    monkeypatch.setattr(study_plot, 'save_figure',
                        lambda fig, path: figures.append(fig))
    ax, curve = _depth_panel(records, tmp_path, figures)
    assert list(curve.get_xdata()) == [16, 64]
    assert list(curve.get_ydata()) == [pytest.approx(50.0),
                                       pytest.approx(60.0)]
    note, = [t for t in ax.texts if 'no runs' in t.get_text()]
    assert note.get_text() == 'contranorm: no runs at L=32'
    # below the axis label, however small the panel: in points, not axes
    assert note.xy == (0.0, 0.0) and note.anncoords == 'offset points'
    assert note.get_position()[1] == -study_plot.NOTES_BELOW



def test_a_depth_panel_spans_its_runs_shows_every_row_and_keeps_its_width(
        tmp_path, monkeypatch):
    r"""Three rows of equal scores at 2, 4, 8 and 12 layers, two of them
    planned but not run at 16 and 32: the axis spans 2 to 12 with ticks
    that do not overlap, each row sits beside the others at every depth
    (none hides another), and the note of the missing depths stays within
    the panel's width, so that the layout keeps the panel wide."""
    settings = [{'norm.scale': 1.0}]
    cells, found = [], {}
    for row in ('batchnorm', 'a_norm_with_a_long_name_of_its_own', 'none'):
        for depth in (2, 4, 8, 12) + ((16, 32) if row != 'none' else ()):
            ran = depth <= 12
            cell, more = _cell(row, settings, [(0.7, 0.9)] if ran else [],
                               seeds=(depth, depth + 100))
            cell.update(depth=depth)
            cells.append(cell)
            found.update(more)
    records = summarise(cells, found, {})
    figures = []
    monkeypatch.setattr(study_plot, 'save_figure',
                        lambda fig, path: figures.append(fig))
    study_plot.plot_depth(chosen_by_validation(records),
                          tmp_path / 'depth.png', paper_lines=False)
    fig, = figures
    ax, = fig.axes
    assert list(ax.get_xticks()) == [2, 4, 8, 12]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    first, second, _ = [line for line in ax.lines
                        if line.get_linestyle() == '-']
    assert list(first.get_ydata()) == list(second.get_ydata())
    for a, b in zip(first.get_xdata(), second.get_xdata()):
        assert a < b and abs(b / a - 2 ** study_plot.DODGE) < 1e-9
    note, = [t for t in ax.texts if 'no runs' in t.get_text()]
    assert len(note.get_text().splitlines()) == 2  # the long note wrapped
    panel = ax.get_window_extent(renderer)
    assert note.get_window_extent(renderer).width <= panel.width * 1.05
    assert panel.width > 0.6 * fig.get_window_extent(renderer).width


TINY_SPEC = '''# @package _global_
defaults:
  - table3_paper
train:
  epochs: 2
collapse_metrics: false
dataset:
  num_nodes: 60
table:
  name: tiny_table
  datasets: [csbm]
  depths: [2, 4]
  seeds: [0]
  grid:
    contranorm: {norm.scale: [0.5, 1.0]}
'''


def _tiny_study(folder):
    r"""A whole table small enough to train in seconds, as a user's spec
    file: table3_paper's protocol and rows on csbm, depths 2 and 4, one
    seed, ContraNorm at two scales, PairNorm's whole grid."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / 'tiny_table.yaml'
    path.write_text(TINY_SPEC)
    return path


def test_a_study_report_is_the_same_bytes_from_the_same_runs(tmp_path):
    r"""A user's spec: runs beside it (``runs/<name>``), the report of the
    whole study in ``results/``; a selection trains into the study's runs
    but writes its report to the scratch folder; the same runs give the
    same bytes, not even rewritten."""
    spec = _tiny_study(tmp_path / 'mine')
    results, scratch = tmp_path / 'mine' / 'results', tmp_path / 'scratch'
    args = [str(spec), '--threads', '1', '--scratch', str(scratch),
            '--rows', 'none', 'contranorm']
    assert study([*args, '--depths', '2']) == 0
    assert not results.exists()
    selected = (scratch / 'tiny_table-selection' / 'tiny_table.md'
                ).read_text()
    assert 'It covers only the selected cells' in selected
    assert len(list((tmp_path / 'mine' / 'runs' / 'tiny_table').rglob(
        'results.json'))) == 3
    assert study([str(spec), '--threads', '1', '--rows', 'none',
                  'contranorm', '--scratch', str(scratch)]) == 0
    assert not results.exists()  # still a selection (rows)
    assert study([str(spec), '--report-only']) == 0

    def files():
        return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(results.iterdir())}

    first = files()
    assert set(first) == {'tiny_table.md', 'tiny_table.csv',
                          'tiny_table_depth.png'}
    report = first['tiny_table.md'][0].decode()
    assert '**4 of 8 cells complete**' in report  # pairnorm, layernorm not run
    assert 'Generated by `python -m gnorm.study tiny_table.yaml ' \
        '--report-only` from the 6 finished runs in `runs/tiny_table`' \
        in report
    assert not re.search(r'\d{4}-\d\d-\d\d', report)  # no date
    with open(results / 'tiny_table.csv') as f:
        rows = list(csv.DictReader(f))
    assert {(r['settings_run'], r['settings'], r['complete'])
            for r in rows if r['row'] == 'contranorm'} == {('2', '2', 'True')}
    assert study([str(spec), '--report-only']) == 0
    assert files() == first  # the same bytes, not even rewritten
    assert study([str(spec), '--report-only', '--datasets', 'csbm',
                  '--depths', '2', '--rows', 'none', '--scratch',
                  str(scratch)]) == 0
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
    notes = with_authors_runs(notes, read_authors(tmp_path))
    assert notes['cora', 'contranorm', 16] == (
        "the authors' published GCN code (PKU-ML/ContraNorm c9bed6a, their "
        "recipe, run by experiments/authors_gcn.py; last-epoch test "
        f"accuracy) gives 54.75 ± 6.52 at s = 0.2 (3 seeds, "
        f"{tmp_path / 'cora_L16_s0.2.json'}); known before")
    assert notes['citeseer', 'contranorm', 8] == 'untouched'
    assert read_authors(tmp_path / 'none') == {}


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
    note = with_authors_runs({}, read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16]
    assert note.index('at s = 1 ') < note.index('at s = 0.5 ') \
        < note.index('at s = 0.2 ')
    assert note.endswith(": of these 3 scales, s = 1 comes within 2 paper "
                         "stds of the paper's 68.75 ± 2.10")
    paper = {('cora', 'contranorm', 16): (80.0, 2.0)}
    assert with_authors_runs({}, read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16].endswith(
        ": of these 3 scales, none comes within 2 paper stds of the "
        "paper's 80.00 ± 2.00")
    for path in sorted(tmp_path.glob('*_s0.[25].json')):
        path.unlink()
    assert with_authors_runs({}, read_authors(tmp_path),
                                    paper, 2.0)[
        'cora', 'contranorm', 16].endswith(
        ": this does not come within 2 paper stds of the paper's "
        "80.00 ± 2.00")


def test_a_footnote_gives_gnorm_at_the_scales_the_authors_ran():
    cell, found = _cell('contranorm', _settings(
        {'contranorm': {'norm.scale': [0.2, 0.5, 1.0]}}, 'contranorm'), [(0.70, 0.50), (0.60, 0.40), (0.65, 0.55)])
    paper = {('cora', 'contranorm', 16): (68.75, 2.10)}
    flag = {'rows': ['contranorm'], 'paper_stds': 2}
    authors = {('cora', 'contranorm', 16): [
        dict(scale=1.0, mean=51.0, std=7.7, n=3, path='a', commit='c'),
        dict(scale=0.8, mean=54.4, std=2.2, n=3, path='b', commit='c'),
        dict(scale=0.2, mean=26.2, std=6.3, n=3, path='c', commit='c')]}
    notes = with_authors_runs({}, authors, paper)
    record = summarise([cell], found, paper, flag, notes, authors,
                       'experiments/results/authors_vs_gnorm.md')[0]
    assert record['note'].startswith(notes['cora', 'contranorm', 16])
    assert record['note'].endswith(  # gnorm ran no s = 0.8
        '; gnorm at the same scales: 55.00 ± 0.00 at s = 1 (2 seeds); '
        '50.00 ± 0.00 at s = 0.2 (2 seeds) (seed by seed, with a '
        'permutation test: experiments/results/authors_vs_gnorm.md)')


MY_SPEC = '''# @package _global_
split: random
test_set: split
select: best_val
collapse_metrics: false
train:
  epochs: 2
dataset:
  num_nodes: 60
table:
  name: {name}
  kind: {kind}
  pairing: seed
  min_seeds: 2
  datasets: [csbm]
  depths: [2]
  seeds: [0, 1]
  rows:
    none: [norm=none]
    mine: [norm=none, norm._target_=my_norm_{name}.HalfLN]
  grid:                      # an argument of the user's class, added with +
    mine: {{+norm.factor: [0.25, 0.5]}}
  compare: {{rows: [mine], against: [none]}}
'''


def _my_study(folder, name, kind='depth', monkeypatch=None):
    r"""A user's norm module and spec file :obj:`name` in :obj:`folder`
    (the module on ``sys.path`` with :obj:`monkeypatch`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f'my_norm_{name}.py').write_text(USER_NORM)
    path = folder / f'{name}.yaml'
    path.write_text(MY_SPEC.format(name=name, kind=kind))
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(folder))
    return path


def test_a_users_spec_and_norm_need_no_hydra_section(tmp_path, monkeypatch,
                                                     capsys):
    r"""A spec file of the user's, outside gnorm, with no ``hydra:``
    section and a row whose norm class lives in the user's module:
    trained, reported, and a rerun trains nothing."""
    spec = _my_study(tmp_path, 'mine_depth', monkeypatch=monkeypatch)
    assert study([str(spec), '--threads', '1']) == 0
    runs = tmp_path / 'runs' / 'mine_depth'
    folders = sorted(p.parent.name for p in runs.rglob('results.json'))
    assert folders == [  # one folder per run, named after its overrides
        f'{factor}dataset=csbm,layers=2,{norm},seed={seed},tag={tag}'
        for factor, norm, tag in (
            (f'+norm.factor={f},', 'norm._target_=my_norm_mine_depth.HalfLN,'
             'norm=none', 'mine') for f in (0.25, 0.5))
        for seed in (0, 1)] + [
        f'dataset=csbm,layers=2,norm=none,seed={seed},tag=none'
        for seed in (0, 1)]
    factors = {load_runs(runs / f)[0]['config']['norm'].get('factor')
               for f in folders}
    assert factors == {0.25, 0.5, None}  # the grid reached the class
    # gnorm.results names the user's norm by its class, as for runs of
    # python -m gnorm.train (a paired study's)
    assert {label(run, 'norm') for run in load_runs(runs)} == {
        'HalfLN', 'none'}
    report = (tmp_path / 'results' / 'mine_depth.md').read_text()
    assert '## Does mine beat none?' in report
    assert '**2 of 2 cells complete**' in report
    assert re.search(r'\| mine \(chosen by val, 2 settings\) \| [\d.]+ ± '
                     r'[\d.]+, factor=0\.(25|5)(<br>| \|)', report)
    assert 'paper' not in report.lower()  # a user's study has no paper
    capsys.readouterr()
    assert study([str(spec), '--dry-run']) == 0
    assert '6 runs in 2 cells, 6 done, 0 to run' in capsys.readouterr().out


def test_a_dry_run_says_each_cells_seconds_and_their_total(
        tmp_path, monkeypatch, capsys):
    r"""``--dry-run`` estimates each cell's seconds on this machine (here
    from one committed run of its CPU) and ends with their total."""
    from gnorm.machine import cpu_name
    from gnorm.study.runs import cost as queue_cost
    run = tmp_path / 'committed' / 'study' / 'run'
    run.mkdir(parents=True)
    (run / 'results.json').write_text(json.dumps(dict(
        status='ok', device='cpu', machine=dict(cpu=cpu_name()),
        choices=dict(dataset='csbm', norm='none'), overrides=[],
        config=dict(layers=2, model=dict(hidden_channels=32)),
        curve=dict(epoch=[1, 2]), batch_runs=1, loop_s=4.0, runtime_s=5.0)))
    monkeypatch.setattr(queue_cost, 'RUNS', tmp_path / 'committed')
    spec = _my_study(tmp_path, 'mine_total', monkeypatch=monkeypatch)
    assert study([str(spec), '--dry-run']) == 0
    said = capsys.readouterr().out
    assert '6 runs in 2 cells, 0 done, 6 to run' in said
    assert said.count(' here\n') == 3  # each cell's, and the total
    total = said.splitlines()[-1]
    assert total.startswith('total: 6 runs to run in 2 cells, about ')
    assert total.endswith(' here')
    assert not (tmp_path / 'runs').exists()


def test_a_paired_study_of_node_runs(tmp_path, monkeypatch):
    r"""Rows paired by seed on node classification: accuracies in %, the
    recipe left to the runs' configs (no Graphormer words)."""
    spec = _my_study(tmp_path, 'mine_paired', 'paired', monkeypatch)
    spec.write_text(spec.read_text().replace(
        '# @package _global_\n',
        '# @package _global_\ndefaults:\n  - override /dataset: csbm\n'))
    # Each run is a process of its own: it finds the user's module as the
    # user's own command would, on PYTHONPATH.
    import os
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        [str(tmp_path), os.environ.get('PYTHONPATH', '')]))
    assert study([str(spec), '--threads', '1']) == 0
    report = (tmp_path / 'results' / 'mine_paired.md').read_text()
    assert '## Against none, seed by seed' in report
    # the recipe and data of a user's paired study, from its runs: no
    # placeholder, no paper, a plot named once
    assert "**Recipe** (from the runs' recorded configs): 2 epochs; " \
        'split: random 60/20/20, seed k draws split k' in report
    assert '**Epochs**: 2 per run. The best validation epoch' in report
    assert '**Data**: csbm; ' in report
    assert 'Graphormer' not in report and 'paper' not in report.lower()
    assert '()' not in report and '**' not in report.split(
        '## Against')[1].split('## Recipe')[0].replace('**mine**', '')
    with open(tmp_path / 'results' / 'mine_paired.csv') as f:
        rows = {r['row']: r for r in csv.DictReader(f)}
    runs = load_runs(tmp_path / 'runs' / 'mine_paired')
    tests = sorted(100 * r['test_acc'] for r in runs
                   if r['config']['tag'] == 'none')
    assert float(rows['none']['test_mean']) == pytest.approx(
        sum(tests) / 2, abs=1e-3)
    assert rows['mine']['pairs'] == '2'


@pytest.mark.parametrize('old,new,says', [
    ('datasets: [csbm]', 'datasets: [pubmed]', "unknown dataset 'pubmed'"),
    ('none: [norm=none]', 'none: []', "row 'none' needs a list of "
     'key=value overrides'),
    ('+norm.factor: [0.25, 0.5]', 'model.dropot: [0.1, 0.2]',
     "row 'mine': unknown key 'model.dropot' in model.dropot=0.1; closest "
     'keys: model.dropout'),
    ('.HalfLN]', '.Nope]', 'does not import (AttributeError'),
    ('depths: [2]', 'depths: [0]', 'table.depths must be depths in layers '
     '(integers >= 1), got 0'),
    ('kind: depth', 'kind: sweep', 'table.kind must be one of depth, '
     'paired'),
    ('pairing: seed', 'pairing: split', 'table.pairing must be one of seed,'
     ' none'),
])
def test_a_bad_spec_is_one_line_before_anything_trains(tmp_path, capsys,
                                                       monkeypatch, old,
                                                       new, says):
    spec = _my_study(tmp_path, 'bad', monkeypatch=monkeypatch)
    spec.write_text(spec.read_text().replace(old, new))
    assert study([str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and err.count('\n') == 1, err
    assert says in err, err
    assert not (tmp_path / 'runs').exists()


PAIRED_CSBM = ('# @package _global_\n',
               '# @package _global_\ndefaults:\n  - override /dataset: csbm\n')


def _spec_says(tmp_path, capsys, monkeypatch, changes, kind='depth'):
    r"""``python -m gnorm.study --dry-run`` of :data:`MY_SPEC` (of
    :obj:`kind`; a paired one on CSBM) with the :obj:`changes` (old, new)
    made: its exit status and what it wrote on stderr."""
    spec = _my_study(tmp_path, 'bad', kind, monkeypatch)
    text = spec.read_text()
    for old, new in ([PAIRED_CSBM] if kind == 'paired' else []) + changes:
        assert old in text, old
        text = text.replace(old, new)
    spec.write_text(text)
    code = study([str(spec), '--dry-run', '--runs', str(tmp_path / 'runs')])
    return code, capsys.readouterr().err


def _refused(tmp_path, capsys, monkeypatch, changes, says, kind='depth'):
    code, err = _spec_says(tmp_path, capsys, monkeypatch, changes, kind)
    assert code == 2, err
    assert err.startswith('error: ') and err.count('\n') == 1, err
    for part in says:
        assert part in err, err
    assert not (tmp_path / 'runs').exists()


ROW = 'none: [norm=none]'
GRID = '+norm.factor: [0.25, 0.5]'


@pytest.mark.parametrize('old,new,says', [
    (ROW, 'none: [norm=none, layers=3]', "row 'none' sets layers"),
    (ROW, 'none: [norm=none, dataset=citeseer]', "row 'none' sets dataset"),
    (ROW, 'none: [norm=none, seed=7]', "row 'none' sets seed"),
    (ROW, 'none: [norm=none, +tag=base]', "row 'none' sets tag"),
    (GRID, 'layers: [2, 3]', "row 'mine' sets layers in its grid"),
])
def test_a_row_or_grid_may_not_set_an_axis_of_the_study(
        tmp_path, capsys, monkeypatch, old, new, says):
    r"""A row's ``layers=2`` would put its runs in the column of another
    depth, ``dataset=citeseer`` CiteSeer in a Cora table; ``seed=7`` would
    be dropped: refused, naming what sets the axis instead."""
    _refused(tmp_path, capsys, monkeypatch, [(old, new)],
             [says, 'which the study sets itself'])


def test_a_paired_row_may_set_layers_but_not_seed(tmp_path, capsys,
                                                  monkeypatch):
    code, err = _spec_says(tmp_path, capsys, monkeypatch,
                           [(ROW, 'none: [norm=none, layers=3]')], 'paired')
    assert code == 0, err
    _refused(tmp_path / 'b', capsys, monkeypatch,
             [(ROW, 'none: [norm=none, seed=3]')], ["row 'none' sets seed",
                                                    'table.seeds'], 'paired')


@pytest.mark.parametrize('old,new,says', [
    (ROW, 'none: [norm=none, test_set=rest]',
     "row 'none' sets test_set=rest, row 'mine' nothing of the split"),
    (GRID, 'split_index: [0, 1]', "row 'mine' sweeps split_index"),
])
def test_rows_paired_by_seed_share_their_split(tmp_path, capsys,
                                               monkeypatch, old, new, says):
    r"""``pairing: seed`` pairs the runs of one seed as runs on one split:
    rows (or grids) that set the split's keys differently are refused;
    with ``pairing: none`` (Welch) they are a table like any other."""
    _refused(tmp_path, capsys, monkeypatch, [(old, new)], [says])
    if old == ROW:
        code, err = _spec_says(tmp_path / 'b', capsys, monkeypatch,
                               [(old, new), ('pairing: seed',
                                             'pairing: none')])
        assert code == 0, err
    _refused(tmp_path / 'c', capsys, monkeypatch, [(old, new)], [says],
             'paired')


def test_a_depth_study_of_a_graph_dataset_is_refused(tmp_path, capsys,
                                                     monkeypatch):
    r"""A depth study selects and compares node scores: one on a
    graph-level dataset is refused before anything trains, pointing at a
    paired study; so is such a dataset selected."""
    says = ["dataset 'zinc_fixture' is graph-level", 'kind: paired']
    _refused(tmp_path, capsys, monkeypatch,
             [('datasets: [csbm]', 'datasets: [zinc_fixture]')], says)
    assert study(['table3_fair', '--datasets', 'zinc_fixture', '--dry-run',
                  '--runs', str(tmp_path / 'runs')]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in says) and err.count('\n') == 1, err


@pytest.mark.parametrize('changes,says', [
    ([(GRID, '+norm.factor: [0.5, 0.50]')],
     'table.grid.mine: +norm.factor lists 0.5 and 0.5, which are equal'),
    ([(ROW, 'none: [norm=contranorm]'),
      (GRID, '+norm.factor: [0.25, 0.5]}\n    none: {norm.scale: [1, 1.0, '
       '0.5]')],
     'table.grid.none: norm.scale lists 1 and 1.0, which are equal'),
    ([(ROW, 'none: [norm=contranorm]'),
      (GRID, '+norm.factor: [0.25, 0.5]}\n    none: {norm.scale: [0.5, '
       '0.5000001]')],
     'table.grid.none: norm.scale lists 0.5 and 0.5000001, which print '
     'alike (s=0.5)'),
])
def test_grid_values_that_print_alike_are_refused(tmp_path, capsys,
                                                  monkeypatch, changes, says):
    r"""A cell's settings are told apart by their labels: values equal, or
    printed alike, would merge into one setting of twice the runs."""
    _refused(tmp_path, capsys, monkeypatch, changes, [says])


@pytest.mark.parametrize('old,new,says', [
    ('  epochs: 2', '  epoch: 2', "unknown key 'train.epoch' in the "
     "protocol; closest keys: train.epochs"),
    ('datasets: [csbm]', 'datasets: [cora]', "unknown key "
     "'dataset.num_nodes' in the protocol; only dataset=csbm have it"),
    ('pairing: seed', 'paring: seed', "unknown key 'table.paring'; closest "
     "keys: table.pairing"),
    ('against: [none]', 'againts: [none]', "unknown key "
     "'table.compare.againts'; closest keys: table.compare.against"),
    ('  seeds: [0, 1]', '  seeds: [0, 1]\n  flag: {rows: [mine], paper_std: '
     '2}', "unknown key 'table.flag.paper_std'; closest keys: "
     "table.flag.paper_stds"),
    ('  seeds: [0, 1]', '  seeds: [0, 1]\n  not_run: [{depth: [2]}]',
     "unknown key 'table.not_run.depth'; closest keys: "
     "table.not_run.depths"),
])
def test_a_typo_in_the_protocol_or_table_names_the_closest_key(
        tmp_path, capsys, monkeypatch, old, new, says):
    r"""``train: {epoch: 30}`` would train the default 200 epochs,
    ``paring: seed`` switch to Welch's interval, ``againts:`` drop the
    comparison: each is refused as ``python -m gnorm.train`` refuses a
    typo, naming the closest key."""
    _refused(tmp_path, capsys, monkeypatch, [(old, new)], [says])


def test_a_protocol_may_give_its_own_norm_class_its_arguments(
        tmp_path, capsys, monkeypatch):
    r"""Keys of a norm class of the user's, set in the protocol, are its
    arguments, not typos: the class takes them."""
    code, err = _spec_says(tmp_path, capsys, monkeypatch, [(
        'select: best_val\n', 'select: best_val\nnorm:\n  _target_: '
        'my_norm_bad.HalfLN\n  factor: 0.5\n'),
        (GRID, 'norm.factor: [0.25, 0.5]')])  # a key of the config now
    assert code == 0, err


@pytest.mark.parametrize('name', ['table3_paper', 'table3_fair',
                                  'contranorm_fidelity',
                                  'contranorm_fidelity_luo',
                                  'sepnorm_molhiv', 'sepnorm_molhiv_cpu',
                                  'sepnorm_molhiv_cpu_long'])
def test_gnorms_own_studies_pass_the_checks(name):
    assert load_spec(name).name == name


@pytest.mark.parametrize('launcher', [
    'processes', pytest.param('submitit_local', marks=pytest.mark.slow)])
def test_a_study_hands_its_cells_to_a_hydra_launcher(tmp_path, launcher,
                                                     capsys, monkeypatch):
    r"""``--launcher``: each cell a ``python -m gnorm.train -m`` multirun
    on a local Hydra launcher (joblib processes, submitit's local
    executor); the same runs and folders as training here, and a rerun
    trains nothing."""
    import os
    spec = _my_study(tmp_path, f'launched_{launcher}', monkeypatch=monkeypatch)
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        [str(tmp_path), os.environ.get('PYTHONPATH', '')]))
    assert study([str(spec), '--launcher', launcher, '--threads', '1']) == 0
    runs = tmp_path / 'runs' / f'launched_{launcher}'
    assert len(list(runs.glob('*/results.json'))) == 6
    report = (tmp_path / 'results' / f'launched_{launcher}.md').read_text()
    assert '**2 of 2 cells complete**' in report
    capsys.readouterr()
    assert study([str(spec), '--launcher', launcher, '--dry-run']) == 0
    assert '6 runs in 2 cells, 6 done, 0 to run' in capsys.readouterr().out


@pytest.mark.parametrize('name', ['table3_paper', 'table3_fair',
                                  'filtered_heterophily',
                                  'heterophily_baselines', 'strong_depth',
                                  'sepnorm_molhiv_cpu',
                                  'sepnorm_molhiv_cpu_long'])
def test_committed_reports_regenerate_byte_identically(tmp_path, name):
    r"""``python -m gnorm.study <name> --report-only`` writes the
    committed report's files, byte for byte, from the committed runs."""
    spec = load_spec(name)
    assert study([name, '--report-only', '--out', str(tmp_path)]) == 0
    for path in sorted(tmp_path.iterdir()):
        assert path.read_bytes() == (spec.out_dir() / path.name
                                     ).read_bytes(), path.name


def test_in_words_groups_depths_and_names_cells_left_for_a_gpu():
    records = [_record('contranorm', 2, OURS), _record('pairnorm', 2, OTHER),
               _record('contranorm', 4, OURS), _record('pairnorm', 4, OTHER),
               {**_record('contranorm', 64, {}, complete=False),
                'not_run': 'GPU work', 'cell_runs': 0},
               {**_record('pairnorm', 64, {}, complete=False),
                'not_run': 'GPU work', 'cell_runs': 0}]
    lines = comparison_lines(records, 'contranorm', ['pairnorm'],
                                     'seed', 0.95)
    assert '| cora | 64 | not run here: contranorm, GPU work |' in lines
    assert next(x for x in lines if x.startswith('In words')) == (
        'In words (Holm-adjusted over a family of 3 planned, 2 run): '
        'against pairnorm, contranorm beats at cora L=2/4 (not run here: '
        'cora L=64).')


@needs_mirror
def test_a_depth_study_of_a_rocauc_dataset_selects_and_reports_rocauc(
        tmp_path):
    r"""Minesweeper is scored by ROC-AUC: its cells choose by mean
    validation ROC-AUC, show test ROC-AUC (%) and say so."""
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    assert study(['filtered_heterophily', '--datasets', 'minesweeper',
                  '--depths', '2', '--seeds', '0', '1', '--rows', 'none',
                  'pairnorm', '--set', 'train.epochs=3',
                  'collapse_metrics=false', '--threads', '1', '--runs',
                  str(runs), '--out', str(out)]) == 0
    done = load_runs(runs)
    assert len(done) == 2 + 4 * 2 and all(
        r['metric'] == 'rocauc' and 'test_acc' not in r for r in done)
    name = 'filtered_heterophily+train.epochs=3+collapse_metrics=false'
    with open(out / f'{name}.csv') as f:
        rows = list(csv.DictReader(f))
    assert {r['metric'] for r in rows} == {'rocauc'}
    by = {r['selection']: r for r in rows if r['row'] == 'pairnorm'}
    pairnorm = [r for r in done if 'scale' in r['config']['norm']]
    assert len(pairnorm) == 8
    for selection in ('val', 'test'):
        chosen = [r for r in pairnorm if setting_label(
            {'norm.scale': r['config']['norm']['scale']})
            == by[selection]['setting']]
        means = {}
        for r in pairnorm:
            means.setdefault(r['config']['norm']['scale'], []).append(
                r[f'{selection}_metric'])
        best = max(sum(v) / len(v) for v in means.values())
        assert sum(r[f'{selection}_metric'] for r in chosen) / 2 == \
            pytest.approx(best, abs=1e-12)
        assert float(by[selection]['test_mean']) == pytest.approx(
            100 * sum(r['test_metric'] for r in chosen) / 2, abs=1e-4)
    report = (out / f'{name}.md').read_text()
    assert 'Each cell: test ROC-AUC (%)' in report
    assert 'by mean validation ROC-AUC' in report
    assert "the seeds' test ROC-AUC, pooled, is not shown above a random " \
        "ranking's 0.5" in report
    assert 'accuracy (%)' not in report and \
        'validation accuracy' not in report


def test_a_depth_study_reads_no_verdict_below_its_minimum_of_seeds():
    r"""Two seeds, a difference a paired t would call: no "beats", "loses"
    or "equivalent" below table.min_seeds (5 by default, as paired
    studies), and the cell says so."""
    ours, other = {0: 80.0, 1: 82.0}, {0: 77.0, 1: 79.5}
    records = [_record('contranorm', 2, ours), _record('pairnorm', 2, other)]
    lines = comparison_lines(records, 'contranorm', ['pairnorm'], 'seed',
                             0.95, min_seeds=5)
    two = next(x for x in lines if x.startswith('| cora | 2 |'))
    assert 'too few seeds (n=2; 5 needed): no verdict' in two
    assert 'beats' not in two and 'loses' not in two
    assert any('not read, too few seeds: cora L=2' in x for x in lines)
    assert 'beats' in ' '.join(comparison_lines(
        records, 'contranorm', ['pairnorm'], 'seed', 0.95, min_seeds=2))


def test_a_spec_training_fewer_epochs_than_its_recipe_says_so(tmp_path):
    from gnorm.study.reports.recipe import protocol_text
    from gnorm.study.spec.find import inherited_recipe
    spec = tmp_path / 'mine.yaml'
    spec.write_text('# @package _global_\ndefaults:\n  - luo\n'
                    'train:\n  epochs: 100\n')
    assert inherited_recipe(spec) == ('luo', 2000)
    runs = [{'config': {'train': {'epochs': 100}}}]
    said = protocol_text(runs, inherited_recipe(spec))
    assert '100 epochs' in said and \
        'fewer epochs than the 2000 of the luo recipe it inherits' in said
    assert 'fewer' not in protocol_text(
        [{'config': {'train': {'epochs': 2000}}}], ('luo', 2000))
    plain = tmp_path / 'plain.yaml'
    plain.write_text('table:\n  kind: depth\n')
    assert inherited_recipe(plain) is None


def test_sigterm_stops_a_study_with_143(tmp_path, monkeypatch, capsys):
    r"""SIGTERM during a study's runs exits 143 (128 + 15), as the queue
    and python -m gnorm.train do; Ctrl-C stays 130."""
    import signal

    import gnorm.train
    from gnorm.errors import Interrupted

    for signum, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        def stop(*args, signum=signum):
            raise Interrupted(signum)
        monkeypatch.setattr(gnorm.train, 'train_runs', stop)
        args = ['table3_paper', *TINY, '--rows', 'none', '--runs',
                str(tmp_path / f'runs{signum}'), '--scratch',
                str(tmp_path / 'scratch')]
        assert study(args) == status
        assert 'interrupted: finished runs are kept' in capsys.readouterr().err
