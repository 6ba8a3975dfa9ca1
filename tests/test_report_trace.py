r"""experiments/report_trace.py: the modules of gnorm a report's writing
passes through, in call order, a loop over cells read once."""
import pytest
from conftest import experiment

COMPUTING = {'spec', 'runs', 'stats', 'findings'}


def test_a_loop_reads_as_one_pass():
    trace = experiment('report_trace')
    assert trace.without_loops(['a', 'b', 'a', 'b', 'a', 'c']) == \
        ['a', 'b', 'a', 'c']
    assert trace.without_loops(['a', 'b', 'c', 'b', 'c', 'b', 'c', 'd']) \
        == ['a', 'b', 'c', 'd']
    assert trace.summary(['a', 'b', 'a', 'c']) == \
        '3 modules, 4 passes, 1 returns to a module left before'


def test_the_trace_follows_calls_and_returns_into_gnorm():
    trace = experiment('report_trace')
    from gnorm.study import stats

    def writer():
        stats.holm([0.01, 0.02])
        return stats.where_in(1.0, 0.0, 2.0)
    visits, entries, result = trace.trace(writer)
    assert visits == ['gnorm.study.stats'] and result == 'inside'
    assert entries == [' -> gnorm.study.stats', ' -> gnorm.study.stats']
    assert trace.entry_counts(['gnorm.study.a', 'gnorm.study.b',
                               'gnorm.study.a', 'gnorm.study.b',
                               'gnorm.study.c', 'gnorm.study.b']) == \
        {'a': 1, 'b': 2, 'c': 1}


def test_the_walk_goes_by_rooms_and_counts_returns():
    trace = experiment('report_trace')
    entries = [' -> gnorm.study.reports.depth',
               'gnorm.study.reports.depth -> gnorm.study.findings.depth',
               'gnorm.study.findings.depth -> gnorm.study.findings.compare',
               'gnorm.study.findings.compare -> gnorm.study.stats',
               'gnorm.study.findings.compare -> gnorm.study.stats',
               'gnorm.study.reports.depth -> gnorm.results',
               'gnorm.results -> gnorm.study.spec.table',
               'gnorm.study.reports.depth -> gnorm.study.reports.plot',
               'gnorm.study.reports.plot -> gnorm.study.findings.select']
    walk = trace.room_walk(entries)
    assert walk == ['reports', 'findings', 'stats', 'spec', 'findings']
    assert trace.returns(walk) == 1
    assert trace.room('gnorm.study.stats') == 'stats'
    assert trace.room('gnorm.results') == ''


@pytest.fixture(scope='module')
def depth_walk():
    return experiment('report_trace').trace_study('tuned_depth')


def test_a_depth_report_enters_each_module_once_or_twice():
    r"""A depth report of one depth computes its findings first, then
    renders them: its writing enters each gnorm.study module once or twice
    (a loop over cells read once), the writer itself once."""
    trace = experiment('report_trace')
    visits, entries = trace.trace_study('heterophily_baselines')
    counts = trace.entry_counts(entries)
    assert counts['reports.depth'] == counts['findings.depth'] == 1
    assert {'findings.compare', 'stats', 'reports.plot',
            'words.verdicts'} <= set(counts)
    assert max(counts.values()) <= 2, counts


def _computes_then_words(entries, most_returns):
    r"""A report's walk by rooms (:obj:`entries`, the trace's second list)
    starts in reports, then findings, words its findings later, returns
    to a room it left at most :obj:`most_returns` times, and enters no
    computing room once the wording began."""
    trace = experiment('report_trace')
    walk = trace.room_walk(entries)
    assert walk[:2] == ['reports', 'findings'] and 'words' in walk
    assert trace.returns(walk) <= most_returns, walk
    every = trace.room_walk(entries, loops_once=False)
    after = every[every.index('words'):]
    assert not COMPUTING & set(after), after


def test_a_depth_report_computes_then_words(depth_walk):
    r"""Following a depth report's writing room by room (sub-packages of
    gnorm.study): it computes its findings in one pass (spec, runs, stats
    inside findings), then words them; no room is entered again once the
    wording began, and the walk returns to a room it left at most 4
    times."""
    _computes_then_words(depth_walk[1], most_returns=4)


def test_a_paired_report_computes_then_words():
    r"""A paired report's writing, room by room: its findings first
    (:func:`gnorm.study.findings.paired.paired_findings`: the rows, their
    curves, what the spec says), then the words; no computing room is
    entered once the wording began, and the walk returns to a room it left
    at most once (the spec, read again after the statistics)."""
    _, entries = experiment('report_trace').trace_study('sepnorm_molhiv_cpu')
    _computes_then_words(entries, most_returns=1)
