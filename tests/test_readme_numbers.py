r"""The main command's report and the README's numbers come from the
committed runs."""
import re
from pathlib import Path

import pytest

from conftest import experiment

ROOT = Path(__file__).resolve().parents[1]
main_command = experiment('main_command')


def test_committed_report_is_generated_from_the_committed_runs():
    assert main_command.report(main_command.RUNS) == \
        main_command.OUT.read_text()


def test_readme_quotes_the_first_folder_of_the_report():
    r"""The README's main-command numbers are those of the report's first
    table (the main command with today's code), ContraNorm and none."""
    readme = (ROOT / 'README.md').read_text()
    quoted = re.search(r'<!-- main-command-numbers -->(.*?)<!-- /main-command'
                       r'-numbers -->', readme, re.S).group(1)
    first = main_command.OUT.read_text().split('\n## ')[1]
    for norm in ('contranorm', 'none'):
        row = next(line for line in first.splitlines()
                   if f'| {norm} |' in line)
        test_acc = re.findall(r'(\d+\.\d\d ± \d+\.\d\d)', row)[0]
        assert test_acc in ' '.join(quoted.split()), (norm, test_acc)


def test_readme_says_what_the_quoted_folder_holds():
    r"""The README's description of ``main_b2b073a`` is what its runs
    record: 6 runs, 32 layers, dropout 0.2, seeds 0-2; the other folders
    it names exist."""
    from gnorm.results import load_runs, value
    page = ' '.join((ROOT / 'docs' / 'training.rst').read_text().split())
    runs = load_runs(main_command.RUNS / 'main_b2b073a')
    assert f'main_b2b073a``: its {len(runs)} runs, ContraNorm and no norm ' \
        'at 32 layers, dropout 0.2, seeds 0-2.' in page
    assert {value(r, 'layers') for r in runs} == {32}
    assert {value(r, 'model.dropout') for r in runs} == {0.2}
    assert sorted({value(r, 'seed') for r in runs}) == [0, 1, 2]
    assert sorted(p.name for p in main_command.RUNS.iterdir()) == [
        'main_b2b073a', 'p2a', 'p3none', 'p4two', 'p5main']
    for name in ('p2a', 'p3none', 'p4two', 'p5main'):
        assert f'``{name}``' in page


def test_bad_runs_folder_is_one_line(tmp_path, capsys):
    assert main_command.main(['--runs', str(tmp_path / 'missing')]) == 2
    assert capsys.readouterr().err.startswith('error: no such folder')


@pytest.mark.parametrize('name,block,page', [
    ('table3_paper', 'table3-in-words', 'docs/results.rst'),
    ('table3_fair', 'table3-fair-in-words', 'README.md')])
def test_readme_says_where_contranorm_beats_the_other_rows(name, block, page):
    r"""The Table 3 sentences of the README and the results page are the
    committed reports' generated "In words" paragraphs (complete cells
    only, Holm-adjusted p, the tuned comparison)."""
    report = (ROOT / 'experiments' / 'results' / f'{name}.md').read_text()
    words = next(line for line in report.splitlines()
                 if line.startswith('In words'))
    assert _quoted(block, page) == words


def _quoted(name, page='README.md'):
    r"""The generated block :obj:`name` of :obj:`page`, its whitespace
    normalised: between ``<!-- name -->`` and ``<!-- /name -->`` in
    Markdown, between the comments ``.. name`` and ``.. /name`` in rst."""
    text = (ROOT / page).read_text()
    marks = (f'<!-- {name} -->(.*?)<!-- /{name} -->' if page.endswith('.md')
             else rf'^\s*\.\. {name}\n(.*?)^\s*\.\. /{name}\n')
    return ' '.join(re.search(marks, text, re.S | re.M).group(1).split())


def test_results_page_says_how_the_authors_speed_compares():
    r"""The README's sentence on the time per run of the authors' code and
    gnorm is the committed ``authors_vs_gnorm.md``'s, word for word."""
    report = (ROOT / 'experiments' / 'results' / 'authors_vs_gnorm.md'
              ).read_text()
    words = next(line for line in report.splitlines()
                 if line.startswith('Time per run: '))
    assert _quoted('authors-speed', 'docs/results.rst') == \
        words.removeprefix('Time per run: ')


def test_results_page_says_how_complete_the_fair_table_is():
    r"""The README's line for ``table3_fair.md`` quotes the report's count
    of complete, partial and missing cells, and calls the table not
    finished while cells are partial or missing."""
    report = (ROOT / 'experiments' / 'results' / 'table3_fair.md'
              ).read_text()
    done, cells, partial, missing = re.search(
        r'\*\*(\d+) of (\d+) cells complete\*\* \(every setting of the '
        r'grid run with every seed\), (\d+) partial, (\d+) missing',
        report).groups()
    assert _quoted('table3-fair-cells', 'docs/results.rst') == (
        f'{done} of {cells} cells complete, {partial} partial, {missing} '
        f'missing')
    item = (ROOT / 'docs' / 'results.rst').read_text().split(
        '- ``table3_fair.md``')[1].split('.. table3-fair-cells')[0]
    assert ('not finished' in item) == (done != cells)


def _numbers(text):
    return re.findall(r'\d+(?:\.\d+)?', text)


