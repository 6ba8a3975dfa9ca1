r"""A depth study's report: ``<name>.md`` (a table per dataset, rows by
depth, footnotes, the comparison of ``table.compare``), ``<name>.csv``
and the plots, from the runs alone: no date, no command line of the
call, so the same runs give the same bytes, and a file that would not
change is not rewritten."""
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.data import leakage_summary
from gnorm.results import code, machines, plural, write_records
from gnorm.study.findings import (Section, annotate, at_default,
                                  chosen_by_validation, family)
from gnorm.study.findings import section as findings_section
from gnorm.study.plot import plot_depth, plot_erank, save_bytes
from gnorm.study.recipe import protocol_text
from gnorm.study.sanity import MEANING, meaning
from gnorm.study.select import REPRODUCED, TIE, reproduced, scores_said
from gnorm.study.spec import REPO, Spec, budget, grid, set_name
from gnorm.study.variants import variant_summary, variant_words
from gnorm.study.verdict_words import comparison, family_words


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


def not_run(spec: Spec, records: List[Dict[str, Any]]) -> None:
    r"""Sets ``not_run`` of each record without runs whose cell
    ``table.not_run`` names (a list of ``datasets``, ``rows``, ``depths``,
    each optional, and ``why``): the reason, e.g. GPU work."""
    for r in records:
        if r['cell_runs']:
            continue
        for entry in spec.table.get('not_run') or []:
            if all(r[field] in entry[key]
                   for key, field in (('datasets', 'dataset'),
                                      ('rows', 'row'), ('depths', 'layers'))
                   if key in entry):
                r['not_run'] = entry['why']
                break


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
        if r.get('chance_seeds'):
            ours += (f"<br>{r['chance_seeds']} of {r['runs']} seeds at "
                     f"chance")
    if r['paper_mean'] is None:
        return ours
    paper = f"paper {r['paper_mean']:.2f} ± {r['paper_std']:.2f}"
    if r['diff'] is None:
        return f'{ours}<br>{paper}'
    return f"{ours}<br>{paper}, Δ {r['diff']:+.2f}"


def completeness(records: List[Dict[str, Any]]) -> str:
    r"""How many cells are complete (every setting of the grid with every
    seed), partial and missing, and how many runs of the grid are done."""
    cells = chosen_by_validation(records)
    complete = sum(r['complete'] for r in cells)
    missing = sum(r['cell_runs'] == 0 for r in cells)
    later = sum(bool(r.get('not_run')) for r in cells)
    return (f"**{complete} of {len(cells)} cells complete** (every setting "
            f"of the grid run with every seed), "
            f"{len(cells) - complete - missing} partial, {missing} missing"
            + (f" ({later} of them not run here: `table.not_run` says why, "
               f"in the cells)" if later else '') + '; '
            f"{sum(r['cell_runs'] for r in cells)} of "
            f"{sum(r['cell_expected'] for r in cells)} runs of the grid "
            f"done ({sum(r['settings_run'] for r in cells)} of "
            f"{sum(r['settings'] for r in cells)} settings with runs).")


def source_name(spec: Spec) -> str:
    r"""How the report names the spec's file: its path in the checkout for
    gnorm's specs, its file name for a user's."""
    return (os.path.relpath(spec.source, REPO) if spec.own
            else spec.source.name)


def _coverage(spec: Spec, records: List[Dict[str, Any]]) -> str:
    r"""What the report covers: the whole table, or the cells selected."""
    def listed(key):
        return ', '.join(map(str, dict.fromkeys(r[key] for r in records)))
    table = spec.table
    whole = ({(r['dataset'], r['row'], r['layers']) for r in records}
             == {(d, row, depth) for d in table['datasets']
                 for row in table['rows'] for depth in table['depths']})
    if whole:
        return 'It covers the whole table.'
    return (f"It covers only the selected cells: datasets {listed('dataset')}"
            f"; rows {listed('row')}; depths {listed('layers')}.")


COLUMNS = ['dataset', 'row', 'layers', 'selection', 'setting',
           'settings_run', 'settings', 'runs', 'expected', 'cell_runs',
           'cell_expected', 'complete', 'test_mean', 'test_std', 'val_mean',
           'paper_mean', 'paper_std', 'diff', 'diff_paper_stds', 'note',
           'ties', 'flags', 'chance_seeds', 'test_train', 'not_run']


def _settings_text(spec: Spec, row: str, defaults: Dict[str, str]) -> str:
    r"""``contranorm: norm=contranorm; grid norm.scale ∈ {0.2, 0.5}
    (2 settings, default s=1)``."""
    text = f"{row}: `{' '.join(spec.table['rows'][row])}`"
    found = grid(spec, row)
    if not found:
        return text + ' (1 setting)'
    keys = '; '.join(f"{k} ∈ {{{', '.join(map(str, v))}}}"
                     for k, v in found.items())
    default = defaults.get(row)
    return (f"{text}; grid {keys} ({budget(spec, row)} settings"
            + (f', default {default}' if default else '') + ')')


