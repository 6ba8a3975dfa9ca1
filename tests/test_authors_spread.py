r"""``experiments.authors.report`` (``experiments/authors_spread.py``'s report):
the permutation test against hand counts, the pairing of the authors'
records with gnorm's runs of the same cell, and its refusal to pool runs
whose configs differ; the smallest p a cell's numbers of runs allow, and a
verdict that never reads a cell without power as "no difference"; its
section "Time per run" (``experiments.authors.speed``): only work-matched
pairs get a ratio."""
import json
import random

import pytest

from conftest import experiment

from gnorm.errors import DataError
from gnorm.study import stats
from experiments.authors import report as authors
from experiments.authors import speed


def test_permutation_p_counts_every_split():
    # 20 splits of 6 values into 3 + 3; only {1,2,3} | {4,5,6} and its
    # mirror are as far apart as the observed split.
    assert stats.permutation_p([1, 2, 3], [4, 5, 6]) == (0.1, True)
    # 3 + 2 of 5 values: the observed split is the most extreme of 10 and
    # has no mirror of equal size.
    assert stats.permutation_p([10, 11, 12], [0, 1]) == (0.1, True)
    p, exact = stats.permutation_p([1, 2, 3], [1, 2, 3])
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
    p, exact = stats.permutation_p([1, 2, 3], [4, 5, 6], samples=20_000)
    assert not exact and p == pytest.approx(0.1, abs=0.01)


def _run(path, seed, acc, scale=0.5, layers=16, dataset='cora',
         runtime=10.0, batch=1, cpu='AMD EPYC', threads=1, loop=None,
         memory=None, **extra):
    r"""A gnorm run; :obj:`loop`: its ``loop_s``, :obj:`memory`: its peak
    host RSS (:obj:`None`: not recorded); :obj:`extra`: ``train`` keys."""
    config = dict(seed=seed, layers=layers, tag='contranorm',
                  select='last', dataset=dict(name=dataset),
                  norm=dict(scale=scale), train=dict(lr=0.005, **extra))
    run = dict(status='ok', choices=dict(experiment='table3_paper'),
               config=config, test_acc=acc, _path=str(path), device='cpu',
               machine=dict(cpu=cpu, cpu_count=2, threads=threads),
               batch_runs=batch, runtime_s=runtime)
    if loop is not None:
        run['loop_s'] = loop
    if memory is not None:
        run['peak_memory'] = dict(host_rss_mib=memory)
    return run


def _machine(cpu='AMD EPYC', threads=1):
    return dict(cpu=cpu, threads=threads, torch_threads=threads,
                device='cpu', gpu=None)


def _authors(folder, accs, scale=0.5, layers=16, seconds=None,
             made_by=None, memory=None):
    r"""An ``authors_gcn.py`` record; run i takes ``seconds[i]`` on
    ``made_by[i]`` (a machine; :obj:`None`: the record's) and records
    ``memory[i]``: (peak host RSS, runs before it in its process), or
    nothing."""
    folder.mkdir(exist_ok=True)
    seconds = seconds or [20.0] * len(accs)
    made_by = made_by or [None] * len(accs)
    memory = memory or [None] * len(accs)
    runs = {}
    for s, (a, t, m, rss) in enumerate(zip(accs, seconds, made_by, memory)):
        runs[str(s)] = dict(test_acc_last=a, seconds=t)
        if m is not None:
            runs[str(s)]['made_by'] = dict(machine=m)
        if rss is not None:
            runs[str(s)]['peak_memory'] = dict(
                host_rss_mib=rss[0], runs_before_in_process=rss[1])
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
    assert authors.gnorm_runs(runs, 'cora', 16, 0.5) == pytest.approx(
        {0: 30.0, 1: 40.0})
    with pytest.raises(DataError, match='differ in more than the seed'):
        authors.gnorm_runs(runs + [_run('f', 5, 0.3, weight_decay=0.0)],
                          'cora', 16, 0.5)
    with pytest.raises(DataError, match='seed 1 .* twice'):
        authors.gnorm_runs(runs + [_run('g', 1, 0.3)], 'cora', 16, 0.5)


