r"""A depth study's report: ``<name>.md`` (a table per dataset, rows by
depth, footnotes, the comparison of ``table.compare``), ``<name>.csv``
and the plots, from the runs alone: no date, no command line of the
call, so the same runs give the same bytes, and a file that would not
change is not rewritten.

One module: each function renders one part of the one report (header,
tables, footnotes, comparisons, depth's gain, reproduction); they share
the report's labels and its byte-identical layout, and a reader follows
the report from top to bottom here."""
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gnorm.data import leakage_summary
from gnorm.results import code, machines, plural, write_records
from gnorm.study.findings.compare import (BEATS, BOTH_AT_CHANCE, EQUIVALENT,
                                          FEW_SEEDS, LOSES, OVER_CHANCE,
                                          UNCOMMITTED, UNDECIDED, UNDER_CHANCE,
                                          chosen_by_validation)
from gnorm.study.findings.depth import (Counts, DepthFindings, RowSettings,
                                        counts, depth_findings, primary)
from gnorm.study.findings.depth_gain import DepthGain
from gnorm.study.findings.select import TIE
from gnorm.study.reports.plot import plot_depth, plot_erank, save_bytes
from gnorm.study.reports.recipe import protocol_text
from gnorm.study.spec.table import Spec
from gnorm.study.words.flags import MEANING, meaning
from gnorm.study.words.variants import variant_summary, variant_words
from gnorm.study.words.verdicts import (comparison, diagnosis_text,
                                        family_words, p_text, signed, why_text)

__all__ = ['write_report', 'render', 'primary', 'completeness', 'tie_rule']


def _label(record: Dict[str, Any]) -> str:
    of = f", {record['settings']} settings" if record['settings'] > 1 else ''
    if record['selection'] == 'val':
        return f"{record['row']} (chosen by val{of})"
    if record['selection'] == 'test':
        return f"{record['row']} (chosen by test{of}, optimistic)"
    if record['selection'] == 'default':
        return f"{record['row']} (default {record['setting']})"
    return record['row']


def tie_rule(said: str = 'accuracy') -> str:
    r"""How ties are read, for cells scored by :obj:`said`."""
    return (f'Ties: settings whose mean {said} (the one choosing) is '
            'equal tie, compared exactly as numbers of correct nodes over '
            'the split\'s nodes (metrics without counts: equal to '
            f'{TIE:g}); the tie goes to the setting listed '
            'first in the row\'s `table.grid` (for s, the smaller scale), '
            'and the cell shows the tied settings it did not choose with '
            f'their test {said} ("tie, not chosen").')


def _cell(r: Dict[str, Any]) -> str:
    if r['runs'] == 0:
        ours = f"not run: {r['not_run']}" if r.get('not_run') else 'missing'
    else:
        ours = f"{r['test_mean']:.2f} ± {r['test_std']:.2f}"
        if r['runs'] < r['expected']:
            ours += f" ({r['runs']}/{r['expected']} runs)"
        if r['setting'] is not None:
            ours += f", {r['setting']}"
            if r['settings_run'] < r['settings']:
                ours += f" (of {r['settings_run']}/{r['settings']})"
        if r.get('ties'):
            ours += f"<br>tie, not chosen: {r['ties']}"
        if r.get('flags'):
            ours += f"<br>flagged: {', '.join(r['flags'])}"
        ours += chance_text(r)
        if r.get('diagnosis'):
            ours += f"<br>runs: {diagnosis_text(r['diagnosis'], short=True)}"
        if r.get('modified_runs'):
            ours += (f"<br>{r['modified_runs']} of {r['runs']} runs from "
                     f"uncommitted code")
    if r['paper_mean'] is None:
        return ours
    paper = f"paper {r['paper_mean']:.2f} ± {r['paper_std']:.2f}"
    if r['diff'] is None:
        return f'{ours}<br>{paper}'
    return f"{ours}<br>{paper}, Δ {r['diff']:+.2f}"


