r"""The study engine on paired studies (``python -m gnorm.study``, the
SepNorm comparisons ``sepnorm_molhiv*``): rows against the first seed by
seed, the readings, where runs and reports go, the recipe read from the
runs, the same runs give the same bytes, and the figures draw what the
records hold."""
import csv
import functools
import json
import math
import re
from pathlib import Path

import pytest

from gnorm.results import load_runs
from gnorm.study import stats
from gnorm.study.cli import main as study
from gnorm.study.findings import paired as study_paired
from gnorm.study.reports import curves as study_curves
from gnorm.study.runs import runner as study_runner
from gnorm.study.runs.pairing import check_fingerprints
from gnorm.study.spec.find import compose
from gnorm.study.spec.load import load_spec
from gnorm.study.words import paired as paired_words
from gnorm.study.words.verdicts import signed


def _spec(**table):
    r"""sepnorm_molhiv_cpu's spec with :obj:`table` keys replaced."""
    spec = load_spec('sepnorm_molhiv_cpu')
    spec.table.update(table)
    return spec


def _found(spec, records):
    r"""The findings the words of a paired report read, of hand-made
    :obj:`records` (the baseline first) under :obj:`spec`."""
    for r in records:
        r.setdefault('short', study_paired.short(r))
        r.setdefault('metric_said', study_paired.metric_said(
            spec, r.get('runs_list', ())))
    return study_paired.PairedFindings(
        name=spec.name, source='', runs='', records=records,
        base=records[0]['short'], metric=records[0]['metric_said'],
        level=spec.level, correction=spec.correction, margin=spec.margin,
        min_seeds=spec.min_seeds,
        family=sum(bool(r.get('decides')) for r in records[1:]),
        same_recipe=False, config={}, beside=[], curves=[], one_epoch=False)


def _sentence(spec, row, base='ShareNorm'):
    r"""The sentence of :obj:`row` against a baseline labelled
    :obj:`base`."""
    found = _found(spec, [{'label': base}, row])
    return paired_words.sentence(found, found.records[1])


def _plot(records, path):
    r"""The curves of :obj:`records` plotted as a report does."""
    study_curves.plot_curves([study_paired.row_curve(r) for r in records],
                             study_paired.one_epoch(records), path, 'test',
                             'ogbg-molhiv', 'ROC-AUC')


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@functools.lru_cache(maxsize=None)
def _composed(experiment, row, *sets):
    r"""The config (JSON) of the run of :obj:`row` and seed 0 of the study
    :obj:`experiment` with the overrides :obj:`sets`, as the run records
    it."""
    from omegaconf import OmegaConf
    spec = load_spec(experiment)
    cfg = compose([*spec.overrides(), *spec.table['rows'][row], f'tag={row}',
                   'seed=0', 'resume=true', *sets])
    return json.dumps(OmegaConf.to_container(cfg, resolve=True))


def _config(experiment, row, seed, *sets):
    r"""The recorded config of the run of :obj:`row` and :obj:`seed` of
    the study :obj:`experiment` with :obj:`sets`."""
    return {**json.loads(_composed(experiment, row, *sets)), 'seed': seed}


# The overrides of runs of :func:`_molhiv_run` of a curve this long.
def _epochs(n):
    return () if n == 1 else (f'train.epochs={n}', )


def _molhiv_run(folder, row, seed, val, test=None, curve=None, split=None):
    r"""A finished run of :obj:`row` and :obj:`seed` in :obj:`folder`:
    one epoch, or the validation :obj:`curve` (selected at its best), its
    config that of ``sepnorm_molhiv_cpu`` (of as many epochs); the
    fingerprint of its :obj:`split` when given."""
    curve = curve or [val]
    best = curve.index(max(curve)) + 1
    config = _config('sepnorm_molhiv_cpu', row, seed, *_epochs(len(curve)))
    config['data'] = {'mirror': '/mirror'}
    folder.mkdir(parents=True)
    (folder / 'results.json').write_text(json.dumps({
        'status': 'ok', 'tag': row, 'metric': 'rocauc',
        'test_metric': val - 0.01 if test is None else test,
        'val_metric': max(curve), 'selected_epoch': best,
        'curve': {'epoch': list(range(1, len(curve) + 1)),
                  'val_metric': curve,
                  'test_metric': [val - 0.01 if test is None else test]
                  * len(curve)},
        'runtime_s': 10.0 + seed, 'device': 'cpu',
        'machine': {'cpu': 'test cpu', 'threads': 1},
        **({'dataset': {'split_fingerprint': split}} if split else {}),
        'config': config}))


