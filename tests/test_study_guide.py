r"""The worked example of docs/study.rst runs as the guide shows it: its
files (the code blocks with a ``:caption:`` naming a file) are taken out of
the page, written to a folder and run with ``python -m gnorm.study``; the
report has the comparison, and a second run trains nothing."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import MIRROR, needs_mirror

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / 'docs' / 'study.rst'


def captioned_files(text):
    r"""``{caption: code}`` of the rst code blocks with a ``:caption:``
    option (the indented lines after the options, blank lines inside
    kept)."""
    found = {}
    for m in re.finditer(r'^\.\. code-block:: \w+\n   :caption: (\S+)\n\n'
                         r'((?:[ \t]+\S.*\n|[ \t]*\n)+)', text, re.M):
        found[m.group(1)] = textwrap.dedent(m.group(2)).strip('\n') + '\n'
    return found


def study(folder, *args):
    env = dict(os.environ, OMP_NUM_THREADS='1', GNORM_DATA_MIRROR=MIRROR,
               PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    proc = subprocess.run([sys.executable, '-m', 'gnorm.study',
                           'my_study.yaml', '--threads', '1', *args],
                          cwd=folder, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:] or proc.stdout[-3000:]
    return proc.stdout


def test_the_guide_names_its_files_and_the_command():
    files = captioned_files(GUIDE.read_text())
    assert set(files) == {'halfnorm.py', 'my_study.yaml'}
    assert 'norm._target_=halfnorm.HalfLN' in files['my_study.yaml']
    assert 'PYTHONPATH=. python -m gnorm.study my_study.yaml --threads 1' \
        in GUIDE.read_text()


def test_the_caption_parser_keeps_blank_lines():
    rst = ('x\n\n.. code-block:: python\n   :caption: a.py\n\n   a = 1\n\n'
           '   b = 2\n\n.. code-block:: bash\n\n   ls\n')
    assert captioned_files(rst) == {'a.py': 'a = 1\n\nb = 2\n'}


@needs_mirror
def test_the_guides_study_runs_and_a_rerun_trains_nothing(tmp_path):
    for name, code in captioned_files(GUIDE.read_text()).items():
        (tmp_path / name).write_text(code)
    out = study(tmp_path)
    assert '16 runs in 6 cells, 0 done, 16 to run' in out
    assert 'report: results/my_study.md' in out
    results = tmp_path / 'results'
    for name in ('my_study.md', 'my_study.csv', 'my_study_depth.png',
                 'my_study_erank.png'):
        assert (results / name).is_file(), name
    report = (results / 'my_study.md').read_text()
    assert '**6 of 6 cells complete**' in report
    assert '## Does mine beat pairnorm and contranorm?' in report
    assert re.search(r'\| cora \| 4 \| too few seeds \(n=2; 5 needed\): '
                     r'no verdict \|', report)
    # what the guide says of the report
    assert 'Protocol, as the runs recorded it: 10 epochs' in report
    assert '| contranorm (default s=1) |' in report
    assert 'flagged: still improving' in report
    assert 'Holm-adjusted over a family of 4' in report
    assert '### mine against pairnorm and contranorm, at equal budgets ' \
        '(secondary view)' in report
    header = (results / 'my_study.csv').read_text().splitlines()[0]
    for other in ('pairnorm', 'contranorm'):
        for column in ('diff', 'lo', 'hi', 'n', 'p', 'p_adj', 'verdict',
                       'naive_lo', 'default_verdict'):
            assert f'vs_{other}_{column}' in header.split(',')
    runs = sorted((tmp_path / 'runs' / 'my_study').glob('*/results.json'))
    assert len(runs) == 16
    before = {p: p.stat().st_mtime_ns for p in runs}
    made = {p: p.read_bytes() for p in results.iterdir()}

    assert '16 runs in 6 cells, 16 done, 0 to run' in study(
        tmp_path, '--dry-run')
    again = study(tmp_path)
    assert '16 done, 0 to run' in again and 'running' not in again
    assert {p: p.stat().st_mtime_ns for p in runs} == before
    assert {p: p.read_bytes() for p in results.iterdir()} == made
