r"""A lent GPU window in one command: the GPU check, then the GPU queue for
the time left, each written into one folder as it goes.

    python experiments/gpu_window.py --out DIR --budget-s 540   # on the GPU
    python experiments/gpu_window.py --bring-back DIR                     # here, after

It runs ``experiments/gpu_check.py`` into DIR within the budget: the
full check where the GPU-path code changed since the last committed
report (its digest, :func:`gpu_check.gpu_code_digest`, differs from the
one ``experiments/results/gpu_check_<device>.md`` records), else the
quick one (every step at tiny sizes); ``--quick`` or ``--full`` decides
instead, ``--check-steps`` runs only those steps (``''`` for none). The
check's report says which it ran and why. Then it runs then ``python -m gnorm.study queue`` (:mod:`gnorm.study.queue.command`:
the cells gnorm's studies leave for a GPU, most wanted first) for the
seconds left, its runs into ``DIR/runs``; with ``--pack`` into a folder
of its own and ``DIR/runs.tgz`` rewritten after every cell (for a device
that sends back a few flat files); ``--finished FILE``: the runs finished
where the runs folders are (``python -m gnorm.study queue
--write-finished FILE`` there). A call cut off keeps every finished step
and cell, and the checkpoints of the runs it stopped (the next window
resumes them). Ctrl-C or SIGTERM ends the check with every process it
started (it runs in a process group of its own) and exits 130 or 143.
The last line says how to bring the results back: ``--bring-back DIR``
copies the runs into the studies' runs folders
(``experiments/runs/<name>``; a finished run there is kept), rewrites the
reports of the studies it touched (``--report-only``), copies the check's
report into ``experiments/results`` and the GPU's seconds per cost unit
and set-up of a cell into ``conf/queue.yaml``.

On CUDA the queue replays its node steps as CUDA graphs (``--cuda-graph``,
:mod:`gnorm.train.graphed`) where this window's check ran the CUDA suite
and it passed: the suite holds the test that the graphed step equals the
eager one on this GPU. ``--eager`` keeps the queue eager.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

# The window's budget counts from here when run as a script (before torch
# imports: a lent device's time limit counts them).
STARTED = time.monotonic()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm

from gnorm.bench import read_jsonl  # noqa: E402
from gnorm.study.queue import command as queue  # noqa: E402
from gnorm.study.queue.config import (CONFIG, Calibration,  # noqa: E402
                                      calibration_line, read_config)
from gnorm.study.queue.plan import WORK, load_specs  # noqa: E402
from gnorm.study.runs.record import rates, read_record  # noqa: E402
from gnorm.study.runs.runner import sigterm_interrupts  # noqa: E402
from gnorm.train.checkpoints import CHECKPOINT  # noqa: E402

from experiments import gpu_check  # noqa: E402

RESULTS = ROOT / 'experiments' / 'results'
ARCHIVE = 'runs.tgz'


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        description=' '.join(__doc__.split('\n\n')[0].split()))
    found.add_argument('--device', choices=('cuda', 'cpu'),
                       help='default: cuda when visible, else cpu')
    how = found.add_mutually_exclusive_group()
    how.add_argument('--quick', action='store_true', default=None,
                     help='the GPU check at tiny sizes (default: quick '
                     'unless the GPU-path code changed since the last '
                     'committed report)')
    how.add_argument('--full', dest='quick', action='store_false',
                     help='the full GPU check')
    found.add_argument('--check-steps', metavar='LETTERS', help='the GPU check\'s steps '
                       '(its --steps; default: all, \'\' for none)')
    found.add_argument('--out', type=Path, help='the folder of the window')
    found.add_argument('--budget-s', type=float, default=540.0, metavar='S',
                       help='seconds for the window (default: 540)')
    found.add_argument('--pack', action='store_true', help='the runs into '
                       f'<out>/{ARCHIVE}, rewritten after every cell')
    found.add_argument('--studies', nargs='+', metavar='NAME',
                       help='the queue\'s studies (default: gnorm\'s)')
    found.add_argument('--work', choices=tuple(WORK),
                       help='the queue\'s cells: marked GPU or CPU work '
                       '(default: the device\'s)')
    found.add_argument('--threads', type=int, help='CPU threads of the runs')
    found.add_argument('--config', type=Path, help='the queue\'s --config: '
                       'its priority and calibration (default: '
                       'conf/queue.yaml)')
    found.add_argument('--eager', action='store_true', help='the queue '
                       'trains eagerly even where the CUDA suite passed '
                       '(default: CUDA graphs then)')
    found.add_argument('--finished', type=Path, metavar='FILE',
                       help='the queue\'s --finished: runs finished where the '
                       'runs folders are (python -m gnorm.study queue '
                       '--write-finished FILE wrote it)')
    found.add_argument('--bring-back', type=Path, metavar='DIR',
                       help='bring the results of a window in DIR back '
                       'into this checkout; run nothing else')
    return found


# ---------------------------------------------------------------- window


def check_kind(args: argparse.Namespace,
               results: Path = RESULTS) -> Tuple[bool, str]:
    r"""Whether the check is quick, and why: as ``--quick`` or ``--full``
    say, else quick where the GPU-path code is the code of the last
    committed report on this device (equal digests), full where it
    changed or no report records a digest."""
    if args.quick is not None:
        return args.quick, '--quick' if args.quick else '--full'
    report = results / f'gpu_check_{args.device}.md'
    now, then = gpu_check.gpu_code_digest(), gpu_check.reported_digest(
        report)
    if then is None:
        return False, (f'{report.name} records no GPU-path code digest: '
                       'the full check')
    if now != then:
        return False, (f'the GPU-path code changed since {report.name} '
                       f'({then} -> {now}): the full check')
    return True, (f'the GPU-path code is that of {report.name} ({now}): '
                  'the quick check')


def run_check(args: argparse.Namespace, seconds: float) -> int:
    r"""``experiments/gpu_check.py`` into ``--out`` for at most
    :obj:`seconds`; its exit status (124 when cut off: its report keeps
    the steps that finished)."""
    from gnorm.bench import child_env
    if args.check_steps == '' or seconds <= 0:
        return 0
    quick, why = check_kind(args)
    print(f'GPU check: {why}', flush=True)
    cmd = check_command(args, quick, why)
    try:
        return run_group(cmd, seconds, cwd=ROOT, env=child_env(ROOT))
    except subprocess.TimeoutExpired:
        print(f'the GPU check was cut off after {seconds:.0f} s',
              flush=True)
        return 124


def run_group(cmd: List[str], seconds: float, **kwargs) -> int:
    r"""Runs :obj:`cmd` in a process group of its own (:obj:`kwargs`: of
    :class:`subprocess.Popen`) for at most :obj:`seconds`; returns its
    exit status, or raises :class:`subprocess.TimeoutExpired`. However
    the wait ends (its end, the time limit, Ctrl-C, SIGTERM), the group
    is ended (:func:`end_group`): no child of the command outlives it."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    try:
        return proc.wait(timeout=seconds)
    finally:
        end_group(proc)