def chance_text(r: Dict[str, Any]) -> str:
    r"""What a cell's chance screen found, where it is flagged or some of
    its seeds predict one class: the pooled score against chance with its
    z, and how many seeds predict one class (or that its runs record no
    predictions, so that the flag rests on the pooled test alone)."""
    flagged = r['at_chance']
    note = r.get('argmax_note')
    if note:
        return (f"<br>note: {note['seeds']} of {note['runs']} seeds put "
                f"their test nodes in one class by argmax (predicted "
                f"{note['predicted']}, labels {note['labels']}, summed over "
                f"seeds); a ranking score: its ranking test decides chance"
                + (f" (pooled z {r['chance_z']:.2f} against a random "
                   f"ranking)" if r.get('chance_z') is not None else ''))
    if not flagged and not r.get('one_class_seeds'):
        return ''
    parts = []
    if r.get('chance_z') is not None and flagged:
        parts.append(f"pooled z {r['chance_z']:.2f} against chance "
                     f"{r['chance_share']:.2f}")
    if r.get('one_class_seeds') is None:
        parts.append('no predictions recorded: the flag rests on the '
                     'pooled test alone')
    else:
        parts.append(f"{r['one_class_seeds']} of {r['runs']} seeds predict "
                     f"one class")
    return '<br>' + '; '.join(parts)


def chance_lines(cells: List[Dict[str, Any]], said: str) -> List[str]:
    r"""Per dataset, the share of its test nodes in the majority class (a
    random ranking's 50 for ROC-AUC) and the pooled score a complete cell
    of its splits must pass not to be flagged (the first complete cell
    with a screen gives it), then the flagged cells, or that no cell is
    flagged."""
    parts = []
    for dataset in dict.fromkeys(r['dataset'] for r in cells):
        screened = [r for r in cells if r['dataset'] == dataset
                    and r.get('chance_share') is not None]
        if not screened:
            continue
        first = next((r for r in screened if r['complete']), screened[0])
        share = ('a random ranking 50.00' if first['metric'] == 'rocauc'
                 else f"majority class {first['chance_share']:.2f} % of the "
                      "test nodes (pooled over the splits)")
        parts.append(f"{dataset}: {share}; a cell of {first['runs']} seeds "
                     f"is flagged below {first['chance_threshold']:.2f} %")
    if not parts:
        return []
    flagged = [f"{r['dataset']} {r['row']} L={r['layers']}"
               for r in cells if r['at_chance']]
    return ['', f'**Chance** (the screen of each cell\'s seeds pooled, '
            f'test {said}): ' + '; '.join(parts) + '. '
            + (f"Flagged: {', '.join(flagged)}." if flagged
               else 'No cell flagged.')]


def modified_lines(cells: List[Dict[str, Any]]) -> List[str]:
    r"""The cells whose runs include runs of uncommitted code (their
    ``source.modified``): marked, and their verdicts left out of the
    paragraph the README quotes; nothing where there is none."""
    marked = [f"{r['dataset']} {r['row']} L={r['layers']} "
              f"({r['modified_runs']} of {r['runs']})"
              for r in cells if r.get('modified_runs')]
    if not marked:
        return []
    return ['', '**Uncommitted code**: runs made by code with changes '
            'not committed (`source.modified`) at ' + ', '.join(marked)
            + '. A verdict of such a cell is shown in its table but not '
            'in the paragraph in words (the README quotes that paragraph); '
            're-running the runs from a commit lifts the mark.']


def completeness(records: List[Dict[str, Any]]) -> str:
    r"""How many cells of :obj:`records` are complete (every setting of the
    grid with every seed), partial and missing, and how many runs of the
    grid are done."""
    return completeness_words(counts(chosen_by_validation(records)))


def completeness_words(c: Counts) -> str:
    r""":func:`completeness` of the :class:`Counts` :obj:`c`."""
    return (f"**{c.complete} of {c.cells} cells complete** (every setting "
            f"of the grid run with every seed), "
            f"{c.cells - c.complete - c.missing} partial, {c.missing} missing"
            + (f" ({c.not_run} of them not run here: `table.not_run` says "
               f"why, in the cells)" if c.not_run else '') + '; '
            f"{c.runs} of {c.runs_expected} runs of the grid "
            f"done ({c.settings_run} of {c.settings} settings with runs).")


