r"""The SepNorm comparison on ogbg-molhiv (the SepNorm paper's Table 3,
MolHIV column, Graphormer without pretraining) with one command: runs what
is missing, seed by seed, then writes the report.

    python experiments/sepnorm.py cpu     # experiment=sepnorm_molhiv_cpu: a small Graphormer, CPU, 1 epoch
    python experiments/sepnorm.py long    # experiment=sepnorm_molhiv_cpu_long: the same, 8 epochs, shuffled batches
    python experiments/sepnorm.py slim    # experiment=sepnorm_molhiv: Graphormer-slim as published (GPU)
    python experiments/sepnorm.py cpu --report-only
    python experiments/sepnorm.py slim --seeds 0 --rows sharenorm sepnorm_bn_ln train.epochs=20

Rows (ShareNorm = LayerNorm at every norm site, and SepNorm with the four
BN/LN combinations of graph token and node tokens), seeds (``seeds``, and
``row_seeds`` for rows that need more), the paper's values and the numbers
reported elsewhere are the ``table:`` section of
``conf/experiment/<experiment>.yaml``. Each (row, seed) is one ``python -m
gnorm.train`` run into ``experiments/runs/<experiment>/<row>/seed_<seed>``
(``--runs``): all rows of seed 0 first, so an interrupted table has whole
rows with fewer seeds. A (row, seed) counts as done only if its folder
holds a finished run of the config it asks for (the same run by
:func:`gnorm.run_keys.result_config`, as ``resume=true`` decides); a folder
holding a finished run of another config is an error, never overwritten.
Interrupt at any time: finished runs are kept, an unfinished one continues
from its checkpoint (``resume=true``). ``--dry-run`` prints what would run
and writes nothing.

Extra ``key=value`` arguments go to every run and make runs of their own,
kept apart as ``table3.py --set`` keeps them: the runs go to
``experiments/runs/<experiment>+<key=value>...`` (``--runs``) and the
report, named the same, to ``<runs>-report`` (``--out``); keys that change
nothing a run computes (``threads``, ``data.mirror``...) name no folder.
The committed report (``experiments/results/<experiment>.{md,csv}`` and
``<experiment>_val.png``) is written only from the committed runs without
overrides. A report covers every row of the table whatever ``--rows`` and
``--seeds`` ran, and depends on the runs only (no date; its recipe and
settings are read from the runs' recorded configs, not from the command
line), so the same runs give the same bytes. The report reads each SepNorm row against
ShareNorm seed by seed: the difference in test ROC-AUC at the best
validation epoch for every seed both rows finished, its mean and 95 %
t interval (n − 1 degrees of freedom), and a sentence: better, worse, or
not distinguishable at this recipe, and whether the paper's difference lies
in the interval; a row with fewer than 5 paired seeds is called not enough
to decide. Beside it: every row's mean ± std over seeds, the runs' recipe
beside Graphormer-slim as published, the data, the epochs and where the
best validation epochs lie, and the validation curves (mean over seeds
with the min–max band; a dot per seed when the runs are one epoch).
"""
import argparse
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.results import (  # noqa: E402
    NOT_CONFIG_KEYS, load_runs, machines, mean_std, value, write_records)
from gnorm.run_keys import ADDED_KEYS  # noqa: E402
from experiments.table3 import set_name  # noqa: E402

RUNS = ROOT / 'experiments' / 'runs'
RESULTS = ROOT / 'experiments' / 'results'
RECIPES = {'cpu': 'sepnorm_molhiv_cpu', 'long': 'sepnorm_molhiv_cpu_long',
           'slim': 'sepnorm_molhiv'}
MIN_SEEDS = 5  # paired seeds a row needs before the report reads it
LEVEL = 0.95   # of the confidence intervals
MINUS = '\u2212'
MARKERS = 'os^vD'
COLUMNS = ['row', 'runs', 'expected', 'enough', 'seeds', 'test_mean',
           'test_std', 'val_mean', 'val_std', 'epochs', 'best_epochs',
           'best_before_last', 'runtime_s', 'paper', 'pairs',
           'paired_seeds', 'test_diffs', 'test_diff', 'test_lo', 'test_hi',
           'val_diffs', 'val_diff', 'val_lo', 'val_hi', 'paper_diff',
           'paper_place', 'verdict']
