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
    assert trace.entered(['a', 'b', 'a', 'b', 'c', 'b']) == 'a 1, b 2, c 1'