def _coverage(found: DepthFindings) -> str:
    r"""What the report covers: the whole table, or the cells selected."""
    def listed(key):
        return ', '.join(map(str, dict.fromkeys(r[key]
                                                for r in found.records)))
    if found.whole:
        return 'It covers the whole table.'
    return (f"It covers only the selected cells: datasets {listed('dataset')}"
            f"; rows {listed('row')}; depths {listed('layers')}.")


COLUMNS = ['dataset', 'row', 'layers', 'selection', 'setting',
           'settings_run', 'settings', 'runs', 'expected', 'cell_runs',
           'cell_expected', 'complete', 'test_mean', 'test_std', 'val_mean',
           'paper_mean', 'paper_std', 'diff', 'diff_paper_stds', 'note',
           'ties', 'flags', 'one_class_seeds', 'chance_share',
           'chance_threshold', 'chance_z', 'modified_runs', 'test_train',
           'not_run']


def _settings_text(row: RowSettings) -> str:
    r"""``contranorm: norm=contranorm; grid norm.scale ∈ {0.2, 0.5}
    (2 settings, default s=1)``."""
    text = f"{row.row}: `{' '.join(row.overrides)}`"
    if not row.grid:
        return text + ' (1 setting)'
    keys = '; '.join(f"{k} ∈ {{{', '.join(map(str, v))}}}"
                     for k, v in row.grid.items())
    return (f"{text}; grid {keys} ({row.budget} settings"
            + (f', default {row.default}' if row.default else '') + ')')


def run_cell(run: Dict[str, Any]) -> str:
    r"""The cell of the finished run :obj:`run` as the report names it:
    ``csbm mine L=2`` (dataset, row, depth)."""
    config = run.get('config') or {}
    return (f"{(config.get('dataset') or {}).get('name')} "
            f"{config.get('tag')} L={config.get('layers')}")


def header(spec: Spec, found: DepthFindings, counted: List[Dict],
           sets: Sequence[str], command: str) -> List[str]:
    r"""The report's title, where it comes from, its protocol, each row's
    settings and budget, what it counts and how to read a cell."""
    made_by = code(counted, run_cell)
    title = f"# {spec.name}: {default_title(spec, found.score)}"
    if sets:
        title += f" — with {' '.join(sets)}"
    paper = bool(spec.table.get('paper'))
    said = found.score
    lines = [
        title, '',
        f'Generated by `{command}` from the {len(counted)} finished runs in '
        f'`{found.runs}` whose config is one of '
        f"this table's (protocol: `{found.source}`"
        + (f" plus `{' '.join(sets)}`" if sets else '') + '). '
        f'{_coverage(found)} '
        f'Machines: {machines(counted) or "none yet"}.'
        + (f' Code: {made_by}.' if made_by else ''),
        '', protocol_text(counted, found.recipe), '',
        'Rows (overrides; settings tried, each chosen per (dataset, depth) '
        f'by mean validation {said}): '
        + '; '.join(map(_settings_text, found.rows)) + '.',
        *per_dataset_lines(spec), *budget_lines(spec, found.equal_budget),
        *leakage_lines(counted), *chance_lines(found.cells, said),
        *modified_lines(found.cells), '',
        completeness_words(found.counts), '',
        f'Each cell: test {said} (%), mean ± std over seeds (ddof=0)'
        + (", the paper's value and Δ = ours − paper" if paper else '')
        + '. A row with several candidate settings shows the chosen one; '
        '"chosen by val" picks it per (dataset, depth) by mean validation '
        f'{said} (the honest choice), "chosen by test, optimistic" by mean '
        f'test {said}, which is what a table built from test means shows, '
        '"default" is the row at its default setting (the budget-matched '
        'comparison reads it). '
        '"of k/n" = only k of the n settings have runs yet; "missing" = not '
        f'run yet; "flagged" = {_flag_words(said)}. {tie_rule(said)}']
    flag = spec.table.get('flag') or {}
    if flag:
        lines += ['', f"Cells of the rows {', '.join(flag['rows'])} more "
                  f"than {flag['paper_stds']:g} paper standard deviations "
                  'from the paper carry a footnote with what is known about '
                  'them.']
    return lines


