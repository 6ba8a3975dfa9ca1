r"""A paired study's report: ``<name>.md`` (the reading in words, the
paired differences to the baseline row, every row, the recipe and data),
``<name>.csv`` and the validation curves, from the runs alone (the recipe
from their recorded configs, the spec's only while there is no run): the
same runs give the same bytes."""
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gnorm.results import machines, plural, user_code_words, write_records
from gnorm.study.findings.paired import PairedFindings, paired_findings
from gnorm.study.reports.curves import plot_curves
from gnorm.study.reports.plot import save_bytes
from gnorm.study.reports.recipe import (epochs_note, data_note, protocol_items,
                                        recipe_lines, recipes)
from gnorm.study.spec.table import Spec
from gnorm.study.stats import PAIRED_T
from gnorm.study.words.paired import (in_words, interval, p_words,
                                      paper_recipe, sentence, verdict_words,
                                      worded)
from gnorm.study.words.verdicts import METHODS, signed

COLUMNS = ['row', 'runs', 'expected', 'enough', 'seeds', 'test_mean',
           'test_std', 'val_mean', 'val_std', 'epochs', 'best_epochs',
           'best_before_last', 'runtime_s', 'paper', 'pairs',
           'paired_seeds', 'test_diffs', 'test_diff', 'test_lo', 'test_hi',
           'test_p', 'test_p_adj', 'test_last_diffs', 'test_last_diff',
           'test_last_lo', 'test_last_hi', 'test_last_p', 'test_last_p_adj',
           'test_last_verdict', 'val_diffs', 'val_diff', 'val_lo', 'val_hi',
           'paper_diff', 'paper_place', 'paper_place_last', 'verdict',
           'method', 'test_train', 'test_naive_lo', 'test_naive_hi',
           'test_naive_p', 'test_exact_p', 'test_equivalence_p',
           'test_equivalence_p_adj']


def seeds_note(found: PairedFindings) -> str:
    r"""How many seeds the rows have, against the ones a decision
    needs."""
    need, records = found.min_seeds, found.records
    few = [r for r in records if r['runs'] < need]
    if not few:
        return (f'**Seeds**: every row has at least {need} finished '
                f'seeds, enough to decide.')
    counts = ', '.join(str(n) for n in sorted({r['runs'] for r in few}))
    return (f'**Not enough seeds to decide**: {len(few)} of {len(records)} '
            f'rows have fewer than the {need} finished seeds a '
            f'decision needs (they have {counts}). Their intervals are '
            f'shown for the record; a reading counts only with '
            f'{need} or more paired seeds.')


def _interval(r: Dict[str, Any], key: str) -> str:
    return interval(r[f'{key}_diff'], r[f'{key}_lo'], r[f'{key}_hi'],
                    r['pairs'])


def _paper(r: Dict[str, Any]) -> str:
    if r['paper_diff'] is None:
        return ''
    places = [r.get(k) for k in ('paper_place', 'paper_place_last')]
    return (signed(r['paper_diff'])
            + (f" ({' / '.join(p or '—' for p in places)})"
               if any(places) else ''))


def _paired_row(found: PairedFindings, r: Dict[str, Any],
                paper: bool) -> str:
    per_seed = ' '.join(signed(d) for d in r['test_diffs'])
    seeds = (f"{r['pairs']}: {' '.join(map(str, r['paired_seeds']))}"
             if r['pairs'] else '0')
    cells = [r['short'], seeds, per_seed, _interval(r, 'test'),
             p_words(found, r), _interval(r, 'test_last'),
             _interval(r, 'val')]
    return '| ' + ' | '.join(cells + ([_paper(r)] if paper else [])
                             + [verdict_words(r, found.base)]) + ' |'


def design_test_words(records: List[Dict[str, Any]]) -> str:
    r"""The test of the rows' differences in words (the design chose it:
    :func:`gnorm.study.stats.design_test`)."""
    methods = sorted({r['method'] for r in records if r.get('method')})
    return '; '.join(METHODS[m] for m in methods or [PAIRED_T])


