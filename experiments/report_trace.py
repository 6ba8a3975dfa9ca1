r"""The modules of gnorm a study's report writing passes through, in call
order: the module that runs at each call and return inside the report
writer (``gnorm.study.reports.depth.write_report`` or the paired one),
consecutive repeats collapsed, code outside gnorm counted as its caller's,
a loop over cells read as one pass (:func:`without_loops`).
It measures how far computing and wording are apart: each visit to a
module is one pass, a pass to a module left before is a return.

The walk goes by rooms too: a room is a sub-package of gnorm.study (its
job: spec, runs, findings, words, reports, ...; ``stats`` is one of its
own). A room is entered when a call from another room reaches it; the
walk lists the rooms entered, in order, a loop over cells read once, and
a room entered again after the walk left it is a return
(:func:`room_walk`). A report that computes its findings first and words
them after enters each room once.

    python experiments/report_trace.py table3_fair
"""
import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _module(frame) -> str:
    r"""The gnorm module :obj:`frame` runs in, else ``''``."""
    name = frame.f_globals.get('__name__', '')
    return name if name.startswith('gnorm.') else ''


def room(module: str) -> str:
    r"""The room of a gnorm module: its sub-package of gnorm.study
    (``gnorm.study.findings.depth`` -> ``findings``; ``gnorm.study.stats``
    -> ``stats``), else ``''`` (outside gnorm.study: its caller's room)."""
    if not module.startswith('gnorm.study.'):
        return ''
    return module.removeprefix('gnorm.study.').split('.')[0]


def trace(writer, *args, **kwargs) -> Tuple[List[str], List[str], Any]:
    r"""Runs ``writer(*args, **kwargs)`` once and returns the gnorm
    modules it passed through, in order, consecutive repeats collapsed;
    the modules it entered by a call from another module, each as
    ``caller -> callee`` rooms' module, in order (:func:`entries_of`);
    and what it returned."""
    visits: List[str] = []
    entries: List[str] = []
    stack: List[str] = []

    def visit(module: str) -> None:
        if module and (not visits or visits[-1] != module):
            visits.append(module)

    def profile(frame, event, arg):
        if event == 'call':
            module = _module(frame) or (stack[-1] if stack else '')
            if module and (not stack or stack[-1] != module):
                entries.append(f"{stack[-1] if stack else ''} -> {module}")
            stack.append(module)
            visit(module)
        elif event == 'return' and stack:
            stack.pop()
            visit(stack[-1] if stack else '')

    sys.setprofile(profile)
    try:
        result = writer(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return visits, entries, result


def without_loops(visits: List[str], longest: int = 8) -> List[str]:
    r""":obj:`visits` with every immediately repeated run of up to
    :obj:`longest` modules kept once (a loop over cells that calls the
    same modules in the same order each time reads as one pass)."""
    found = list(visits)
    changed = True
    while changed:
        changed = False
        for k in range(1, longest + 1):
            i = 0
            while i + 2 * k <= len(found):
                if found[i:i + k] == found[i + k:i + 2 * k]:
                    del found[i + k:i + 2 * k]
                    changed = True
                else:
                    i += 1
    return found


def summary(visits: List[str]) -> str:
    r"""``N modules, P passes, R returns`` of :func:`trace`'s list."""
    seen, returns = set(), 0
    for module in visits:
        returns += module in seen
        seen.add(module)
    return (f'{len(seen)} modules, {len(visits)} passes, {returns} returns '
            f'to a module left before')


def _study(modules: List[str]) -> List[str]:
    r"""The gnorm.study modules of :obj:`modules`, prefix dropped,
    consecutive repeats collapsed."""
    study = [m.removeprefix('gnorm.study.') for m in modules
             if m.startswith('gnorm.study.')]
    return [m for i, m in enumerate(study) if i == 0 or study[i - 1] != m]


def trace_study(spec: str) -> Tuple[List[str], List[str]]:
    r""":func:`trace`'s two lists for the report writer of the study
    :obj:`spec` (``python -m gnorm.study SPEC --report-only`` into a
    temporary folder)."""
    from gnorm.study.reports import depth as depth_report
    from gnorm.study.reports import paired as paired_report
    from gnorm.study.cli import main as study_main
    found = {}
    originals = {module: module.write_report
                 for module in (depth_report, paired_report)}
    for module, original in originals.items():
        def traced(*a, _original=original, **k):
            found['visits'], found['entries'], result = trace(
                _original, *a, **k)
            return result
        module.write_report = traced
    try:
        with tempfile.TemporaryDirectory() as out:
            study_main([spec, '--report-only', '--out', out])
    finally:
        for module, original in originals.items():
            module.write_report = original
    return found['visits'], found['entries']


def entries_of(entries: List[str]) -> List[str]:
    r"""The modules entered of :func:`trace`'s second list
    (``caller -> callee``: the callee)."""
    return [e.rpartition(' -> ')[2] for e in entries]


def entry_counts(entries: List[str]) -> Dict[str, int]:
    r"""How often each gnorm.study module was entered by a call from
    another (:func:`trace`'s second list, a loop over cells read once)."""
    counts: Dict[str, int] = {}
    for module in without_loops(_study(entries_of(entries))):
        counts[module] = counts.get(module, 0) + 1
    return counts


def room_walk(entries: List[str], loops_once: bool = True) -> List[str]:
    r"""The rooms (:func:`room`) a call from another room entered, in order
    (:func:`trace`'s second list; a call between two modules of one room,
    or to code outside gnorm.study, enters none), consecutive repeats
    collapsed, a loop over cells read once (every pass with
    :obj:`loops_once` false)."""
    walk: List[str] = []
    caller_room = {}
    for entry in entries:
        caller, _, callee = entry.partition(' -> ')
        here = caller_room.get(caller, room(caller))
        there = room(callee) or here
        caller_room[callee] = there
        if there and there != here and (not walk or walk[-1] != there):
            walk.append(there)
    return without_loops(walk) if loops_once else walk


def returns(walk: List[str]) -> int:
    r"""How often :obj:`walk` enters a room it entered before."""
    return len(walk) - len(set(walk))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('spec', help="a study: one of gnorm's or a file")
    parser.add_argument('--all', action='store_true',
                        help='every pass of every gnorm module, loops '
                        'included (default: gnorm.study\'s, loops once)')
    args = parser.parse_args(argv)
    visits, entries = trace_study(args.spec)
    if not args.all:
        visits = without_loops(_study(visits))
    print(' -> '.join(m.removeprefix('gnorm.study.') for m in visits))
    print(summary(visits))
    print('entered by a call from another module: ' + ', '.join(
        f'{m} {n}' for m, n in entry_counts(entries).items()))
    walk = room_walk(entries)
    print(f"rooms: {' -> '.join(walk)} ({returns(walk)} returns to a room "
          f'left before)')


if __name__ == '__main__':
    main()
