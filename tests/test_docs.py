r"""The documentation builds without a warning: broken cross-references,
malformed docstrings (the API pages are generated from them) and rst errors
fail here, as ``sphinx-build -W`` would on a docs host."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / 'docs'


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip('sphinx', reason='the docs build needs Sphinx: '
                        'pip install -e ".[docs]" (the test extra has it)')
    env = dict(os.environ, OMP_NUM_THREADS='1')  # autodoc imports torch
    proc = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q',
         '-b', 'html', '-d', str(tmp_path / 'doctrees'), str(DOCS),
         str(tmp_path / 'html')],
        capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr or proc.stdout
    html = (tmp_path / 'html' / 'api' / 'nn.html').read_text()
    assert 'gnorm.nn.ContraNorm' in html and 'class="math' in html
    api = {p.name: p.read_text() for p in (tmp_path / 'html' / 'api').iterdir()
           if p.suffix == '.html'}
    # Command lines paste as typed: --by, not an en dash.
    results = api['results.html']
    text = re.sub(r'<[^>]+>', '', results)  # what a reader copies
    assert 'python -m gnorm.results multirun/table3_paper --by dataset.name' \
        in text
    assert '\u2013by' not in results
    # No signature shows where the docs were built.
    root = str(DOCS.parent)
    assert not [name for name, text in api.items()
                if root in text or 'PosixPath' in text]
    # The pages list what a user calls, not the command line's helpers.
    assert 'id="gnorm.train.train"' in api['train.html']
    assert 'id="gnorm.train.check_choices"' not in api['train.html']
    assert 'id="gnorm.results.aggregate"' in results
    assert 'id="gnorm.results.differing_keys"' not in results
    # Every module of gnorm.study has its section, the statistics included.
    from gnorm.study import __doc__ as study_doc
    study = api['study.html']
    for module in re.findall(r':mod:`~(gnorm\.study\.\w+)`', study_doc):
        assert f'id="module-{module}"' in study, module
    assert 'id="gnorm.study.stats.paired_interval"' in study


def test_the_guides_show_the_study_command_not_the_old_scripts():
    r"""``experiments/table3.py`` and ``experiments/sepnorm.py`` are
    aliases kept for typed commands; the guides show ``python -m
    gnorm.study <experiment>``."""
    pages = {p.name: p.read_text() for p in DOCS.glob('*.rst')}
    assert not [name for name, text in pages.items()
                if 'table3.py' in text or 'sepnorm.py' in text]
    for experiment in ('table3_paper', 'table3_fair', 'sepnorm_molhiv',
                       'sepnorm_molhiv_cpu', 'sepnorm_molhiv_cpu_long'):
        assert f'python -m gnorm.study {experiment}' in ''.join(
            pages.values()), experiment
