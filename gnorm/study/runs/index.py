r"""The runs below a folder as short records (:func:`short_record`):
what the queue, ``--dry-run`` and the committed rates read of a
``results.json`` (its status, its run identity, the user code and
``source.modified`` it records, its seconds and cost units:
:func:`run_cell`), each parsed once per content: the cache
(:mod:`gnorm.study.spec.cache`) keeps a folder's short records by the SHA-256
of each file's bytes, so a file is read whole again exactly when its
bytes changed, and a short record is never stale. Reports read the runs
in full (:func:`gnorm.results.load_runs`).
"""
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from gnorm.results.keys import record_identity
from gnorm.results.user_code import recorded_user_code, targets
from gnorm.study.runs.compose import cost, run_key
from gnorm.study.spec.cache import CODE, Store


# ------------------------------------------- a run's seconds and units


def run_units(run: Dict[str, Any]) -> Optional[int]:
    r"""The cost units of the run :obj:`run` (its ``results.json``) at
    the epochs it trained (:func:`gnorm.study.runs.compose.cost`); :obj:`None`
    where its record lacks them."""
    config, curve = run.get('config') or {}, run.get('curve') or {}
    choices = run.get('choices') or {}
    dataset = choices.get('dataset') or (run.get('dataset') or {}).get(
        'name')
    epochs = (curve.get('epoch') or [None])[-1]
    if not dataset or not epochs or not config.get('layers'):
        return None
    base = [f"norm={choices.get('norm')}", *(run.get('overrides') or [])]
    hidden = int((config.get('model') or {}).get('hidden_channels') or 32)
    return cost(dataset, int(config['layers']), base, hidden, int(epochs))


def run_machine(run: Dict[str, Any]) -> Optional[str]:
    r"""The device a run trained on by name: its GPU's, else its CPU's."""
    machine = run.get('machine') or {}
    return (machine.get('gpu') if str(run.get('device')).startswith('cuda')
            else machine.get('cpu'))


def run_seconds(run: Dict[str, Any]) -> Dict[str, float]:
    r"""A run's share of its batch's seconds: ``steady_s`` (``loop_s``,
    the epochs alone, where recorded, else ``runtime_s``) and ``setup_s``
    (the rest), each over the runs of the batch."""
    share = max(int(run.get('batch_runs') or 1), 1)
    wall = float(run['runtime_s'])
    steady = float(run.get('loop_s') or wall)
    return dict(steady_s=steady / share, setup_s=max(wall - steady, 0.0))


def run_cell(run: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    r"""The run :obj:`run` (a ``results.json``) as a cell of one run (its
    machine, device, seconds and units), or :obj:`None`: unfinished or
    without its units."""
    if run.get('status') != 'ok' or not run.get('runtime_s'):
        return None
    found = run_units(run)
    if not found or not run_machine(run):
        return None
    seconds = run_seconds(run)
    return dict(machine=run_machine(run), device=str(run['device']),
                seconds=seconds['steady_s'] + seconds['setup_s'],
                units=found, **seconds)


# ------------------------------------------------------ short records


def short_record(run: Dict[str, Any]) -> Dict[str, Any]:
    r"""What the queue and ``--dry-run`` read of :obj:`run` (a
    ``results.json``): ``status``; ``key``, its identity
    (:func:`gnorm.study.runs.compose.run_key`; :obj:`None` for a run that is
    not finished or has no config); the ``targets`` of its config and the
    ``source`` it records (``user_code``, ``modified``), to tell whether
    the user's code changed since; ``cell``, its seconds and units
    (:func:`run_cell`; :obj:`None` without)."""
    config = run.get('config')
    source = run.get('source') if isinstance(run.get('source'), dict) \
        else {}
    return dict(status=run.get('status'),
                key=(run_key(record_identity(run))
                     if run.get('status') == 'ok' and 'config' in run
                     else None),
                targets=sorted(set(targets(config))),
                source=dict(user_code=recorded_user_code(run),
                            modified=bool(source.get('modified'))),
                cell=run_cell(run))


def _parse(data: bytes) -> Dict[str, Any]:
    r"""The run of a file's bytes :obj:`data`, or one of status
    ``unreadable`` (as :func:`gnorm.results.load_runs` reads it)."""
    try:
        run = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return {'status': 'unreadable'}
    return run if isinstance(run, dict) and 'status' in run \
        else {'status': 'unreadable'}


def short_runs(folder: Path) -> List[Dict[str, Any]]:
    r"""The short record of every ``results.json`` below :obj:`folder`
    (in :func:`gnorm.results.load_runs`' order, each with its path under
    ``_path``), as the cache holds them for the bytes each file holds
    now; the others read and kept."""
    folder = Path(folder).resolve()
    store = Store('runs', f'{folder.name}-{_hash(str(folder))[:12]}',
                  [CODE, str(folder)], lambda: True)
    found, seen = [], []
    for name in _below(folder):
        path = os.path.join(folder, name)
        try:
            with open(path, 'rb') as f:
                data = f.read()
        except OSError:
            continue
        digest = _hash(data)
        seen.append(name)
        entry = store.get(name)
        if entry is None or entry[0] != digest:
            entry = [digest, short_record(_parse(data))]
            store.put(name, entry)
        found.append({**entry[1], '_path': path})
    store.keep_only(seen)
    store.save()
    return found


def _below(folder: Path) -> List[str]:
    r"""Every ``results.json`` below :obj:`folder`, relative to it, in
    the order of :func:`gnorm.results.load_runs` (by path, part by
    part)."""
    found = []
    for top, _, files in os.walk(folder):
        if 'results.json' in files:
            found.append(os.path.relpath(os.path.join(top, 'results.json'),
                                         folder))
    return sorted(found, key=lambda name: name.split(os.sep))


def _hash(data: Any) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def finished(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    r"""The finished runs of the short records :obj:`runs` by key, the
    first by path of equal ones (as :func:`gnorm.study.runs.compose.index`)."""
    found: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        if run['status'] == 'ok' and run['key'] is not None:
            found.setdefault(run['key'], run)
    return found


def changed_code(record: Dict[str, Any]) -> List[str]:
    r""":func:`gnorm.results.user_code.changed_user_code` of a full or a
    short record: the files of the user's code it names that changed
    since it was made."""
    from gnorm.results.user_code import changed_user_code
    config = record.get('config')
    if not isinstance(config, dict):  # a short record: its targets
        config = {'targets': [{'_target_': t}
                              for t in record.get('targets', [])]}
    return changed_user_code(record, config)


def modified(record: Dict[str, Any]) -> bool:
    r"""Whether the full or short :obj:`record` was made by uncommitted
    code (``source.modified``): the reports do not quote it."""
    source = record.get('source')
    return isinstance(source, dict) and bool(source.get('modified'))