def paired_lines(found: PairedFindings) -> List[str]:
    r"""The readings and the table of paired differences to the first
    row."""
    base, name, records = found.base, found.metric, found.records
    paper = any(r['paper_diff'] is not None for r in records[1:])
    family, level = found.family, f'{found.level:.0%}'
    margin, need = found.margin, found.min_seeds
    return [
        f'## Against {base}, seed by seed', '',
        *[f'- {sentence(found, r)}' for r in records[1:]], '',
        f'Δ = the row − {base} of the same seed (runs of one seed share '
        f'the seed of initialisation and data order), over the seeds both '
        f'finished; mean, {level} confidence interval (each row alone, '
        f'unadjusted) and two-sided p by ' + design_test_words(records[1:])
        + f'. Test {name} (%) at '
        f"each run's best validation epoch (the weights the runs select) "
        f'and at its last epoch, validation {name} at the best. '
        + (f'The rows that decide (at least {need} paired seeds: '
           f'{family}) are one family: the readings use the Holm-adjusted '
           f'p of the test at the best validation epoch (`table.correction'
           f': holm`), below {1 - found.level:.2f} for "better" or "worse"; '
           f'otherwise "equivalent" within ±{margin:g} when the two '
           f'one-sided tests of |Δ| < {margin:g} (TOST, '
           f'`table.margin`), Holm-adjusted the same way, give p below '
           f'{1 - found.level:.2f}, else "undecided". '
           if found.correction == 'holm' else
           'Each reading uses its own p (`table.correction: none`). ')
        + (f"Paper Δ: the paper's value of the row − its {base} value "
           f'({paper_recipe(found)}), and where it lies relative to the '
           f'test intervals (best validation epoch / last epoch). '
           if paper else ''), '',
        f'| norm | paired seeds (n: seeds) | Δ test per seed | Δ test, best '
        f'val epoch [{level} CI, unadjusted] | p | Δ test, last epoch '
        f'[{level} CI, unadjusted] | Δ val [{level} CI, unadjusted] | ' + ('paper Δ | ' if paper else '')
        + 'reading |', '|---|---|---|---|---|---|---|' + (
            '---|' if paper else '') + '---|',
        *[_paired_row(found, r, paper) for r in records[1:]]]


def _pm(mean: Optional[float], std: Optional[float]) -> str:
    return '' if mean is None else f'{mean:.2f} ± {std:.2f}'


def _row_line(r: Dict[str, Any], paper: bool) -> str:
    seeds = (f"{r['runs']}/{r['expected']}"
             + ('' if r['enough'] else ' (too few to decide)'))
    if r['runs'] == 0:
        return (f"| {r['label']} | {seeds} | missing | | "
                + (f"{r['paper'] or ''} | " if paper else '') + '| | |')
    return (f"| {r['label']} | {seeds} | "
            f"{_pm(r['test_mean'], r['test_std'])} | "
            f"{_pm(r['val_mean'], r['val_std'])} | "
            + (f"{r['paper'] if r['paper'] else ''} | " if paper else '')
            + f"{'/'.join(map(str, r['epochs']))} | "
            f"{' '.join(map(str, r['best_epochs']))} | "
            f"{r['runtime_s']:.0f} s |")


def row_lines(found: PairedFindings) -> List[str]:
    r"""The table of the rows: seeds, test and validation metric."""
    name, records = found.metric, found.records
    paper = any(r['paper'] is not None for r in records)
    return [
        '## Every row', '',
        f'Test and validation {name} (%) at the best validation epoch, '
        "mean ± std over seeds (ddof=0); seeds = finished seeds / the "
        "table's; epochs = epochs run per run; best = the selected epoch of "
        'each run; time = mean wall time per run.', '',
        f'| norm | seeds | test {name} | val {name} | '
        + ('paper | ' if paper else '') + 'epochs | best | time |',
        '|---|---|---|---|' + ('---|' if paper else '') + '---|---|---|',
        *[_row_line(r, paper) for r in records]]


