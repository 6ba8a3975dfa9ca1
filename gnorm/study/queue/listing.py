r"""What the queue prints: the :class:`Plan` of a call (its cells, its
rate, and for ``--list`` its sections by kind of work), the tables of
``--list`` with each cell's seconds here and on the last measured GPU,
the totals per kind of work, the runs given up and the first line of a
call that trains. Nothing here plans or trains
(:mod:`~gnorm.study.queue.command`).
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.study.queue.plan import (CPU_WORK_S, MAX_FAILURES, WORK, Pending,
                                    classed)
from gnorm.study.queue.run import INF, MARGIN_S, estimate_of
from gnorm.study.runs.cost import Rate, committed_rates, duration, other_gpu


def in_words(selection: Dict[str, Any], work: str) -> str:
    r"""The cells the queue takes, in words."""
    if not selection:
        return f'marked {work}'
    return 'selected: ' + '; '.join(
        f"{key} {', '.join(map(str, values))}"
        for key, values in selection.items())


@dataclass
class Plan:
    r"""What a call trains: the pending ``items`` in order, the ``rate``
    of the device (``eager``: the one a cell failing as CUDA graphs falls
    back to), the ``calibration`` committed, in words ``what``; for
    ``--list`` the ``sections`` (each kind of work in words, its cells
    and a line to print after them), the cells whose runs are
    ``given_up``, the rate of this machine's ``cpu`` (it classes the
    cells no ``table.not_run`` entry marks,
    :func:`gnorm.study.queue.plan.classed`) and the cells ``stopped`` at a
    deadline before, by label (:func:`gnorm.study.runs.record.stopped_cells`:
    their estimates here are at least what that training said)."""
    items: List[Pending]
    rate: Rate
    calibration: Dict[str, float]
    device: str
    what: str
    eager: Optional[Rate] = None
    sections: List[Tuple[str, List[Pending], Optional[str]]] = field(
        default_factory=list)
    given_up: List[Pending] = field(default_factory=list)
    cpu: Optional[Rate] = None
    stopped: Dict[str, Dict[str, Any]] = field(default_factory=dict)


# What --list says after the cells of a kind.
UNMARKED = ('the queue trains these when selected (--datasets, --rows, '
            '--depths), or once table.not_run marks them')
REMAKE_WHAT = 'runs of uncommitted code: source.modified'
REMAKE = ('their runs count as finished and the reports leave them out: '
          'move the run folders aside, then train them again from '
          'committed code (the study, or the queue with a selection)')


def table(rows: List[Sequence[str]]) -> None:
    r"""Prints :obj:`rows` as aligned columns (text left, figures right)."""
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        print('  '.join(v.ljust(w) if k == 1 else v.rjust(w)
                        for k, (v, w) in enumerate(zip(r, widths))).rstrip())


def last_gpu(calibration: Dict[str, float]) -> Rate:
    r"""The rate of the last GPU measured: ``conf/queue.yaml``'s
    :obj:`calibration`, else the committed runs' (:obj:`None` name
    without any)."""
    found = other_gpu('', calibration, committed_rates())
    return Rate(*found) if found else Rate(None)


def background(what: str) -> Optional[str]:
    r"""The command that trains the CPU work here in the background, into
    the studies' runs folders (:obj:`None` for other work)."""
    if not what.startswith(in_words({}, WORK['cpu'])):
        return None
    return ('nohup python -m gnorm.study queue --device cpu --work cpu '
            '--out experiments/runs --threads 1 > outputs/queue-cpu.log '
            '2>&1 &')


def here_s(items: Sequence[Pending], rate: Rate,
           stopped: Dict[str, Dict[str, Any]]) -> Optional[float]:
    r"""The seconds of :obj:`items` here, summed: each cell's estimate
    at :obj:`rate`, and for a cell :obj:`stopped` at a deadline before at
    least what that training said (:func:`~gnorm.study.queue.run.estimate_of`,
    as a call that trains plans it); :obj:`None` without a rate."""
    found = [estimate_of(i, rate, stopped.get(i.label)) for i in items]
    return None if any(s is None for s in found) else sum(found)


def row(k: str, label: str, items: Sequence[Pending], rate: Rate,
        gpu: Rate, stopped: Dict[str, Dict[str, Any]]) -> Tuple[str, ...]:
    r"""A line of ``--list``'s tables for the cells :obj:`items` (one
    cell, or a total): runs, cost units, seconds here (:func:`here_s`) and
    on the last GPU."""
    units = sum(i.units for i in items)
    return (k, label, str(sum(len(i.left) for i in items)), f'{units:.3g}',
            duration(here_s(items, rate, stopped)),
            duration(gpu.estimate(units, len(items))))


