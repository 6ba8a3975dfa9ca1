r"""experiments/gpu_window.py: the GPU check, then the GPU queue for the
time left, into one folder as it goes; ``--bring-back`` copies the runs
into the studies' runs folders, rewrites their reports, copies the
check's report and writes the GPU's calibration."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import experiment, needs_mirror
from gnorm.results import load_runs
from gnorm.study.queue import config as queue_config
from gnorm.study.runs import record as queue_record
from gnorm.study.spec.load import load_spec
from test_queue import NAME, tiny_spec

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures('one_thread')


def test_a_window_packs_its_runs_and_they_come_back(tmp_path, monkeypatch,
                                                    capsys):
    window = experiment('gpu_window')
    spec = load_spec(str(tiny_spec(tmp_path / 'study')))
    checks = []

    def check(args, seconds):  # the check's report, at once
        checks.append(seconds)
        (args.out / 'gpu_check_cpu.md').write_text('# gnorm GPU check\n')
        return 0

    monkeypatch.setattr(window, 'run_check', check)
    (tmp_path / 'tmp').mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp'))
    out = tmp_path / 'window'
    assert window.main(['--device', 'cpu', '--quick', '--work', 'gpu',
                        '--pack', '--out', str(out), '--budget-s', '300',
                        '--threads', '1'], [spec]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert said[-1] == ('bring the results back: python '
                        f'experiments/gpu_window.py --bring-back {out}')
    assert 'trained 2 cells' in said[-2] and 299 < checks[0] <= 300
    # a device that sends back a few flat files gets them all
    assert sorted(p.name for p in out.iterdir()) == ['gpu_check_cpu.md',
                                                     'runs.tgz']
    assert window.packed_runs(out).parent.parent == tmp_path / 'tmp'
    results, config = tmp_path / 'results', tmp_path / 'queue.yaml'
    results.mkdir()
    shutil.copy(queue_config.CONFIG, config)
    assert window.bring_back(out, [spec], results, config) == 0
    runs = load_runs(spec.runs_dir())
    assert len(runs) == 4 and {r['status'] for r in runs} == {'ok'}
    report = (spec.out_dir() / f'{NAME}.md').read_text()
    assert '**2 of 4 cells complete**' in report
    assert (results / 'gpu_check_cpu.md').is_file()
    assert config.read_text() == queue_config.CONFIG.read_text()  # a CPU's: none
    stamps = {r['_path']: Path(r['_path']).stat().st_mtime_ns for r in runs}
    assert window.bring_back(out, [spec], results, config) == 0
    assert {p: Path(p).stat().st_mtime_ns for p in stamps} == stamps
    # a second window into the same folder, on a fresh temporary folder
    # (another device): it reads the archive first, trains nothing twice,
    # and the archive keeps every run
    (tmp_path / 'tmp2').mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path / 'tmp2'))
    before = _archived(out / 'runs.tgz')
    assert window.main(['--device', 'cpu', '--quick', '--work', 'gpu',
                        '--pack', '--out', str(out), '--budget-s', '300',
                        '--threads', '1'], [spec]) == 0
    said = capsys.readouterr().out
    assert 'trained 0 cells' in said and 'go on from' in said
    assert _archived(out / 'runs.tgz') == before and len(before) == 4


def _archived(archive):
    r"""The finished runs' result files an archive holds."""
    import tarfile
    with tarfile.open(archive) as tar:
        return sorted(n for n in tar.getnames()
                      if n.endswith('results.json'))


def test_the_calibration_of_a_gpu_goes_into_the_config(tmp_path):
    window = experiment('gpu_window')
    config = tmp_path / 'queue.yaml'
    shutil.copy(queue_config.CONFIG, config)
    for name, seconds in (('GPU A', 20.0), ('GPU B', 5.0), ('GPU A', 40.0)):
        (tmp_path / queue_record.RECORD).write_text(json.dumps({
            name: dict(device='cuda', seconds=seconds, units=1e10),
            'a CPU': dict(device='cpu', seconds=1.0, units=1.0)}))
        assert window.calibrate(tmp_path, config) == {name: seconds / 1e10}
    found = queue_config.read_config(config)
    assert found['calibration'] == {'GPU B': 5e-10, 'GPU A': 4e-9}
    assert list(found['calibration'])[-1] == 'GPU A'
    assert found['priority'] == queue_config.read_config(queue_config.CONFIG)['priority']


def test_a_check_over_the_budget_is_cut_off(tmp_path):
    window = experiment('gpu_window')
    args = window.parser().parse_args(['--device', 'cpu', '--quick',
                                       '--out', str(tmp_path)])
    assert window.run_check(args, 0.5) == 124
    assert window.run_check(args, 0) == 0  # no time: not started


