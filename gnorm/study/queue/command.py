r"""``python -m gnorm.study queue``: trains, in one process and within a
time budget, the cells that gnorm's depth studies leave for a GPU (or a
CPU), most wanted first, into run folders the studies read.

    python -m gnorm.study queue --list                     # what is left, with estimates
    python -m gnorm.study queue --budget-s 540 --out DIR   # train what fits into DIR
    python -m gnorm.study queue --device cpu --studies strong_depth --datasets chameleon_filtered --depths 16

Which cells (:mod:`gnorm.study.queue.plan`): the unfinished cells of
every depth study (gnorm's, or ``--studies``) that the study's
``table.not_run`` marks as GPU work (the first entry naming the cell says
why, and its ``why`` starts with "GPU work"; "CPU work" with ``--device
cpu``, ``--work`` picks either; ``--list`` shows all, below), or, with
``--datasets``, ``--rows`` or ``--depths``, the cells selected. A run is
finished where the study's runs folder or ``--out`` holds it or the
``--finished`` file lists it (written by ``--write-finished`` where the
runs folders are), a finished run of its own identity; a run that failed
twice while training is not queued again (one refused before it trains,
as for missing data, is tried again).

Order: ``conf/queue.yaml``'s ``priority`` (:mod:`gnorm.study.queue.config`),
the first entry a cell matches; cells of no entry last; the cheapest first
within a place.

Time (:mod:`gnorm.study.runs.cost`, :mod:`gnorm.study.queue.run`): a
cell's cost units times the device's seconds per unit, plus its set-up:
measured into ``--out``'s record, else ``conf/queue.yaml``'s
``calibration``, else the committed runs on the device (x2), else another
GPU's (x4); each said. A cell starts only when its estimate fits the time
left of ``--budget-s`` (counted from the start); one running at the end
is stopped then, its finished runs and its runs' checkpoints kept (the
next call resumes them, its estimate of the cell at least the pace that
cell kept): the call ends within the budget and 20 s. Runs go to ``<out>/<runs folder>/<run>``, as in
``experiments/runs``; ``<out>/.queue.json`` records each cell's seconds,
merged under a lock with any other process's. Ctrl-C or SIGTERM keeps
every finished cell; the same command goes on.

CUDA graphs: with ``--cuda-graph`` the cells' node steps replay as CUDA
graphs (``train.cuda_graph=true``; not part of a run's identity). Their
seconds per unit are a rate of their own (``<GPU> (CUDA graphs)``), the
eager one its prior. A cell whose step cannot be captured trains again
eagerly, and so do the cells after it; a run that diverges fails its cell
once and the queue goes on as it was.

The list (``--list``, :func:`whole`): without ``--work`` or a selection,
every cell with unfinished runs, whatever marks it: those marked CPU and
GPU work (the device's first); then those no ``table.not_run`` entry
marks, classed by their estimate on this machine's CPU
(:func:`gnorm.study.queue.plan.classed`: CPU work where it is at most
:data:`~gnorm.study.queue.plan.CPU_WORK_S`, 6 h, else GPU work; the queue
trains them only when selected); then the cells to remake, whose
finished runs were made by uncommitted code (``source.modified``: the
reports do not quote them). Each cell with its runs and its estimates
here and on the last measured GPU, a run once, and the totals per kind
of work (GPU work, CPU work, to remake). Specs and compositions come
from the cache (:mod:`gnorm.study.spec.cache`), the runs from their short
records (:mod:`gnorm.study.runs.index`): seconds, not minutes.
"""
import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gnorm.errors import GnormError
from gnorm.study.queue.config import AXES, CONFIG, check_priority, read_config
from gnorm.study.queue.listing import (REMAKE, REMAKE_WHAT, UNMARKED, Plan,
                                       head, in_words, show)
from gnorm.study.queue.plan import (CPU_WORK_S, WORK, Pending, claim, classed,
                                    finished_digests, load_specs, order,
                                    pending, read_digests)
