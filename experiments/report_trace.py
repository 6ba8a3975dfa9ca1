r"""The modules of gnorm a study's report writing passes through, in call
order: the module that runs at each call and return inside the report
writer (``gnorm.study.reports.depth.write_report`` or the paired one),
consecutive repeats collapsed, code outside gnorm counted as its caller's,
a loop over cells read as one pass (:func:`without_loops`).
It measures how far computing and wording are apart: each visit to a
module is one pass, a pass to a module left before is a return.

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


def trace(writer, *args, **kwargs) -> Tuple[List[str], List[str], Any]:
    r"""Runs ``writer(*args, **kwargs)`` once and returns the gnorm
    modules it passed through, in order, consecutive repeats collapsed;
    the modules it entered by a call from another module, in order; and
    what it returned."""
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
                entries.append(module)
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


def entry_counts(entries: List[str]) -> Dict[str, int]:
    r"""How often each gnorm.study module was entered by a call from
    another (:func:`trace`'s second list, a loop over cells read once)."""
    counts: Dict[str, int] = {}
    for module in without_loops(_study(entries)):
        counts[module] = counts.get(module, 0) + 1
    return counts


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


if __name__ == '__main__':
    main()
