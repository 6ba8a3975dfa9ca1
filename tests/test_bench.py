r"""gnorm.bench, the benchmarks' harness: the timing order and what is
kept of it (with a fake clock), ratios, JSON lines that resume, the table
writer's bytes, a measurement in a child process, a revision's code, the
plot and the step runner."""
import json
import subprocess
import sys

import pytest
import torch

from gnorm import bench


class FakeClock:
    r"""A clock that each case advances by its own amount: the times
    :func:`bench.alternate` measures are known."""

    def __init__(self):
        self.now, self.calls = 0.0, []

    def __call__(self):
        return self.now

    def case(self, name, seconds):
        def run(*args):
            self.calls.append((name, *args))
            self.now += seconds
        return run


def test_rotation_starts_each_round_one_case_later():
    assert list(bench.rotation('abc', 3)) == [
        (0, 'a'), (0, 'b'), (0, 'c'), (1, 'b'), (1, 'c'), (1, 'a'),
        (2, 'c'), (2, 'a'), (2, 'b')]
    assert list(bench.rotation(['x'], 2)) == [(0, 'x'), (1, 'x')]


def test_alternate_times_cases_in_rotating_rounds_after_warm_up():
    clock = FakeClock()
    cases = {'fast': clock.case('fast', 1.0), 'slow': clock.case('slow', 3.0)}
    times = bench.alternate(cases, rounds=3, warmup=1, clock=clock)
    assert [name for name, *_ in clock.calls] == [
        'fast', 'slow', 'slow', 'fast', 'fast', 'slow', 'slow', 'fast']
    assert times == {'fast': [1.0] * 3, 'slow': [3.0] * 3}  # warm-up dropped
    assert bench.medians(times) == {'fast': 1.0, 'slow': 3.0}


def test_alternate_passes_each_round_its_input_and_keeps_rounds_apart():
    clock = FakeClock()
    durations = iter([5.0, 6.0, 1.0, 2.0, 3.0, 4.0])  # warm-up: 5, 6

    def case(name):
        def run(batch):
            clock.calls.append((name, batch))
            clock.now += next(durations)
        return run
    times = bench.alternate({'a': case('a'), 'b': case('b')}, rounds=2,
                            inputs=['w', 'x', 'y'], clock=clock)
    assert clock.calls == [('a', 'w'), ('b', 'w'), ('b', 'x'), ('a', 'x'),
                           ('a', 'y'), ('b', 'y')]
    assert times == {'a': [2.0, 3.0], 'b': [1.0, 4.0]}


def test_timed_gives_the_result_and_a_time_per_clock():
    seconds, result = bench.timed(lambda x: x + 1, 41)
    assert result == 42 and seconds >= 0
    both, _ = bench.timed(sum, range(10**5), clock=bench.wall_and_cpu)
    assert len(both) == 2 and all(t >= 0 for t in both)


def test_ratios():
    assert bench.ratio(3.0, 2.0) == 1.5
    assert bench.ratio(None, 2.0) is None and bench.ratio(1.0, 0) is None
    assert bench.ratio_range([2.0, 4.0], [1.0, 2.0]) == (1.0, 4.0)


def test_records_resume_and_the_last_line_of_a_key_wins(tmp_path):
    path = tmp_path / 'sub' / 'r.jsonl'
    records = bench.Records(path)
    assert len(records) == 0 and bench.read_jsonl(path) == []
    records.add(dict(key='a', seconds=1.0))
    records.add(dict(key='b', seconds=2.0))
    records.add(dict(key='a', seconds=3.0))
    again = bench.Records(path)  # a sweep started again
    assert 'a' in again and 'c' not in again and len(again) == 2
    assert again.get('a')['seconds'] == 3.0
    assert [r['key'] for r in again] == ['a', 'b']
    assert len(bench.read_jsonl(path)) == 3  # every line kept
    path.write_text(path.read_text() + '\n\n')
    by_value = bench.Records(path, key=lambda r: r['seconds'])
    assert sorted(by_value.rows) == [1.0, 2.0, 3.0]
    assert len(bench.Records(path, resume=False)) == 0
    assert path.read_text() == ''
    bench.write_jsonl(path, [dict(a=1), dict(b=2)])
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'