from gnorm.study.queue.run import INF, MARGIN_S, Deadline, Queue, stops_at
from gnorm.study.runs.cost import Rate, device_name, duration, rate_of
from gnorm.study.runs.record import failures, stopped_cells
from gnorm.study.spec.table import Spec, SpecError

OUT = Path('outputs') / 'queue'


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog='python -m gnorm.study queue',
        description='Trains the cells that gnorm\'s depth studies leave '
        'for a GPU, most wanted first, as many as fit in --budget-s.',
        epilog=' '.join(__doc__.split('\n\n')[4].split()))
    found.add_argument('--device', choices=('cuda', 'cpu'),
                       help='where the runs train (default: cuda when '
                       'visible, else cpu)')
    found.add_argument('--work', choices=tuple(WORK), help='the cells '
                       'table.not_run marks as GPU or CPU work (default: '
                       'the device\'s; --list: both)')
    found.add_argument('--budget-s', type=float, default=INF,
                       metavar='S', help='seconds to train for, from the '
                       f'start; the call ends within S + {MARGIN_S:g} '
                       '(default: no limit)')
    found.add_argument('--out', type=Path, default=OUT,
                       help=f'the folder of the runs (default: {OUT})')
    found.add_argument('--list', action='store_true', help='print the '
                       'pending cells (all, without --work or a '
                       'selection: marked or not, and those to remake) '
                       'with their estimates and the totals per kind of '
                       'work; train nothing')
    found.add_argument('--studies', nargs='+', metavar='NAME',
                       help='only these studies (names or spec files; '
                       'default: gnorm\'s depth studies)')
    found.add_argument('--datasets', nargs='+', metavar='NAME',
                       help='select these datasets\' cells')
    found.add_argument('--rows', nargs='+', metavar='ROW',
                       help='select these rows\' cells')
    found.add_argument('--depths', nargs='+', type=int, metavar='L',
                       help='select these depths\' cells')
    found.add_argument('--config', type=Path, default=CONFIG,
                       help='the priority and calibration (default: '
                       'conf/queue.yaml)')
    found.add_argument('--threads', type=int, help='CPU threads of the runs')
    found.add_argument('--cuda-graph', action='store_true',
                       help='replay the node steps as CUDA graphs '
                       '(train.cuda_graph=true); a cell failing so trains '
                       'again eagerly, and so do the cells after it')
    found.add_argument('--finished', type=Path, metavar='FILE',
                       help='count the runs this file lists as finished '
                       '(for a device without the runs folders)')
    found.add_argument('--write-finished', type=Path, metavar='FILE',
                       help='write the digests of the finished runs of the '
                       'studies\' runs folders and --out into FILE; train '
                       'nothing')
    return found


def check_args(args: argparse.Namespace) -> None:
    r"""Raises :class:`SpecError` for a bad number on the command line."""
    if not args.budget_s >= 0:
        raise SpecError(f'--budget-s must be >= 0 seconds, got '
                        f'{args.budget_s:g}')
    if args.threads is not None and args.threads < 1:
        raise SpecError(f'--threads must be >= 1, got {args.threads}')
    bad = [d for d in args.depths or [] if d < 1]
    if bad:
        raise SpecError(f'--depths must be integers >= 1, got {bad[0]}')


def selection_of(args: argparse.Namespace,
                 specs: Sequence[Spec]) -> Dict[str, Any]:
    r"""The cells ``--datasets``, ``--rows``, ``--depths`` select;
    :class:`SpecError` for a value no study of :obj:`specs` has."""
    found = {key: getattr(args, key) for key, _ in AXES
             if getattr(args, key)}
    for key, values in found.items():
        known = {v for s in specs for v in s.table[key]}
        bad = [v for v in values if v not in known]
        if bad:
            raise SpecError(f'--{key} {bad[0]}: no study of the queue has '
                            f"it; they have {', '.join(map(str, known))}")
    return found


