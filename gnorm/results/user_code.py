r"""Which code of the user's made a run: the modules outside gnorm that
its config names through a ``_target_`` (``norm._target_=mynorm.HalfLN``),
recorded with a hash of their source (``source.user_code`` in
``results.json``: ``{module: {path, sha256}}``), so that ``resume`` and
``python -m gnorm.study`` train a run again once such a file changed, and
a report names the files that made its runs.

The rule, by file: a module is the user's where its file lies neither in
gnorm's package folder (gnorm's own code: ``source.commit`` says which),
nor in a ``site-packages`` or ``dist-packages`` folder (torch,
torch_geometric, any installed package), nor in Python's standard
library; modules without a file (built-in ones) are no one's. Every
``_target_`` of the whole resolved config counts; for each, the module
its dotted path names (its file found without running it, so that an
edit that breaks the module still counts as a change) and, where that
module only re-exports it, the module that defines the class or
function. The hash is of the module's file alone: a module of the user's
that it imports in turn is not followed (name it through a ``_target_``
to have it counted).
"""
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sysconfig
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

# gnorm's package folder; the standard library's folders.
_GNORM = Path(__file__).resolve().parents[1]
_STDLIB = tuple(dict.fromkeys(Path(p).resolve() for p in (
    sysconfig.get_paths().get('stdlib'),
    sysconfig.get_paths().get('platstdlib')) if p))
_INSTALLED = ('site-packages', 'dist-packages')


def is_user_file(path: Any) -> bool:
    r"""Whether the module file :obj:`path` is the user's code (see the
    module's rule): outside gnorm's package folder, any ``site-packages``
    or ``dist-packages`` folder and the standard library."""
    path = Path(path).resolve()
    if path.is_relative_to(_GNORM) or set(_INSTALLED) & set(path.parts):
        return False
    return not any(path.is_relative_to(folder) for folder in _STDLIB)


def targets(config: Any) -> Iterator[str]:
    r"""Every ``_target_`` of the nested dict (and lists) :obj:`config`."""
    if isinstance(config, dict):
        for key, value in config.items():
            if key == '_target_' and isinstance(value, str):
                yield value
            else:
                yield from targets(value)
    elif isinstance(config, list):
        for value in config:
            yield from targets(value)


def _origin(spec: Any) -> Optional[Path]:
    r"""The file of the module :obj:`spec` (:obj:`None`: built-in, a
    namespace package)."""
    origin = getattr(spec, 'origin', None)
    return Path(origin).resolve() if origin and Path(origin).is_file() \
        else None


@functools.lru_cache(maxsize=None)
def _installed(top: str) -> bool:
    r"""Whether the top-level module or package :obj:`top` lies where no
    code of the user's does (gnorm, torch: nothing of theirs is imported
    to tell)."""
    try:
        origin = _origin(importlib.util.find_spec(top))
    except (ImportError, ValueError):
        return False
    return origin is not None and not is_user_file(origin)


def _named_module(target: str) -> Optional[Tuple[str, Path]]:
    r"""The module the dotted :obj:`target` names and its file, found
    without running it (only the packages above it are imported): the
    last module of its path; :obj:`None` where none is found."""
    parts, found = target.split('.'), None
    for k in range(1, len(parts)):
        name = '.'.join(parts[:k])
        try:
            spec = importlib.util.find_spec(name)
        except Exception:  # a package above it fails: the run says it
            break
        if spec is None:
            break
        if _origin(spec) is not None:
            found = (name, _origin(spec))
        if spec.submodule_search_locations is None:
            break  # a module: the rest of the path are its attributes
    return found


def target_modules(target: str) -> Dict[str, Path]:
    r"""The user's modules of :obj:`target` (a ``_target_``) and their
    files: the module its dotted path names (its file found even where it
    no longer imports, e.g. after an edit) and, where that one imports
    and only re-exports the object, the module defining it; those whose
    file is the user's (:func:`is_user_file`)."""
    if _installed(target.split('.')[0]):
        return {}
    named = _named_module(target)
    if named is None:
        return {}
    found = dict([named])
    try:
        obj = importlib.import_module(named[0])
        for name in target.split('.')[named[0].count('.') + 1:]:
            obj = getattr(obj, name)
        defining = inspect.getmodule(obj)
    except Exception:  # the run that builds it says why
        defining = None
    if defining is not None and _origin(defining.__spec__) is not None:
        found[defining.__name__] = _origin(defining.__spec__)
    return {name: path for name, path in found.items()
            if is_user_file(path)}


def file_sha256(path: Path) -> str:
    r"""SHA-256 of the bytes of :obj:`path`, read each time: an edit that
    keeps the file's size within the file system's time resolution still
    counts."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def user_code(config: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    r"""The user's modules that the resolved config :obj:`config` names
    (see the module's rule), each with its file's ``path`` and
    ``sha256``, by module name, sorted; empty for gnorm's own targets."""
    found = {}
    for target in dict.fromkeys(targets(config)):
        for module, path in target_modules(target).items():
            found[module] = {'path': str(path), 'sha256': file_sha256(path)}
    return dict(sorted(found.items()))


def recorded_user_code(record: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    r"""The user code :obj:`record` (a ``results.json``) names in
    ``source.user_code``; empty for none or a record without it."""
    source = record.get('source')
    found = source.get('user_code') if isinstance(source, dict) else None
    return found if isinstance(found, dict) else {}


def file_name(module: str, entry: Dict[str, str]) -> str:
    r"""The file of the user's :obj:`module` as a report or a message names
    it: ``mynorm.py``; ``mypkg/__init__.py`` for a package."""
    name = Path(entry.get('path') or f'{module}.py').name
    return f"{module.replace('.', '/')}/{name}" if name == '__init__.py' \
        else name


def changed_user_code(record: Dict[str, Any],
                      config: Optional[Dict[str, Any]] = None) -> List[str]:
    r"""The files of the user's code whose source differs now from what
    the finished run :obj:`record` recorded (:func:`file_name`; sorted):
    a module of the resolved :obj:`config` (default: the record's) whose
    hash is another, or that the record does not name (a run made before
    gnorm recorded user code). Empty where the run's user code is the
    code of now. A module that does not import now is not compared (the
    run that would need it says why)."""
    if config is None:
        config = record.get('config') if isinstance(record.get('config'),
                                                    dict) else {}
    before = recorded_user_code(record)
    return sorted(file_name(module, entry)
                  for module, entry in user_code(config).items()
                  if (before.get(module) or {}).get('sha256')
                  != entry['sha256'])


def retraining(record: Dict[str, Any], files: List[str], where: Any) -> str:
    r"""The line that says the finished run :obj:`record` at :obj:`where`
    is trained again because the user's :obj:`files` changed
    (:func:`changed_user_code`), or were not recorded by it."""
    if not recorded_user_code(record):
        return (f"retraining: {', '.join(files)} not recorded by this run "
                f"(made before gnorm recorded the user's code) ({where})")
    return (f"retraining: {', '.join(files)} changed since this run "
            f"({where})")