def reproduction_lines(found: DepthFindings) -> List[str]:
    r"""With ``table.reproduced`` (:attr:`DepthFindings.reproduction`),
    which cells with a paper value reproduce it, which do not (their
    footnote says what is known) and which are not complete yet."""
    if found.reproduction is None:
        return []
    rule = found.reproduction.rule
    words = {True: 'reproduced', False: 'not reproduced',
             None: 'not complete yet',
             UNCOMMITTED: 'not quoted (runs of uncommitted code)'}
    said = {k: [f"{r['dataset']} {r['row']} L={r['layers']}"
                + (f" ({r['test_mean']:.2f} against {r['paper_mean']:.2f} "
                   f"± {r['paper_std']:.2f})"
                   if r['runs'] and k != UNCOMMITTED else '')
                for r in cells]
            for k, cells in found.reproduction.cells.items()}
    counts_said = ', '.join(f'{len(v)} {words[k]}'
                            for k, v in said.items() if v)
    return ['', '## Against the paper', '',
            f"A complete cell reproduces the paper when its test mean lies "
            f"within {rule['paper_stds']:g} of the paper's standard "
            f"deviations of the paper's mean (accuracy), or within "
            f"{rule['points']:g} points of it (ROC-AUC).", '',
            f"Against the paper ({counts_said}): "
            + '. '.join(f"{words[k].capitalize()}: {'; '.join(v)}"
                        for k, v in said.items() if v) + '.']


# What a row's best depth against its shallowest says of depth;
# {shallow}: the shallowest depth, {margin}: the study's margin.
GAIN_SAID = {BEATS: 'depth pays', LOSES: 'depth costs',
             EQUIVALENT: 'depth changes it by less than {margin} points',
             UNDECIDED: 'undecided at ±{margin}',
             OVER_CHANCE: 'depth pays: L={shallow} is at chance',
             UNDER_CHANCE: 'depth costs: at chance, L={shallow} trains',
             BOTH_AT_CHANCE: 'at chance at both depths'}


def _depths(depths) -> str:
    return 'L=' + '/'.join(map(str, depths))


def gain_text(g: DepthGain) -> str:
    r"""What depth does for one row on one dataset: ``batchnorm: 90.61 at
    L=2, 97.34 at L=12: depth pays, L=12 over L=2 +6.73 [+5.91, +7.55],
    p <0.0001`` (the best depth by validation against the shallowest,
    the family's adjusted p), the cells at chance and those not read."""
    means = ', '.join(f'{m:.2f} at L={d}' for d, m in g.means)
    found, i = g.found, g.found.interval
    if found.why == FEW_SEEDS:
        d = found.detail
        said = (f"best at L={g.best}, {signed(d['diff'])} over "
                f"L={g.shallow}, {why_text(found)}")
    elif i is None:
        said = (f'best at L={g.best}' if len(g.means) > 1
                else f'only L={g.best} complete')
    elif found.verdict is None:  # too few seeds for a test
        said = (f'best at L={g.best}, {signed(i.diff)} over L={g.shallow}, '
                f'no test with n={i.n}')
    else:
        said = (GAIN_SAID[found.verdict].format(shallow=g.shallow,
                                                margin=f'{found.margin:g}')
                + f', L={g.best} over L={g.shallow} {signed(i.diff)}'
                + (f' [{signed(i.lo)}, {signed(i.hi)}], p '
                   f'{p_text(found.p_adj)}' if i.lo is not None else ''))
    notes = [f'at chance at {_depths(g.at_chance)}'] if g.at_chance else []
    notes += [f'at L={d} the runs fail: {diagnosis_text(told, short=True)}'
              for d, told in g.failing]
    if g.uncommitted:
        notes.append(f'not read, runs of uncommitted code: '
                     f'{_depths(g.uncommitted)}')
    if g.left:
        notes.append(f'not complete: {_depths(g.left)}')
    return (f'{g.row}: {means}: {said}'
            + (f" ({'; '.join(notes)})" if notes else ''))