def kinds(args: argparse.Namespace, device: str,
          selection: Dict[str, Any]) -> List[str]:
    r"""The kinds of work a call takes: ``--work``, else the device's
    (``--list``: both, the device's first), one for a selection."""
    if args.work or selection or not args.list:
        return [args.work or ('gpu' if device == 'cuda' else 'cpu')]
    return ['gpu', 'cpu'] if device == 'cuda' else ['cpu', 'gpu']


def check_device(args: argparse.Namespace, device: str) -> None:
    r"""Raises :class:`SpecError` for a device the call cannot train on."""
    if device_name(device) is None and not args.list:
        raise SpecError('--device cuda: torch sees no CUDA device; pass '
                        '--device cpu')
    if args.cuda_graph and device != 'cuda':
        raise SpecError(f'--cuda-graph replays the steps as CUDA graphs and '
                        f'needs --device cuda, got {device}')


def whole(specs: Sequence[Spec], args: argparse.Namespace, device: str,
          priority: Sequence[Dict[str, Any]], cpu: Rate,
          failed: Dict[str, int], digests: Sequence[str]
          ) -> Tuple[List[Tuple[str, List[Pending], Optional[str]]],
                     List[Pending]]:
    r"""The sections of ``--list`` without ``--work`` or a selection:
    every cell with unfinished runs, those ``table.not_run`` marks by
    their mark (the device's kind first), the others classed by their
    estimate on this machine's CPU :obj:`cpu`
    (:func:`~gnorm.study.queue.plan.classed`), each run listed once; then
    the cells to remake (runs of uncommitted code); and the cells with
    runs given up."""
    found = pending(specs, args.out, device, None, {}, digests,
                    args.cuda_graph, failed, remake=True)
    items = [i for i in found if not i.remake]
    given_up = [i for i in items if i.given_up]
    taken: set = set()
    sections = []
    for kind in kinds(args, device, {}):
        marked = [i for i in items if (i.mark or '').startswith(WORK[kind])]
        sections.append((in_words({}, WORK[kind]),
                         claim(order(marked, priority), taken), None))
    unmarked = claim(order([i for i in items if not any(
        (i.mark or '').startswith(w) for w in WORK.values())], priority),
        taken)
    limit = duration(CPU_WORK_S)
    for work, words in ((WORK['cpu'], f'at most {limit} a cell on this '
                                      f'machine\'s CPU'),
                        (WORK['gpu'], f'over {limit} a cell on this '
                                      f'machine\'s CPU, or no estimate '
                                      f'there')):
        sections.append((f'not marked by table.not_run: {work}, {words}',
                         [i for i in unmarked if classed(i, cpu) == work],
                         UNMARKED))
    sections.append((REMAKE_WHAT,
                     claim(order([i for i in found if i.remake], priority)),
                     REMAKE))
    return sections, given_up


def prepare(args: argparse.Namespace,
            specs: Optional[Sequence[Spec]]) -> Plan:
    r"""The :class:`Plan` of :obj:`args` over :obj:`specs` (default:
    ``--studies``, else gnorm's depth studies)."""
    from gnorm.results.folders import check_folder
    import torch
    check_args(args)
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    check_device(args, device)
    specs = list(specs or load_specs(args.studies))
    selection = selection_of(args, specs)
    config = read_config(args.config, [s.name for s in specs])
    check_priority(config['priority'], specs, args.config)
    check_folder(args.out, f'--out {args.out}', write=not args.list)
    failed, digests = failures(args.out), read_digests(args.finished)
    name, calibration = device_name(device), config['calibration']
    cpu = rate_of(args.out, device_name('cpu'), 'cpu', calibration)
    if args.list and not args.work and not selection:
        sections, given_up = whole(specs, args, device, config['priority'],
                                   cpu, failed, digests)
    else:
        sections, given_up = [], []
        for kind in kinds(args, device, selection):
            found = pending(specs, args.out, device, WORK[kind], selection,
                            digests, args.cuda_graph, failed)
            given_up += [i for i in found if i.given_up]
            sections.append((in_words(selection, WORK[kind]),
                             claim(order(found, config['priority'])), None))
    return Plan(sections[0][1], rate_of(args.out, name, device, calibration,
                                        args.cuda_graph), calibration,
                device, sections[0][0],
                rate_of(args.out, name, device, calibration)
                if args.cuda_graph else None, sections, given_up, cpu,
                stopped_cells(args.out))


