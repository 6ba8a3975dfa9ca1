import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What a wheel is built from (a copy, so the checkout gets no build/).
SOURCES = ('pyproject.toml', 'setup.py', 'README.md', 'LICENSE', 'gnorm',
           'conf', 'hydra_plugins')


def _run(*cmd, cwd, env=None):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_wheel_installs_and_runs_outside_the_repository(tmp_path):
    # Build the wheel from a copy of the sources.
    src = tmp_path / 'src'
    src.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, src / name,
             **({'ignore': shutil.ignore_patterns('__pycache__')}
                if (REPO / name).is_dir() else {}))
    _run(sys.executable, '-m', 'pip', 'wheel', '--no-deps',
         '--no-build-isolation', '-w', tmp_path / 'dist', src, cwd=tmp_path)
    wheel, = (tmp_path / 'dist').glob('gnorm-*.whl')

    # A fresh environment: its own site-packages get the wheel; torch & co.
    # come from this environment's site-packages through a .pth file (its
    # own .pth files, among them gnorm's editable install, are not run).
    venv = tmp_path / 'venv'
    _run(sys.executable, '-m', 'venv', '--without-pip', venv, cwd=tmp_path)
    python = venv / 'bin' / 'python'
    site = Path(_run(python, '-c', 'import sysconfig; print(sysconfig.'
                     'get_paths()["purelib"])', cwd=tmp_path).stdout.strip())
    (site / 'deps.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
    _run(sys.executable, '-m', 'pip', '--python', python, 'install',
         '--no-deps', '--no-index', wheel, cwd=tmp_path)

    assert (site / 'gnorm' / 'conf' / 'train.yaml').is_file()
    assert (site / 'gnorm' / 'conf' / 'norm' / 'contranorm.yaml').is_file()

    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}

    job = ['dataset=csbm', 'layers=2', 'train.epochs=2']
    _run(python, '-m', 'gnorm.train', *job, 'hydra.run.dir=a',
         cwd=elsewhere, env=env)
    script = venv / 'bin' / 'gnorm-train'
    _run(script, *job, 'hydra.run.dir=b', cwd=elsewhere, env=env)
    for run in ('a', 'b'):
        assert '"status": "ok"' in (elsewhere / run / 'results.json'
                                    ).read_text()
    help = _run(script, '--help', cwd=elsewhere, env=env).stdout
    assert 'layers' in help and 'csbm' in help