def test_report_pairs_each_record_with_gnorm(tmp_path):
    _authors(tmp_path / 'authors', [0.40, 0.42, 0.44])
    _authors(tmp_path / 'authors', [0.5], scale=1.0)
    runs = [_run(f'r{s}', s, a) for s, a in enumerate([0.30, 0.32, 0.34])]
    text = authors.report(authors.read_authors(tmp_path / 'authors'), runs,
                         [tmp_path])
    row = next(line for line in text.splitlines()
               if line.startswith('| cora | 16 | 0.5 '))
    # 3 + 3 runs, all of gnorm's below all of the authors': p = 2 / 20.
    assert '42.00 ± 1.63 (3)' in row and '32.00 ± 1.63 (3)' in row
    assert '-10.00' in row and row.endswith('| 0.100 | 0.1 |')
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
    twins = authors.read_twins(folder)
    lines = authors.twin_lines(twins, 'authors_twin.png')
    row = next(line for line in lines if 'float64' in line)
    assert row.endswith('| 20 | 1.0e-06 | 1.0e-04 | 40.00 | 45.00 |')
    assert lines[-1] == '![weights apart vs epoch](authors_twin.png)'
    assert authors.plot_twins(twins, tmp_path / 'twin.png')
    assert (tmp_path / 'twin.png').read_bytes().startswith(b'\x89PNG')
    assert authors.twin_lines([], None) == [] and \
        not authors.plot_twins([], tmp_path / 'none.png')


def test_verdict_names_what_chance_does_not_explain():
    assert authors.verdict([('a', 0.5, 0.01), ('b', 0.001, 0.0001)]) == (
        '2 tests, one family: a Holm-adjusted p below 0.05 marks a '
        'difference that chance does not explain at 95 % confidence; the '
        "smallest p must pass Holm's first threshold 0.05 / 2 = 0.0250. "
        '2 of 2 cells have the runs to pass it at all (smallest p below '
        'it). Beyond chance: b. Not distinguishable with these runs: a.')
    said = authors.verdict([('a', 0.04, 0.001), ('b', 0.3, 0.001)])
    assert 'Not distinguishable with these runs: a, b. p below 0.05 before ' \
        'the adjustment, not after (by chance alone about one test in 20 ' \
        'is): a.' in said
    # Holm, not Bonferroni: 0.02 and 0.03 of 2 tests both pass (0.04, 0.03).
    said = authors.verdict([('a', 0.02, 0.001), ('b', 0.03, 0.001)])
    assert 'Beyond chance: a, b.' in said
    # level is the confidence.
    assert 'below 0.1 marks' in authors.verdict([('a', 0.5, 0.01)], 0.9)


def test_verdict_reads_nothing_into_cells_without_power():
    r"""3 + 5 runs: no split gives p below 1 / 56, above 0.05 / 10."""
    tested = [(f'c{i}', p, stats.smallest_p(3, 5))
              for i, p in enumerate([1 / 56] + [0.5] * 8)]
    said = authors.verdict(tested + [('big', 0.2, stats.smallest_p(8, 11))])
    assert 'No cell differs' not in said
    assert '1 of 10 cells has the runs to pass it at all' in said
    assert 'Not distinguishable with these runs: big.' in said
    assert ('Without power (smallest p 0.0179: not below 0.0050 whatever '
            'the runs): c0, c1, c2, c3, c4, c5, c6, c7, c8; a cell without '
            'power shows nothing either way.') in said
    said = authors.verdict(tested)
    assert 'No cell has the runs to pass it at all' in said
    assert 'Beyond chance' not in said and 'Not distinguishable' not in said


