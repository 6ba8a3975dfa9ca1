r"""Measurements in child processes: alone in a fresh process (its peak
memory its own), or importing another revision's code (:func:`code_at`)
to time it beside the working tree."""
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Sequence


class ChildFailed(RuntimeError):
    r"""A child process of :func:`run_child` exited with an error;
    ``tail`` is the last line of its standard error (``killed`` where it
    wrote none) and the message its whole standard error."""

    def __init__(self, stderr: str):
        super().__init__(stderr)
        self.tail = (stderr.strip().splitlines() or ['killed'])[-1]


def run_child(args: Sequence[str], **kwargs: Any) -> Dict[str, Any]:
    r"""Runs ``python <args>`` in a fresh process (this interpreter) and
    returns the JSON object its last line of output holds: a measurement
    made alone in its process, its peak memory its own. Raises
    :class:`ChildFailed` when the process fails. :obj:`kwargs` go to
    :func:`subprocess.run`."""
    proc = subprocess.run([sys.executable, *map(str, args)],
                          capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise ChildFailed(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_env(root: Path) -> Dict[str, str]:
    r"""This process's environment with :obj:`root` first on
    ``PYTHONPATH``: a child process run there imports that checkout's
    code."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(root), os.environ.get('PYTHONPATH')])))


def code_at(rev: str, repo: Path) -> Path:
    r"""A folder holding the files of git revision :obj:`rev` of the
    repository :obj:`repo` (``git archive``, extracted once into
    ``$TMPDIR/<name>_<commit>``), for a child process to import its code
    from (``sys.path``)."""
    commit = subprocess.run(['git', 'rev-parse', '--short', rev], cwd=repo,
                            capture_output=True, text=True,
                            check=True).stdout.strip()
    folder = Path(os.environ.get('TMPDIR', '/tmp')) / \
        f'{Path(repo).resolve().name}_{commit}'
    if not folder.is_dir():
        tmp = folder.with_name(folder.name + '.tmp')
        tmp.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(['git', 'archive', commit], cwd=repo,
                                 capture_output=True, check=True).stdout
        subprocess.run(['tar', '-x', '-C', str(tmp)], input=archive,
                       check=True)
        os.replace(tmp, folder)
    return folder


def use_code(folder: Path, package: str = 'gnorm') -> None:
    r"""Makes this process import :obj:`package` from :obj:`folder` (a
    :func:`code_at` folder) from now on: the folder goes first on
    ``sys.path`` and the package's modules imported so far are forgotten.
    What holds them already (the harness's functions a script imported)
    keeps working, so a child process can time a revision that has no
    harness with this one."""
    sys.path.insert(0, str(folder))
    for name in [m for m in sys.modules
                 if m == package or m.startswith(package + '.')]:
        del sys.modules[name]