# (setting, config keys of a run, key of the table's ``published:``)
RECIPE_KEYS = [
    ('layers', ['layers'], 'layers'),
    ('hidden', ['model.hidden_channels'], 'hidden'),
    ('FFN', ['model.ffn_channels'], 'ffn'),
    ('heads', ['model.num_heads'], 'heads'),
    ('multi-hop max distance', ['model.max_dist'], 'max_dist'),
    ('epochs', ['train.epochs'], 'epochs'),
    ('batch', ['train.batch_size'], 'batch'),
    ('peak lr', ['train.lr'], 'lr'),
    ('warmup', ['train.warmup_steps'], 'warmup'),
    ('end lr', ['train.end_lr'], 'end_lr'),
    ('weight decay', ['train.weight_decay'], 'weight_decay'),
    ('dropout / input / attention', ['model.dropout', 'model.input_dropout',
                                     'model.attention_dropout'], 'dropout'),
    ('precision', ['train.precision'], 'precision'),
    ('batches', ['train.bucket_chunk'], 'batches'),
]
# What the data mirror's PROVENANCE.md (section 4) says of its molhiv.
REGENERATED = (
    "`ogb_regenerated/ogbg_molhiv`, regenerated from MoleculeNet's HIV.csv "
    "with OGB's featurizer (`atom_to_feature_vector` / "
    "`bond_to_feature_vector`), not OGB's own files. Its PROVENANCE.md "
    "(section 4): labels, graph structure and scaffold split match OGB "
    "(the regenerated files have the originals' exact compressed sizes); "
    "node and edge features are not identical to OGB's (node-feat.csv.gz "
    "616,977 bytes against OGB's 616,919, edge-feat.csv.gz 268,657 against "
    "268,628), the difference \"probably concerns a small number of atoms "
    "and bonds, in metal complexes and unusual valences\"")


def compose_experiment(experiment: str, sets: Sequence[str] = ()):
    r"""The composed config of ``experiment=<experiment>`` and :obj:`sets`
    (its ``table:`` section included)."""
    from hydra import compose, initialize_config_dir
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return compose('train', overrides=[f'experiment={experiment}',
                                           *sets])


def label(row: str) -> str:
    r"""``sharenorm`` -> ShareNorm (LayerNorm); ``sepnorm_bn_ln`` ->
    SepNorm BN+LN (graph token BN, node tokens LN)."""
    if not row.startswith('sepnorm_'):
        return 'ShareNorm (LayerNorm)' if row == 'sharenorm' else row
    virtual, token = row.split('_')[1:]
    return (f'SepNorm {virtual.upper()}+{token.upper()} (graph token '
            f'{virtual.upper()}, nodes {token.upper()})')


def precision(config: Dict[str, Any], device: Optional[str]) -> str:
    r"""The arithmetic of a run of :obj:`config` on :obj:`device` (both as
    its ``results.json`` records them): ``fp32``, or ``bf16 autocast on
    the CPU`` (graph runs autocast on every device). A config without
    ``train.precision`` ran in fp32 (:data:`gnorm.run_keys.ADDED_KEYS`)."""
    kind = value({'config': config}, 'train.precision',
                 ADDED_KEYS['train.precision'])
    if kind != 'bf16':
        return str(kind)
    where = ('the CPU' if str(device).startswith('cpu') else
             str(device).split(':')[0].upper() if device else 'an unrecorded '
             'device')
    return f'bf16 autocast on {where}'


def recipe(config: Dict[str, Any], device: Optional[str]) -> str:
    r"""The training recipe of a run of :obj:`config` on :obj:`device`
    (as its ``results.json`` records them), in words; ``?`` for a setting
    the config does not record."""
    def get(key, fmt=str):
        v = value({'config': config}, key)
        return '?' if v is None else fmt(v)

    def g(v):
        return f'{v:g}'
    chunk = value({'config': config}, 'train.bucket_chunk')
    bucket = (f', batches of similar-size molecules (chunks of '
              f'{chunk} batches; so the BN of the SepNorm rows '
              f'trains on batch statistics of similar-size molecules and '
              f'evaluates with running averages over all sizes, a handicap '
              f'the paper\'s shuffled batches do not have)'
              if chunk else ', uniformly shuffled batches')
    epochs = value({'config': config}, 'train.epochs')
    return (f"Graphormer, {get('layers')} layers, hidden "
            f"{get('model.hidden_channels')}, {get('model.num_heads')} "
            f"heads, FFN {get('model.ffn_channels')}, multi-hop max "
            f"distance {get('model.max_dist')}, dropout "
            f"{get('model.dropout')} / input {get('model.input_dropout')} / "
            f"attention {get('model.attention_dropout')}; AdamW lr "
            f"{get('train.lr', g)} (weight decay "
            f"{get('train.weight_decay', g)}) after "
            f"{get('train.warmup_steps')} warmup updates, decay to "
            f"{get('train.end_lr', g)} over {get('train.epochs')} "
            f'epoch{"s" if epochs != 1 else ""} of batch '
            f"{get('train.batch_size')}{bucket}, gradient clip "
            f"{get('train.grad_clip', g)}, {precision(config, device)}, "
            f'test at the best validation epoch')


def recipes(runs: List[Dict[str, Any]], cfg) -> str:
    r"""The recipe of :obj:`runs` from their recorded configs and devices
    (each distinct one, with its number of runs, where they differ); the
    recipe of the config :obj:`cfg` where there is no run yet."""
    if not runs:
        from omegaconf import OmegaConf
        return (recipe(OmegaConf.to_container(cfg, resolve=True),
                       cfg.device if cfg.device != 'auto' else None)
                + ' (the config: no run yet)')
    seen: Dict[str, int] = {}
    for run in runs:
        text = recipe(run.get('config', {}), run.get('device'))
        seen[text] = seen.get(text, 0) + 1
    if len(seen) == 1:
        return next(iter(seen))
    return 'the runs differ: ' + '; '.join(
        f'{n} of {len(runs)} runs: {text}' for text, n in seen.items())