def show_section(what: str, items: List[Pending], rate: Rate, gpu: Rate,
                 stopped: Dict[str, Dict[str, Any]],
                 after: Optional[str] = None) -> None:
    r"""Prints the cells :obj:`items` of one kind of work (:obj:`what`)
    with their seconds here (:obj:`rate`, :obj:`stopped`: :func:`here_s`)
    and on the last GPU, then :obj:`after`."""
    runs = sum(len(i.left) for i in items)
    remake = what == REMAKE_WHAT
    print(f"\n{len(items)} cells {'to remake' if remake else 'pending'} "
          f"({what}), {runs} runs to train{' again' if remake else ''}, "
          f'{duration(here_s(items, rate, stopped))} here')
    if not items:
        return
    table([('#', 'cell', 'runs', 'units', 'here', 'last GPU'),
           *(row(str(k), i.label, [i], rate, gpu, stopped)
             for k, i in enumerate(items, start=1)),
           row('', 'total', items, rate, gpu, stopped)])
    command = background(what)
    if command:
        print(f'start it here, in the background (one such process per '
              f'free core; they share the folder):\n  {command}')
    if after:
        print(f'({after})')


def show_totals(plan: Plan, gpu: Rate) -> None:
    r"""Prints the cells listed per kind of work (GPU work, CPU work, to
    remake) with their runs and seconds here and on the last GPU; an
    unmarked cell counts as :func:`~gnorm.study.queue.plan.classed`
    says."""
    kinds_: Dict[str, List[Pending]] = {WORK['gpu']: [], WORK['cpu']: [],
                                        'to remake': []}
    for _, items, _ in plan.sections:
        for i in items:
            kind = 'to remake' if i.remake else classed(i, plan.cpu)
            kinds_[kind].append(i)
    print(f'\nwhat is listed, by kind of work (a cell no table.not_run '
          f'entry marks is CPU work where this machine\'s CPU takes at '
          f'most {duration(CPU_WORK_S)} for it, else GPU work):')
    table([('cells', 'kind', 'runs', 'units', 'here', 'last GPU'),
           *(row(str(len(items)), k, items, plan.rate, gpu, plan.stopped)
             for k, items in kinds_.items())])


def why_given_up(item: Pending) -> str:
    r"""Where the reason its runs were given up is written: the
    ``results.json`` of the first that has one, else what to do (the
    failures are counted in the queue's ``.queue.json``)."""
    for run in item.given_up:
        path = Path(run['dir']) / 'results.json'
        if path.is_file():
            return f'{path} says why'
    return ('no results.json says why; delete their counts under "failed '
            'runs" in the .queue.json of --out to queue them again')


def show(plan: Plan) -> None:
    r"""Prints the pending cells of every section of :obj:`plan` in the
    queue's order, with their seconds on this device and on the last
    measured GPU, the runs given up and the totals per kind of work."""
    gpu = last_gpu(plan.calibration)
    print(f'here ({plan.device}: {plan.rate.name or "no CUDA device"}): '
          f'{plan.rate.said()}')
    print(f'last measured GPU: {gpu.name}, {gpu.prior:.3g} s per unit'
          if gpu.name else 'last measured GPU: none (conf/queue.yaml '
          'calibration, committed runs)')
    for what, items, after in plan.sections:
        show_section(what, items, plan.rate, gpu, plan.stopped, after)
    for item in plan.given_up:
        print(f'given up: {item.label}: {len(item.given_up)} runs failed '
              f'{MAX_FAILURES} times; not queued again ({why_given_up(item)})')
    if not any(items for _, items, _ in plan.sections):
        print('(--work gpu or cpu takes the cells table.not_run marks as '
              'GPU or CPU work; --datasets, --rows, --depths select cells)')
        return
    show_totals(plan, gpu)


def head(plan: Plan, budget_s: float) -> str:
    r"""The first line of a call that trains."""
    return (f'{len(plan.items)} cells pending ({plan.what}), '
            f'{sum(len(i.left) for i in plan.items)} runs; '
            + (f'budget {duration(budget_s)} (+ {MARGIN_S:g} s to stop)'
               if budget_s < INF else 'no time limit')
            + f' on {plan.device} ({plan.rate.name}): {plan.rate.said()}')
