r"""experiments/report_trace.py: the modules of gnorm a report's writing
passes through, in call order, a loop over cells read once."""
from conftest import experiment


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
    assert entries == ['gnorm.study.stats', 'gnorm.study.stats']
    assert trace.entry_counts(['gnorm.study.a', 'gnorm.study.b',
                               'gnorm.study.a', 'gnorm.study.b',
                               'gnorm.study.c', 'gnorm.study.b']) == \
        {'a': 1, 'b': 2, 'c': 1}


def test_a_depth_report_enters_each_module_once_or_twice():
    r"""A depth report computes its findings first, then renders them: its
    writing enters each gnorm.study module once or twice (a loop over
    cells read once), the writer itself once."""
    trace = experiment('report_trace')
    visits, entries = trace.trace_study('heterophily_baselines')
    counts = trace.entry_counts(entries)
    assert counts['reports.depth'] == counts['findings.depth'] == 1
    assert {'findings.compare', 'stats', 'reports.plot',
            'words.verdicts'} <= set(counts)
    assert max(counts.values()) <= 2, counts