def test_markdown_table_bytes():
    lines = bench.markdown_table(['name', 'ms', 'note'],
                                 [['a', 1.23456, None], ['b|c', 2, 'x']])
    assert lines == ['| name | ms | note |', '|---|---|---|',
                     '| a | 1.235 | - |', '| b/c | 2 | x |']
    assert bench.records_table([dict(a=1), dict(b='x', a=2.5)]) == [
        '| a | b |', '|---|---|', '| 1 | - |', '| 2.5 | x |']


def test_write_report_ends_with_one_newline(tmp_path):
    text = bench.write_report(tmp_path / 'r.md', ['# title', '', 'text'])
    assert text == '# title\n\ntext\n'
    assert (tmp_path / 'r.md').read_text() == text


def test_machine_is_one_dict_rendered_in_words():
    from gnorm.machine import cpu_name, machine_words, this_machine
    info = this_machine('cpu')
    assert info['cpu'] == cpu_name() and info['torch'] == torch.__version__
    assert 'gpu' not in info and info['threads'] == torch.get_num_threads()
    said = machine_words(info)
    assert cpu_name() in said and torch.__version__ in said
    assert machine_words(dict(info, gpu='NVIDIA H200')) == \
        f'NVIDIA H200 (torch {torch.__version__})'
    with pytest.warns(DeprecationWarning, match='machine_words'):
        assert bench.machine('cpu') == said


def test_the_machine_says_whether_denormals_are_flushed():
    from gnorm.machine import denormals_flushed, this_machine
    if not torch.set_flush_denormal(True):
        pytest.skip('this CPU cannot flush denormals')
    try:
        assert denormals_flushed()
        assert this_machine('cpu')['denormals_flushed'] is True
    finally:
        torch.set_flush_denormal(False)
    assert not denormals_flushed()
    assert this_machine('cpu')['denormals_flushed'] is False


CHILD = """
import json
import torch
from gnorm.bench import PeakMemory
with PeakMemory('cpu') as peak:
    x = torch.ones(256 * 2**20 // 4)  # 256 MiB, touched
print('progress')
print(json.dumps({'gib': peak.gib, 'sum': float(x.sum())}))
"""


def test_a_child_measures_its_own_peak_memory(tmp_path):
    script = tmp_path / 'child.py'
    script.write_text(CHILD)
    found = bench.run_child([script])
    assert found['sum'] == 64 * 2**20
    assert 0.2 < found['gib'] < 0.3  # its own, not the parent's peak
    script.write_text('import sys\nsys.exit("the cell fell over")\n')
    with pytest.raises(bench.ChildFailed) as e:
        bench.run_child([script])
    assert e.value.tail == 'the cell fell over'
    assert bench.peak_rss_gib() > 0


def _python(code):
    r"""What a fresh Python process running :obj:`code` prints."""
    return subprocess.run([sys.executable, '-c', code], capture_output=True,
                          text=True, check=True).stdout


def test_code_at_exports_a_revision(tmp_path, monkeypatch):
    repo = tmp_path / 'repo'
    repo.mkdir()

    def git(*args):
        subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t',
                        *args], cwd=repo, check=True, capture_output=True)
    git('init', '-q')
    (repo / 'mod.py').write_text('VERSION = 1\n')
    git('add', 'mod.py')
    git('commit', '-q', '-m', 'one')
    (repo / 'mod.py').write_text('VERSION = 2\n')  # the working tree moves on
    monkeypatch.setenv('TMPDIR', str(tmp_path / 'tmp'))
    (tmp_path / 'tmp').mkdir()
    folder = bench.code_at('HEAD', repo)
    assert (folder / 'mod.py').read_text() == 'VERSION = 1\n'
    assert bench.code_at('HEAD', repo) == folder  # extracted once


def test_use_code_imports_the_package_from_another_folder(tmp_path):
    (tmp_path / 'gnorm').mkdir()  # a revision without the harness
    (tmp_path / 'gnorm' / '__init__.py').write_text('')
    (tmp_path / 'gnorm' / 'data.py').write_text('WHERE = "old"\n')
    code = ('from gnorm.bench import timed, use_code\n'
            f'use_code({str(tmp_path)!r})\n'
            'import gnorm.data\n'
            'print(gnorm.data.WHERE, timed(len, "abc")[1])')
    assert _python(code).split() == ['old', '3']