def end_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    r"""Ends the process group that :obj:`proc` leads: SIGTERM to all of
    it, :obj:`grace_s` for :obj:`proc` to exit, then SIGKILL to what is
    left of the group; :obj:`proc` is waited for."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:  # the group is gone
            break
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    proc.wait()


def check_command(args: argparse.Namespace, quick: bool, why: str
                  ) -> List[str]:
    r"""The command line of ``experiments/gpu_check.py`` for the window
    :obj:`args`: the reason :obj:`why` as one argument (``--why=...``, so
    that a reason such as ``--quick`` is not read as an option)."""
    return [sys.executable, str(ROOT / 'experiments' / 'gpu_check.py'),
            '--device', args.device, '--out', str(args.out), f'--why={why}',
            *(['--quick'] if quick else []),
            *(['--steps', args.check_steps] if args.check_steps else [])]


def graphed(args: argparse.Namespace) -> Tuple[bool, str]:
    r"""Whether the queue replays its steps as CUDA graphs, and why: on
    CUDA, without ``--eager``, where this window's check ran the CUDA suite
    (step a of ``<out>/gpu_check_cuda.jsonl``) and it passed."""
    if args.device != 'cuda' or args.eager:
        return False, ('--eager' if args.eager else 'not on CUDA')
    suite = next((r for r in read_jsonl(args.out / 'gpu_check_cuda.jsonl')
                  if r.get('step') == 'a'), None)
    if suite is None:
        return False, 'this window ran no CUDA suite: eager steps'
    if suite.get('status') != 'ok':
        return False, (f"the CUDA suite {suite.get('status')}: eager "
                       f"steps")
    return True, ('the CUDA suite passed (the graphed step equals the eager '
                  'one here): the steps replay as CUDA graphs')


def packed_runs(out: Path) -> Path:
    r"""The runs folder of a window into :obj:`out` with ``--pack``: a
    folder of its own under the temporary folder."""
    tag = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f'gnorm-window-{tag}' / 'runs'


def pack(runs: Path, archive: Path) -> None:
    r""":obj:`runs` as ``runs/...`` in the gzipped tar :obj:`archive`,
    replaced at once (a cut-off call keeps the last whole one), but the
    checkpoints of finished runs: a stopped run's goes on to the next
    window, which resumes it."""
    def needed(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        path = runs / Path(info.name).relative_to('runs')
        return None if path.name == CHECKPOINT and finished(path.parent) \
            else info
    tmp = archive.with_name(archive.name + '.tmp')
    with tarfile.open(tmp, 'w:gz') as tar:
        if runs.is_dir():
            tar.add(runs, arcname='runs', filter=needed)
    tmp.replace(archive)


def unpack(archive: Path, runs: Path) -> None:
    r"""The runs of an earlier window's :obj:`archive` (``runs/...``) into
    :obj:`runs`, before the queue plans: it trains none of them again,
    and the archive it rewrites holds them too (it only grows)."""
    if not archive.is_file():
        return
    runs.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(runs.parent, **({'filter': 'data'} if hasattr(
            tarfile, 'data_filter') else {}))
    print(f'GPU queue: the runs of {archive} go on from {runs}', flush=True)


def queue_args(args: argparse.Namespace, runs: Path, seconds: float,
               cuda_graph: bool = False) -> List[str]:
    r"""The queue's command line for :obj:`seconds` into :obj:`runs`."""
    found = ['--device', args.device, '--budget-s', f'{max(seconds, 0):.1f}',
             '--out', str(runs), *(['--cuda-graph'] if cuda_graph else [])]
    for key in ('studies', 'work', 'threads', 'finished', 'config'):
        value = getattr(args, key)
        if value is not None:
            found += [f'--{key}', *map(str, value if isinstance(value, list)
                                       else [value])]
    return found


