r"""The authors' published GCN code and gnorm, run by run, at every Table 3
cell and scale where both have runs under the authors' protocol: each
side's per-seed last-epoch test accuracies, their means and stds, the
difference of the means and an exact two-sided permutation test of it
(are the two sets of runs draws of one distribution?), beside the smallest
p that test can give with the two numbers of runs: a cell that cannot
reach the corrected threshold has no power and shows nothing either way.

The authors' side is the records of ``experiments/authors_gcn.py``
(:func:`read_authors`); gnorm's side is every finished ContraNorm run of
``experiment=table3_paper`` at the same dataset, depth and scale
(:func:`gnorm_runs`; runs of a cell whose configs differ in anything but
the seed, and the keys that change no result, are an error, never
averaged). The two sides draw other random numbers, so a seed of one is no
match for the same seed of the other: only the distributions compare. The
section "Time per run" is :mod:`experiments.authors.speed`'s; the last,
"On the same random numbers", tables the records of
``experiments/authors_twin.py`` (:func:`twin_lines`, :func:`plot_twins`).
:func:`report` is a pure function of the records and runs;
``experiments/authors_spread.py`` reads the committed ones and writes
``experiments/results/authors_vs_gnorm.md``.
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.errors import DataError
from gnorm.results import mean_std, plural, value
from gnorm.results.keys import drop_keys, record_identity
from gnorm.study.reports.plot import save_figure
from gnorm.study.spec.inputs import read_records, relative
from gnorm.study.stats import LEVEL, holm, permutation_p, smallest_p

from experiments.authors.speed import speed_lines


def read_authors(folder: Path) -> List[Dict[str, Any]]:
    r"""The ContraNorm records of ``experiments/authors_gcn.py`` in
    :obj:`folder` (:func:`read_records`)."""
    return [r for r in read_records(folder) if r['norm_mode'] == 'CN']


def _is_cell(run: Dict[str, Any], dataset: str, layers: int,
             scale: float) -> bool:
    return (run.get('status') == 'ok'
            and run.get('choices', {}).get('experiment') == 'table3_paper'
            and value(run, 'tag') == 'contranorm'
            and value(run, 'dataset.name') == dataset
            and value(run, 'layers') == layers
            and value(run, 'norm.scale') == scale)


def gnorm_runs(runs: List[Dict[str, Any]], dataset: str, layers: int,
               scale: float) -> Dict[int, float]:
    r"""Seed -> last-epoch test accuracy (%) of gnorm's ContraNorm runs of
    the cell; an error if their configs differ in more than the seed or a
    seed is there twice."""
    found = [r for r in runs if _is_cell(r, dataset, layers, scale)]
    configs = {json.dumps(drop_keys(record_identity(r), ['seed']),
                          sort_keys=True) for r in found}
    if len(configs) > 1:
        raise DataError(
            f'gnorm runs of {dataset} L={layers} s={scale:g} differ '
            f'in more than the seed: ' + ', '.join(r['_path'] for r in found))
    by_seed: Dict[int, float] = {}
    for run in found:
        seed = value(run, 'seed')
        if seed in by_seed:
            raise DataError(f'gnorm has seed {seed} of {dataset} '
                            f'L={layers} s={scale:g} twice: {run["_path"]}')
        by_seed[seed] = 100 * run['test_acc']
    return dict(sorted(by_seed.items()))


def _values(runs: Dict[int, float]) -> str:
    return ', '.join(f'{v:.2f}' for v in runs.values())


def _mean(runs: Dict[int, float]) -> str:
    mean, std = mean_std(list(runs.values()))
    return f'{mean:.2f} ± {std:.2f} ({len(runs)})'


def _cells(cells: List[str]) -> str:
    return ', '.join(cells)


def verdict(tested: List[Tuple[str, float, float]],
            level: float = LEVEL) -> str:
    r"""In words, which of the :obj:`tested` cells (cell, p, the smallest
    p its numbers of runs allow: :func:`smallest_p`) differ beyond chance:
    a Holm-adjusted p (:func:`gnorm.study.stats.holm`, the family of the
    tests) below :math:`\alpha = 1 - \mathrm{level}` (:obj:`level`: the
    confidence, as everywhere in gnorm.study). A cell whose smallest p is
    not below Holm's first threshold :math:`\alpha / m` has no power: it
    can show no difference, so it shows nothing either way; only a cell
    with power whose adjusted p stays above :math:`\alpha` is not
    distinguishable with these runs."""
    alpha = 1 - level
    bound = alpha / len(tested)
    adjusted = holm([p for _, p, _ in tested])
    powered = [(cell, q) for (cell, _, least), q in zip(tested, adjusted)
               if least < bound]
    weak = [(cell, least) for cell, _, least in tested if least >= bound]
    beyond = [cell for cell, q in powered if q < alpha]
    quiet = [cell for cell, q in powered if q >= alpha]
    below = [cell for (cell, p, _), q in zip(tested, adjusted)
             if p < alpha <= q]
    said = (f'{plural(len(tested), "test")}, one family: a Holm-adjusted '
            f'p below {alpha:.2g} marks a difference that chance does not '
            f'explain at {100 * level:g} % confidence; the smallest p must '
            f'pass Holm\'s first threshold {alpha:.2g} / {len(tested)} = '
            f'{bound:.4f}. ')
    said += (f"{len(powered)} of {len(tested)} cells "
             f"{'has' if len(powered) == 1 else 'have'} the runs to pass "
             'it at all (smallest p below it).' if powered else
             'No cell has the runs to pass it at all (smallest p).')
    if beyond:
        said += f" Beyond chance: {_cells(beyond)}."
    if quiet:
        said += f" Not distinguishable with these runs: {_cells(quiet)}."
    if weak:
        least = sorted(p for _, p in weak)
        span = (f'{least[0]:.4f}' if least[0] == least[-1] else
                f'{least[0]:.4f} to {least[-1]:.4f}')
        said += (f" Without power (smallest p {span}: not below "
                 f"{bound:.4f} whatever the runs): "
                 f"{_cells([cell for cell, _ in weak])}; a cell without "
                 'power shows nothing either way.')
    if below:
        said += (f" p below {alpha:.2g} before the adjustment, not after "
                 f"(by chance alone about one test in {round(1 / alpha)} "
                 f"is): {_cells(below)}.")
    return said


def _key(record: Dict[str, Any]) -> Tuple[str, int, float]:
    return record['dataset'], record['layers'], record['scale']


def report(authors: List[Dict[str, Any]], runs: List[Dict[str, Any]],
           folders: Sequence[Path],
           timing: Sequence[Dict[str, Any]] = (),
           timing_runs: Sequence[Dict[str, Any]] = (),
           timing_folders: Sequence[Path] = ()) -> str:
    r"""The markdown comparison of :obj:`authors` (:func:`read_authors`)
    with gnorm's :obj:`runs` (read from :obj:`folders`); the section "Time
    per run" also takes the authors' timing records :obj:`timing`
    (:func:`read_authors`) and gnorm's timing runs :obj:`timing_runs`
    (both read from :obj:`timing_folders`), which the accuracies leave
    out."""
    lines = [
        "# The authors' GCN code and gnorm, run by run",
        '',
        "Table 3 cells (ContraNorm + the shared LayerNorm, the authors' "
        "protocol) where both the authors' published code "
        "(experiments/authors_gcn.py) and gnorm (experiment=table3_paper) "
        'have runs: last-epoch test accuracy (%), mean ± std (ddof=0; '
        'runs). The two sides draw other random numbers, so only the '
        'distributions compare: p is the two-sided permutation test of the '
        'difference of the means (exact: every split of the pooled runs); '
        'smallest p is the least p that test can give with the two numbers '
        'of runs, whatever their values (gnorm.study.stats.smallest_p): a '
        'cell whose smallest p is not below the threshold cannot show a '
        'difference. gnorm runs from '
        + ', '.join(str(relative(f)) for f in folders)
        + '. Written by `python experiments/authors_spread.py`.',
        '',
        "| dataset | L | s | authors' code | gnorm | gnorm − authors | p | "
        'smallest p |',
        '|---|---|---|---|---|---|---|---|',
    ]
    # tested: (cell, p, smallest p); timed: (cell, records, runs)
    details, tested, timed = [], [], []
    for a in sorted(authors, key=_key):
        ours = gnorm_runs(runs, *_key(a))
        cell = f"{a['dataset']} | {a['layers']} | {a['scale']:g}"
        timed.append((_key(a), [a['path']], [
            r for r in runs if _is_cell(r, *_key(a))]))
        if not ours:
            lines.append(f"| {cell} | {_mean(a['runs'])} | no runs | | | |")
            continue
        diff = (sum(ours.values()) / len(ours)
                - sum(a['runs'].values()) / len(a['runs']))
        p = least = ''
        if len(ours) + len(a['runs']) >= 3:
            chance, exact = permutation_p(list(ours.values()),
                                          list(a['runs'].values()))
            floor = smallest_p(len(ours), len(a['runs']))
            tested.append((f"{a['dataset']} L={a['layers']} "
                           f"s={a['scale']:g}", chance, floor))
            p = f'{chance:.3f}' + ('' if exact else ' (sampled)')
            least = f'{floor:.2g}'
        lines.append(f"| {cell} | {_mean(a['runs'])} | {_mean(ours)} | "
                     f'{diff:+.2f} | {p} | {least} |')
        details.append(
            f"- {a['dataset']} L={a['layers']} s={a['scale']:g}: the "
            f"authors' code {_values(a['runs'])} "
            f"(seeds {', '.join(map(str, a['runs']))}; "
            f"{relative(a['path'])}); gnorm {_values(ours)} "
            f"(seeds {', '.join(map(str, ours))}).")
    if tested:
        lines += ['', verdict(tested)]
    cells = {key: (paths, found) for key, paths, found in timed}
    for record in sorted(timing, key=_key):
        cells.setdefault(_key(record), ([], []))[0].append(record['path'])
    for key, (paths, found) in cells.items():
        found += [r for r in timing_runs if _is_cell(r, *key)]
    sources = ('Timing records and runs (left out of the accuracies above) '
               'from ' + ', '.join(str(relative(f)) for f in timing_folders)
               + '.') if timing_folders else ''
    together = {str(r['path']) for r in timing} | {
        str(r['_path']) for r in timing_runs}
    return '\n'.join(lines + ['', 'Per seed:', ''] + details
                     + speed_lines([(key, paths, found) for key, (paths, found)
                                    in cells.items()], sources,
                                   together)) + '\n'


def read_twins(folder: Path) -> List[Dict[str, Any]]:
    r"""The records of ``experiments/authors_twin.py`` in :obj:`folder`
    (by name), each with its ``path``."""
    return [dict(json.loads(path.read_text()), path=path)
            for path in sorted(folder.glob('*.json'))]


def _twin_label(config: Dict[str, Any]) -> str:
    return (f"{config['dataset']} L={config['layers']} "
            f"s={config['scale']:g} seed {config['seed']} {config['dtype']}")


def twin_lines(twins: List[Dict[str, Any]], plot: Optional[str]) -> List[str]:
    r"""The report's section on :obj:`twins` (:func:`read_twins`)."""
    if not twins:
        return []
    lines = [
        '', '## On the same random numbers', '',
        "experiments/authors_twin.py trains the authors' DeepGCN and "
        "gnorm's from the same weights with the same dropout masks: where "
        'their weights drift apart, rounding moved them (the largest '
        'difference of any weight; their test accuracies, %).', '',
        '| run | epochs | weights apart after 10 epochs | at the end | '
        "authors' model | gnorm |", '|---|---|---|---|---|---|']
    for twin in twins:
        rows, config = twin['twin'], twin['config']
        at10 = rows['weight_difference'][rows['epoch'].index(10)] \
            if 10 in rows['epoch'] else None
        lines.append(
            f"| {_twin_label(config)} ({relative(twin['path'])}) | "
            f"{rows['epoch'][-1]} | "
            + (f'{at10:.1e}' if at10 is not None else '') + ' | '
            f"{rows['weight_difference'][-1]:.1e} | "
            f"{100 * rows['their_test_acc'][-1]:.2f} | "
            f"{100 * rows['gnorm_test_acc'][-1]:.2f} |")
    if plot:
        lines += ['', f'![weights apart vs epoch]({plot})']
    return lines


def plot_twins(twins: List[Dict[str, Any]], path: Path) -> bool:
    r"""The largest weight difference vs epoch of every twin record, on a
    log scale; :obj:`False` (no file) without records."""
    if not twins:
        return False
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for twin in twins:
        rows = twin['twin']
        ax.plot(rows['epoch'], rows['weight_difference'], marker='o', ms=3,
                label=_twin_label(twin['config']))
    ax.set_yscale('log')
    ax.set_xlabel('epoch')
    ax.set_ylabel("largest |weight(authors') - weight(gnorm)|")
    ax.set_title("The authors' DeepGCN and gnorm's on the same random "
                 'numbers', fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    return True
