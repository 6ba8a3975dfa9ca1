r"""Checks of the folders and files that gnorm's commands write, made
before any work starts: a place that cannot be written is one line naming
it (a :class:`~gnorm.errors.ConfigError`), not a traceback after a run."""
import os
from pathlib import Path
from typing import Union

from gnorm.errors import ConfigError


def _existing(path: Path) -> Path:
    r"""The first of :obj:`path` and its parents that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_folder(path: Union[str, Path], what: str,
                 write: bool = True) -> None:
    r"""Raises :class:`~gnorm.errors.ConfigError` naming :obj:`what` (e.g.
    ``hydra.run.dir=outputs/x``, ``--out x``) if the folder :obj:`path`
    cannot be made: a regular file lies on its way or the folder is a file;
    or cannot be written: the folder (with :obj:`write`), or the parent
    where it would be made, is read-only. With :obj:`write` false, an
    existing folder may be read-only (e.g. data that is there already)."""
    path = Path(path).absolute()
    existing = _existing(path)
    if not existing.is_dir():
        where = 'is a file' if existing == path else \
            f'lies under the file {existing}'
        raise ConfigError(f"{what}: {path} {where}; pass a folder")
    if (write or existing != path) and not os.access(existing,
                                                      os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: cannot write in {existing} (read-only); "
                          f"pass a folder you can write")


def check_file(path: Union[str, Path], what: str) -> None:
    r""":func:`check_folder` for the folder of the file :obj:`path`, and
    :class:`~gnorm.errors.ConfigError` if :obj:`path` is a folder."""
    path = Path(path).absolute()
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a folder; pass a file name")
    existing = _existing(path.parent)
    if not existing.is_dir():
        raise ConfigError(f"{what}: {path} lies under the file {existing}; "
                          f"pass another path")
    check_folder(path.parent, what)