def run_folder(runs_dir: Path, row: str, seed: int) -> Path:
    return runs_dir / row / f'seed_{seed}'


def command(experiment: str, overrides: Sequence[str], row: str, seed: int,
            folder: Path, sets: Sequence[str]) -> List[str]:
    r"""The ``python -m gnorm.train`` command of one run."""
    return [sys.executable, '-m', 'gnorm.train', f'experiment={experiment}',
            *overrides, f'tag={row}', f'seed={seed}', 'resume=true',
            f'hydra.run.dir={folder}', *sets]


def run_config(experiment: str, spec, row: str, seed: int,
               sets: Sequence[str]):
    r"""The composed config of the run of :obj:`row` and :obj:`seed` (the
    overrides of :func:`command`, without its folder)."""
    return compose_experiment(experiment, [*spec['rows'][row], f'tag={row}',
                                           f'seed={seed}', 'resume=true',
                                           *sets])


def finished(folder: Path, cfg) -> bool:
    r"""Whether :obj:`folder` holds a finished run of :obj:`cfg` (the same
    run by :func:`gnorm.run_keys.result_config`); raises
    :class:`~gnorm.errors.ConfigError` if it holds a finished run of
    another config."""
    from gnorm.train.common import finished_run
    return finished_run(folder / 'results.json', cfg) is not None


def row_seeds(spec, row: str) -> List[int]:
    r"""The seeds of the table's row :obj:`row`: its entry of
    ``table.row_seeds`` (rows that need more seeds to decide), else
    ``table.seeds``."""
    return list(spec.get('row_seeds', {}).get(row, spec['seeds']))


def run_missing(experiment: str, spec: Dict[str, Any], rows: Sequence[str],
                seeds: Optional[Sequence[int]], runs_dir: Path,
                sets: Sequence[str], threads: Optional[int],
                dry_run: bool) -> int:
    r"""Runs the (row, seed) runs that are not finished runs of their
    config (:func:`finished`), seed by seed: the :obj:`seeds` of every row
    of :obj:`rows`, or without :obj:`seeds` each row's own
    (:func:`row_seeds`); returns the number that failed or could not run
    (a folder holding a finished run of another config)."""
    from gnorm.errors import ConfigError
    env = dict(os.environ)
    if threads:
        env['OMP_NUM_THREADS'] = str(threads)
    every = sorted({s for row in rows for s in row_seeds(spec, row)})
    todo = [(seed, row) for seed in (seeds or every) for row in rows
            if seeds or seed in row_seeds(spec, row)]
    failed = 0
    for k, (seed, row) in enumerate(todo, start=1):
        folder = run_folder(runs_dir, row, seed)
        tag = f'[{k}/{len(todo)}] {row} seed={seed}'
        try:
            if finished(folder, run_config(experiment, spec, row, seed,
                                           sets)):
                print(f'{tag}: done', flush=True)
                continue
        except ConfigError:
            print(f'{tag}: error: {folder} holds a finished run of another '
                  f'config, kept as it is; pass another --runs', flush=True)
            failed += 1
            continue
        args = command(experiment, spec['rows'][row], row, seed, folder, sets)
        print(f'{tag}: running\n  {shlex.join(args[1:])}', flush=True)
        if dry_run:
            continue
        proc = subprocess.run(args, cwd=ROOT, env=env)
        if proc.returncode in (130, -2):  # Ctrl-C: stop the table
            raise KeyboardInterrupt
        failed += proc.returncode != 0
    return failed


def by_seed(runs: Sequence[Dict[str, Any]], key: str) -> Dict[int, float]:
    r"""The field :obj:`key` (``test_metric``, ``val_metric``) of each run
    in %, by the run's ``seed`` (runs that do not record one are left
    out)."""
    return {value(r, 'seed'): 100 * r[key] for r in runs
            if value(r, 'seed') is not None}


def paired(base: Dict[int, float], other: Dict[int, float]
           ) -> Dict[int, float]:
    r"""The differences :obj:`other` − :obj:`base` seed by seed, for the
    seeds both have (in seed order)."""
    return {seed: other[seed] - base[seed] for seed in sorted(other)
            if seed in base}


def t_interval(values: Sequence[float], level: float = LEVEL
               ) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    r"""The mean of :obj:`values` and its :obj:`level` confidence interval
    from the t distribution with :math:`n - 1` degrees of freedom,
    :math:`\bar x \pm t_{(1 + \mathrm{level}) / 2,\, n - 1}\, s / \sqrt{n}`
    (:math:`s` with ddof=1); no bounds for fewer than two values, no mean
    for none."""
    n = len(values)
    if n == 0:
        return None, None, None
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf((1 + level) / 2, n - 1) * s / math.sqrt(n)
    return mean, mean - half, mean + half