# ------------------------------------------------------------- command


def _run(plan: Plan, args: argparse.Namespace, start: float,
         after_cell: Optional[Callable[[], Any]]) -> int:
    r"""Trains :obj:`plan`; returns the exit status (0, 1 when a cell
    failed, 130 when interrupted by Ctrl-C, 143 by SIGTERM, as
    :class:`gnorm.errors.Interrupted` says)."""
    from gnorm.study.queue import run as queue_run
    from gnorm.study.runs.runner import sigterm_interrupts
    cells = Queue(plan.items, plan.rate, start + args.budget_s, args.out,
                  plan.device, plan.eager, after_cell)
    try:
        with sigterm_interrupts():
            counts = cells.run()
    except KeyboardInterrupt as e:
        print(f"interrupted: the {cells.counts['trained']} cells finished "
              f'are kept in {args.out}; run the same command again to go '
              f'on', file=sys.stderr, flush=True)
        return getattr(e, 'exit_code', 130)  # 143 for SIGTERM
    print(f"trained {counts['trained']} cells in "
          f'{duration(queue_run.clock() - start)}; {counts["skipped"]} '
          f"skipped (over the time left), {counts['stopped']} stopped at "
          f"the deadline, {counts['unreached']} not reached, "
          f"{counts['elsewhere']} trained by another process, "
          f"{counts['failed']} failed; runs in {args.out}", flush=True)
    return 1 if counts['failed'] else 0


def write_finished(args: argparse.Namespace,
                   specs: Optional[Sequence[Spec]]) -> int:
    r"""``--write-finished FILE``: the digests of the finished runs, a
    line each (:func:`finished_digests`); returns the exit status."""
    from gnorm.results.folders import check_file
    try:
        check_file(args.write_finished, '--write-finished')
        found = finished_digests(list(specs or load_specs(args.studies)),
                                 args.out)
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        return 2
    args.write_finished.write_text(''.join(f'{d}\n' for d in found))
    print(f'{len(found)} finished runs listed in {args.write_finished}')
    return 0


def planned(args: argparse.Namespace, specs: Optional[Sequence[Spec]],
            deadline: float) -> Tuple[Optional[Plan], int]:
    r"""The plan of :obj:`args`, planned before :obj:`deadline` (the
    budget binds the planning too), or :obj:`None` and the exit status."""
    try:
        with stops_at(deadline):
            return prepare(args, specs), 0
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        return None, 2
    except Deadline:
        print('the budget ended while planning; nothing was trained',
              flush=True)
        return None, 0
    except KeyboardInterrupt as e:  # while planning: nothing written yet
        print('interrupted while planning; nothing was trained or written',
              file=sys.stderr, flush=True)
        return None, getattr(e, 'exit_code', 130)  # 143: SIGTERM (a window)


def main(argv: Optional[Sequence[str]] = None,
         specs: Optional[Sequence[Spec]] = None,
         after_cell: Optional[Callable[[], Any]] = None) -> int:
    r"""``python -m gnorm.study queue ARGS``; :obj:`specs`: loaded specs
    in place of ``--studies``; :obj:`after_cell`: called after every
    cell trained (e.g. to pack the runs). Returns the exit status."""
    from gnorm.study.queue import run as queue_run
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    start = queue_run.clock()
    if args.write_finished is not None:
        return write_finished(args, specs)
    plan, status = planned(args, specs,
                           INF if args.list else start + args.budget_s)
    if plan is None:
        return status
    if args.list:
        show(plan)
        return 0
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    print(head(plan, args.budget_s), flush=True)
    return _run(plan, args, start, after_cell)