def test_report_without_power_says_so(tmp_path):
    r"""3 cells of 3 + 5 runs: p is at least 1 / 56 = 0.0179, above
    0.05 / 3 = 0.0167."""
    runs = []
    for scale in (0.2, 0.5, 0.8):
        _authors(tmp_path / 'authors', [0.40, 0.41, 0.42], scale=scale)
        runs += [_run(f'r{s}', s, a, scale=scale) for s, a in
                 enumerate([0.30, 0.31, 0.32, 0.33, 0.34])]
    text = authors.report(authors.read_authors(tmp_path / 'authors'), runs,
                         [tmp_path])
    row = next(line for line in text.splitlines()
               if line.startswith('| cora | 16 | 0.5 '))
    assert row.endswith('| 0.018 | 0.018 |')  # all below: p = 1 / 56
    assert 'No cell differs' not in text
    assert 'No cell has the runs to pass it at all (smallest p).' in text
    assert 'a cell without power shows nothing either way' in text


def _group(kind=('cpu', 'AMD EPYC', 1), runs=3, batch=1, eval_every=1,
           loop=True, together=True):
    return speed.Runs(kind, (1.0, ) * runs, (None, ) * runs, '', batch,
                      eval_every, loop, together)


@pytest.mark.parametrize('gnorm, why', [
    (dict(), []),
    (dict(batch=5), ['gnorm batched']),
    (dict(kind=('cpu', 'AMD EPYC', 2)), ['other threads']),
    (dict(kind=('cpu', 'Intel Xeon', 1)), ['other machine']),
    (dict(kind=('cuda', 'NVIDIA H100', 1)), ['other machine']),
    (dict(kind=('cpu', 'Intel Xeon', 2), batch=20),
     ['other machine', 'other threads', 'gnorm batched']),
    (dict(batch=None), ['gnorm batch not recorded']),
    (dict(eval_every=10), ['gnorm evaluated every 10th epoch']),
    (dict(eval_every=2), ['gnorm evaluated every 2nd epoch']),
    (dict(loop=False), ['no loop time recorded']),
    (dict(runs=2), ['too few runs']),
    (dict(batch=5, eval_every=10, loop=False, runs=1),
     ['gnorm batched', 'gnorm evaluated every 10th epoch',
      'no loop time recorded', 'too few runs']),
    (dict(together=False), ['not timed side by side'])])
def test_a_pair_is_work_matched(gnorm, why):
    assert speed.why_apart(_group(), _group(**gnorm)) == why
    assert speed.why_apart(_group(runs=2), _group()) == ['too few runs']


def test_ratio_is_the_authors_mean_time_over_gnorms():
    assert speed.mean_ratio([10.0, 30.0], [5.0, 5.0, 5.0]) == 4.0
    assert speed.mean_ratio([3.0], [6.0]) == 0.5
    assert speed.ratio_range([10.0, 30.0], [5.0, 2.0]) == (2.0, 15.0)


def test_machines_and_time_per_run_of_both_records(tmp_path):
    _authors(tmp_path, [0.4, 0.4, 0.4], seconds=[10.0, 20.0, 30.0],
             made_by=[None, _machine(threads=2), None],
             memory=[(400.0, 0), None, (900.0, 1)])
    assert speed.authors_times(tmp_path / 'cora_L16_s0.5.json') == [
        # run 2 followed run 0 in its process: its peak is not its own
        speed.Runs(('cpu', 'AMD EPYC', 1), (10.0, 30.0), (400.0, None),
                   f'{tmp_path.name}/cora_L16_s0.5.json'),
        speed.Runs(('cpu', 'AMD EPYC', 2), (20.0, ), (None, ),
                   f'{tmp_path.name}/cora_L16_s0.5.json')]
    runs = [_run('a', 0, 0.3, runtime=50.0, batch=5),
            _run('b', 1, 0.3, runtime=30.0, eval_every=10),
            _run('c', 2, 0.3, runtime=30.0, loop=12.0, memory=300.0),
            dict(_run('d', 3, 0.3, runtime=8.0), device='cuda:0',
                 machine=dict(cpu='AMD EPYC', threads=1, gpu='H100'))]
    cpu = ('cpu', 'AMD EPYC', 1)
    assert speed.gnorm_times(runs) == [
        speed.Runs(cpu, (10.0, ), (None, ), '', 5, 1, False),  # batch / 5
        speed.Runs(cpu, (30.0, ), (None, ), '', 1, 10, False),
        speed.Runs(cpu, (12.0, ), (300.0, ), '', 1, 1, True),  # loop_s
        speed.Runs(('cuda', 'H100', 1), (8.0, ), (None, ), '', 1, 1, False)]
    assert speed.kind_label(('cpu', 'AMD EPYC', 2)) == \
        'cpu: AMD EPYC, 2 threads'
    assert [speed.ordinal(n) for n in (1, 2, 3, 4, 10, 11, 12, 21, 22)] == [
        '1st', '2nd', '3rd', '4th', '10th', '11th', '12th', '21st', '22nd']