def verdict(lo: Optional[float], hi: Optional[float],
            base: str = 'ShareNorm') -> str:
    r"""The reading of a confidence interval of a difference to
    :obj:`base`: better (above 0), worse (below 0), or not
    distinguishable."""
    if lo is None or hi is None:
        return 'no interval'
    if lo > 0:
        return f'better than {base}'
    if hi < 0:
        return f'worse than {base}'
    return f'not distinguishable from {base} at this recipe'


def placed(x: float, lo: float, hi: float) -> str:
    r"""Where :obj:`x` lies relative to the interval [:obj:`lo`,
    :obj:`hi`]: ``inside``, ``above`` or ``below``."""
    return 'above' if x > hi else 'below' if x < lo else 'inside'


def _signed(x: float) -> str:
    return f'{x:+.2f}'.replace('-', MINUS)


def interval(mean: Optional[float], lo: Optional[float],
             hi: Optional[float], n: int) -> str:
    r"""``+1.23 [−0.40, +2.86] (n=5)``."""
    if mean is None:
        return 'no paired seeds'
    if lo is None:
        return f'{_signed(mean)} (n={n}, no interval)'
    return f'{_signed(mean)} [{_signed(lo)}, {_signed(hi)}] (n={n})'


def _short(record: Dict[str, Any]) -> str:
    return record['label'].split(' (')[0]


def sentence(record: Dict[str, Any], base: str = 'ShareNorm') -> str:
    r"""The plain reading of a row's paired difference in test ROC-AUC to
    :obj:`base` (fields of :func:`summarise`), with the paper's difference
    placed in the interval where the paper has one."""
    n, lo, hi = record['pairs'], record['test_lo'], record['test_hi']
    head = (f"**{_short(record)}** − {base}, test ROC-AUC: "
            f"{interval(record['test_diff'], lo, hi, n)}")
    reading = verdict(lo, hi, base)
    if n < MIN_SEEDS:
        text = (f'{head}: not enough seeds to decide ({n} paired seeds, '
                f'{MIN_SEEDS} needed)'
                + (f'; the interval of these {n} alone reads "{reading}".'
                   if lo is not None else '.'))
    else:
        text = f'{head}: {reading}.'
    paper = record.get('paper_diff')
    if paper is None:
        return text
    if lo is None:
        return f"{text} The paper's {_signed(paper)} cannot be placed."
    where = placed(paper, lo, hi)
    return (f"{text} The paper's {_signed(paper)} lies "
            + ('inside the interval.' if where == 'inside'
               else f'outside the interval ({where} it).'))


def _holds(x: float, lo: float, hi: float, what: str) -> str:
    return f"{'holds' if lo <= x <= hi else 'excludes'} {what}"


def in_words(records: List[Dict[str, Any]]) -> str:
    r"""The report's reading in one sentence (the README quotes it): for
    each row with the paper's difference, its interval and whether it
    holds 0 and the paper's value; then the other rows' readings."""
    base = _short(records[0])
    parts, others = [], {}
    for r in records[1:]:
        if r['pairs'] < MIN_SEEDS or r['test_lo'] is None:
            others.setdefault(f'fewer than {MIN_SEEDS} paired seeds, not '
                              f'enough to decide', []).append(_short(r))
        elif r['paper_diff'] is None:
            others.setdefault(r['verdict'], []).append(_short(r))
        else:
            lo, hi = r['test_lo'], r['test_hi']
            parts.append(
                f"{_short(r)} − {base}, test ROC-AUC "
                f"{interval(r['test_diff'], lo, hi, r['pairs'])}: the "
                f"interval {_holds(0.0, lo, hi, '0')} and "
                f"{_holds(r['paper_diff'], lo, hi, 'the paper’s ' + _signed(r['paper_diff']))}")
    parts += [f"{', '.join(rows)}: {reading}"
              for reading, rows in others.items()]
    return '; '.join(parts) + '.'


def _last(run: Dict[str, Any]) -> int:
    return run['curve']['epoch'][-1]


def _record(spec, runs: List[Dict[str, Any]], row: str) -> Dict[str, Any]:
    r"""A row's finished runs, summarised (see :func:`summarise`)."""
    ok = [r for r in runs if value(r, 'tag') == row
          and r.get('status') == 'ok']
    test, test_std = mean_std([100 * r['test_metric'] for r in ok])
    val, val_std = mean_std([100 * r['val_metric'] for r in ok])
    return dict(
        row=row, label=label(row), runs=len(ok),
        expected=len(row_seeds(spec, row)),
        enough=len(ok) >= MIN_SEEDS, test_mean=test, test_std=test_std,
        val_mean=val, val_std=val_std,
        seeds=sorted(by_seed(ok, 'test_metric')),
        epochs=sorted({_last(r) for r in ok}),
        best_epochs=sorted(r['selected_epoch'] for r in ok),
        best_before_last=sum(r['selected_epoch'] < _last(r) for r in ok),
        runtime_s=mean_std([r['runtime_s'] for r in ok])[0],
        paper=spec.get('paper', {}).get(row), runs_list=ok)