@pytest.mark.slow  # ~70 s on 2 busy cores: the quick GPU check, then the queue
@needs_mirror
def test_a_window_on_the_cpu(tmp_path):
    spec = tiny_spec(tmp_path / 'study')
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(REPO))
    out = tmp_path / 'window'
    proc = subprocess.run(
        [sys.executable, 'experiments/gpu_window.py', '--device', 'cpu',
         '--quick', '--out', str(out), '--budget-s', '500', '--studies',
         str(spec), '--work', 'gpu', '--threads', '1'], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith(
        'bring the results back: python experiments/gpu_window.py '
        '--bring-back ')
    steps = [json.loads(line) for line in
             (out / 'gpu_check_cpu.jsonl').read_text().splitlines()[1:]]
    assert [s['step'] for s in steps] == list('abcdef')
    runs = load_runs(out / 'runs')
    assert len(runs) == 4 and {r['status'] for r in runs} == {'ok'}


def test_the_window_runs_the_full_check_where_gpu_code_changed(tmp_path):
    gpu_window = experiment('gpu_window')
    check = experiment('gpu_check')
    args = gpu_window.parser().parse_args(['--out', str(tmp_path)])
    args.device = 'cuda'
    report = tmp_path / 'gpu_check_cuda.md'
    quick, why = gpu_window.check_kind(args, tmp_path)
    assert not quick and 'records no GPU-path code digest' in why
    digest = check.gpu_code_digest()
    report.write_text(f'# gnorm GPU check (cuda)\n\n* {check.DIGEST}: '
                      f'{digest}\n')
    assert check.reported_digest(report) == digest
    assert gpu_window.check_kind(args, tmp_path) == (
        True, f'the GPU-path code is that of gpu_check_cuda.md ({digest}): '
        'the quick check')
    report.write_text(f'* {check.DIGEST}: 0000000000000000\n')
    quick, why = gpu_window.check_kind(args, tmp_path)
    assert not quick and 'changed since gpu_check_cuda.md' in why
    forced = gpu_window.parser().parse_args(['--out', str(tmp_path),
                                             '--quick'])
    forced.device = 'cuda'
    assert gpu_window.check_kind(forced, tmp_path) == (True, '--quick')


def test_the_digest_follows_the_gpu_path_code(tmp_path):
    check = experiment('gpu_check')
    for name in check.GPU_PATHS:
        path = tmp_path / name
        if name.endswith('.py'):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('x = 1\n')
        else:
            path.mkdir(parents=True)
            (path / 'a.py').write_text('x = 1\n')
    before = check.gpu_code_digest(tmp_path)
    (tmp_path / 'gnorm' / 'nn' / 'a.py').write_text('x = 2\n')
    assert check.gpu_code_digest(tmp_path) != before
    (tmp_path / 'gnorm' / 'nn' / 'a.py').write_text('x = 1\n')
    (tmp_path / 'gnorm' / 'study.py').write_text('not GPU code\n')
    assert check.gpu_code_digest(tmp_path) == before


def test_the_queue_replays_cuda_graphs_where_the_cuda_suite_passed(
        tmp_path):
    r"""The window's queue replays its steps as CUDA graphs on CUDA where
    this window's CUDA suite (which holds the graphed step's equality test)
    ran and passed; else, or with ``--eager``, it trains eagerly."""
    window = experiment('gpu_window')
    args = window.parser().parse_args(['--out', str(tmp_path)])
    args.device = 'cuda'
    assert window.graphed(args) == (
        False, 'this window ran no CUDA suite: eager steps')
    record = tmp_path / 'gpu_check_cuda.jsonl'
    for status, replay in (('ok', True), ('failed: 1 tests', False)):
        record.write_text(json.dumps(dict(step='environment')) + '\n'
                          + json.dumps(dict(step='a', status=status)) + '\n')
        assert window.graphed(args)[0] is replay
    assert 'the CUDA suite failed: 1 tests' in window.graphed(args)[1]
    record.write_text(json.dumps(dict(step='a', status='ok')) + '\n')
    assert '--cuda-graph' in window.queue_args(args, tmp_path, 60.0,
                                               *window.graphed(args)[:1])
    args.eager = True
    assert window.graphed(args) == (False, '--eager')
    args.eager, args.device = False, 'cpu'
    assert window.graphed(args) == (False, 'not on CUDA')
    assert '--cuda-graph' not in window.queue_args(args, tmp_path, 60.0)


@pytest.mark.parametrize('flag,quick', [('--quick', True), ('--full', False)])
def test_the_window_hands_its_check_a_reason_it_can_parse(tmp_path, flag,
                                                          quick):
    r"""With --quick or --full the reason is the flag itself: the check's
    own command line reads it as the reason, not as an option (it exited
    'argument --why: expected one argument')."""
    window, check = experiment('gpu_window'), experiment('gpu_check')
    args = window.parser().parse_args(['--device', 'cpu', flag, '--out',
                                       str(tmp_path)])
    kind, why = window.check_kind(args)
    assert (kind, why) == (quick, flag)
    ctx = check.parser().parse_args(window.check_command(args, kind,
                                                         why)[2:])
    assert (ctx.why, ctx.quick, ctx.device) == (flag, quick, 'cpu')


def test_the_calibration_keeps_the_set_up_of_a_cell(tmp_path):
    r"""A window's cells of 10 s of epochs and 30 s of set-up: the
    calibration it brings back estimates such a cell at 40 s, not 10 s;
    a GPU measured without set-up stays a plain number."""
    from gnorm.study.runs import cost as queue_cost
    window = experiment('gpu_window')
    config = tmp_path / 'queue.yaml'
    shutil.copy(queue_config.CONFIG, config)
    runs, units = tmp_path / 'runs', 1e10
    for name, setup in (('GPU A', 30.0), ('GPU B', 0.0)):
        queue_record.add_cell(runs, name, 'cuda', dict(
            seconds=10.0 + setup, steady_s=10.0, setup_s=setup,
            units=units))
    assert window.calibrate(runs, config) == {'GPU A': 1e-9, 'GPU B': 1e-9}
    assert 'calibration: {"GPU A": {per_unit: 1.0000e-09, setup_s: 30.0}, ' \
        '"GPU B": 1.0000e-09}' in config.read_text()
    found = queue_config.read_config(config)['calibration']
    assert [found[n].setup_s for n in ('GPU A', 'GPU B')] == [30.0, 0.0]
    for name, seconds in (('GPU A', 40.0), ('GPU B', 10.0)):
        rate = queue_cost.rate_of(tmp_path / 'next', name, 'cuda', found,
                                  committed={})
        assert rate.estimate(units) == pytest.approx(seconds)
    # read back and written again: the same line
    before = config.read_text()
    window.calibrate(runs, config)
    assert config.read_text() == before


def _alive(pid):
    r"""Whether the process :obj:`pid` runs (a zombie does not)."""
    try:
        stat = Path(f'/proc/{pid}/stat').read_text()
    except OSError:
        return False
    return stat.rsplit(')', 1)[1].split()[0] not in ('Z', 'X')


def test_sigterm_ends_the_check_and_every_process_it_started(
        tmp_path, monkeypatch, capsys):
    r"""SIGTERM while the check runs: the window ends the check and the
    process the check started (which would outlive both), runs no queue,
    and exits 143."""
    import signal
    import threading
    import time
    window = experiment('gpu_window')
    pids = tmp_path / 'pids'
    check = (  # starts a sleeper that outlives it, says both pids, sleeps
        'import os, subprocess, sys, time\n'
        "sleeper = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(120)'])\n"
        f"open({str(pids) + '.tmp'!r}, 'w').write("
        "f'{os.getpid()} {sleeper.pid}')\n"
        f"os.replace({str(pids) + '.tmp'!r}, {str(pids)!r})\n"
        'time.sleep(120)\n')
    monkeypatch.setattr(window, 'check_command',
                        lambda *a: [sys.executable, '-c', check])
    queued = []
    monkeypatch.setattr(window.queue, 'main',
                        lambda *a: queued.append(a) or 0)

    def terminate():  # once both run; never the default action on pytest
        while not pids.exists():
            time.sleep(0.05)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL,
                                                signal.SIG_IGN):
            os.kill(int(pids.read_text().split()[0]), signal.SIGKILL)
        else:
            os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=terminate, daemon=True).start()
    began = time.monotonic()
    status = window.main(['--device', 'cpu', '--quick', '--out',
                          str(tmp_path / 'window'), '--budget-s', '100'],
                         [load_spec(str(tiny_spec(tmp_path / 'study')))])
    assert status == 143 and queued == []
    assert time.monotonic() - began < 60
    ended = time.monotonic() + 10  # a signalled process exits soon after
    while any(map(_alive, map(int, pids.read_text().split()))) and \
            time.monotonic() < ended:
        time.sleep(0.05)
    assert not any(_alive(int(pid)) for pid in pids.read_text().split())
    assert 'interrupted: what finished is kept' in capsys.readouterr().err
