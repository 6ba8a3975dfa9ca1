r"""experiments/gpu_check.py: the quick check runs every step on the CPU and
writes its report; a step that raises is recorded and the check goes on."""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import experiment, needs_mirror
from gnorm.bench import Budget, pytest_rows

REPO = Path(__file__).resolve().parents[1]


def _records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], {r['step']: r for r in lines[1:]}


@pytest.mark.slow  # ~30 s; the steps' parts are tested one by one below
@needs_mirror
def test_quick_cpu_check_runs_every_step(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, 'experiments/gpu_check.py', '--device', 'cpu',
         '--quick', '--out', str(tmp_path)], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (tmp_path / 'gpu_check_cpu.md').read_text()
    env_line, steps = _records(tmp_path / 'gpu_check_cpu.jsonl')
    assert list(steps) == list('abcdef')
    assert steps['a']['status'] == 'skipped: no device'
    for key in 'bcdef':
        assert steps[key]['status'] == 'ok', steps[key]
        assert steps[key]['rows'], key
    for key, record in steps.items():
        assert f'## {key}. {record["title"]}: {record["status"]}' in report
    assert env_line['device_name'] in report
    assert f'torch {torch.__version__}' in report
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    assert f'gnorm commit: {commit}' in report
    # Figures, not only headings: a layer time, a throughput, the table.
    assert any(r.get('ms', 0) > 0 for r in steps['b']['rows'])
    assert any(r.get('graphs_per_s', 0) > 0 for r in steps['d']['rows'])
    assert steps['f']['rows'][0]['runs'] == 8
    assert steps['f']['rows'][0]['table_h'] > 0


def test_a_failing_step_is_recorded_and_the_check_goes_on(tmp_path):
    check = experiment('gpu_check')
    ran = []

    def fine(ctx, budget):
        ran.append('fine')
        return dict(rows=[dict(x=1.5)], notes=['a note'])

    def broken(ctx, budget):
        ran.append('broken')
        raise RuntimeError('the device fell over\nsecond line')

    def later(ctx, budget):
        ran.append('later')
        return dict(status='skipped: nothing to do')

    steps = [check.Step('a', 'first', 5, 1, fine),
             check.Step('b', 'breaks', 5, 1, broken),
             check.Step('c', 'after', 5, 1, later)]
    ctx = argparse.Namespace(device='cpu', quick=True, out=str(tmp_path))
    env = check.environment(ctx, ['--device', 'cpu', '--quick'])
    records = check.run_steps(steps, ctx, env)
    assert ran == ['fine', 'broken', 'later']
    assert [r['status'] for r in records] == ['ok', 'failed',
                                             'skipped: nothing to do']
    assert records[1]['error'] == ('RuntimeError: the device fell over '
                                   'second line')
    assert all(r['budget_s'] == 1 for r in records)  # the quick budgets
    _, found = _records(tmp_path / 'gpu_check_cpu.jsonl')
    assert [r['status'] for r in found.values()] == [
        r['status'] for r in records]
    # The report records the digest of the GPU-path code it checked.
    assert check.reported_digest(tmp_path / 'gpu_check_cpu.md') == \
        check.gpu_code_digest()
    report = (tmp_path / 'gpu_check_cpu.md').read_text()
    assert '## b. breaks: failed' in report
    assert 'RuntimeError: the device fell over second line' in report
    assert '| 1.5 |' in report and '* a note' in report


def test_the_suite_step_fails_with_its_failing_tests_and_messages():
    output = '\n'.join([
        '..F.', '=== short test summary info ===',
        'FAILED tests/test_cuda.py::test_a[cuda] - RuntimeError: overwritten',
        'ERROR tests/test_cuda.py::test_b[cuda]',
        '1 failed, 2 passed, 1 error in 3.0s'])
    rows, status = pytest_rows(output)
    assert status == 'failed: 2 tests'
    assert rows[0] == dict(summary='1 failed, 2 passed, 1 error in 3.0s',
                           failures=2)
    assert rows[1] == dict(summary='failed',
                           failures='tests/test_cuda.py::test_a[cuda]',
                           message='RuntimeError: overwritten')
    assert rows[2]['failures'] == 'tests/test_cuda.py::test_b[cuda]'
    assert pytest_rows('4 passed in 1.0s') == (
        [dict(summary='4 passed in 1.0s', failures=0)], 'ok')


def test_a_failing_graphormer_setting_is_recorded_and_the_others_run(
        monkeypatch):
    from experiments.cases import graphormer as cases
    check = experiment('gpu_check')
    measured = []

    def measure(name, batch, dtype, norm, **kwargs):
        measured.append((name, dtype))
        if dtype == 'float32':
            raise AssertionError('expected stride 36\nsecond line')
        return 'result'

    monkeypatch.setattr(cases, 'measure', measure)
    monkeypatch.setattr(cases, 'row', lambda *a, **k: dict(
        step_s=0.1, data_s=0.01, graphs_per_s=10.0, model_graphs_per_s=11.0,
        mean_nodes=20.0, peak_gib=0.1))
    ctx = argparse.Namespace(device='cpu', quick=True, mirror=None)
    found = check.graphormer(ctx, Budget(60))
    assert measured == [('zinc', 'float32'), ('zinc', 'bfloat16')]
    statuses = [r['status'] for r in found['rows']]
    assert statuses[:2] == ['failed: AssertionError: expected stride 36 '
                            'second line', 'ok']
    assert found['status'] == 'failed: 1 of 8 settings'


@pytest.mark.parametrize('plugin', ['no:xdist', 'xdist'])
def test_the_cuda_suite_collects_with_and_without_pytest_xdist(plugin):
    r"""The GPU machine may lack pytest-xdist (tests/conftest.py runs the
    tests in parallel only where it is installed): the CUDA suite the check
    runs collects either way."""
    if plugin == 'xdist':
        pytest.importorskip('xdist')
    proc = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', plugin, '-m', 'cuda',
         '--collect-only', '-q', '-p', 'no:cacheprovider',
         'tests/test_cuda.py'], cwd=REPO, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'test_graphed_node_training_equals_eager[cuda]' in proc.stdout