def _compare(record: Dict[str, Any], base: Dict[str, Any]) -> None:
    r"""Adds :obj:`record`'s paired differences to :obj:`base` (test and
    validation ROC-AUC), their mean and t interval, the paper's difference
    and the reading."""
    for key in ('test', 'val'):
        diffs = paired(by_seed(base['runs_list'], f'{key}_metric'),
                       by_seed(record['runs_list'], f'{key}_metric'))
        mean, lo, hi = t_interval(list(diffs.values()))
        record.update({f'{key}_diffs': [round(d, 4) for d in diffs.values()],
                       f'{key}_diff': mean, f'{key}_lo': lo,
                       f'{key}_hi': hi})
        record['paired_seeds'] = list(diffs)
    record['pairs'] = len(record['paired_seeds'])
    record['paper_diff'] = (None if None in (record['paper'], base['paper'])
                            else record['paper'] - base['paper'])
    record['verdict'] = (verdict(record['test_lo'], record['test_hi'],
                                 _short(base))
                         if record['pairs'] >= MIN_SEEDS
                         else 'not enough seeds to decide')
    record['paper_place'] = (
        placed(record['paper_diff'], record['test_lo'], record['test_hi'])
        if record['paper_diff'] is not None and record['test_lo'] is not None
        else None)


def summarise(spec: Dict[str, Any], runs: List[Dict[str, Any]],
              rows: Sequence[str]) -> List[Dict[str, Any]]:
    r"""One record per row: test and validation ROC-AUC (%) at the best
    validation epoch, mean ± std (ddof=0) over the finished seeds, the
    epochs run and selected, the paper's value; every row after the first
    also gets its differences to the first row seed by seed (the seeds
    both finished), their mean and 95 % t interval, and the reading."""
    records = [_record(spec, runs, row) for row in rows]
    for record in records[1:]:
        _compare(record, records[0])
    return records


def _pm(mean: Optional[float], std: Optional[float]) -> str:
    return '' if mean is None else f'{mean:.2f} ± {std:.2f}'


def seeds_note(records: List[Dict[str, Any]]) -> str:
    r"""How many seeds the rows have, against the :data:`MIN_SEEDS` a
    decision needs."""
    few = [r for r in records if r['runs'] < MIN_SEEDS]
    if not few:
        return (f'**Seeds**: every row has at least {MIN_SEEDS} finished '
                f'seeds, enough to decide.')
    counts = ', '.join(str(n) for n in sorted({r['runs'] for r in few}))
    return (f'**Not enough seeds to decide**: {len(few)} of {len(records)} '
            f'rows have fewer than the {MIN_SEEDS} finished seeds a '
            f'decision needs (they have {counts}). Their intervals are '
            f'shown for the record; a reading counts only with '
            f'{MIN_SEEDS} or more paired seeds.')


def _interval(r: Dict[str, Any], key: str) -> str:
    return interval(r[f'{key}_diff'], r[f'{key}_lo'], r[f'{key}_hi'],
                    r['pairs'])


def _paired_row(r: Dict[str, Any]) -> str:
    per_seed = ' '.join(_signed(d) for d in r['test_diffs'])
    paper = ('' if r['paper_diff'] is None else
             f"{_signed(r['paper_diff'])}"
             + (f" ({r['paper_place']})" if r['paper_place'] else ''))
    return (f"| {_short(r)} | {' '.join(map(str, r['paired_seeds']))} | "
            f"{per_seed} | **{_interval(r, 'test')}** | "
            f"{_interval(r, 'val')} | {paper} | {r['verdict']} |")


def paired_lines(records: List[Dict[str, Any]]) -> List[str]:
    r"""The readings and the table of paired differences to the first
    row."""
    base = _short(records[0])
    return [
        '## SepNorm against ShareNorm, seed by seed', '',
        *[f'- {sentence(r, base)}' for r in records[1:]], '',
        f'Δ = the row − {base} of the same seed (runs of one seed share '
        f'the seed of initialisation and data order), over the seeds both '
        f'finished; mean and {LEVEL:.0%} confidence interval from the t '
        f'distribution with n − 1 degrees of freedom (std with ddof=1). '
        f'Test and validation ROC-AUC (%) at each run\'s best validation '
        f'epoch. Paper Δ: the paper\'s value of the row − its {base} '
        f'value, and where it lies relative to the test interval. The '
        f'reading needs at least {MIN_SEEDS} paired seeds.', '',
        '| norm | paired seeds | Δ test per seed | Δ test, mean '
        f'[{LEVEL:.0%} CI] | Δ val, mean [{LEVEL:.0%} CI] | paper Δ | '
        'reading |', '|---|---|---|---|---|---|---|',
        *[_paired_row(r) for r in records[1:]]]