def gain_lines(found: DepthFindings) -> List[str]:
    r"""What depth does for each row, a dataset per paragraph: each row's
    complete cells, its best depth by validation against its shallowest
    (:mod:`gnorm.study.findings.depth_gain`), the rows without a complete cell."""
    gains, score = found.gains, found.score
    if not gains:
        return []
    size = found.gain_size
    method = ''.join(f', {m}' for m in size.methods)
    lines = ['', '## What depth does', '',
             f"Each row's best depth by mean validation {score} against its "
             f'shallowest complete depth, test {score}{method}; '
             f'{family_words(size, found.correction)}, one comparison per '
             f'row and dataset.']
    for dataset in dict.fromkeys(g.dataset for g in gains):
        mine = [g for g in gains if g.dataset == dataset]
        read = '; '.join(gain_text(g) for g in mine if g.means)
        none = [g.row for g in mine if not g.means]
        lines += ['', f'On {dataset}, ' + (read or 'no row has a complete '
                                               'cell')
                  + (f"; no complete cell: {', '.join(none)}"
                     if none and read else '') + '.']
    return lines


def per_dataset_lines(spec: Spec) -> List[str]:
    r"""The overrides of ``table.per_dataset``, a dataset per clause (a
    deviation of the protocol the report must name); nothing without
    any."""
    found = spec.table.get('per_dataset') or {}
    if not found:
        return []
    return ['', '**Per dataset** (`table.per_dataset`, after the row\'s '
            'overrides): ' + '; '.join(
                f"{d}: `{' '.join(o)}`" for d, o in found.items()) + '.']


def leakage_lines(counted: List[Dict]) -> List[str]:
    r"""The leakage of the datasets the runs trained on
    (:func:`gnorm.data.leakage_summary`), a dataset per clause: its test
    nodes with a duplicate in training (the same features, label and
    neighbours on the graph the runs train on), the range over its splits;
    nothing where no run records it."""
    by: Dict[str, List] = {}
    for row in leakage_summary(counted):
        by.setdefault(row.dataset, []).append(row)
    if not by:
        return []
    parts = []
    for dataset, rows in by.items():
        counts = sorted(r.same_neighbours for r in rows)
        tests = sorted({r.test for r in rows})
        count = (f'{counts[0]}' if counts[0] == counts[-1]
                 else f'{counts[0]}–{counts[-1]}')
        test = (f'{tests[0]}' if len(tests) == 1
                else f'{tests[0]}–{tests[-1]}')
        parts.append(f"{dataset} {count} of {test} "
                     f"({plural(len(rows), 'split')})")
    return ['', '**Leakage** (test nodes with a duplicate in training: the '
            'same features, label and neighbours, on the graph the runs '
            'train on; gnorm.data.leakage): ' + '; '.join(parts) + '.']


def budget_lines(spec: Spec, equal: Optional[int]) -> List[str]:
    r"""Where every compared row tried :obj:`equal` settings
    (:attr:`DepthFindings.equal_budget`): a line saying the comparisons
    are at equal budgets (``table.budget: equal`` enforces it); nothing
    otherwise (the secondary view compares at defaults)."""
    if equal is None:
        return []
    return ['', f'**Equal budgets**: every compared row tried '
            f"{plural(equal, 'setting')} per (dataset, depth)"
            + (' (`table.budget: equal`)' if spec.table.get('budget') ==
               'equal' else '') + ', so no verdict comes from a larger '
            'grid.']


def default_title(spec: Spec, score: str) -> str:
    r"""``table.title``, else the score against depth (``accuracy vs
    depth``, ``ROC-AUC vs depth``)."""
    return spec.table.get('title', f'{score} vs depth')


def _flag_words(said: str) -> str:
    return '; '.join(f'{flag}: {meaning(flag, said)}' for flag in MEANING)


def _footnote(r: Dict[str, Any], number: int) -> str:
    return (f"[^{number}]: {r['dataset']} {_label(r)} L={r['layers']}: "
            f"{r['test_mean']:.2f} ± {r['test_std']:.2f} is "
            f"{r['diff_paper_stds']:+.1f} paper stds from "
            f"{r['paper_mean']:.2f} ± {r['paper_std']:.2f}: {r['note']}.")


