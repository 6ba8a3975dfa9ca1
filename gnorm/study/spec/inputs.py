r"""What a depth study reads beside its runs: the paper's values
(``table.paper``: a csv of dataset, row, layers, mean, std), the
footnotes' explanations (``table.notes``: dataset, row, layers, note) and
the records of a reference implementation's runs (``table.authors``: the
JSON records ``experiments/authors_gcn.py`` writes), cited in the
footnotes of the cells far from the paper."""
import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from gnorm.results import mean_std, plural
from gnorm.study.spec.table import REPO

def read_csv(path: Path) -> List[Dict[str, str]]:
    r"""The rows of a csv file whose ``#`` lines are comments."""
    with open(path) as f:
        return list(csv.DictReader(line for line in f
                                   if not line.startswith('#')))


def read_paper(path: Path) -> Dict[Tuple[str, str, int], Tuple[float,
                                                                float]]:
    r"""(dataset, row, layers) -> (mean, std) of the paper's table."""
    return {(r['dataset'], r['row'], int(r['layers'])):
            (float(r['mean']), float(r['std'])) for r in read_csv(path)}


def read_notes(path: Optional[Path],
               ) -> Dict[Tuple[str, str, Optional[int]], str]:
    r"""(dataset, row, layers) -> explanation of a cell far from the
    paper; layers :obj:`None` (an empty ``layers`` in the file): every depth
    of that dataset and row without a line of its own."""
    if path is None or not path.is_file():
        return {}
    return {(r['dataset'], r['row'], int(r['layers']) if r['layers'] else
             None): r['note'] for r in read_csv(path)}


# The authors' norm_mode (experiments/authors_gcn.py) -> the table's row.
AUTHORS_ROWS = {'CN': 'contranorm', 'PN': 'pairnorm', 'None': 'none'}


def relative(path: Path) -> Path:
    r""":obj:`path` relative to the repository's root when it lies in it
    (as reports name files), else as it is."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def read_records(folder) -> list:
    r"""The records this script wrote in :obj:`folder` (``*.json``, by
    name): each record's ``dataset``, ``layers``, ``scale``,
    ``norm_mode``, their ``commit`` (7 digits), ``path`` and ``runs``:
    seed -> last-epoch test accuracy in % (from the runs themselves, not
    the rounded summary)."""
    records = []
    for path in sorted(Path(folder).glob('*.json')):
        record = json.loads(path.read_text())
        config = record['config']
        records.append(dict(
            dataset=config['dataset'], layers=int(config['layers']),
            scale=float(config['scale']), norm_mode=config['norm_mode'],
            commit=(record['authors']['commit'] or '')[:7], path=path,
            runs={int(seed): 100 * run['test_acc_last']
                  for seed, run in record['runs'].items()}))
    return records


def read_authors(folder: Optional[Path],
                 ) -> Dict[Tuple[str, str, int], List[Dict[str, Any]]]:
    r"""(dataset, row, layers) -> the runs of the authors' code there (the
    records ``*.json`` of ``experiments/authors_gcn.py`` in :obj:`folder`,
    one per cell and scale), highest scale first: ``scale``, last-epoch test
    accuracy ``mean`` and ``std`` (%, ddof=0), seeds ``n``, ``path``,
    their ``commit``."""
    found: Dict[Tuple[str, str, int], List[Dict[str, Any]]] = {}
    if folder is None or not folder.is_dir():
        return found
    for record in read_records(folder):
        key = (record['dataset'], AUTHORS_ROWS[record['norm_mode']],
               record['layers'])
        mean, std = mean_std(list(record['runs'].values()))
        found.setdefault(key, []).append(dict(
            scale=record['scale'], mean=mean, std=std,
            n=len(record['runs']), commit=record['commit'],
            path=relative(record['path'])))
    for runs in found.values():
        runs.sort(key=lambda run: -run['scale'])
    return found


def with_authors_runs(
    notes: Dict[Tuple[str, str, Optional[int]], str],
    authors: Dict[Tuple[str, str, int], List[Dict[str, Any]]],
    paper: Optional[Dict] = None, paper_stds: float = 2.0,
) -> Dict[Tuple[str, str, Optional[int]], str]:
    r""":obj:`notes` with, for every cell of :obj:`authors`
    (:func:`read_authors`), a first sentence generated from those runs:
    their last-epoch test accuracy, mean ± std over the seeds run, per
    scale; and, where :obj:`paper` has the cell, which of those scales come
    within :obj:`paper_stds` paper stds of the paper."""
    notes = dict(notes)
    for key, runs in authors.items():
        rest = notes.get(key, notes.get((*key[:2], None)))
        said = '; '.join(f"{r['mean']:.2f}"
                         + (f" ± {r['std']:.2f}" if r['n'] > 1 else '')
                         + " at s = "
                         f"{r['scale']:g} ({plural(r['n'], 'seed')}, "
                         f"{r['path']})"
                         for r in runs)
        notes[key] = (f"the authors' published GCN code "
                      f"(PKU-ML/ContraNorm {runs[0]['commit']}, their "
                      f"recipe, run by experiments/authors_gcn.py; "
                      f"last-epoch test accuracy) gives {said}"
                      + _against_paper(runs, (paper or {}).get(key),
                                       paper_stds)
                      + (f'; {rest}' if rest else ''))
    return notes


def _against_paper(runs: List[Dict[str, Any]],
                   paper: Optional[Tuple[float, float]],
                   paper_stds: float) -> str:
    r"""Which scales of :obj:`runs` (:func:`read_authors`) come within
    :obj:`paper_stds` paper stds of :obj:`paper` (mean, std), as a clause;
    empty without the paper's value."""
    if not paper or paper[0] is None or not paper[1]:
        return ''
    close = [f"{r['scale']:g}" for r in runs
             if abs(r['mean'] - paper[0]) <= paper_stds * paper[1]]
    within = (f" {paper_stds:g} paper stds of the paper's "
              f"{paper[0]:.2f} ± {paper[1]:.2f}")
    if len(runs) == 1:
        return (': this comes within' if close
                else ': this does not come within') + within
    return (f': of these {len(runs)} scales, '
            + (f"s = {', '.join(close)} "
               + ('comes' if len(close) == 1 else 'come') + ' within'
               if close else 'none comes within') + within)
