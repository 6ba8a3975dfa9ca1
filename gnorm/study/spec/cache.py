r"""A cache of what studies compute before they train, kept by content:
the checked ``table:`` of each of gnorm's studies
(:func:`gnorm.study.spec.load.load_spec`), the runs of its cells
(:func:`gnorm.study.runs.compose.compose_cells`: folders, identities, names,
widths and epochs) and the short records of ``results.json`` files
(:mod:`gnorm.study.runs.index`).

Each entry is found by what it was computed from, by content, never by
a file's address, size or time:

* a spec or a cell (:func:`context`): the bytes of every file of the
  config folder (``conf/``), of every Python file of gnorm's package and
  of its Hydra sweeper (:data:`CODE`: the code that composes, checks,
  names and identifies runs), the values of the environment variables
  the configs read (``${oc.env:NAME}``) and the versions of Python,
  Hydra and OmegaConf; a cell also by its overrides. Only gnorm's own
  studies are kept: a user's spec may name code outside gnorm. What a
  check reads outside these (the files ``table.paper`` names, the
  classes a row imports) is checked on every call.
* a short record: the SHA-256 of the file's bytes, and :data:`CODE`.

An edit of any of these is another key, so a stale entry is never read.
:data:`CODE` is hashed when this module is imported, before anything is
composed; a process writes (:meth:`Store.save`) only while gnorm's code
and the config folder still hash as its keys say, so a process whose
files were edited under it never stores what its older code computed.
An entry that does not read back from JSON exactly is not kept.

The folder: ``GNORM_CACHE``, else ``$XDG_CACHE_HOME/gnorm``, else
``~/.cache/gnorm``: ``spec/``, ``cells/`` and ``runs/``, one file per
study or runs folder holding its entries (a new key's file replaces the
study's others). It may be deleted at any time; a folder that cannot be
written leaves every call as correct as with it, and as slow as before.
"""
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

_PACKAGE = Path(__file__).resolve().parents[1]


def folder() -> Path:
    r"""The cache's folder (see the module's text)."""
    given = os.environ.get('GNORM_CACHE')
    if given:
        return Path(given)
    base = os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache'
    return Path(base) / 'gnorm'


def tree_digest(root: Path, pattern: str = '*') -> str:
    r"""SHA-256 of the names (relative to :obj:`root`) and bytes of every
    file below :obj:`root` that matches :obj:`pattern`, in name order."""
    found = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob(pattern) if p.is_file()
                       and '__pycache__' not in p.parts):
        name = path.relative_to(root).as_posix().encode()
        data = path.read_bytes()
        found.update(b'%d:%s%d:' % (len(name), name, len(data)))
        found.update(data)
    return found.hexdigest()


def code_digest() -> str:
    r""":func:`tree_digest` of gnorm's Python files and of its Hydra
    sweeper's (``hydra_plugins/gnorm_sweeper``: ``conf/train.yaml`` picks
    it), as they are now."""
    sweeper = _PACKAGE.parent / 'hydra_plugins' / 'gnorm_sweeper'
    return tree_digest(_PACKAGE, '*.py') + (
        tree_digest(sweeper, '*.py') if sweeper.is_dir() else '')


# gnorm's code as this process imported it (see the module's text).
CODE = code_digest()


def _versions() -> List[str]:
    import hydra
    import omegaconf
    return [sys.version.split()[0], hydra.__version__,
            omegaconf.__version__]


def conf_digest(conf_dir: Path) -> str:
    r""":func:`tree_digest` of every file of :obj:`conf_dir`, with the
    values of the environment variables its files read
    (``${oc.env:NAME}``)."""
    names = set()
    for path in Path(conf_dir).rglob('*.yaml'):
        names |= set(re.findall(rb'oc\.env:([A-Za-z_][A-Za-z0-9_]*)',
                                path.read_bytes()))
    env = json.dumps({n.decode(): os.environ.get(n.decode())
                      for n in sorted(names)})
    return hashlib.sha256(
        (tree_digest(conf_dir) + env).encode()).hexdigest()


def context(conf_dir: Path) -> List[str]:
    r"""The key of what is composed from :obj:`conf_dir` in this process:
    :data:`CODE`, :func:`conf_digest` and the versions."""
    return [CODE, conf_digest(conf_dir), *_versions()]


def exact(value: Any) -> bool:
    r"""Whether :obj:`value` reads back from JSON as itself (no integer
    keys made text, no tuples made lists)."""
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def _name(text: str) -> str:
    return re.sub(r'[^A-Za-z0-9_.+=-]', '_', text)[:80]


class Store:
    r"""The entries of one study or folder (:obj:`name`) of one
    :obj:`kind` under :obj:`key` (a JSON list: what they were computed
    from), in one file of :func:`folder`; an entry of another key is never
    read. :obj:`still`: whether the inputs of :obj:`key` still hash as
    it says (checked before writing), e.g. ``lambda: context(conf) ==
    key``."""

    def __init__(self, kind: str, name: str, key: List[Any],
                 still: Callable[[], bool]):
        self.key, self.still = key, still
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
        self.path = folder() / kind / f'{_name(name)}-{digest}.json'
        self.entries: Dict[str, Any] = {}
        self.changed = False
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(found, dict) and found.get('key') == key and \
                isinstance(found.get('entries'), dict):
            self.entries = found['entries']

    def get(self, entry: str) -> Optional[Any]:
        return self.entries.get(entry)

    def put(self, entry: str, value: Any) -> None:
        r"""Keeps :obj:`value` under :obj:`entry` where it reads back
        from JSON exactly (:func:`exact`)."""
        if exact(value) and self.entries.get(entry) != value:
            self.entries[entry] = value
            self.changed = True

    def keep_only(self, entries: Any) -> None:
        r"""Drops the entries not among :obj:`entries`."""
        gone = set(self.entries) - set(entries)
        for entry in gone:
            del self.entries[entry]
        self.changed |= bool(gone)

    def save(self) -> None:
        r"""Writes the entries (whole, through a temporary file), where
        any changed and :obj:`still` holds, and removes the files of this
        study's other keys; a folder that cannot be written is left as
        it is."""
        if not self.changed or not self.still() or code_digest() != CODE:
            return
        where, tmp = self.path.parent, None
        try:
            where.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=where, prefix='.tmp-')
            with os.fdopen(fd, 'w') as f:
                json.dump({'key': self.key, 'entries': self.entries}, f)
            os.replace(tmp, self.path)
            stem = self.path.name.rsplit('-', 1)[0]
            for other in where.glob(f'{stem}-*.json'):
                if other != self.path and \
                        other.name.rsplit('-', 1)[0] == stem:
                    other.unlink(missing_ok=True)
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return
        self.changed = False