def header(spec: Spec, records: List[Dict[str, Any]], counted: List[Dict],
           sets: Sequence[str], command: str, runs_dir: Path,
           defaults: Optional[Dict[str, str]] = None) -> List[str]:
    r"""The report's title, where it comes from, its protocol, each row's
    settings and budget, what it counts and how to read a cell."""
    defaults = defaults or {}
    made_by = code(counted)
    title = f"# {spec.name}: {default_title(spec, records)}"
    if sets:
        title += f" — with {' '.join(sets)}"
    paper = bool(spec.table.get('paper'))
    said = scores_said(records)
    lines = [
        title, '',
        f'Generated by `{command}` from the {len(counted)} finished runs in '
        f'`{os.path.relpath(runs_dir, spec.home())}` whose config is one of '
        f"this table's (protocol: `{source_name(spec)}`"
        + (f" plus `{' '.join(sets)}`" if sets else '') + '). '
        f'{_coverage(spec, records)} '
        f'Machines: {machines(counted) or "none yet"}.'
        + (f' Code: {made_by}.' if made_by else ''),
        '', protocol_text(counted), '',
        'Rows (overrides; settings tried, each chosen per (dataset, depth) '
        f'by mean validation {said}): '
        + '; '.join(_settings_text(spec, row, defaults)
                    for row in spec.table['rows']) + '.',
        *per_dataset_lines(spec), *budget_lines(spec),
        *leakage_lines(counted), '',
        completeness(records), '',
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


def reproduction_lines(spec: Spec, records: List[Dict[str, Any]]
                       ) -> List[str]:
    r"""With ``table.reproduced`` (a rule: ``paper_stds`` for accuracy,
    ``points`` for ROC-AUC; ``true`` for :data:`REPRODUCED`), which cells
    with a paper value reproduce it, which do not (their footnote says
    what is known) and which are not complete yet."""
    rule = spec.table.get('reproduced')
    if not rule:
        return []
    rule = {**REPRODUCED, **(rule if isinstance(rule, dict) else {})}
    said: Dict[Optional[bool], List[str]] = {True: [], False: [], None: []}
    for r in chosen_by_validation(records):
        if r['paper_mean'] is None:
            continue
        text = (f"{r['dataset']} {r['row']} L={r['layers']}"
                + (f" ({r['test_mean']:.2f} against {r['paper_mean']:.2f} "
                   f"± {r['paper_std']:.2f})" if r['runs'] else ''))
        said[reproduced(r, rule)].append(text)
    words = {True: 'reproduced', False: 'not reproduced',
             None: 'not complete yet'}
    counts = ', '.join(f'{len(v)} {words[k]}' for k, v in said.items() if v)
    return ['', '## Against the paper', '',
            f"A complete cell reproduces the paper when its test mean lies "
            f"within {rule['paper_stds']:g} of the paper's standard "
            f"deviations of the paper's mean (accuracy), or within "
            f"{rule['points']:g} points of it (ROC-AUC).", '',
            f"Against the paper ({counts}): "
            + '. '.join(f"{words[k].capitalize()}: {'; '.join(v)}"
                        for k, v in said.items() if v) + '.']


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


def budget_lines(spec: Spec) -> List[str]:
    r"""Where every compared row tried as many settings: a line saying the
    comparisons are at equal budgets (``table.budget: equal`` enforces
    it); nothing otherwise (the secondary view compares at defaults)."""
    compared = _compared(spec)
    if not compared or any(_unequal(spec, row, against)
                           for row, against in compared):
        return []
    sizes = {budget(spec, r) for row, against in compared
             for r in (row, *against)}
    return ['', f'**Equal budgets**: every compared row tried '
            f"{plural(sizes.pop(), 'setting')} per (dataset, depth)"
            + (' (`table.budget: equal`)' if spec.table.get('budget') ==
               'equal' else '') + ', so no verdict comes from a larger '
            'grid.']


def default_title(spec: Spec, records: List[Dict[str, Any]]) -> str:
    r"""``table.title``, else the score against depth (``accuracy vs
    depth``, ``ROC-AUC vs depth``)."""
    return spec.table.get('title', f'{scores_said(records)} vs depth')


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


def _compared(spec: Spec) -> List[tuple]:
    r"""(row, the rows it is compared with) of ``table.compare``."""
    compare = spec.table.get('compare') or {}
    return [(row, [o for o in compare.get('against', []) if o != row])
            for row in compare.get('rows', [])]


def families(spec: Spec, records: List[Dict[str, Any]]) -> Dict[str, Dict]:
    r"""The table's comparisons as two families (:func:`family`): ``val``,
    each row's setting chosen by validation, and ``default``, every row
    at its default setting (budget-matched)."""
    correction = spec.table.get('correction', 'holm')
    return {view: family(cells, _compared(spec), spec.pairing, spec.level,
                         correction)
            for view, cells in (('val', chosen_by_validation(records)),
                                ('default', at_default(records)))}


def primary(spec: Spec) -> str:
    r"""The view whose verdicts are the study's (``table.primary``):
    ``val`` (each row tuned by validation, the default) or ``default``
    (every row at its default setting: equal budgets)."""
    return 'default' if spec.table.get('primary') == 'budget' else 'val'


def sections(spec: Spec, records: List[Dict[str, Any]],
             found: Dict[str, Dict]) -> List[Tuple[str, bool, Section]]:
    r"""The comparison sections of ``table.compare.rows`` as data, in the
    order the report gives them: (role, whether it is the primary view,
    section) per row,
    its primary view (``table.primary``) first, then the other, labelled
    secondary, where the compared rows' budgets differ (else the two views
    are one); the role is empty for a row read in one view."""
    found_sections = []
    correction = spec.table.get('correction', 'holm')
    first = primary(spec)
    for row, against in _compared(spec):
        both = _unequal(spec, row, against)
        for view in (first, 'default' if first == 'val' else 'val'):
            if view != first and not both:
                continue
            role = ('' if not both else 'primary' if view == first
                    else 'secondary')
            section = findings_section(records, row, against, found[view],
                                       spec.level, correction, view,
                                       bool(spec.table.get('spread_rule')))
            if section is not None:
                found_sections.append((role, view == first, section))
    return found_sections


def comparisons(spec: Spec,
                found_sections: List[Tuple[str, bool, Section]]
                ) -> List[str]:
    r"""The comparison sections (:func:`sections`) in words, each primary
    one followed by what its verdicts say on the datasets' variants
    (``table.variants``)."""
    lines: List[str] = []
    correction = spec.table.get('correction', 'holm')
    for role, first, section in found_sections:
        lines += [''] + comparison(section, spec.level, correction, role)
        if first and spec.table.get('variants'):
            how = family_words(section.size, correction)
            lines += ['', variant_summary(section.row, section.mine,
                                          spec.table['variants'], how),
                      '', variant_words(section.row, section.mine,
                                        spec.table['variants'], how)]
    return lines


def _unequal(spec: Spec, row: str, against: Sequence[str]) -> bool:
    return len({budget(spec, r) for r in (row, *against)}) > 1


def interval_columns(records: List[Dict[str, Any]],
                     found: Dict[str, Dict]) -> List[str]:
    r"""Adds the compared rows' comparisons to :obj:`records`
    (:func:`gnorm.study.findings.annotate`: tuned, and budget-matched with
    ``default_`` in the column names); returns their columns."""
    columns = annotate(chosen_by_validation(records), found['val'])
    return columns + annotate(at_default(records), found['default'],
                              'default_')


def write_report(spec: Spec, records: List[Dict[str, Any]],
                 counted: List[Dict], sets: Sequence[str], runs_dir: Path,
                 out: Path, command: str,
                 authors: Optional[Dict] = None,
                 defaults: Optional[Dict[str, str]] = None) -> Path:
    r"""Writes ``<name>.md``, ``<name>.csv`` and the plots (``<name>``: the
    study's name, plus ``+<override>`` for each of :obj:`sets`); returns
    the path of the ``.md``."""
    name = set_name(spec.name, sets)
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / f'.{name}.csv.new'
    not_run(spec, records)
    found = families(spec, records)
    scores = ['metric'] if any(r['metric'] != 'acc' for r in records) \
        else []  # which score test_mean is, where it is not accuracy
    columns = interval_columns(records, found)
    found_sections = sections(spec, records, found)
    write_records(scratch, records, COLUMNS + scores + columns)
    save_bytes(out / f'{name}.csv', scratch.read_bytes())
    scratch.unlink()
    lines = header(spec, records, counted, sets, command, runs_dir,
                   defaults)
    table_lines, footnotes = tables(records)
    lines += table_lines + reproduction_lines(spec, records)
    lines += comparisons(spec, found_sections)
    if footnotes:
        lines += [''] + footnotes
    lines += ['', f'![{scores_said(records)} vs depth]({name}_depth.png)',
              '']
    plot_depth(records, out / f'{name}_depth.png',
               paper_lines=bool(spec.table.get('paper_lines')),
               authors=authors,
               figure_title=f"{name}: "
               f"{default_title(spec, records)}")
    if plot_erank(records, out / f'{name}_erank.png'):
        lines += [f'![effective rank vs layer]({name}_erank.png)', '']
    else:
        lines += ['No run of this report recorded effective ranks '
                  '(`collapse_metrics`), so there is no plot of them.', '']
    save_bytes(out / f'{name}.md', '\n'.join(lines).encode())
    return out / f'{name}.md'
