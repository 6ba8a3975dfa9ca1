r"""``experiments/authors_spread.py``: the permutation test against hand
counts, the pairing of the authors' records with gnorm's runs of the same
cell, and its refusal to pool runs whose configs differ; its section "Time
per run" (``experiments/authors_speed.py``): only like-for-like pairs get a
ratio."""
import json
import random

import pytest

from conftest import experiment

spread = experiment('authors_spread')
from gnorm.study import stats  # noqa: E402


def test_permutation_p_counts_every_split():
    # 20 splits of 6 values into 3 + 3; only {1,2,3} | {4,5,6} and its
    # mirror are as far apart as the observed split.
    assert spread.permutation_p([1, 2, 3], [4, 5, 6]) == (0.1, True)
    # 3 + 2 of 5 values: the observed split is the most extreme of 10 and
    # has no mirror of equal size.
    assert spread.permutation_p([10, 11, 12], [0, 1]) == (0.1, True)
    p, exact = spread.permutation_p([1, 2, 3], [1, 2, 3])
    assert exact and p == 1.0


@pytest.mark.parametrize('n_a, n_b, least', [
    (3, 3, 2 / 20), (3, 5, 1 / 56), (5, 3, 1 / 56), (3, 6, 1 / 84),
    (8, 11, 1 / 75582), (1, 1, 1.0), (1, 2, 1 / 3)])
def test_smallest_p_of_the_exact_test(n_a, n_b, least):
    assert stats.smallest_p(n_a, n_b) == pytest.approx(least)
    # Reached by values far apart: the first group above the second.
    a = [100.0 + i for i in range(n_a)]
    b = [float(i) for i in range(n_b)]
    p, exact = stats.permutation_p(a, b)
    assert exact and p == pytest.approx(least)
    # And never undercut by other values.
    rng = random.Random(0)
    for _ in range(5):
        values = [rng.gauss(0, 1) for _ in range(n_a + n_b)]
        assert stats.permutation_p(values[:n_a], values[n_a:])[0] >= \
            least - 1e-12


def test_smallest_p_of_the_sampled_test(monkeypatch):
    monkeypatch.setattr(stats, 'EXACT_LIMIT', 5)
    assert stats.smallest_p(3, 3, samples=99) == 0.01
    # 2 of C(20, 10) = 184756 splits as extreme: no sample meets them.
    p, exact = stats.permutation_p(range(100, 110), range(10), samples=99)
    assert not exact and p == 0.01
    with pytest.raises(ValueError, match='smallest_p'):
        stats.smallest_p(0, 3)


def test_permutation_p_samples_many_splits(monkeypatch):
    monkeypatch.setattr(stats, "EXACT_LIMIT", 5)
    p, exact = spread.permutation_p([1, 2, 3], [4, 5, 6], samples=20_000)
    assert not exact and p == pytest.approx(0.1, abs=0.01)


def _run(path, seed, acc, scale=0.5, layers=16, dataset='cora',
         runtime=10.0, batch=1, cpu='AMD EPYC', threads=1, **extra):
    config = dict(seed=seed, layers=layers, tag='contranorm',
                  select='last', dataset=dict(name=dataset),
                  norm=dict(scale=scale), train=dict(lr=0.005, **extra))
    return dict(status='ok', choices=dict(experiment='table3_paper'),
                config=config, test_acc=acc, _path=str(path), device='cpu',
                machine=dict(cpu=cpu, cpu_count=2, threads=threads),
                batch_runs=batch, runtime_s=runtime)


def _machine(cpu='AMD EPYC', threads=1):
    return dict(cpu=cpu, threads=threads, torch_threads=threads,
                device='cpu', gpu=None)


def _authors(folder, accs, scale=0.5, layers=16, seconds=None,
             made_by=None):
    r"""An ``authors_gcn.py`` record; run i takes ``seconds[i]`` on
    ``made_by[i]`` (a machine; :obj:`None`: the record's)."""
    folder.mkdir(exist_ok=True)
    seconds = seconds or [20.0] * len(accs)
    made_by = made_by or [None] * len(accs)
    runs = {}
    for s, (a, t, m) in enumerate(zip(accs, seconds, made_by)):
        runs[str(s)] = dict(test_acc_last=a, seconds=t)
        if m is not None:
            runs[str(s)]['made_by'] = dict(machine=m)
    record = dict(config=dict(dataset='cora', layers=layers, scale=scale,
                              norm_mode='CN'),
                  runs=runs, machine=_machine())
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


@pytest.mark.parametrize('gnorm, batch, why', [
    (('cpu', 'AMD EPYC', 1), 1, []),
    (('cpu', 'AMD EPYC', 1), 5, ['gnorm batched']),
    (('cpu', 'AMD EPYC', 2), 1, ['other threads']),
    (('cpu', 'Intel Xeon', 1), 1, ['other machine']),
    (('cuda', 'NVIDIA H100', 1), 1, ['other machine']),
    (('cpu', 'Intel Xeon', 2), 20, ['other machine', 'other threads',
                                    'gnorm batched']),
    (('cpu', 'AMD EPYC', 1), None, ['gnorm batch not recorded'])])