def test_graphormer_page_speed_comes_from_the_committed_benchmark():
    r"""The README's Graphormer step times and speed-ups are those of the
    committed side-by-side benchmark (process CPU time of the model step,
    LayerNorm and SepNorm, before and after)."""
    table = (ROOT / 'experiments' / 'results' /
             'bench_graphormer_cpu_vs_b2b073a.md').read_text()
    model_time = table.split('## Model time')[1]

    def cells(dataset, norm):  # CPU ms before, after, CPU-time speedup
        line = next(row for row in model_time.splitlines() if row.startswith(
            f'| {dataset} | float32 | {norm} | shuffle | 128 |'))
        return line.strip(' |').split(' | ')[-3:]
    for dataset, text in zip(('zinc', 'molhiv'),
                             _quoted('graphormer-speed',
                                     'docs/graphormer.rst').split(';')):
        ln, sep = cells(dataset, 'layernorm'), cells(dataset, 'sepnorm')
        assert _numbers(text)[-6:] == [
            ln[0], sep[0], ln[1], sep[1], ln[2][:-1], sep[2][:-1]]


@pytest.mark.parametrize('marker, name, columns, column', [
    ('graphormer-parts', 'bench_graphormer_parts_cpu.md', 2, -1),
    ('graphormer-linear', 'bench_graphormer_parts_cpu.md', 2, -2),
    ('graphormer-runs', 'bench_graphormer_runs_cpu.md', 3, -1)])
def test_graphormer_page_ratio_ranges_come_from_the_committed_benchmarks(
        marker, name, columns, column):
    r"""The README's range of a benchmark's ratios is the lowest and the
    highest ratio (:obj:`column`) of its committed table's rows."""
    table = (ROOT / 'experiments' / 'results' / name).read_text()
    row = r'\| \w+ ' * columns + r'\| \d'
    ratios = [float(line.strip(' |').split(' | ')[column][:-1])
              for line in table.splitlines() if re.match(row, line)]
    low, high = _numbers(_quoted(marker, 'docs/graphormer.rst'))[:2]
    assert (float(low), float(high)) == (min(ratios), max(ratios))


def test_readme_sepnorm_reading_is_the_reports():
    r"""The results page's reading of the long SepNorm comparison is the
    report's in-words sentence, which follows its rows' readings."""
    report = (ROOT / 'experiments' / 'results' /
              'sepnorm_molhiv_cpu_long.md').read_text()
    (words, ) = [line.removeprefix('**In words**: ')
                 for line in report.splitlines()
                 if line.startswith('**In words**: ')]
    assert _quoted('sepnorm-reading', 'docs/results.rst') == words
    readings = [line.rsplit(' | ', 1)[-1].strip(' |')
                for line in report.split('## Every row')[0].splitlines()
                if line.startswith('| SepNorm')]
    assert len(readings) == 4
    for reading in set(readings):
        assert reading in words


def test_readme_says_where_the_committed_runs_were_made():
    r"""The README's sentence on where the committed results were made
    names every GPU a committed run records, and claims no CPU-only
    history while some run was trained on a GPU."""
    import json
    gpus = set()
    for path in (ROOT / 'experiments' / 'runs').glob('*/**/results.json'):
        text = path.read_text()
        if '"gpu"' in text:
            gpu = json.loads(text).get('machine', {}).get('gpu')
            if gpu:
                gpus.add(gpu)
    readme = ' '.join((ROOT / 'README.md').read_text().split())
    for gpu in gpus:
        assert gpu in readme, gpu
    if gpus:
        assert 'all made on CPUs' not in readme


def test_readme_says_whether_the_verdicts_survive_without_duplicates():
    r"""The results page's reading of the filtered graphs is the committed
    report's generated paragraph on the variants."""
    report = (ROOT / 'experiments' / 'results' / 'filtered_heterophily.md'
              ).read_text()
    words = next(line for line in report.splitlines()
                 if line.startswith('Kept on the variants'))
    assert _quoted('filtered-heterophily-reading',
                   'docs/results.rst') == words


def test_readme_is_a_front_page():
    r"""At most 150 lines, no commit hashes or run-folder names: those
    live in the docs and the reports."""
    readme = (ROOT / 'README.md').read_text()
    assert len(readme.splitlines()) <= 150
    assert not re.search(r'\b[0-9a-f]{7,40}\b', readme)
    assert 'experiments/runs' not in readme
    for name in ('main_b2b073a', 'p5main', 'p4two', 'p3none', 'p2a'):
        assert name not in readme


def test_every_readme_block_is_its_reports_reading():
    r"""Every generated block of the README and of docs/results.rst
    (experiments/readme_blocks.py: the Table 3 readings, the filtered
    graphs, the residual baselines, the depth question against them...)
    holds its report's words, word for word;
    ``python experiments/readme_blocks.py`` rewrites them."""
    blocks = experiment('readme_blocks')
    for page in blocks.PAGES:
        for name, block in page.blocks.items():
            assert _quoted(name, page.path) == ' '.join(
                block.words().split()), (page.path, name)
    assert blocks.main(['--check']) == 0


def test_a_stale_block_is_found_and_rewritten(tmp_path, monkeypatch):
    r"""``--check`` fails on a page whose block no longer says what its
    report says, and a rewrite restores the report's words, wrapped."""
    blocks = experiment('readme_blocks')
    readme = (ROOT / 'README.md').read_text()
    stale = re.sub(r'(<!-- tuned-depth-reading -->).*?(<!-- /tuned-depth)',
                   r'\1\nold words\n\2', readme, flags=re.S)
    (tmp_path / 'README.md').write_text(stale)
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'results.rst').write_text(
        (ROOT / 'docs' / 'results.rst').read_text())
    monkeypatch.setattr(blocks, 'ROOT', tmp_path)
    assert blocks.main(['--check']) == 1
    assert blocks.main([]) == 0
    assert (tmp_path / 'README.md').read_text() == readme