def window(args: argparse.Namespace, specs: Optional[Sequence] = None,
           start: Optional[float] = None) -> int:
    r"""The GPU check, then the queue for the time left; its exit status:
    the queue's, else 1 where the check failed (not where it was cut off
    at the budget)."""
    import torch
    start = time.monotonic() if start is None else start
    if args.device is None:
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    args.out.mkdir(parents=True, exist_ok=True)
    checked = run_check(args, args.budget_s - (time.monotonic() - start))
    left = args.budget_s - (time.monotonic() - start)
    runs = packed_runs(args.out) if args.pack else args.out / 'runs'
    if args.pack:
        unpack(args.out / ARCHIVE, runs)
    after = (lambda: pack(runs, args.out / ARCHIVE)) if args.pack else None
    replay, why = graphed(args)
    print(f'GPU queue: {why}', flush=True)
    status = queue.main(queue_args(args, runs, left, replay), specs, after)
    if args.pack:
        pack(runs, args.out / ARCHIVE)
    return status or int(checked not in (0, 124))


# ------------------------------------------------------------ bring back


def runs_of(folder: Path, tmp: Path) -> Path:
    r"""The runs of the window :obj:`folder`: ``runs/``, else those of
    ``runs.tgz`` unpacked into :obj:`tmp`."""
    if (folder / 'runs').is_dir():
        return folder / 'runs'
    if not (folder / ARCHIVE).is_file():
        raise SystemExit(f'error: {folder} holds neither runs/ nor '
                         f'{ARCHIVE}')
    unpack(folder / ARCHIVE, tmp / 'runs')
    return tmp / 'runs'


