r"""The command line, ``python -m gnorm.train`` and ``gnorm-train``: a
thin :func:`hydra.main` wrapper around :func:`gnorm.train.run.train`, the
checks and ``--help`` of :mod:`gnorm.train.arguments` before Hydra starts,
one ``error:`` line per failed job, and clean stops on SIGINT and SIGTERM.
"""
import logging
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from gnorm.errors import ConfigError, GnormError, Interrupted
from gnorm.train.arguments import (
    check_choices,
    check_keys,
    check_launchers,
    check_output_folder,
    help_text,
)
from gnorm.train.common import CONF_DIR, main_process
from gnorm.train.run import train, train_runs
from gnorm.train.sweep import load_batch
from hydra_plugins.gnorm_sweeper.gnorm_sweeper import GnormSweeper

log = logging.getLogger(__name__)

# Failures of the jobs of this process: (exit code, message).
_FAILURES: List[tuple] = []


def job_label() -> str:
    r"""``job <num> (<overrides>): `` for a job of a multirun, else
    nothing."""
    if not HydraConfig.initialized():
        return ''
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return ''
    return f"job {hc.job.num} ({' '.join(hc.overrides.task)}): "


def resume_note(cfg: DictConfig, folder: Path) -> Optional[str]:
    r"""The line that says what ``resume=true`` does for a single node run
    whose folder holds neither results nor a checkpoint (the default
    folder is new for every run): nothing, the run trains from the start;
    else :obj:`None`."""
    from gnorm.train.checkpoints import CHECKPOINT
    if not cfg.get('resume', False) or \
            cfg.dataset.get('task', 'node') != 'node' or \
            (folder / 'results.json').exists() or \
            (folder / CHECKPOINT).exists():
        return None
    return (f"note: resume=true: {folder} holds no results.json and no "
            f"{CHECKPOINT} to resume from (without hydra.run.dir each run "
            f"gets a new folder): this run trains from the start")


def error_line(error: GnormError,
               runs: Optional[List[Dict[str, Any]]] = None) -> str:
    r"""The ``error: ...`` line of a failed job, labelled with the job
    (:func:`job_label`). For a job of gnorm's sweeper that trains the
    batch :obj:`runs`, whose label would name its first run: the run the
    error is about (its folder starts the message), labelled as that run's
    job of an unbatched sweep would be."""
    text = str(error)
    for run in runs or []:
        folder = f"{Path(run['dir']).absolute()}: "
        if text.startswith(folder):
            return (f"error: job {run['hydra']['job']['num']} "
                    f"({' '.join(run['info']['overrides'])}): "
                    f"{text[len(folder):]}")
    return f'error: {job_label()}{text}'


@hydra.main(version_base='1.3', config_path=str(CONF_DIR), config_name='train')
def main(cfg: DictConfig) -> Optional[float]:
    r"""The command line: runs :func:`train` (or the runs of a batch file
    of gnorm's sweeper), turns a :class:`~gnorm.errors.GnormError` into
    ``error: ...`` on stderr and removes the folders of runs refused before
    training (those without ``results.json``); returns the validation
    metric (for sweepers)."""
    runs = load_batch(cfg.batch_file) if cfg.get('batch_file') else None
    folders = ([r['dir'] for r in runs] if runs is not None
               else [HydraConfig.get().runtime.output_dir])
    try:
        if runs is not None:  # a job of gnorm's sweeper: many runs
            results = train_batch(runs)[0]
        else:
            note = resume_note(cfg, Path(folders[0]))
            if note is not None and not job_label():  # a single run
                print(note, file=sys.stderr, flush=True)
            results = train(cfg)
        return results.get('val_metric', results.get('val_acc'))
    except GnormError as e:
        print(error_line(e, runs), file=sys.stderr, flush=True)
        for folder in folders:
            remove_refused(Path(folder))
        # Later jobs of a multirun still run; the exit status reports it.
        _FAILURES.append((e.exit_code, str(e)))
        return None


