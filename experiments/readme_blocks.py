r"""Copies the generated readings of the committed reports into the
README's marked blocks (``<!-- name -->...<!-- /name -->``) and those of
docs/results.rst (``.. name`` ... ``.. /name``), so that the front page
and the results page say what the reports say, word for word
(tests/test_readme_numbers.py checks it).

    python experiments/readme_blocks.py          # rewrite the blocks
    python experiments/readme_blocks.py --check  # exit 1 where one differs
"""
import argparse
import re
import sys
import textwrap
from pathlib import Path
from typing import Callable, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'


class Block(NamedTuple):
    r"""What a block quotes: the first match of :obj:`pattern` (a regex,
    line by line) in :obj:`report` (in the results folder), its groups
    joined by :obj:`template`."""
    report: str
    pattern: str
    template: str = '{}'

    def words(self) -> str:
        text = (RESULTS / self.report).read_text()
        found = re.search(self.pattern, text, re.M)
        if found is None:
            raise SystemExit(f'{self.report}: no line matches '
                             f'{self.pattern!r}; regenerate the report')
        return self.template.format(*found.groups())


def _line(prefix: str) -> str:
    r"""The pattern of a whole line starting with :obj:`prefix`."""
    return rf'^({re.escape(prefix)}.*)$'


def _under(heading: str, prefix: str) -> str:
    r"""The pattern of the first whole line starting with :obj:`prefix`
    below the line :obj:`heading`."""
    return rf'^{re.escape(heading)}\n(?:.*\n)*?({re.escape(prefix)}.*)$'


README = {
    'main-command-numbers': Block('main_command.md',
                                  r'^\*\*Reading\.\*\* (.*)$'),
    'table3-fair-in-words': Block('table3_fair.md', _line('In words')),
    'heterophily-baselines-reading': Block('heterophily_baselines.md',
                                           _line('Against the paper (')),
    'tuned-depth-reading': Block('tuned_depth.md', _line('On minesweeper, ')),
    'tuned-depth-lin-verdicts': Block(
        'tuned_depth.md',
        _under('## Does contranorm_lin beat batchnorm?', 'In words (')),
    'contranorm-fidelity-luo': Block(
        'contranorm_fidelity_luo.md',
        r'^In words \(.*?\): against contranorm, contranorm_lin (.*)\.$'),
}
DOCS = {
    'table3-in-words': Block('table3_paper.md', _line('In words')),
    'table3-fair-cells': Block(
        'table3_fair.md',
        r'\*\*(\d+) of (\d+) cells complete\*\* \(every setting of the '
        r'grid run with every seed\), (\d+) partial, (\d+) missing',
        '{} of {} cells complete, {} partial, {} missing'),
    'sepnorm-reading': Block('sepnorm_molhiv_cpu_long.md',
                             r'^\*\*In words\*\*: (.*)$'),
    'strong-depth-in-words': Block('strong_depth.md', _line('In words (')),
    'filtered-heterophily-reading': Block('filtered_heterophily.md',
                                          _line('Kept on the variants ')),
    'contranorm-fidelity-in-words': Block('contranorm_fidelity.md',
                                          _line('In words (')),
    'contranorm-fidelity-luo-in-words': Block('contranorm_fidelity_luo.md',
                                              _line('In words (')),
    'luo-init-full-in-words': Block('luo_init_full.md', _line('In words (')),
}


def _fill(words: str, width: int, indent: str = '') -> str:
    return textwrap.fill(words, width, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False)


def _markdown_body(match: re.Match, words: str) -> str:
    r"""A block spanning lines is wrapped at 76 columns; an inline one
    stays inline."""
    return '\n' + _fill(words, 76) + '\n' if '\n' in match['body'] else words


def _rst_body(match: re.Match, words: str) -> str:
    r"""Wrapped at 74 columns, indented as the block's marks are."""
    return _fill(words, 74, match['indent'])


class Page(NamedTuple):
    r"""A page with blocks: where it is, what its blocks quote, the pattern
    of a block's marks around its ``body`` (``{name}`` the block's name)
    and how a body is laid out."""
    path: str
    blocks: dict
    marks: str
    body: Callable[[re.Match, str], str]


PAGES = (
    Page('README.md', README,
         r'<!-- {name} -->(?P<body>.*?)<!-- /{name} -->', _markdown_body),
    Page('docs/results.rst', DOCS,
         r'^(?P<indent> *)\.\. {name}\n\n(?P<body>.*?)\n\n *\.\. /{name}$',
         _rst_body),
)


def refreshed(page: Page, text: str) -> str:
    r""":obj:`text` (the page's) with every block of the page holding its
    report's words; a block the page lacks is left out."""
    for name, block in page.blocks.items():
        match = re.search(page.marks.format(name=re.escape(name)), text,
                          re.S | re.M)
        if match is not None:
            text = (text[:match.start('body')]
                    + page.body(match, block.words())
                    + text[match.end('body'):])
    return text


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    args.add_argument('--check', action='store_true',
                      help='change nothing; exit 1 where a block differs')
    args = args.parse_args(argv)
    differ = 0
    for page in PAGES:
        path = ROOT / page.path
        before = path.read_text()
        after = refreshed(page, before)
        if after == before:
            continue
        if args.check:
            print(f'{page.path}: blocks differ from the reports; run '
                  f'python experiments/readme_blocks.py', file=sys.stderr)
            differ = 1
        else:
            path.write_text(after)
            print(f'updated {page.path}')
    return differ


if __name__ == '__main__':
    sys.exit(main())