def finished(folder: Path) -> bool:
    r"""Whether :obj:`folder` holds a run that finished (``status: ok``)."""
    import json
    path = folder / 'results.json'
    try:
        return json.loads(path.read_text()).get('status') == 'ok'
    except (OSError, ValueError):
        return False


def copy_runs(runs: Path, specs: Sequence) -> List:
    r"""Copies each finished run of ``runs/<runs folder>/`` into the runs
    folder of its study (a finished run there is kept); returns the
    studies whose runs folder got runs."""
    by_name: Dict[str, Path] = {}
    for spec in specs:
        by_name.setdefault(spec.runs_dir().name, spec.runs_dir())
    copied: Dict[str, int] = {}
    for result in sorted(runs.glob('*/*/results.json')):
        run, name = result.parent, result.parent.parent.name
        target = by_name.get(name)
        if target is None:
            print(f'skipped {run}: no study keeps its runs in {name}/')
        elif finished(run) and not finished(target / run.name):
            shutil.copytree(run, target / run.name, dirs_exist_ok=True)
            copied[name] = copied.get(name, 0) + 1
    for name, count in copied.items():
        print(f'copied {count} runs into {by_name[name]}')
    return [s for s in specs if s.runs_dir().name in copied]


def copy_check(folder: Path, results: Path) -> List[Path]:
    r"""Copies the GPU check's report (``gpu_check_*``) into
    :obj:`results`."""
    copied = []
    for path in sorted(folder.glob('gpu_check_*')):
        copied.append(Path(shutil.copy2(path, results / path.name)))
    return copied


def calibrate(runs: Path, config: Path) -> Dict[str, float]:
    r"""Writes the seconds per unit and the set-up of a cell of each GPU
    in the queue's record of :obj:`runs` (its steady rate and the mean
    set-up of its cells, :class:`gnorm.study.queue.config.Calibration`)
    into ``calibration:`` of :obj:`config` (the newest last); returns
    those written."""
    measured = {name: Calibration(entry['seconds'] / entry['units'],
                                  entry.get('setup_s') or 0.0)
                for name, entry in rates(read_record(runs)).items()
                if entry.get('device') == 'cuda' and entry.get('units')}
    if not measured:
        return {}
    known = read_config(config)['calibration']
    for name in measured:
        known.pop(name, None)
    known.update(measured)
    line = calibration_line(known)
    config.write_text(re.sub(r'^calibration:.*$', lambda _: line,
                             config.read_text(), flags=re.M))
    return measured


def bring_back(folder: Path, specs: Optional[Sequence] = None,
               results: Path = RESULTS, config: Path = CONFIG) -> int:
    r"""Brings the window :obj:`folder` back (see the module's text)."""
    from gnorm.study.cli import main as study
    specs = list(specs or load_specs())
    with tempfile.TemporaryDirectory(prefix='gnorm-bring-back-') as tmp:
        runs = runs_of(folder, Path(tmp))
        status = 0
        for spec in copy_runs(runs, specs):
            ref = spec.experiment if spec.own else str(spec.source)
            status = study([ref, '--report-only']) or status
        for name, value in calibrate(runs, config).items():
            print(f'{config}: calibration of {name}: {value:.3g} s per '
                  f'unit + {value.setup_s:.3g} s set-up a cell')
    for path in copy_check(folder, results):
        print(f'copied {path}')
    return status


def main(argv: Optional[Sequence[str]] = None,
         specs: Optional[Sequence] = None,
         start: Optional[float] = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.bring_back is not None:
        return bring_back(args.bring_back, specs)
    if args.out is None:
        parser().error('--out DIR is required (or --bring-back DIR)')
    try:
        with sigterm_interrupts():  # as Ctrl-C: the check's group ends
            status = window(args, specs, start)
    except KeyboardInterrupt as e:
        print('interrupted: what finished is kept', file=sys.stderr)
        status = getattr(e, 'exit_code', 130)  # 143 for SIGTERM
    print(f'bring the results back: python experiments/gpu_window.py '
          f'--bring-back {args.out}', flush=True)
    return status


if __name__ == '__main__':
    sys.exit(main(start=STARTED))