def remove_refused(folder: Path) -> None:
    r"""Removes what Hydra and gnorm wrote into the folder of a run refused
    before training (no ``results.json``): ``.hydra/`` and ``train.log``,
    then the folder and its parents inside the working directory while
    they are empty."""
    if (folder / 'results.json').exists():
        return
    shutil.rmtree(folder / '.hydra', ignore_errors=True)
    (folder / 'train.log').unlink(missing_ok=True)
    cwd = Path.cwd().absolute()
    folder = folder.absolute()
    while folder != cwd and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        if cwd not in folder.parents:  # outside: the run folder only
            break
        folder = folder.parent


def train_batch(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    r"""Trains the runs of a batch file of
    :class:`gnorm.train.sweep.BatchedSweeper` (see
    :func:`gnorm.train.sweep.load_batch`) as one model, each recorded in
    its folder as a run of its own: ``.hydra/`` (``config.yaml``,
    ``overrides.yaml``, ``hydra.yaml``), ``train.log`` (the job's log) and
    ``results.json``."""
    own = Path(HydraConfig.get().runtime.output_dir).absolute()
    logs = []
    if main_process():
        job_log = next((h for h in logging.getLogger().handlers
                        if isinstance(h, logging.FileHandler)), None)
        seen = {own}  # a folder named twice gets one log
        for run in runs:
            folder = Path(run['dir'])
            hydra_dir = folder / '.hydra'
            hydra_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(run['config'], hydra_dir / 'config.yaml')
            OmegaConf.save(OmegaConf.create(run['info']['overrides']),
                           hydra_dir / 'overrides.yaml')
            OmegaConf.save(OmegaConf.create({'hydra': run['hydra']}),
                           hydra_dir / 'hydra.yaml')
            if job_log is not None and folder.absolute() not in seen:
                seen.add(folder.absolute())
                handler = logging.FileHandler(folder / 'train.log')
                handler.setFormatter(job_log.formatter)
                handler.setLevel(job_log.level)
                logs.append(handler)
    root = logging.getLogger()
    for handler in logs:
        root.addHandler(handler)
    try:
        log.info('training %d runs as one model: %s', len(runs),
                 ', '.join(Path(r['dir']).name for r in runs))
        return train_runs([r['config'] for r in runs],
                          [r['dir'] for r in runs],
                          [r['info'] for r in runs])
    finally:
        for handler in logs:
            root.removeHandler(handler)
            handler.close()


def _interrupt(signum: int, frame: Any) -> None:
    r"""Signal handler: stops the run with :class:`Interrupted` (further
    signals are ignored while the results are written)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def register_sweeper() -> None:
    r"""Makes ``hydra/sweeper=gnorm`` known to Hydra, which finds plugins
    by walking the ``hydra_plugins`` folders on the path: an editable
    install of gnorm has none."""
    Plugins.instance().register(GnormSweeper)


def cli() -> None:
    r"""Entry point of ``python -m gnorm.train`` and ``gnorm-train``:
    ``--help`` lists the main keys; an unknown group option or key, a
    launcher that is not installed, or an output folder that cannot be
    written, is one line (exit status 2)
    before Hydra starts; SIGINT and SIGTERM stop the
    run cleanly (exit status 130, 143); a failed job exits with its
    error's status after the other jobs of a multirun ran."""
    argv = sys.argv[1:]
    if '--help' in argv or '-h' in argv:
        print(help_text())
        return
    try:
        check_choices(argv)
        check_keys(argv)
        check_launchers(argv)
        check_output_folder(argv)
    except ConfigError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(e.exit_code)
    register_sweeper()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # A signal ignored from the start (e.g. SIGINT of a job started in
        # the background by a script) stays ignored.
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _interrupt)
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(getattr(e, 'exit_code', 128 + signal.SIGINT))
    if _FAILURES:
        sys.exit(max(code for code, _ in _FAILURES))
