r"""Multiruns that train many runs as one model.

:class:`BatchedSweeper` (``hydra/sweeper=gnorm``, the default of
``python -m gnorm.train -m``) expands a sweep as Hydra's basic sweeper does,
then groups the runs that differ only in seed, split and norm scale (the
task's ``batch_key``) into batches of up to ``batch_runs`` runs (``auto``:
a whole group; the job splits it to what memory holds). Each batch is one
job of the launcher (the basic one, ``hydra/launcher=joblib`` or
``submitit_slurm``): its overrides are those of its first run plus
``batch_file``, a JSON file next to ``multirun.yaml`` that lists every run
of the batch (config, overrides, group choices, output folder). The job
trains them as one model (:func:`gnorm.train.run.train_runs`) and writes
each run's ``results.json`` into the folder an unbatched sweep would have
given it. With ``batch_runs=1``, or for runs that train alone, the jobs
are those of the basic sweeper.
"""
import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from gnorm.train.common import (
    finished_run,
    group_batches,
    is_int,
    quoted,
    run_names,
    task_module,
)
from gnorm.train.hydra_adapter import job_overrides

log = logging.getLogger(__name__)

BATCH_FOLDER = '.batches'


def _batch_size(cfg: DictConfig) -> Optional[int]:
    r"""The ``batch_runs`` of :obj:`cfg`: :obj:`None` for ``auto``, 1 for a
    bad value."""
    size = cfg.get('batch_runs', 1)
    if size == 'auto':
        return None
    return size if is_int(size) and size > 0 else 1


class BatchedSweeper(Sweeper):
    r"""Hydra's basic sweeper, each launched job training a batch of runs
    as one model (see the module's documentation).

    Args:
        max_batch_size (int, optional): Not used (runs are grouped by
            ``batch_runs``); the key of Hydra's basic sweeper.
            (default: :obj:`None`)
        params (dict, optional): Overrides swept in every multirun, e.g.
            ``{'seed': '0,1,2'}``. (default: :obj:`None`)
    """
    def __init__(self, max_batch_size: Optional[int] = None,
                 params: Optional[Dict[str, str]] = None):
        super().__init__()
        self.params = params or {}
        self.hydra_context: Optional[HydraContext] = None
        self.config: Optional[DictConfig] = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext,
              task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function,
            config=config)

    def _run(self, overrides: List[str], num: int) -> Dict[str, Any]:
        r"""Run :obj:`num` of the sweep: its config, output folder and
        what its ``results.json`` records of Hydra."""
        loader = self.hydra_context.config_loader
        config = loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.num = num
            config.hydra.job.id = str(num)
        HydraConfig.instance().set_config(config)
        sweep = config.hydra.sweep
        folder = Path(str(sweep.dir)).absolute() / str(sweep.subdir)
        hydra = OmegaConf.to_container(config.hydra, resolve=False,
                                       enum_to_str=True)
        hydra['runtime']['output_dir'] = str(folder)  # as Hydra records it
        choices = {k: v for k, v in config.hydra.runtime.choices.items()
                   if not k.startswith('hydra/') and k != 'hydra'}
        task = OmegaConf.masked_copy(config, [k for k in config
                                              if k != 'hydra'])
        return {'overrides': list(overrides), 'subdir': str(sweep.subdir),
                'dir': str(folder),
                'config': OmegaConf.to_container(task, resolve=False),
                'hydra': hydra,
                'info': {'choices': choices,
                         'names': run_names(
                             task, choices,
                             config.hydra.runtime.config_sources),
                         'overrides': list(config.hydra.overrides.task)},
                'cfg': task}

    def _batches(self, jobs: Sequence[List[str]]) -> List[List[Dict]]:
        r"""The runs of :obj:`jobs` (one override list each), unfinished
        ones only, grouped into batches."""
        runs, keys = [], []
        for num, overrides in enumerate(jobs):
            run = self._run(overrides, num)
            cfg = run['cfg']
            try:
                if cfg.get('resume', False) and finished_run(
                        Path(run['dir']) / 'results.json', cfg) is not None:
                    print(f"done already: {run['dir']}", flush=True)
                    continue
                key = task_module(cfg).batch_key(cfg)
            except Exception:  # the job itself reports it
                key = None
            runs.append(run)
            # batch_runs=1, or a bad one (the job reports it): alone
            keys.append(None if _batch_size(cfg) == 1 else key)
        return [[runs[i] for i in batch] for batch in group_batches(
            keys, lambda group: _batch_size(runs[group[0]]['cfg'])
            or len(group))]

    def sweep(self, arguments: List[str]) -> Any:
        jobs = job_overrides(self.hydra_context.config_loader, self.params,
                             arguments)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        save_sweep_config(self.config, sweep_dir)
        batches = self._batches(jobs)
        launched: List[List[str]] = []
        folder = sweep_dir / BATCH_FOLDER
        for k, batch in enumerate(batches):
            first = batch[0]
            job = list(first['overrides'])
            if len(batch) > 1:
                folder.mkdir(exist_ok=True)
                name = first['subdir'].replace('/', '_')
                path = folder / f'{name}.json'
                path.write_text(json.dumps([
                    {key: run[key] for key in ('dir', 'config', 'info',
                                               'hydra')}
                    for run in batch], indent=1) + '\n')
                job.append(f'batch_file={quoted(str(path.resolve()))}')
            job.append(f'hydra.sweep.subdir={quoted(first["subdir"])}')
            launched.append(job)
        runs = sum(len(b) for b in batches)
        log.info('%d runs in %d jobs (%d of them trained alone)', runs,
                 len(launched), sum(len(b) == 1 for b in batches))
        if not launched:
            return []
        returns = self.launcher.launch(launched, initial_job_idx=0)
        for r in returns:
            _ = r.return_value  # re-raises a job's exception
        return [returns]


def save_sweep_config(config: DictConfig, sweep_dir: Path) -> Path:
    r"""Saves the sweep's :obj:`config` as ``multirun.yaml`` in
    :obj:`sweep_dir` and returns the path; where the folder already holds
    the ``multirun.yaml`` of another sweep (a second ``-m`` into the same
    folder), as the first free ``multirun.<n>.yaml`` (n = 2, 3...) so that
    no sweep's record is overwritten. The same sweep again (e.g. resumed)
    writes no new file."""
    text = OmegaConf.to_yaml(config)
    path, n = sweep_dir / 'multirun.yaml', 1
    while path.is_file() and path.read_text() != text:
        n += 1
        path = sweep_dir / f'multirun.{n}.yaml'
    if n > 1 and not path.is_file():
        log.info('%s holds the config of another sweep: this one is '
                 'recorded in %s', sweep_dir / 'multirun.yaml', path.name)
    path.write_text(text)
    return path


def load_batch(path: str) -> List[Dict[str, Any]]:
    r"""The runs listed in the batch file :obj:`path` (written by
    :class:`BatchedSweeper`), each with its ``config`` (a
    :class:`DictConfig` without ``batch_file``), ``dir`` (output folder),
    ``info`` (group choices and overrides for ``results.json``) and
    ``hydra`` (the ``hydra`` node of its config)."""
    runs = json.loads(Path(path).read_text())
    for run in runs:
        run['config'] = OmegaConf.create(run['config'])
        with open_dict(run['config']):
            run['config'].batch_file = None
    return runs
