r"""The Python snippets of README.md and of the guides in docs/ run, and
print what they say they print.

A ```python block (README) or ``.. code-block:: python`` (docs) is run as is;
a ```pycon / ``.. code-block:: pycon`` block is a doctest session, its
printed output compared. The snippets of one file run in order in one
namespace, as a reader would paste them."""
import doctest
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / 'README.md'
# The guides that hold Python snippets.
GUIDES = [page for page in sorted((ROOT / 'docs').glob('*.rst'))
          if '.. code-block:: py' in page.read_text()]
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def markdown_snippets(text):
    r"""``(language, code, line)`` of the python/pycon blocks of Markdown."""
    return [(m.group(1), m.group(2), text.count('\n', 0, m.start()) + 2)
            for m in re.finditer(r'^```(python|pycon)\n(.*?)^```', text,
                                 re.S | re.M)]


def rst_snippets(text):
    r"""``(language, code, line)`` of the python/pycon code blocks of rst:
    the indented lines after the directive (blank lines inside kept)."""
    found = []
    for m in re.finditer(r'^\.\. code-block:: (python|pycon)\n\n'
                         r'((?:[ \t]+\S.*\n|[ \t]*\n)+)', text, re.M):
        code = textwrap.dedent(m.group(2)).strip('\n') + '\n'
        found.append((m.group(1), code, text.count('\n', 0, m.start()) + 3))
    return found


def run_snippets(path, snippets):
    namespace = {}
    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    for language, code, line in snippets:
        if language == 'python':
            exec(compile('\n' * (line - 1) + code, str(path), 'exec'),
                 namespace)
            continue
        test = doctest.DocTestParser().get_doctest(
            code, namespace, f'{path.name}:{line}', str(path), line - 1)
        runner.run(test, clear_globs=False)
        namespace.update(test.globs)  # a DocTest runs in a copy
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f'{path.name}: {result.failed} example(s) ' \
                               f'printed something else (see above)'


def test_readme_snippets_run_and_print_what_they_say():
    snippets = markdown_snippets(README.read_text())
    assert any(language == 'pycon' for language, _, _ in snippets), \
        'README has no doctested example'
    run_snippets(README, snippets)


@pytest.mark.parametrize('page', GUIDES, ids=[p.name for p in GUIDES])
def test_docs_snippets_run_and_print_what_they_say(page):
    run_snippets(page, rst_snippets(page.read_text()))


def test_the_snippet_parsers_find_every_block():
    md = "x\n```python\na = 1\n```\n```bash\nls\n```\n```pycon\n>>> a\n1\n```\n"
    assert [(lang, line) for lang, _, line in markdown_snippets(md)] == \
        [('python', 3), ('pycon', 9)]
    rst = ("x\n\n.. code-block:: python\n\n   a = 1\n\n   b = 2\n\n"
           ".. code-block:: bash\n\n   ls\n")
    assert rst_snippets(rst) == [('python', 'a = 1\n\nb = 2\n', 5)]


def test_ci_runs_the_readme_test_command():
    text = README.read_text()
    ci = (README.parent / '.ci' / 'run').read_text()
    command = ci.strip().splitlines()[-1]
    assert command in text


def test_contranorm_defaults_of_the_class_and_the_command_line_are_said():
    r"""``ContraNorm(32)`` contrasts with all nodes, ``norm=contranorm``
    with non-neighbours only: README and docs/training.rst say so where
    they introduce them, naming both values."""
    import inspect
    from conftest import compose_train
    from gnorm.nn import ContraNorm
    layer = inspect.signature(ContraNorm).parameters['negatives'].default
    command_line = compose_train('norm=contranorm').norm.negatives
    assert (layer, command_line) == ('all', 'non_neighbors')
    readme = ' '.join(README.read_text().split())
    assert f"`ContraNorm(32)` contrasts with all nodes (`negatives='{layer}'`" \
        in readme
    assert f'`norm=contranorm` on the command line ' \
        f'(`conf/norm/contranorm.yaml`) is the authors\' graph variant, ' \
        f'`negatives: {command_line}`' in readme
    training = ' '.join((ROOT / 'docs' / 'training.rst').read_text().split())
    assert f"``contranorm`` is the authors' graph variant, ``negatives: " \
        f"{command_line}``" in training
    assert f"(``negatives='{layer}'``, the paper's equations)" in training


def test_two_commands_say_what_the_mirror_is_and_how_long_the_run_takes():
    r"""The main command's ``GNORM_DATA_MIRROR=../shared/data`` is the CI's
    layout: the README says what the folder is and how to do without it,
    and how many epochs the command trains and how to train fewer (an
    override that works)."""
    from conftest import compose_train
    from gnorm.train import check_keys
    text = README.read_text()
    section = text[text.index('## Two commands'):
                   text.index('## Layers in your own PyG model')]
    words = ' '.join(section.split())
    assert 'GNORM_DATA_MIRROR=../shared/data python -m gnorm.train' in words
    assert "`GNORM_DATA_MIRROR=../shared/data` is where this repository's " \
        "CI keeps" in words
    assert 'laid out as PyG and OGB expect' in words
    assert '[docs/data.rst](docs/data.rst)' in words
    epochs = compose_train('dataset=cora', 'layers=32',
                           'norm=contranorm').train.epochs
    assert f'The main command trains {epochs} epochs' in words
    shorter = re.search(r'add `(train\.epochs=\d+)` for a quick look',
                        words).group(1)
    check_keys([shorter])
    assert compose_train(shorter).train.epochs < epochs