def _row_line(r: Dict[str, Any]) -> str:
    seeds = (f"{r['runs']}/{r['expected']}"
             + ('' if r['enough'] else ' (too few to decide)'))
    if r['runs'] == 0:
        return (f"| {r['label']} | {seeds} | missing | | "
                f"{r['paper'] or ''} | | | |")
    return (f"| {r['label']} | {seeds} | "
            f"**{_pm(r['test_mean'], r['test_std'])}** | "
            f"{_pm(r['val_mean'], r['val_std'])} | "
            f"{r['paper'] if r['paper'] else ''} | "
            f"{'/'.join(map(str, r['epochs']))} | "
            f"{' '.join(map(str, r['best_epochs']))} | "
            f"{r['runtime_s']:.0f} s |")


def row_lines(records: List[Dict[str, Any]]) -> List[str]:
    r"""The table of the rows: seeds, test and validation ROC-AUC."""
    return [
        '## Every row', '',
        'Test and validation ROC-AUC (%) at the best validation epoch, mean '
        '± std over seeds (ddof=0); seeds = finished seeds / the table\'s; '
        'epochs = epochs run per run; best = the selected epoch of each '
        'run; time = mean wall time per run.', '',
        '| norm | seeds | test ROC-AUC | val ROC-AUC | paper | epochs | '
        'best | time |', '|---|---|---|---|---|---|---|---|',
        *[_row_line(r) for r in records]]


def _setting(key: str, v: Any) -> str:
    if key == 'train.bucket_chunk':
        return f'similar-size (chunks of {v})' if v else 'shuffled'
    if key == 'train.warmup_steps':
        return f'{v:,} updates'
    return f'{v:g}' if isinstance(v, float) else str(v)


def _settings(config: Dict[str, Any], keys: Sequence[str]) -> Optional[str]:
    values = [value(config, k) for k in keys]
    if any(v is None for v in values):
        return None
    return ' / '.join(_setting(k, v) for k, v in zip(keys, values))


def _ours(runs: List[Dict[str, Any]], cfg: Dict[str, Any],
          keys: Sequence[str]) -> str:
    r"""The setting :obj:`keys` of the runs (distinct values joined), or
    of the config where no run records it."""
    seen = sorted({s for s in (_settings(r, keys) for r in runs)
                   if s is not None})
    return '; '.join(seen) or f'{_settings(cfg, keys)} (config, no run)'


def recipe_lines(name: str, cfg, runs: List[Dict[str, Any]]) -> List[str]:
    r"""Our recipe (the runs' configs) beside gnorm's Graphormer-slim
    setting (for the CPU recipe) and Graphormer-slim as published (the
    ``table.published`` section)."""
    from omegaconf import OmegaConf
    published = cfg.table.published
    configs = [{'config': OmegaConf.to_container(cfg, resolve=True)}]
    heads = ['ours (the runs\' configs)']
    if name != 'slim':
        slim = compose_experiment(RECIPES['slim'])
        configs.append({'config': OmegaConf.to_container(slim,
                                                         resolve=True)})
        heads.append(f"experiment={RECIPES['slim']} (gnorm's slim setting)")
    heads.append(published.source)
    lines = [f"| setting | {' | '.join(heads)} |",
             '|---' * (len(heads) + 1) + '|']
    for setting, keys, key in RECIPE_KEYS:
        cells = [_ours(runs, configs[0], keys)]
        cells += [_settings(c, keys) for c in configs[1:]]
        v = published.get(key)
        cells.append('' if v is None else v if isinstance(v, str)
                     else _setting(keys[0], v))
        lines.append(f"| {setting} | {' | '.join(cells)} |")
    return lines


def data_note(runs: List[Dict[str, Any]]) -> str:
    r"""Where the runs' ogbg-molhiv came from (``data.mirror`` of their
    configs) and what is known of the regenerated copy."""
    kinds = [('?' if value(r, 'data') is None else
              'mirror' if value(r, 'data.mirror') else 'ogb') for r in runs]
    parts = [f'{kinds.count(k)} of {len(runs)} runs {text}'
             for k, text in (('mirror', 'read it from a data mirror, '
                              + REGENERATED),
                             ('ogb', "read OGB's own files"),
                             ('?', 'do not record where it came from'))
             if kinds.count(k)]
    return '**Data**: ogbg-molhiv; ' + ('; '.join(parts) or 'no runs yet') \
        + '.'


def epochs_note(records: List[Dict[str, Any]], why: str) -> str:
    r"""How many epochs the runs train and why, and where their best
    validation epochs lie."""
    runs = [run for r in records for run in r['runs_list']]
    if not runs:
        return f'**Epochs**: no runs yet (the recipe: {why}).'
    epochs = sorted({_last(run) for run in runs})
    before = sum(r['best_before_last'] for r in records)
    return (f"**Epochs**: {'/'.join(map(str, epochs))} per run ({why}). "
            f'The best validation epoch lies before the last in {before} '
            f'of {len(runs)} runs'
            + (' (one epoch per run: the only epoch is the best one, so '
               'nothing shows whether longer training would plateau)'
               if epochs == [1] else '')
            + '; a recipe trained to a plateau has most best epochs well '
            'before the last.')