def _section(text):
    section = text.split('## Time per run')[1]
    return section, [line for line in section.splitlines()
                     if line.startswith('| cora |')]


def test_report_never_pairs_a_run_evaluated_every_tenth_epoch(tmp_path):
    folder = tmp_path / 'authors'
    _authors(folder, [0.4] * 3, seconds=[30.0, 40.0, 50.0])
    runs = [_run(f'r{s}', s, 0.3, runtime=20.0, loop=10.0, eval_every=10)
            for s in range(3)]
    # timed side by side: the only reason left is the evaluation
    section, rows = _section(authors.report(
        [], [], [], authors.read_authors(folder), runs, [folder]))
    assert rows == [
        '| cora | 16 | 0.5 | authors/cora_L16_s0.5.json, cpu: AMD EPYC, 1 '
        'thread | 40.0 ± 8.2 (3) | not recorded | cpu: AMD EPYC, 1 thread | '
        'alone, evaluated every 10th epoch, `loop_s` | 10.0 ± 0.0 (3) | not '
        'recorded | — (gnorm evaluated every 10th epoch) | — |']
    assert 'Time per run: no cell has a work-matched pair yet' in section
    assert ': gnorm evaluated every 10th epoch at 1 cell.' in section
    assert 'x gnorm' not in section


def test_report_times_work_matched_pairs_only(tmp_path):
    folder, timing = tmp_path / 'authors', tmp_path / 'speed'
    _authors(folder, [0.4, 0.4], seconds=[30.0, 50.0])
    _authors(folder, [0.5], scale=1.0)
    _authors(folder, [0.5], scale=0.2)
    # The timing record: 3 runs, each alone in its process.
    _authors(timing, [0.4] * 3, seconds=[30.0, 40.0, 50.0],
             memory=[(600.0, 0), (610.0, 0), (620.0, 0)])
    runs = [_run('batched', 2, 0.3, runtime=100.0, batch=4),
            _run('old', 3, 0.3, runtime=5.0, eval_every=10),
            _run('other', 4, 0.3, runtime=5.0, cpu='Intel Xeon', threads=2),
            _run('only-batched', 0, 0.3, scale=1.0, runtime=60.0, batch=3)]
    timed = [_run(f'speed{s}', s, 0.3, runtime=30.0, loop=loop,
                  memory=300.0 + s, eval_every=1)
             for s, loop in enumerate([8.0, 10.0, 12.0])]
    text = authors.report(authors.read_authors(folder), runs, [tmp_path],
                         authors.read_authors(timing), timed, [timing])
    section, rows = _section(text)
    # The timing runs stay out of the accuracies.
    assert 'gnorm 30.00, 30.00, 30.00 (seeds 2, 3, 4)' in text
    head = ('| cora | 16 | 0.5 | speed/cora_L16_s0.5.json, cpu: AMD EPYC, '
            '1 thread | 40.0 ± 8.2 (3) | 610 (3) | cpu: AMD EPYC, 1 thread | ')
    assert head + ('alone, evaluated every epoch, `loop_s` | 10.0 ± 1.6 (3) '
                   '| 301 (3) | 4.00x (2.50x-6.25x) | 2.03x |') in rows
    assert head + ('alone, evaluated every 10th epoch, `runtime_s` (whole '
                   'call) | 5.0 ± 0.0 (1) | not recorded | — (gnorm '
                   'evaluated every 10th epoch, no loop time recorded, too '
                   'few runs, not timed side by side) | — |') in rows
    # The old record: too few runs for any of gnorm's.
    assert ('| cora | 16 | 0.5 | authors/cora_L16_s0.5.json, cpu: AMD EPYC, '
            '1 thread | 40.0 ± 10.0 (2) | not recorded | cpu: AMD EPYC, 1 '
            'thread | alone, evaluated every epoch, `loop_s` | 10.0 ± 1.6 '
            '(3) | 301 (3) | — (too few runs, not timed side by side) | — |'
            ) in rows
    assert ('| cora | 16 | 0.2 | authors/cora_L16_s0.2.json, cpu: AMD EPYC, '
            '1 thread | 20.0 ± 0.0 (1) | not recorded | no runs | | | | — (no '
            'gnorm runs) | |') in rows
    assert len(rows) == 1 + 2 * 4 + 1
    assert ("Time per run: at 1 work-matched pair (loop against loop, gnorm "
            "evaluating every epoch) the authors' code takes 4.00x gnorm's "
            "time (3.48x-4.53x paired by seed (95 % interval, n=3); "
            "2.50x-6.25x over every pair of runs, which mixes the "
            "machine's loads; 2.03x its peak memory) at cora "
            'L=16 s=0.5 (speed/cora_L16_s0.5.json); of the 2 cells without '
            'a pair: gnorm batched at 1 cell; no loop time recorded at 1 '
            'cell; too few runs at 1 cell; no gnorm runs at 1 cell; not '
            'timed side by side at 1 cell.'
            ) in section.splitlines()
    assert 'Timing records and runs (left out of the accuracies above) ' \
        f'from {timing}.' in section


