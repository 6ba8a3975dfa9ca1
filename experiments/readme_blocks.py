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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'
# block -> (report, the prefix of the report's line the block quotes).
BLOCKS = {
    'table3-in-words': ('table3_paper.md', 'In words'),
    'table3-fair-in-words': ('table3_fair.md', 'In words'),
    'heterophily-baselines-reading': ('heterophily_baselines.md',
                                      'Against the paper ('),
    'tuned-depth-reading': ('tuned_depth.md', 'On minesweeper, '),
}
# Prefixes that are labels of the report, not words the README quotes.
DROPPED = ('**In words**: ',)
DOCS = ROOT / 'docs' / 'results.rst'
# docs/results.rst's blocks -> (report, the pattern of the words quoted:
# its groups joined by the template).
DOC_BLOCKS = {
    'table3-fair-cells': (
        'table3_fair.md',
        r'\*\*(\d+) of (\d+) cells complete\*\* \(every setting of the '
        r'grid run with every seed\), (\d+) partial, (\d+) missing',
        '{} of {} cells complete, {} partial, {} missing'),
    'sepnorm-reading': ('sepnorm_molhiv_cpu_long.md',
                        r'^\*\*In words\*\*: (.*)$', '{}'),
    'strong-depth-in-words': ('strong_depth.md', r'^(In words \(.*)$', '{}'),
    'filtered-heterophily-reading': ('filtered_heterophily.md',
                                     r'^(Kept on the variants .*)$', '{}'),
}


def reading(report: str, prefix: str) -> str:
    r"""The first line of :obj:`report` (in the results folder) starting
    with :obj:`prefix`, without a label prefix."""
    text = (RESULTS / report).read_text()
    line = next(x for x in text.splitlines() if x.startswith(prefix))
    return line.removeprefix(prefix) if prefix in DROPPED else line


def refreshed(readme: str) -> str:
    r""":obj:`readme` with every block of :data:`BLOCKS` holding its
    report's reading, wrapped at 76 columns (where the block spans lines;
    inline blocks stay inline)."""
    for name, (report, prefix) in BLOCKS.items():
        words = reading(report, prefix)
        pattern = re.compile(f'(<!-- {name} -->)(.*?)(<!-- /{name} -->)',
                             re.S)
        match = pattern.search(readme)
        if match is None:
            continue
        body = ('\n' + textwrap.fill(words, 76, break_on_hyphens=False,
                                        break_long_words=False) + '\n'
                if '\n' in match.group(2) else words)
        readme = (readme[:match.start(2)] + body
                  + readme[match.end(2):])
    return readme


def doc_refreshed(page: str) -> str:
    r""":obj:`page` (docs/results.rst) with every block of
    :data:`DOC_BLOCKS` holding its report's words, wrapped at 74 columns
    and indented as the block's marks are."""
    for name, (report, pattern, template) in DOC_BLOCKS.items():
        found = re.search(pattern, (RESULTS / report).read_text(), re.M)
        words = template.format(*found.groups())
        marks = re.compile(rf'^( *)\.\. {name}\n\n(.*?)\n\n( *)\.\. /{name}$',
                           re.S | re.M)
        match = marks.search(page)
        if match is None:
            continue
        indent = match.group(1)
        body = textwrap.fill(words, 74, initial_indent=indent,
                             subsequent_indent=indent,
                             break_on_hyphens=False, break_long_words=False)
        page = page[:match.start(2)] + body + page[match.end(2):]
    return page


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    args.add_argument('--check', action='store_true',
                      help='change nothing; exit 1 where a block differs')
    args = args.parse_args(argv)
    differ = 0
    for path, refresh in ((ROOT / 'README.md', refreshed),
                          (DOCS, doc_refreshed)):
        before = path.read_text()
        after = refresh(before)
        if after == before:
            continue
        if args.check:
            print(f'{path.relative_to(ROOT)}: blocks differ from the '
                  f'reports; run python experiments/readme_blocks.py',
                  file=sys.stderr)
            differ = 1
        else:
            path.write_text(after)
            print(f'updated {path.relative_to(ROOT)}')
    return differ


if __name__ == '__main__':
    sys.exit(main())