def _graph(config: Dict[str, Any], ok: List[Dict[str, Any]]) -> bool:
    r"""Whether the study's runs are graph-level runs (their recipe has
    words of its own)."""
    if ok:
        return all('test_metric' in run for run in ok)
    return config['dataset'].get('task', 'node') == 'graph'


def recipe_section(spec: Spec, found: PairedFindings,
                   ok: List[Dict[str, Any]]) -> List[str]:
    r"""The recipe and data section."""
    config = found.config
    said = (recipes(ok, config) if _graph(config, ok) else
            protocol_items(ok) or 'no runs yet')
    lines = ['## Recipe and data', '',
             f"**Recipe** (from the runs' recorded configs): {said}."
             + (f" {spec.table['recipe_note']}"
                if spec.table.get('recipe_note') else '')]
    if spec.table.get('published'):
        lines += ['', *recipe_lines(spec.table['published'], config,
                                    found.beside, ok)]
    lines += ['', epochs_note(ok, spec.table.get('epochs_why', '')), '',
              data_note(spec, ok)]
    return lines


def elsewhere_section(spec: Spec, metric: str) -> List[str]:
    r"""What ``table.elsewhere`` lists ([model, value] pairs), after
    ``table.elsewhere_intro``; the scores are test :obj:`metric`."""
    found = spec.table.get('elsewhere') or []
    if not found:
        return []
    return ['', '## Elsewhere', '', spec.table.get('elsewhere_intro', ''),
            '', f'| model | test {metric} (%) |', '|---|---|',
            *[f'| {name} | {score} |' for name, score in found]]


def user_code_line(runs: List[Dict[str, Any]]) -> str:
    r"""`` Code: user code: mynorm.py (sha256 1a2b3c4d).``, the files of
    the user's code that made :obj:`runs`
    (:func:`gnorm.results.user_code_words`, a row's runs being its
    cell); nothing where none names user code."""
    words = user_code_words(
        runs, lambda run: f"row {(run.get('config') or {}).get('tag')}")
    return f' Code: {words}.' if words else ''


def write_report(spec: Spec, cfg, runs: List[Dict[str, Any]],
                 runs_dir: Path, out: Path, sets: Sequence[str],
                 command: str) -> Path:
    r"""Computes the study's findings from its :obj:`runs`
    (:func:`gnorm.study.findings.paired.paired_findings`: every row, its
    config :obj:`cfg`), then writes ``<report>.md``, ``<report>.csv`` and
    the plot (``<report>``: the study's name, plus ``+<override>`` for
    each of :obj:`sets`) and returns the path of the ``.md``."""
    found = paired_findings(spec, cfg, runs, runs_dir, sets)
    report, records = found.name, found.records
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / f'{report}.csv', worded(found), COLUMNS)
    ok = [run for r in records for run in r['runs_list']]
    title = spec.table.get('title', 'rows against the first, paired by seed')
    lines = [
        f'# {title} ({spec.name})'
        + (f" — with {' '.join(sets)}" if sets else ''),
        '',
        f"Generated by `{command}` from {plural(len(ok), 'finished run')} "
        f'in `{found.runs}` (config: `{found.source}`'
        + (f" plus `{' '.join(sets)}`" if sets else '') + '). Machines: '
        f'{machines(ok) or "none yet"}.' + user_code_line(ok),
        '', seeds_note(found), '',
        f'**In words**: {in_words(found)}', '',
        *paired_lines(found), '', *row_lines(found), '',
        *recipe_section(spec, found, ok),
        *elsewhere_section(spec, found.metric),
        '', f'![validation {found.metric} per epoch]({report}_val.png)',
        '']
    save_bytes(out / f'{report}.md', '\n'.join(lines).encode())
    plot_curves(found.curves, found.one_epoch, out / f'{report}_val.png',
                report, spec.table.get('plot_title')
                or spec.table.get('title'), found.metric)
    return out / f'{report}.md'