def tables(records: List[Dict[str, Any]]) -> tuple:
    r"""A table per dataset (rows by depth) and the footnotes."""
    depths = sorted({r['layers'] for r in records})
    lines: List[str] = []
    footnotes: List[str] = []
    for dataset in dict.fromkeys(r['dataset'] for r in records):
        lines += ['', f'## {dataset}', '',
                  '| row | ' + ' | '.join(f'L={d}' for d in depths) + ' |',
                  '|---|' + '---|' * len(depths)]
        rows = dict.fromkeys((r['row'], r['selection']) for r in records
                             if r['dataset'] == dataset)
        for row, selection in rows:
            rs = {r['layers']: r for r in records if r['dataset'] == dataset
                  and r['row'] == row and r['selection'] == selection}
            texts = []
            for d in depths:
                r = rs.get(d)
                text = _cell(r) if r else ''
                if r and r['note']:
                    footnotes.append(_footnote(r, len(footnotes) + 1))
                    text += f' [^{len(footnotes)}]'
                texts.append(text)
            lines.append(f'| {_label(next(iter(rs.values())))} | '
                         + ' | '.join(texts) + ' |')
    return lines, footnotes


def comparisons(spec: Spec, found: DepthFindings) -> List[str]:
    r"""The comparison sections in words, each primary one followed by
    what its verdicts say on the datasets' variants (``table.variants``)."""
    lines: List[str] = []
    for role, first, section in found.sections:
        lines += [''] + comparison(section, found.level, found.correction,
                                   role)
        if first and spec.table.get('variants'):
            how = family_words(section.size, found.correction)
            lines += ['', variant_summary(section.row, section.mine,
                                          spec.table['variants'], how),
                      '', variant_words(section.row, section.mine,
                                        spec.table['variants'], how)]
    return lines


def render(spec: Spec, found: DepthFindings, counted: List[Dict],
           sets: Sequence[str], command: str) -> str:
    r"""The Markdown of the report of :obj:`found`."""
    lines = header(spec, found, counted, sets, command)
    table_lines, footnotes = tables(found.records)
    lines += table_lines + reproduction_lines(found) + gain_lines(found)
    lines += comparisons(spec, found)
    if footnotes:
        lines += [''] + footnotes
    lines += ['', f'![{found.score} vs depth]({found.name}_depth.png)', '']
    return '\n'.join(lines)


def write_report(spec: Spec, records: List[Dict[str, Any]],
                 counted: List[Dict], sets: Sequence[str], runs_dir: Path,
                 out: Path, command: str,
                 authors: Optional[Dict] = None,
                 defaults: Optional[Dict[str, str]] = None) -> Path:
    r"""Writes ``<name>.md``, ``<name>.csv`` and the plots (``<name>``: the
    study's name, plus ``+<override>`` for each of :obj:`sets`); returns
    the path of the ``.md``. The findings are computed first
    (:func:`gnorm.study.findings.depth.depth_findings`), then rendered."""
    found = depth_findings(spec, records, sets, runs_dir, defaults)
    name = found.name
    out.mkdir(parents=True, exist_ok=True)
    text = render(spec, found, counted, sets, command)
    metric = ['metric'] if any(r['metric'] != 'acc' for r in records) \
        else []  # which score test_mean is, where it is not accuracy
    scratch = out / f'.{name}.csv.new'
    write_records(scratch, records, COLUMNS + metric + found.columns)
    save_bytes(out / f'{name}.csv', scratch.read_bytes())
    scratch.unlink()
    plot_depth(found.cells, out / f'{name}_depth.png',
               paper_lines=bool(spec.table.get('paper_lines')),
               authors=authors,
               figure_title=f"{name}: {default_title(spec, found.score)}",
               scores=found.scores)
    if plot_erank(found.cells, out / f'{name}_erank.png'):
        text += f'\n![effective rank vs layer]({name}_erank.png)\n'
    else:
        text += ('\nNo run of this report recorded effective ranks '
                 '(`collapse_metrics`), so there is no plot of them.\n')
    save_bytes(out / f'{name}.md', text.encode())
    return out / f'{name}.md'
