import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / 'README.md'


def test_readme_python_example_runs():
    blocks = re.findall(r'```python\n(.*?)```', README.read_text(), re.S)
    assert blocks, 'README has no python example'
    for block in blocks:
        exec(compile(block, str(README), 'exec'), {})


def test_ci_runs_the_readme_test_command():
    text = README.read_text()
    ci = (README.parent / '.ci' / 'run').read_text()
    command = ci.strip().splitlines()[-1]
    assert command in text