def test_line_plot_is_deterministic_and_labels_each_series_once(tmp_path):
    panels = [dict(title=f'd={d}', note='not measured: n=9' if d else '',
                   lines=[dict(x=[1, 10], y=[1e-3, 1e-2], label=name,
                               color=f'C{i}', marker='o')
                          for i, name in enumerate(('a', 'b'))])
              for d in (0, 1)]
    figs = [bench.line_plot(tmp_path / f'{i}.png', panels, xlabel='n',
                            ylabel='s', xticks=[1, 10]) for i in range(2)]
    assert (tmp_path / '0.png').read_bytes() == \
        (tmp_path / '1.png').read_bytes()
    legend, = figs[0].legends
    assert [t.get_text() for t in legend.get_texts()] == ['a', 'b']
    assert len(figs[0].axes) == 2 and len(figs[0].axes[0].lines) == 2


def test_steps_run_in_order_and_a_failing_one_is_recorded(tmp_path):
    def fine(context, budget):
        return dict(rows=[dict(n=1, ms=0.5)], notes=['measured'])

    def broken(context, budget):
        raise ValueError('bad\nsize')
    steps = [bench.Step('a', 'first', 5, 1, fine),
             bench.Step('b', 'second', 5, 1, broken)]
    path = tmp_path / 'check.jsonl'
    records = bench.run_steps(
        steps, None, path, dict(device='cpu'), quick=True,
        report=lambda env, records: '\n'.join(
            [env['device'], *bench.steps_report(records)]) + '\n')
    assert [r['status'] for r in records] == ['ok', 'failed']
    assert records[1]['error'] == 'ValueError: bad size'
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == dict(step='environment', device='cpu')
    assert [r['budget_s'] for r in lines[1:]] == [1, 1]
    report = path.with_suffix('.md').read_text()
    assert '## b. second: failed' in report and '* measured' in report
    assert '| 1 | 0.5 |' in report
    budget = bench.Budget(0)
    assert budget.over() and 'stopped before n = 10' in \
        budget.stop_note('n = 10')


def test_the_harness_imports_torch_and_the_standard_library_only():
    code = ('import sys, gnorm.bench; print(sorted(m for m in sys.modules '
            'if m.split(".")[0] in {"torch_geometric", "hydra", "matplotlib", '
            '"scipy"}))')
    assert _python(code).strip() == '[]'


def test_profiled_lists_the_operators_of_one_call():
    x = torch.randn(8, 8)
    events = bench.profiled(torch.mm, x, x)
    assert any(e.key == 'aten::mm' for e in events)
    assert 'aten::mm' in events.table(sort_by='self_cpu_time_total')


def test_the_command_line_picks_the_device_and_refuses_a_missing_gpu(
        tmp_path, monkeypatch, capsys):
    import argparse
    monkeypatch.setenv('GNORM_DATA_MIRROR', str(tmp_path / 'mirror'))
    parser = bench.arguments(argparse.ArgumentParser(), tmp_path / 'out',
                             device='auto', threads=None, checkout=tmp_path)
    args = bench.parse(parser, [])
    assert args.device == ('cuda' if torch.cuda.is_available() else 'cpu')
    assert (args.out, args.mirror, args.root, args.report_only) == (
        str(tmp_path / 'out'), str(tmp_path / 'mirror'),
        str(tmp_path / 'data'), False)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    with pytest.raises(SystemExit):
        bench.parse(parser, ['--device', 'cuda'])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith('--device cuda: torch sees no CUDA device; run on '
                          'a GPU machine or pass --device cpu')


def test_measure_into_starts_the_file_anew_and_report_only_measures_nothing(
        tmp_path):
    import argparse
    path = tmp_path / 'rows.jsonl'
    path.write_text('{"k": 0}\n')
    never = (1 / 0 for _ in range(1))  # measuring a row would raise
    bench.measure_into(argparse.Namespace(report_only=True), path, never,
                       key=lambda r: r['k'])
    assert path.read_text() == '{"k": 0}\n'
    bench.measure_into(argparse.Namespace(report_only=False), path,
                       iter([{'k': 1}, {'k': 2}]), key=lambda r: r['k'])
    assert bench.read_jsonl(path) == [{'k': 1}, {'k': 2}]


def test_attempt_records_why_a_cell_has_no_result(capsys):
    row = {}
    assert bench.attempt(row, lambda: 42) == 42 and row == {}

    def out_of_memory():
        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate')

    def broken():
        raise ValueError('stride 36\nsecond line')

    assert bench.attempt(row, out_of_memory) is None
    assert row == {'status': 'out of memory'}
    assert bench.attempt(row, broken) is None
    assert row == {'status': 'failed: ValueError: stride 36 second line'}
    assert 'Traceback' in capsys.readouterr().err