def runs_folder(experiment: str, sets: Sequence[str]) -> Path:
    r"""The default runs folder of :obj:`experiment` with the overrides
    :obj:`sets` (those that change what a run computes): the committed
    ``experiments/runs/<experiment>`` without any, else a folder of their
    own beside it, named as table3's ``--set`` reports are
    (:func:`experiments.table3.set_name`), so that runs of other settings
    never land in, or count as, the committed runs."""
    return RUNS / set_name(experiment, sets)


def config_sets(sets: Sequence[str]) -> List[str]:
    r"""The overrides of :obj:`sets` that change what a run computes (not
    threads, data folders...: :data:`gnorm.results.NOT_CONFIG_KEYS`)."""
    return [s for s in sets
            if s.split('=', 1)[0].lstrip('+~') not in NOT_CONFIG_KEYS]


def write_report(name: str, cfg, records: List[Dict[str, Any]],
                 runs_dir: Path, out: Path, sets: Sequence[str]) -> Path:
    r"""Writes ``<report>.md``, ``<report>.csv`` and the plot of the
    recipe :obj:`name` (``cpu``, ``slim``) with the overrides :obj:`sets`
    (``<report>``: the experiment's name, plus ``+<override>`` for each
    of :obj:`sets`), and returns the path of the ``.md``: from the
    records, runs and config only (the recipe from the runs' recorded
    configs, the config's only while there is no run)."""
    experiment = RECIPES[name]
    sets = config_sets(sets)
    report = set_name(experiment, sets)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / f'{report}.csv', records, COLUMNS)
    ok = [run for r in records for run in r['runs_list']]
    spec = cfg.table
    args = [name, *sets, '--report-only']
    if runs_dir.resolve() != runs_folder(experiment, sets).resolve():
        args += ['--runs', os.path.relpath(runs_dir, ROOT)]
    lines = [
        f'# SepNorm vs ShareNorm on ogbg-molhiv from scratch ({experiment})'
        + (f" — with {' '.join(sets)}" if sets else ''),
        '',
        f'Generated by `python experiments/sepnorm.py {shlex.join(args)}` '
        f'from {len(ok)} finished runs '
        f'in `{os.path.relpath(runs_dir, ROOT)}` (config: '
        f'`conf/experiment/{experiment}.yaml`'
        + (f" plus `{' '.join(sets)}`" if sets else '') + '). Machines: '
        f'{machines(ok) or "none yet"}.',
        '', seeds_note(records), '',
        f'**In words**: {in_words(records)}', '',
        *paired_lines(records), '', *row_lines(records), '',
        '## Recipe and data', '',
        f'**Recipe** (from the runs\' recorded configs): '
        f'{recipes(ok, cfg)}. ogbg-molhiv scaffold split '
        f'(32,901 / 4,113 / 4,113), ROC-AUC from `ogb`\'s Evaluator.'
        + (' **A small CPU recipe, not the published architecture or '
           'training length: compare the rows with each other, not with '
           'the paper.** The paper\'s recipe (Graphormer-slim as '
           'published, beside it in the table below) is a GPU job: '
           '`python experiments/sepnorm.py slim`.'
           if '_cpu' in experiment else ''),
        '', *recipe_lines(name, cfg, ok), '',
        epochs_note(records, spec.epochs_why), '', data_note(ok), '',
        '## Elsewhere', '',
        'Paper: Graphormer 73.36 → +SepNorm 75.64 (its Table 3, '
        'without pretraining; no hyperparameters published). '
        'What from-scratch models give elsewhere, to place the '
        'numbers:', '', '| model | test ROC-AUC (%) |', '|---|---|']
    lines += [f'| {name} | {score} |' for name, score in spec.elsewhere]
    lines += ['', f'![validation ROC-AUC per epoch]({report}_val.png)',
              '']
    (out / f'{report}.md').write_text('\n'.join(lines))
    plot(records, out / f'{report}_val.png', report)
    return out / f'{report}.md'


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=120, bbox_inches='tight',
                metadata={'Software': None})
    plt.close(fig)


