r"""``experiments/authors_spread.py``: the permutation test against hand
counts, the pairing of the authors' records with gnorm's runs of the same
cell, and its refusal to pool runs whose configs differ."""
import json

import pytest

from conftest import experiment

spread = experiment('authors_spread')


def test_permutation_p_counts_every_split():
    # 20 splits of 6 values into 3 + 3; only {1,2,3} | {4,5,6} and its
    # mirror are as far apart as the observed split.
    assert spread.permutation_p([1, 2, 3], [4, 5, 6]) == (0.1, True)
    # 3 + 2 of 5 values: the observed split is the most extreme of 10 and
    # has no mirror of equal size.
    assert spread.permutation_p([10, 11, 12], [0, 1]) == (0.1, True)
    p, exact = spread.permutation_p([1, 2, 3], [1, 2, 3])
    assert exact and p == 1.0


def test_permutation_p_samples_many_splits(monkeypatch):
    monkeypatch.setattr(spread, 'EXACT_LIMIT', 5)
    p, exact = spread.permutation_p([1, 2, 3], [4, 5, 6], samples=20_000)
    assert not exact and p == pytest.approx(0.1, abs=0.01)


def _run(path, seed, acc, scale=0.5, layers=16, dataset='cora', **extra):
    config = dict(seed=seed, layers=layers, tag='contranorm',
                  select='last', dataset=dict(name=dataset),
                  norm=dict(scale=scale), train=dict(lr=0.005, **extra))
    return dict(status='ok', choices=dict(experiment='table3_paper'),
                config=config, test_acc=acc, _path=str(path))


def _authors(folder, accs, scale=0.5, layers=16):
    folder.mkdir(exist_ok=True)
    record = dict(config=dict(dataset='cora', layers=layers, scale=scale,
                              norm_mode='CN'),
                  runs={str(s): dict(test_acc_last=a)
                        for s, a in enumerate(accs)})
    record['authors'] = dict(commit='c9bed6a6')
    (folder / f'cora_L{layers}_s{scale}.json').write_text(json.dumps(record))


def test_gnorm_runs_of_the_cell_only(tmp_path):
    runs = [_run('a', 0, 0.3), _run('b', 1, 0.4), _run('c', 0, 0.9,
                                                        scale=1.0),
            _run('d', 2, 0.9, layers=32), dict(_run('e', 3, 0.9),
                                               status='interrupted')]
    assert spread.gnorm_runs(runs, 'cora', 16, 0.5) == pytest.approx(
        {0: 30.0, 1: 40.0})
    with pytest.raises(SystemExit, match='differ in more than the seed'):
        spread.gnorm_runs(runs + [_run('f', 5, 0.3, weight_decay=0.0)],
                          'cora', 16, 0.5)
    with pytest.raises(SystemExit, match='seed 1 .* twice'):
        spread.gnorm_runs(runs + [_run('g', 1, 0.3)], 'cora', 16, 0.5)


def test_report_pairs_each_record_with_gnorm(tmp_path):
    _authors(tmp_path / 'authors', [0.40, 0.42, 0.44])
    _authors(tmp_path / 'authors', [0.5], scale=1.0)
    runs = [_run(f'r{s}', s, a) for s, a in enumerate([0.30, 0.32, 0.34])]
    text = spread.report(spread.read_authors(tmp_path / 'authors'), runs,
                         [tmp_path])
    row = next(line for line in text.splitlines()
               if line.startswith('| cora | 16 | 0.5 '))
    # 3 + 3 runs, all of gnorm's below all of the authors': p = 2 / 20.
    assert '42.00 ± 1.63 (3)' in row and '32.00 ± 1.63 (3)' in row
    assert '-10.00' in row and row.endswith('| 0.100 |')
    assert '| cora | 16 | 1 | 50.00 ± 0.00 (1) | no runs |' in text
    assert 'gnorm 30.00, 32.00, 34.00 (seeds 0, 1, 2)' in text


def test_twin_records_are_tabled_and_plotted(tmp_path):
    folder = tmp_path / 'twins'
    folder.mkdir()
    for dtype, apart in (('float32', [1e-4, 3e-2, 0.5]),
                         ('float64', [1e-9, 1e-6, 1e-4])):
        (folder / f'cora_{dtype}.json').write_text(json.dumps(dict(
            config=dict(dataset='cora', layers=16, scale=0.5, seed=0,
                        dtype=dtype),
            twin=dict(epoch=[1, 10, 20], weight_difference=apart,
                      their_test_acc=[0.1, 0.2, 0.4],
                      gnorm_test_acc=[0.1, 0.2, 0.45]))))
    twins = spread.read_twins(folder)
    lines = spread.twin_lines(twins, 'authors_twin.png')
    row = next(line for line in lines if 'float64' in line)
    assert row.endswith('| 20 | 1.0e-06 | 1.0e-04 | 40.00 | 45.00 |')
    assert lines[-1] == '![weights apart vs epoch](authors_twin.png)'
    assert spread.plot_twins(twins, tmp_path / 'twin.png')
    assert (tmp_path / 'twin.png').read_bytes().startswith(b'\x89PNG')
    assert spread.twin_lines([], None) == [] and \
        not spread.plot_twins([], tmp_path / 'none.png')


def test_verdict_names_what_chance_does_not_explain():
    assert spread.verdict([('a', 0.5), ('b', 0.001)]) == (
        '2 tests: a p below 0.05 / 2 = 0.0250 (Bonferroni) marks a '
        'difference that chance does not explain at the 5 % level. Beyond '
        'chance: b.')
    said = spread.verdict([('a', 0.04), ('b', 0.3)])
    assert 'No cell differs beyond chance. Below 0.05 but not beyond ' \
        'chance (by chance alone about one test in 20 is): a.' in said
