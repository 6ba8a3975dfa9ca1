r"""A check of named steps, each within its own time budget: a step that
raises is recorded as failed with its one-line error and the next one
runs; after every step its record is appended to a JSON-lines file and
the Markdown report rewritten, so a kill loses nothing finished."""
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple

from gnorm.bench.records import Records
from gnorm.bench.report import records_table

Record = Dict[str, Any]


class Budget:
    r"""A step's time budget: :obj:`seconds` from its creation."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.perf_counter()

    def spent(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.spent()

    def over(self) -> bool:
        return self.left() <= 0

    def stop_note(self, before: str) -> str:
        return (f'budget of {self.seconds:g} s reached after '
                f'{self.spent():.1f} s: stopped before {before}')


class Step(NamedTuple):
    r"""A step: its letter, its title, its budgets (seconds; a quick run
    takes the second) and ``run(context, budget) -> dict``, which returns
    ``rows`` (dicts: a table), ``notes`` (lines) and a ``status`` (``ok``
    unless it says ``skipped: <reason>`` or ``failed: <what>``)."""
    key: str
    title: str
    budget: float
    quick_budget: float
    run: Callable[[Any, Budget], Dict[str, Any]]


def one_line(error: BaseException) -> str:
    r"""The error's type and message on one line, at most 300
    characters."""
    text = ' '.join(str(error).split())
    return f'{type(error).__name__}: {text}'[:300]


def run_steps(steps: List[Step], context: Any, path: Path,
              env: Dict[str, Any], report: Callable[[Dict[str, Any],
                                                     List[Record]], str],
              quick: bool = False) -> List[Record]:
    r"""Runs :obj:`steps` in order, each with ``step.run(context,
    budget)``; the JSON-lines file :obj:`path` starts with :obj:`env` (a
    line with ``step: environment``), gets each step's record as it
    finishes, and ``report(env, records)`` is written beside it as
    ``.md``. A record: the step's ``step``, ``title``, ``seconds``,
    ``budget_s`` and what it returned, ``status`` ``failed`` and the
    ``error`` where it raised."""
    lines = Records(path, key=lambda r: r['step'], resume=False)
    lines.add({'step': 'environment', **env})
    records = []
    for step in steps:
        budget = Budget(step.quick_budget if quick else step.budget)
        print(f'[{step.key}] {step.title} (budget {budget.seconds:g} s)',
              flush=True)
        try:
            found = dict(step.run(context, budget) or {})
            record = dict(status=found.pop('status', 'ok'), **found)
        except Exception as e:  # recorded; the check goes on
            traceback.print_exc()
            record = dict(status='failed', error=one_line(e))
        records.append(lines.add(dict(
            step=step.key, title=step.title, seconds=round(budget.spent(), 2),
            budget_s=budget.seconds, **record)))
        path.with_suffix('.md').write_text(report(env, records))
        print(f'[{step.key}] {records[-1]["status"]} in '
              f'{records[-1]["seconds"]} s', flush=True)
    return records


def steps_report(records: List[Record]) -> List[str]:
    r"""The report's lines of the step :obj:`records`: a table of each
    step's status, seconds and budget, then a section per step with its
    error, notes and rows."""
    lines = ['| step | status | seconds | budget s |', '|---|---|---|---|']
    lines += [f'| {r["step"]}. {r["title"]} | {r["status"]} | '
              f'{r["seconds"]:.1f} | {r["budget_s"]:g} |' for r in records]
    for r in records:
        lines += ['', f'## {r["step"]}. {r["title"]}: {r["status"]}', '']
        if r.get('error'):
            lines += [f'Error: `{r["error"]}`', '']
        lines += [f'* {n}' for n in r.get('notes', [])]
        if r.get('notes'):
            lines.append('')
        if r.get('rows'):
            lines += records_table(r['rows'])
    return lines