def plot(records: List[Dict[str, Any]], path: Path, title: str) -> None:
    r"""Validation ROC-AUC per epoch: each row's mean over seeds as a line
    and the min–max over seeds as a band; with one epoch per run (no curve
    to draw), each row's seeds as dots beside their mean ± std."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    if all(len(run['curve']['epoch']) <= 1
           for r in records for run in r['runs_list']):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _plot_seeds(ax, records, title)
        fig.tight_layout()
        return _save(fig, path)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for k, r in enumerate(records):
        _plot_band(ax, r, f'C{k}', MARKERS[k % len(MARKERS)])
    ax.set_xlabel('epoch')
    ax.set_ylabel('validation ROC-AUC (%)')
    ax.grid(alpha=0.3)
    ax.set_title(f'ogbg-molhiv, {title}: validation ROC-AUC per epoch',
                 fontsize=9)
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1), fontsize=8,
              title='line: mean over seeds\nband: min–max over seeds',
              title_fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _plot_band(ax, record: Dict[str, Any], color: str, marker: str) -> None:
    r"""A row's mean validation ROC-AUC per epoch over its seeds, and the
    band from the seeds' minimum to their maximum."""
    per_epoch: Dict[int, List[float]] = {}
    for run in record['runs_list']:
        for e, v in zip(run['curve']['epoch'], run['curve']['val_metric']):
            per_epoch.setdefault(e, []).append(100 * v)
    if not per_epoch:
        return
    epochs = sorted(per_epoch)
    values = [per_epoch[e] for e in epochs]
    ax.fill_between(epochs, [min(v) for v in values],
                    [max(v) for v in values], color=color, alpha=0.15,
                    lw=0)
    ax.plot(epochs, [sum(v) / len(v) for v in values], color=color, lw=1.6,
            marker=marker, ms=4, markevery=max(1, len(epochs) // 20),
            label=f"{_short(record)} ({record['runs']} seeds)")


def _plot_seeds(ax, records: List[Dict[str, Any]], title: str) -> None:
    r"""Validation ROC-AUC of runs of one epoch: a dot per seed, the
    mean ± std over seeds beside them, a column per row."""
    for k, r in enumerate(records):
        values = [100 * run['val_metric'] for run in r['runs_list']]
        ax.plot([k - 0.08] * len(values), values, 'o', color=f'C{k}',
                alpha=0.6, ms=5)
        if values:
            ax.errorbar([k + 0.08], [r['val_mean']], yerr=[r['val_std']],
                        fmt='D', color=f'C{k}', capsize=4)
    ax.set_xticks(range(len(records)))
    ax.set_xticklabels([f"{_short(r)}\n({r['runs']} seeds)"
                        for r in records], fontsize=7)
    ax.set_xlim(-0.5, len(records) - 0.5)
    ax.set_ylabel('validation ROC-AUC (%)')
    ax.grid(axis='y', alpha=0.3)
    ax.set_title(f'ogbg-molhiv, {title}: one epoch per run, no curve\n'
                 'dots: each seed; diamond and bar: mean ± std over seeds '
                 '(ddof=0)', fontsize=9)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog='python experiments/sepnorm.py',
        description=' '.join(__doc__.split('\n\n')[0].split()))
    parser.add_argument('recipe', choices=list(RECIPES),
                        help='cpu: experiment=sepnorm_molhiv_cpu (a small '
                        'Graphormer on the CPU); slim: '
                        'experiment=sepnorm_molhiv (Graphormer-slim as '
                        'published, GPU)')
    parser.add_argument('sets', nargs='*', metavar='key=value',
                        help='overrides for every run, e.g. '
                        'train.epochs=20 (runs of their own: default --runs '
                        'experiments/runs/<experiment>+<override>..., '
                        'report beside them)')
    parser.add_argument('--rows', nargs='+', metavar='ROW',
                        help='only these rows (default: every row of the '
                        'recipe: sharenorm and the four sepnorm_<graph '
                        'token>_<nodes> combinations)')
    parser.add_argument('--seeds', nargs='+', type=int, metavar='SEED',
                        help="only these seeds (default: the recipe's)")
    parser.add_argument('--runs', help='runs folder (default: '
                        'experiments/runs/<experiment>, with overrides '
                        'experiments/runs/<experiment>+<override>...)')
    parser.add_argument('--out', help='report folder (default: '
                        'experiments/results for the committed runs '
                        'without overrides, else <runs>-report)')
    parser.add_argument('--threads', type=int,
                        help='OMP_NUM_THREADS of every run')
    parser.add_argument('--report-only', action='store_true',
                        help='run nothing, write the report of the runs in '
                        '--runs')
    parser.add_argument('--dry-run', action='store_true',
                        help='print what would run, run nothing, write '
                        'nothing')
    args = parser.parse_args(argv)
    experiment = RECIPES[args.recipe]
    cfg = compose_experiment(experiment, args.sets)
    spec = cfg.table
    rows = args.rows or list(spec.rows)
    unknown = [r for r in rows if r not in spec.rows]
    if unknown:
        parser.error(f"unknown rows {unknown}; pick from {list(spec.rows)}")
    sets = config_sets(args.sets)
    committed = runs_folder(experiment, []).resolve()
    runs_dir = (Path(args.runs) if args.runs else
                runs_folder(experiment, sets)).resolve()
    published = runs_dir == committed and not sets
    out = (Path(args.out) if args.out else RESULTS if published else
           runs_dir.with_name(runs_dir.name + '-report')).resolve()
    if out == RESULTS.resolve() and not published:
        parser.error(f'{os.path.relpath(RESULTS, ROOT)} holds the reports '
                     f'of {os.path.relpath(committed, ROOT)} without '
                     f'overrides only; pass another --out')
    failed = 0
    if not args.report_only:
        failed = run_missing(experiment, spec, rows, args.seeds, runs_dir,
                             args.sets, args.threads, args.dry_run)
    if args.dry_run:
        return 1 if failed else 0
    runs = [r for r in load_runs(runs_dir)] if runs_dir.is_dir() else []
    records = summarise(spec, runs, list(spec.rows))
    path = write_report(args.recipe, cfg, records, runs_dir, out, args.sets)
    print(f"report: {path}", flush=True)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
