r"""A check of named steps, each within its own time budget: a step that
raises is recorded as failed with its one-line error and the next one
runs; after every step its record is appended to a JSON-lines file and
the Markdown report rewritten, so a kill loses nothing finished.
:func:`environment` says what ran the check, :func:`check_report` writes
it, and :func:`pytest_step` is a step running a selection of tests."""
import platform
import shlex
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

import torch

from gnorm.bench.process import child_env
from gnorm.bench.records import Records
from gnorm.bench.report import records_table
from gnorm.machine import machine_words, this_machine

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


def attempt(row: Record, measure: Callable[[], Any]) -> Any:
    r"""``measure()`` for the table :obj:`row`: its result, or :obj:`None`
    with ``row['status']`` saying why there is none: ``out of memory``
    (the CUDA cache emptied for the next) or ``failed: <error>`` (its
    traceback printed), so that the step's other rows go on."""
    try:
        return measure()
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        row['status'] = 'out of memory'
    except Exception as e:  # recorded; the other rows go on
        traceback.print_exc()
        row['status'] = f'failed: {one_line(e)[:200]}'
    return None


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


def environment(device: str, command: Sequence[str],
                commit: str) -> Dict[str, Any]:
    r"""What runs a check on :obj:`device` (``cuda`` or ``cpu``): the
    device's name, the versions of torch, CUDA and Python, torch's
    threads, gnorm's :obj:`commit`, the :obj:`command` and the start."""
    cuda = device == 'cuda'
    return dict(
        device=device,
        device_name=(torch.cuda.get_device_name() if cuda
                     else machine_words(this_machine('cpu'))),
        torch=torch.__version__, cuda=torch.version.cuda or 'none (CPU build)',
        python=platform.python_version(), threads=torch.get_num_threads(),
        commit=commit, command=shlex.join(command),
        started=datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC'))


def check_report(title: str, env: Dict[str, Any],
                 records: List[Record]) -> str:
    r"""The Markdown report of a check: :obj:`title` and its
    :func:`environment` (with the lines of its ``notes``, if any), then
    :func:`steps_report`."""
    return '\n'.join([
        f'# {title} ({env["device"]})', '',
        f'* device: {env["device_name"]}',
        f'* torch {env["torch"]}, CUDA {env["cuda"]}, '
        f'Python {env["python"]}, {env["threads"]} torch threads',
        f'* gnorm commit: {env["commit"]}',
        f'* command: `{env["command"]}`',
        f'* started: {env["started"]}',
        *(f'* {note}' for note in env.get('notes', ())), '',
        *steps_report(records)]) + '\n'


def pytest_step(root: Path, marker: str, budget: Budget) -> Dict[str, Any]:
    r"""A step running the tests of :obj:`root` marked :obj:`marker`
    (``pytest -m``) within :obj:`budget` (killed when it is spent), its
    rows and status from :func:`pytest_rows`."""
    cmd = [sys.executable, '-m', 'pytest', '-m', marker, '-q', '-rfE',
           '-p', 'no:cacheprovider']
    try:
        proc = subprocess.run(cmd, cwd=root, env=child_env(root),
                              capture_output=True,
                              text=True, timeout=max(budget.left(), 1))
        output, notes = proc.stdout + proc.stderr, []
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b'').decode() if isinstance(e.stdout, bytes) \
            else (e.stdout or '')
        notes = [f'budget of {budget.seconds:g} s reached: pytest killed']
    rows, status = pytest_rows(output)
    return dict(rows=rows, status=status,
                notes=[f'`{shlex.join(cmd[1:])}`', *notes])


def pytest_rows(output: str) -> Tuple[List[Record], str]:
    r"""The rows and status of a pytest run from its :obj:`output` (with
    ``-rfE``): its summary line, then each failing test with its one-line
    message; status ``ok``, or ``failed: <n> tests`` when any failed."""
    lines = output.strip().splitlines()
    summary = next((line.strip('= ') for line in reversed(lines)
                    if any(w in line for w in ('passed', 'failed', 'error',
                                               'skipped', 'deselected'))),
                   'no summary line')
    failures = [line.split(' ', 1)[1].partition(' - ') for line in lines
                if line.startswith(('FAILED ', 'ERROR '))]
    rows = [dict(summary=summary, failures=len(failures))] + [
        dict(summary='failed', failures=name, message=message[:200])
        for name, _, message in failures]
    return rows, f'failed: {len(failures)} tests' if failures else 'ok'