def test_sepnorm_report_is_the_same_bytes_whatever_the_selection(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    for seed, val in enumerate([0.70, 0.66]):
        _molhiv_run(runs / 'sharenorm' / f'seed_{seed}', 'sharenorm', seed,
                    val)
        _molhiv_run(runs / 'sepnorm_bn_ln' / f'seed_{seed}', 'sepnorm_bn_ln',
                    seed, val - 0.03)
    args = ['sepnorm_molhiv_cpu', '--report-only', '--runs', str(runs),
            '--out', str(out)]
    assert study(args) == 0
    first = _files(out)
    assert set(first) == {'sepnorm_molhiv_cpu.md', 'sepnorm_molhiv_cpu.csv',
                          'sepnorm_molhiv_cpu_val.png'}
    report = first['sepnorm_molhiv_cpu.md'].decode()
    assert 'Generated by `python -m gnorm.study sepnorm_molhiv_cpu ' \
        '--report-only --runs ' in report
    assert not re.search(r'\d{4}-\d\d-\d\d', report)  # no date
    assert '| SepNorm LN+LN (graph token LN, nodes LN) | 0/5 (too few to ' \
        'decide) | missing' in report  # every row of the table, run or not
    # Again, with a selection: the same rows, the same bytes.
    assert study([*args, '--rows', 'sharenorm', '--seeds', '0']) == 0
    assert _files(out) == first


def _finished_run_of(folder, experiment, row, seed, *sets, device='cpu'):
    r"""A finished run in :obj:`folder` whose recorded config is that of
    the study :obj:`experiment` for :obj:`row`, :obj:`seed` and
    :obj:`sets`, trained on :obj:`device`."""
    folder.mkdir(parents=True)
    (folder / 'results.json').write_text(json.dumps({
        'status': 'ok', 'tag': row, 'metric': 'rocauc', 'test_metric': 0.6,
        'val_metric': 0.6, 'selected_epoch': 1,
        'curve': {'epoch': [1], 'val_metric': [0.6]}, 'runtime_s': 1.0,
        'device': device, 'config': _config(experiment, row, seed, *sets)}))


def test_sepnorm_dry_run_writes_nothing(tmp_path, capsys):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    _finished_run_of(runs / 'sharenorm' / 'seed_0', 'sepnorm_molhiv_cpu',
                     'sharenorm', 0)
    before = _files(runs / 'sharenorm' / 'seed_0')
    assert study(['sepnorm_molhiv_cpu', '--dry-run', '--rows', 'sharenorm',
                  '--seeds', '0', '1', '--runs', str(runs), '--out',
                  str(out)]) == 0
    said = capsys.readouterr().out
    assert 'sharenorm seed=0: done' in said
    assert 'sharenorm seed=1: would run' in said and ': running' not in said
    assert not out.exists()  # no report
    assert sorted(p.name for p in runs.iterdir()) == ['sharenorm']
    assert _files(runs / 'sharenorm' / 'seed_0') == before


def test_sepnorm_rows_run_their_own_seeds(tmp_path, capsys):
    # sepnorm_molhiv_cpu_long: ShareNorm and SepNorm BN+LN to 32 seeds,
    # the other rows to table.seeds.
    assert study(['sepnorm_molhiv_cpu_long', '--dry-run', '--runs',
                  str(tmp_path / 'runs')]) == 0
    said = capsys.readouterr().out
    todo = [line.split('] ')[1].split(':')[0] for line in said.splitlines()
            if line.startswith('[')]
    spec = load_spec('sepnorm_molhiv_cpu_long').table
    assert len(todo) == 2 * 32 + 3 * len(spec['seeds'])
    assert 'sepnorm_bn_ln seed=31' in todo and 'sharenorm seed=31' in todo
    assert 'sepnorm_ln_ln seed=31' not in todo
    assert todo[:5] == [f'{row} seed=0' for row in spec['rows']]


def test_sepnorm_run_of_another_config_is_not_done(tmp_path, capsys):
    r"""A finished run of hidden 32 is not a run of
    ``model.hidden_channels=16``: not "done", and kept as it is."""
    runs = tmp_path / 'runs'
    _finished_run_of(runs / 'sharenorm' / 'seed_0', 'sepnorm_molhiv_cpu',
                     'sharenorm', 0)
    assert study(['sepnorm_molhiv_cpu', '--set', 'model.hidden_channels=16',
                  '--dry-run', '--rows', 'sharenorm', '--seeds', '0',
                  '--runs', str(runs), '--out', str(tmp_path / 'out')]) == 1
    said = capsys.readouterr().out
    assert 'seed=0: done' not in said
    assert 'holds a finished run of another config' in said
    # An override that changes nothing a run computes is the same run.
    assert study(['sepnorm_molhiv_cpu', '--set', 'threads=2', '--dry-run',
                  '--rows', 'sharenorm', '--seeds', '0', '--runs', str(runs),
                  '--out', str(tmp_path / 'out')]) == 0
    assert 'sharenorm seed=0: done' in capsys.readouterr().out


def test_sepnorm_overrides_make_runs_and_a_report_of_their_own(tmp_path,
                                                               capsys):
    scratch = tmp_path / 'scratch'
    assert study(['sepnorm_molhiv_cpu', '--set', 'train.epochs=2',
                  'model.hidden_channels=16', 'threads=1', '--dry-run',
                  '--rows', 'sharenorm', '--seeds', '0', '--scratch',
                  str(scratch)]) == 0
    said = capsys.readouterr().out
    own = scratch / ('sepnorm_molhiv_cpu+train.epochs=2'
                     '+model.hidden_channels=16')
    assert 'seed=0: would run' in said
    assert f'hydra.run.dir={own}/runs/sharenorm/seed_0' in said
    assert not scratch.exists()
    results = load_spec('sepnorm_molhiv_cpu').out_dir()
    assert study(['sepnorm_molhiv_cpu', '--set', 'train.epochs=2',
                  '--report-only', '--runs', str(tmp_path), '--out',
                  str(results)]) == 2
    assert 'holds the report of the whole study' in capsys.readouterr().err


def _recipe(md):
    return next(line for line in md.splitlines()
                if line.startswith('**Recipe**'))


def test_sepnorm_recipe_is_read_from_the_runs(tmp_path):
    r"""The report's recipe is that of the runs' recorded configs and
    devices; runs of different recipes are named apart; a run of another
    config is not the study's."""
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    bf16 = 'train.precision=bf16'
    _finished_run_of(runs / 'sharenorm' / 'seed_0', 'sepnorm_molhiv_cpu',
                     'sharenorm', 0, bf16)
    args = ['sepnorm_molhiv_cpu', '--set', bf16, '--report-only', '--runs',
            str(runs), '--out', str(out)]
    report = out / f'sepnorm_molhiv_cpu+{bf16}.md'
    assert study(args) == 0
    recipe = _recipe(report.read_text())
    assert 'hidden 32,' in recipe and 'over 1 epoch of batch 32' in recipe
    assert 'bf16 autocast on the CPU' in recipe and 'CUDA' not in recipe
    assert 'the runs differ' not in recipe
    _finished_run_of(runs / 'sharenorm' / 'seed_1', 'sepnorm_molhiv_cpu',
                     'sharenorm', 1, bf16, device='cuda:0')
    _finished_run_of(runs / 'sharenorm' / 'seed_2', 'sepnorm_molhiv_cpu',
                     'sharenorm', 2)  # fp32: another config
    assert study(args) == 0
    md = report.read_text()
    assert '**Recipe** (from the runs\' recorded configs): the runs differ: ' \
        '1 of 2 runs: Graphormer' in md
    assert 'bf16 autocast on the CPU' in md and 'bf16 autocast on CUDA' in md
    assert ', fp32, ' not in _recipe(md) and 'from 2 finished runs' in md


def test_one_epoch_runs_are_dots_per_seed_not_a_curve(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    runs = tmp_path / 'runs'
    for seed, val in enumerate([0.70, 0.66, 0.60]):
        _molhiv_run(runs / f'seed_{seed}', 'sharenorm', seed, val)
    spec = _spec(seeds=[0, 1, 2], paper={})
    records = study_paired.summarise(spec, load_runs(runs), ['sharenorm'])
    figures = []
    monkeypatch.setattr(plt, 'close', figures.append)
    _plot(records, tmp_path / 'val.png')
    ax, = figures[0].axes
    dots, = [line for line in ax.lines if len(line.get_xdata()) == 3]
    assert [round(v, 6) for v in dots.get_ydata()] == [70.0, 66.0, 60.0]
    assert not [line for line in ax.lines if line.get_linestyle() == '-']
    assert 'one epoch per run' in ax.get_title()


@pytest.mark.parametrize('values,mean,half', [
    # t(0.975, 4) = 2.776445, s = sqrt(2.5): 2.776445 * sqrt(2.5 / 5)
    ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 2.776445 * math.sqrt(0.5)),
    # t(0.975, 1) = 12.706205, s = sqrt(2): 12.706205 * sqrt(2) / sqrt(2)
    ([0.0, 2.0], 1.0, 12.706205),
])
def test_t_interval_is_mean_plus_minus_t_quantile_times_sem(values, mean,
                                                            half):
    m, lo, hi, _ = stats.mean_interval(values)
    assert m == pytest.approx(mean)
    assert (lo, hi) == pytest.approx((mean - half, mean + half), abs=1e-5)


def test_t_interval_needs_two_values():
    assert stats.mean_interval([]) == (None, None, None, None)
    assert stats.mean_interval([1.5]) == (1.5, None, None, None)
    assert stats.mean_interval([2.0, 2.0]) == (2.0, 2.0, 2.0, 0.0)  # no spread
    assert paired_words.interval(1.5, None, None, 1) == \
        '+1.50 (n=1, no interval)'
    assert paired_words.interval(1.234, -0.4, 2.857, 5) == \
        '+1.23 [\u22120.40, +2.86] (n=5)'


def test_only_seeds_both_rows_finished_are_paired(tmp_path):
    found = stats.paired_interval({0: 70.0, 1: 72.0, 3: 74.0},
                                  {3: 73.0, 0: 71.0, 2: 60.0})
    assert found.seeds == (0, 3) and found.diff == 0.0
    runs = tmp_path / 'runs'
    for seed in (0, 1, 2):
        _molhiv_run(runs / 'sharenorm' / f'seed_{seed}', 'sharenorm', seed,
                    0.70, test=0.70 + 0.01 * seed)
    for seed in (1, 2, 3):
        _molhiv_run(runs / 'sepnorm_bn_ln' / f'seed_{seed}', 'sepnorm_bn_ln',
                    seed, 0.70, test=0.75)
    spec = _spec(seeds=[0, 1, 2, 3, 4], paper={})
    _, row = study_paired.summarise(spec, load_runs(runs),
                                    ['sharenorm', 'sepnorm_bn_ln'])
    assert row['paired_seeds'] == [1, 2] and row['pairs'] == 2
    assert row['test_diffs'] == pytest.approx([4.0, 3.0])
    assert row['test_diff'] == pytest.approx(3.5)  # not 75 - mean(70..72)
    assert row['why_not'] == study_paired.FEW_SEEDS
    assert paired_words.verdict_words(row, 'ShareNorm') == \
        'not enough seeds to decide'


def _row(diff, lo, hi, pairs=5, paper=None, last=None):
    r"""A compared row's record as :func:`study_paired.summarise` makes
    it: Δ at the best validation epoch (:obj:`diff`, :obj:`lo`,
    :obj:`hi`) and at the last (:obj:`last`, default the same), read
    alone (no family: p unknown)."""
    decides = pairs >= 5 and lo is not None
    record = {'label': 'SepNorm BN+LN (graph token BN, nodes LN)',
              'pairs': pairs, 'paper_diff': paper, 'higher': True,
              'decides': decides,
              'why_not': None if decides else study_paired.FEW_SEEDS,
              'test_alone': None if lo is None else stats.verdict(lo, hi)}
    for key, (d, low, high) in (('test', (diff, lo, hi)),
                                ('test_last', last or (diff, lo, hi))):
        record.update({f'{key}_diff': d, f'{key}_lo': low,
                       f'{key}_hi': high, f'{key}_p': None,
                       f'{key}_found': (None if low is None
                                        else stats.verdict(low, high))})
        record['paper_place' + key[4:]] = (
            None if paper is None or low is None
            else stats.where_in(paper, low, high))
    return record


@pytest.mark.parametrize('lo,hi,reading', [
    (0.5, 3.0, 'better than ShareNorm.'),
    (-3.0, -0.5, 'worse than ShareNorm.'),
    (-1.0, 2.0, 'not distinguishable from ShareNorm at this recipe.'),
])
def test_sentence_reads_the_interval_against_zero(lo, hi, reading):
    text = _sentence(_spec(), _row((lo + hi) / 2, lo, hi))
    assert text.startswith('**SepNorm BN+LN** \u2212 ShareNorm, test '
                           'ROC-AUC: ')
    assert '(n=5) at the best validation epoch; ' in text
    assert text.endswith(f'(n=5) at the last epoch: {reading}')
    assert "paper" not in text  # no paper value for this row


def test_sentence_says_when_the_last_epoch_reads_otherwise():
    text = _sentence(_spec(), _row(0.3, -1.0, 1.6, last=(1.1, 0.2, 2.0)))
    assert text.endswith(
        '+1.10 [+0.20, +2.00] (n=5) at the last epoch: not distinguishable '
        'from ShareNorm at this recipe (at the last epoch: better than '
        'ShareNorm).')


@pytest.mark.parametrize('paper,where', [
    (2.28, 'inside the interval'),
    (5.0, 'above the interval'),
    (-2.0, 'below the interval'),
])
def test_sentence_places_the_papers_difference(paper, where):
    text = _sentence(_spec(), _row(1.5, 0.5, 3.0, paper=paper))
    assert text.endswith(
        f"The paper's {signed(paper)} (with the paper's own recipe, not this "
        f"study's) lies {where} at the best validation epoch and {where} at "
        'the last epoch.')


def test_sentence_with_too_few_seeds_does_not_decide():
    text = _sentence(_spec(), _row(1.5, 0.5, 3.0, pairs=4, paper=2.28))
    assert ': not enough seeds to decide (4 paired seeds, 5 needed); the ' \
        'interval of these 4 alone reads "better than ShareNorm".' in text
    assert text.endswith('and inside the interval at the last epoch.')
    text = _sentence(_spec(), _row(1.5, None, None, pairs=1, paper=2.28))
    assert text.endswith("5 needed). The paper's +2.28 (with the paper's "
                         "own recipe, not this study's) cannot be placed.")


# Test ROC-AUC per seed: ShareNorm, and each row's difference to it (%).
SHARENORM = [0.70, 0.72, 0.68, 0.71, 0.69]
DIFFS = {'sepnorm_bn_ln': [3.1, 2.9, 3.0, 3.2, 2.8],   # better, above 2.28
         'sepnorm_ln_ln': [-5.1, -4.9, -5.0, -5.2, -4.8],  # worse
         'sepnorm_bn_bn': [1.0, -1.0, 2.0, -2.0, 0.0],     # straddles 0
         'sepnorm_ln_bn': [1.0, 2.0, 3.0]}                 # 3 seeds only


def _table_runs(runs):
    r"""Five seeds of six epochs (best validation at epoch 4) per row,
    three for LN+BN, with the test differences of :data:`DIFFS`."""
    for row, diffs in [('sharenorm', [0.0] * 5), *DIFFS.items()]:
        for seed, diff in enumerate(diffs):
            top = 0.70 + 0.01 * seed + 0.002 * len(row)
            curve = [top - 0.06, top - 0.03, top - 0.01, top, top - 0.005,
                     top - 0.01]
            _molhiv_run(runs / row / f'seed_{seed}', row, seed, top,
                        test=SHARENORM[seed] + diff / 100, curve=curve)


def test_report_decides_from_five_paired_seeds(tmp_path):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    _table_runs(runs)
    assert study(['sepnorm_molhiv_cpu', '--report-only', '--set',
                  'train.epochs=6', '--runs', str(runs), '--out',
                  str(out)]) == 0
    name = 'sepnorm_molhiv_cpu+train.epochs=6'
    md = (out / f'{name}.md').read_text()
    assert '**Not enough seeds to decide**: 1 of 5 rows have fewer than ' \
        'the 5 finished seeds a decision needs (they have 3).' in md
    lines = {line.split(' \u2212 ')[0]: line for line in md.splitlines()
             if line.startswith('- **')}
    # both epoch rules (here the test metric is flat: the same Δ), the
    # family-wise reading, the paper's Δ placed and its recipe named
    bn_ln = lines['- **SepNorm BN+LN**']
    assert bn_ln.count('+3.00 [+2.80, +3.20] (n=5, p=') == 2
    assert ') at the best validation epoch; +3.00' in bn_ln
    assert bn_ln.endswith(
        ') at the last epoch: better than ShareNorm. The paper\'s +2.28 '
        "(with the paper's own recipe, not this study's) lies below the "
        'interval at the best validation epoch and below the interval at '
        'the last epoch.')
    assert lines['- **SepNorm LN+LN**'].endswith(
        ') at the last epoch: worse than ShareNorm.')
    assert '\u22125.00 [\u22125.20, \u22124.80] (n=5, p=' in \
        lines['- **SepNorm LN+LN**']
    assert lines['- **SepNorm BN+BN**'].endswith(
        'at the last epoch: undecided against ShareNorm at ±1.')
    assert 'not enough seeds to decide (3 paired seeds, 5 needed)' in \
        lines['- **SepNorm LN+BN**']
    assert '| SepNorm LN+BN (graph token LN, nodes BN) | 3/5 (too few to ' \
        'decide) |' in md and '| SepNorm BN+BN (graph token BN, nodes ' \
        'BN) | 5/5 |' in md
    assert '| epochs | 6 | 50 | about 10,000 (400k updates) |' in md
    assert 'The best validation epoch lies before the last in 23 of 23 ' \
        'runs' in md
    assert '23 of 23 runs read it from a data mirror' in md
    rows = {r['row']: r for r in csv.DictReader(
        open(out / f'{name}.csv'))}
    assert [float(d) for d in rows['sepnorm_bn_ln']['val_diffs'].split()] \
        == pytest.approx([0.8] * 5)  # validation, seed by seed
    assert float(rows['sepnorm_bn_ln']['val_lo']) == pytest.approx(0.8)
    assert rows['sepnorm_bn_ln']['paper_place'] == 'below'
    assert rows['sepnorm_bn_bn']['verdict'] == \
        'undecided against ShareNorm at ±1'
    assert rows['sharenorm']['test_diff'] == ''


def test_curves_show_the_mean_and_band_of_every_row(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    _table_runs(tmp_path / 'runs')
    spec = _spec(seeds=[0, 1, 2, 3, 4], paper={})
    rows = ['sharenorm', *DIFFS]
    records = study_paired.summarise(spec, load_runs(tmp_path / 'runs'),
                                     rows)
    figures = []
    monkeypatch.setattr(plt, 'close', figures.append)
    _plot(records, tmp_path / 'val.png')
    ax, = figures[0].axes
    assert len(ax.collections) == len(ax.lines) == len(rows)  # band, line
    seeds = [run['curve']['val_metric'] for run in records[4]['runs_list']]
    mean = [100 * sum(v) / len(v) for v in zip(*seeds)]
    assert list(ax.lines[4].get_ydata()) == pytest.approx(mean)
    legend = ax.get_legend()
    assert 'min\u2013max over seeds' in legend.get_title().get_text()
    assert [t.get_text() for t in legend.get_texts()][4] == \
        'SepNorm LN+BN (3 seeds)'
    figures[0].canvas.draw()  # the legend lies right of the axes
    assert legend.get_window_extent().x0 > ax.get_window_extent().x1
    plt.close(figures[0])


@pytest.mark.parametrize('lo, hi, says', [
    (-1.0, 3.0, "holds 0 and holds the paper's +2.28"),
    (-3.0, 1.0, "holds 0 and excludes the paper's +2.28"),
    (0.5, 4.0, "excludes 0 and holds the paper's +2.28"),
    (0.5, 1.5, "excludes 0 and excludes the paper's +2.28")])
def test_sepnorm_in_words_places_0_and_the_papers_difference(lo, hi, says):
    base = {'label': 'ShareNorm (LayerNorm)'}
    row = _row((lo + hi) / 2, lo, hi, pairs=32, paper=2.28)
    few = {**_row(0.0, -1.0, 1.0, pairs=3), 'label': 'SepNorm LN+LN (x)'}
    words = paired_words.in_words(_found(_spec(), [base, row, few]))
    assert words.startswith('SepNorm BN+LN − ShareNorm, test ROC-AUC: ')
    assert f'(n=32) at the best validation epoch, which {says}; ' in words
    assert f'(n=32) at the last epoch, which {says} (the paper' in words
    assert words.endswith('SepNorm LN+LN: fewer than 5 paired seeds, not '
                          'enough to decide (readings Holm-adjusted over '
                          'the 1 row compared).')


def test_a_paired_report_counts_only_runs_of_its_config(tmp_path):
    r"""Runs of another config in the runs folder (those of a 5-epoch
    study before the study of 1 epoch) are no runs of the study: not
    counted, not read; the 5-epoch study's report counts only them."""
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    for seed in (0, 1):
        for row in ('sharenorm', 'sepnorm_bn_ln'):
            _finished_run_of(runs / 'five' / row / f'seed_{seed}',
                             'sepnorm_molhiv_cpu', row, seed,
                             'train.epochs=5')
    _finished_run_of(runs / 'sharenorm' / 'seed_2', 'sepnorm_molhiv_cpu',
                     'sharenorm', 2)
    args = ['sepnorm_molhiv_cpu', '--report-only', '--runs', str(runs),
            '--out', str(out)]
    assert study(args) == 0
    md = (out / 'sepnorm_molhiv_cpu.md').read_text()
    assert 'from 1 finished run in' in md
    assert '| SepNorm BN+LN (graph token BN, nodes LN) | 0/5 (too few to ' \
        'decide) | missing' in md
    assert study([*args, '--set', 'train.epochs=5']) == 0
    md = (out / 'sepnorm_molhiv_cpu+train.epochs=5.md').read_text()
    assert 'from 4 finished runs in' in md
    assert '(n=2, no interval)' not in md and '(n=2)' in md


def test_a_compared_rows_mean_is_over_its_paired_seeds(tmp_path):
    r"""The baseline shows every seed it finished; a row compared with it
    shows the seeds of its differences only, so that its mean and its Δ
    are over the same seeds."""
    runs = tmp_path / 'runs'
    for seed in (0, 1, 2, 3):
        _molhiv_run(runs / 'sharenorm' / f'seed_{seed}', 'sharenorm', seed,
                    0.70, test=0.70)
    for seed, test in ((0, 0.71), (1, 0.72), (2, 0.73), (4, 0.99)):
        _molhiv_run(runs / 'sepnorm_bn_ln' / f'seed_{seed}', 'sepnorm_bn_ln',
                    seed, 0.70, test=test)
    spec = _spec(seeds=[0, 1, 2, 3, 4], paper={})
    base, row = study_paired.summarise(spec, load_runs(runs),
                                       ['sharenorm', 'sepnorm_bn_ln'])
    assert base['seeds'] == [0, 1, 2, 3] and base['runs'] == 4
    assert base['test_mean'] == pytest.approx(70.0)
    assert row['paired_seeds'] == row['seeds'] == [0, 1, 2]
    assert row['runs'] == 3 and len(row['runs_list']) == 3
    assert row['test_mean'] == pytest.approx(72.0)  # not seed 4's 99
    assert row['test_diff'] == pytest.approx(2.0)


def test_check_fingerprints_names_a_seed_of_two_splits():
    def run(fingerprint=None):
        return ({'dataset': {'split_fingerprint': fingerprint}}
                if fingerprint else {'dataset': {}})
    same = {0: run('aa'), 1: run('bb')}
    assert check_fingerprints(same, {**same, 2: run('cc')}) is None
    # Runs that record no fingerprint (older runs, graph runs) pass.
    assert check_fingerprints({0: run('aa'), 1: {}}, {0: run('aa'),
                                                      1: run('xx')}) is None
    assert check_fingerprints({0: run('aa'), 3: run('bb')},
                              {3: run('cc'), 0: run('aa')}) == (3, 'bb', 'cc')
    assert paired_words.mismatch_words((3, 'bb', 'cc')) == (
        "seed 3: the runs' splits differ (split fingerprints bb and cc)")


def test_a_row_on_other_splits_is_not_compared(tmp_path):
    r"""Runs of one seed that trained on different splits (split=random
    against split=public) are no pair: the row is not compared, and the
    report says why."""
    runs = tmp_path / 'runs'
    for seed in range(5):
        _molhiv_run(runs / 'sharenorm' / f'seed_{seed}', 'sharenorm', seed,
                    0.70, test=0.50, split=f'random{seed}')
        _molhiv_run(runs / 'sepnorm_bn_ln' / f'seed_{seed}', 'sepnorm_bn_ln',
                    seed, 0.70, test=0.90, split='public')
    spec = _spec(seeds=[0, 1, 2, 3, 4], paper={})
    records = study_paired.summarise(spec, load_runs(runs),
                                     ['sharenorm', 'sepnorm_bn_ln'])
    row = records[1]
    why = "seed 0: the runs' splits differ (split fingerprints random0 and " \
        'public)'
    assert row['pairs'] == 0 and row['test_diff'] is None
    assert row['why_not'] == study_paired.UNPAIRED
    assert paired_words.verdict_words(row, 'ShareNorm') == \
        f'not compared: {why}'
    assert row['runs'] == 5  # its seeds, shown without a difference
    assert _sentence(spec, row).endswith(f'not compared: {why}.')
    assert paired_words.in_words(_found(spec, records)) == (
        f'SepNorm BN+LN: not compared: {why}.')


def test_an_interrupted_paired_study_reports_what_finished(tmp_path,
                                                           monkeypatch,
                                                           capsys):
    runs, out = tmp_path / 'runs', tmp_path / 'out'
    calls = []

    def one_run_then_ctrl_c(args, threads):
        calls.append(args)
        if len(calls) > 1:
            raise KeyboardInterrupt
        folder = next(a for a in args if a.startswith('hydra.run.dir='))
        _finished_run_of(Path(folder.split('=', 1)[1]), 'sepnorm_molhiv_cpu',
                         'sharenorm', 0)
        return True

    monkeypatch.setattr(study_runner, '_subprocess', one_run_then_ctrl_c)
    assert study(['sepnorm_molhiv_cpu', '--rows', 'sharenorm',
                  'sepnorm_bn_ln', '--seeds', '0', '--runs', str(runs),
                  '--out', str(out)]) == 130
    said = capsys.readouterr()
    assert 'interrupted: finished runs are kept' in said.err
    assert 'report: ' in said.out
    assert 'from 1 finished run in' in (out / 'sepnorm_molhiv_cpu.md'
                                        ).read_text()