def test_speed_in_words_without_any_pair():
    assert speed.in_words([], [['gnorm batched']] * 2 + [[
        'other machine', 'gnorm batched']]) == (
        'Time per run: no cell has a work-matched pair yet (the same '
        'machine and threads; gnorm trained alone, evaluated every epoch, '
        'timed by `loop_s`; 3 runs a side or more), so no ratio is given: '
        'other machine at 1 cell; gnorm batched at 3 cells.')
    pair = speed.Pair('cora L=16 s=0.5', 1.25, 0.5, 2.0, None)
    assert speed.in_words([pair], []) == (
        "Time per run: at 1 work-matched pair (loop against loop, gnorm "
        "evaluating every epoch) the authors' code takes 1.25x gnorm's time "
        "(0.50x-2.00x over every pair of runs, which mixes the machine's "
        'loads; peak memory not recorded by both) at cora '
        'L=16 s=0.5.')


def test_committed_report_is_generated_from_the_committed_records():
    r"""``authors_vs_gnorm.md`` up to its section on the same random numbers
    is :func:`report` of the committed records and runs."""
    spread = experiment('authors_spread')
    text = spread.compare()
    committed = spread.OUT.read_text()
    assert committed.split('\n## On the same random numbers')[0] == text


def test_the_speed_ratio_is_an_interval_paired_by_seed():
    r"""The two runs of one seed ran side by side under one load: their
    log ratio's t interval is the ratio's, not the range over every pair
    of runs (which mixes loads)."""
    import math
    from scipy import stats as scipy_stats
    cpu = ('cpu', 'AMD EPYC', 1)
    authors = speed.Runs(cpu, (20.0, 44.0, 30.0, 9.0), (None, ) * 4,
                         seeds=(0, 1, 2, 3))
    gnorm = speed.Runs(cpu, (10.0, 20.0, 16.0, 5.0, 7.0), (None, ) * 5,
                       seeds=(0, 1, 2, 3, 9))
    low, high, n = speed.seed_interval(authors, gnorm)
    logs = [math.log(a / g) for a, g in ((20, 10), (44, 20), (30, 16),
                                         (9, 5))]
    mean = sum(logs) / 4
    half = scipy_stats.t.ppf(0.975, 3) * scipy_stats.sem(logs)
    assert n == 4
    assert (low, high) == pytest.approx((math.exp(mean - half),
                                         math.exp(mean + half)))
    assert speed.seed_interval(authors, speed.Runs(
        cpu, (10.0, ), (None, ), seeds=(0, ))) is None