def test_a_pair_is_the_same_machine_and_threads_and_gnorm_alone(
        gnorm, batch, why):
    speed = experiment('authors_speed')
    assert speed.why_apart(('cpu', 'AMD EPYC', 1), gnorm, batch) == why


def test_ratio_is_the_authors_mean_time_over_gnorms():
    speed = experiment('authors_speed')
    assert speed.ratio([10.0, 30.0], [5.0, 5.0, 5.0]) == 4.0
    assert speed.ratio([3.0], [6.0]) == 0.5


def test_machines_and_time_per_run_of_both_records(tmp_path):
    speed = experiment('authors_speed')
    _authors(tmp_path, [0.4, 0.4, 0.4], seconds=[10.0, 20.0, 30.0],
             made_by=[None, _machine(threads=2), None])
    assert speed.authors_times(tmp_path / 'cora_L16_s0.5.json') == {
        ('cpu', 'AMD EPYC', 1): [10.0, 30.0],
        ('cpu', 'AMD EPYC', 2): [20.0]}
    runs = [_run('a', 0, 0.3, runtime=50.0, batch=5),
            _run('b', 1, 0.3, runtime=30.0),
            dict(_run('c', 2, 0.3, runtime=8.0), device='cuda:0',
                 machine=dict(cpu='AMD EPYC', threads=1, gpu='H100'))]
    assert speed.gnorm_times(runs) == {
        (('cpu', 'AMD EPYC', 1), 5): [10.0],  # the batch's time / 5
        (('cpu', 'AMD EPYC', 1), 1): [30.0],
        (('cuda', 'H100', 1), 1): [8.0]}
    assert speed.kind_label(('cpu', 'AMD EPYC', 2)) == \
        'cpu: AMD EPYC, 2 threads'


def test_report_times_like_with_like_only(tmp_path):
    folder = tmp_path / 'authors'
    _authors(folder, [0.4, 0.4], seconds=[30.0, 50.0])
    _authors(folder, [0.5], scale=1.0)
    _authors(folder, [0.5], scale=0.2)
    runs = [_run('alone0', 0, 0.3, runtime=18.0),
            _run('alone1', 1, 0.3, runtime=22.0),
            _run('batched', 2, 0.3, runtime=100.0, batch=4),
            _run('other', 3, 0.3, runtime=5.0, cpu='Intel Xeon', threads=2),
            _run('only-batched', 0, 0.3, scale=1.0, runtime=60.0, batch=3)]
    text = spread.report(spread.read_authors(folder), runs, [tmp_path])
    section = text.split('## Time per run')[1]
    rows = [line for line in section.splitlines()
            if line.startswith('| cora |')]
    assert rows == [
        '| cora | 16 | 0.2 | cpu: AMD EPYC, 1 thread | 20.0 ± 0.0 (1) | '
        'no runs | | | — (no gnorm runs) |',
        '| cora | 16 | 0.5 | cpu: AMD EPYC, 1 thread | 40.0 ± 10.0 (2) | '
        'cpu: AMD EPYC, 1 thread | alone | 20.0 ± 2.0 (2) | 2.00x |',
        '| cora | 16 | 0.5 | cpu: AMD EPYC, 1 thread | 40.0 ± 10.0 (2) | '
        'cpu: AMD EPYC, 1 thread | in batches of 4 (batch time / 4) | '
        '25.0 ± 0.0 (1) | — (gnorm batched) |',
        '| cora | 16 | 0.5 | cpu: AMD EPYC, 1 thread | 40.0 ± 10.0 (2) | '
        'cpu: Intel Xeon, 2 threads | alone | 5.0 ± 0.0 (1) | '
        '— (other machine, other threads) |',
        '| cora | 16 | 1 | cpu: AMD EPYC, 1 thread | 20.0 ± 0.0 (1) | '
        'cpu: AMD EPYC, 1 thread | in batches of 3 (batch time / 3) | '
        '20.0 ± 0.0 (1) | — (gnorm batched) |']
    assert "Time per run: at 1 like-for-like pair the authors' code takes " \
        "2.00x gnorm's time; gnorm batched at 1 cell; no gnorm runs at 1 " \
        "cell without a pair." in section.splitlines()
    assert 'Peak memory: not recorded by either side.' in section


def test_speed_in_words_without_any_pair():
    speed = experiment('authors_speed')
    assert speed.in_words([], [['gnorm batched']] * 2 + [[
        'other machine', 'gnorm batched']]) == (
        'Time per run: no cell has a like-for-like pair (the same machine '
        'and threads, gnorm trained alone): gnorm batched at 2 cells; '
        'other machine, gnorm batched at 1 cell.')
    assert speed.in_words([0.5, 1.25], []) == (
        "Time per run: at 2 like-for-like pairs the authors' code takes "
        "0.50x-1.25x gnorm's time.")


def test_committed_report_is_generated_from_the_committed_records():
    r"""``authors_vs_gnorm.md`` up to its section on the same random numbers
    is :func:`report` of the committed records and runs."""
    folders = [f for f in spread.RUNS if f.is_dir()]
    text = spread.report(spread.read_authors(spread.AUTHORS),
                         spread.load_runs(*folders), folders)
    committed = spread.OUT.read_text()
    assert committed.split('\n## On the same random numbers')[0] == text
