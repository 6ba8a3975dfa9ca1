r"""Errors that the command line reports as one line (``error: ...``) and a
non-zero exit status, without a traceback. Their message names the problem
and the fix; and :func:`renamed`, a former public name kept for one
release."""
import contextlib
import difflib
import functools
import signal
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterable, Iterator, List

# sys.argv[0] while `python -m gnorm.train` imports its package, and the
# console script's name.
_COMMANDS = ('-m', 'gnorm-train')


class GnormError(Exception):
    r"""Base class of the errors that end a run with a one-line message."""
    exit_code = 1


class ConfigError(GnormError):
    r"""A bad value on the command line or in a config file."""
    exit_code = 2


class DataError(GnormError):
    r"""A dataset that cannot be found, copied, downloaded or split."""


class TrainingError(GnormError):
    r"""A run that failed while training (e.g. a NaN or infinite loss)."""


class CaptureError(GnormError):
    r"""A training step that could not be captured as a CUDA graph
    (``train.cuda_graph``): the same runs can train eagerly."""


class Interrupted(KeyboardInterrupt):
    r"""SIGINT (Ctrl-C) or SIGTERM during a run; the command line turns both
    into this and exits with status ``128 + signal number`` (130, 143).
    A :class:`KeyboardInterrupt`, so code that handles Ctrl-C handles it."""
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


@contextlib.contextmanager
def interrupt_exits() -> Iterator[None]:
    r"""Ctrl-C inside the block (the imports of ``gnorm.train``) while a
    command starts (``python -m gnorm.train``, ``gnorm-train``) prints one
    line and exits with status 130, instead of a traceback through the
    imports of torch and Hydra; in a program that imports gnorm, Ctrl-C
    raises :class:`KeyboardInterrupt` as usual."""
    try:
        yield
    except KeyboardInterrupt:
        if not sys.argv or Path(sys.argv[0]).name not in _COMMANDS:
            raise
        print('interrupted while starting: nothing ran', file=sys.stderr,
              flush=True)
        sys.exit(128 + signal.SIGINT)


def closest(key: str, keys: Iterable[str]) -> List[str]:
    r"""Up to three of :obj:`keys` that :obj:`key` may be a typo of: close
    as a whole (``norm.scal``: ``norm.scale``) or by the last dotted part
    (``lr``: ``train.lr``), closest first."""
    leaf = key.rsplit('.', 1)[-1]
    scored = []
    for other in keys:
        score = max(difflib.SequenceMatcher(None, key, other).ratio(),
                    difflib.SequenceMatcher(None, leaf,
                                            other.rsplit('.', 1)[-1]).ratio()
                    - 0.05)
        if score >= 0.75:
            scored.append((-score, other))
    return [other for _, other in sorted(scored)[:3]]


def renamed(function: Callable, old: str) -> Callable:
    r""":obj:`function` under its former name :obj:`old`, kept for one
    release: a call warns (:class:`DeprecationWarning`) with the new name,
    then calls it."""
    new = f'{function.__module__}.{function.__name__}'

    @functools.wraps(function)
    def alias(*args, **kwargs):
        warnings.warn(f'{old} is deprecated: use {new}', DeprecationWarning,
                      stacklevel=2)
        return function(*args, **kwargs)
    alias.__doc__ = f'Deprecated alias of :func:`{new}`.'
    alias.__name__ = alias.__qualname__ = old.rsplit('.', 1)[-1]
    return alias


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    r"""A script's main block: a :class:`GnormError` inside it is printed
    as one line (``error: ...``) on stderr and ends the process with its
    exit status, instead of a traceback."""
    try:
        yield
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
