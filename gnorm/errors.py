r"""Errors that the command line reports as one line (``error: ...``) and a
non-zero exit status, without a traceback. Their message names the problem
and the fix."""
import signal


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


class Interrupted(KeyboardInterrupt):
    r"""SIGINT (Ctrl-C) or SIGTERM during a run; the command line turns both
    into this and exits with status ``128 + signal number`` (130, 143).
    A :class:`KeyboardInterrupt`, so code that handles Ctrl-C handles it."""
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum
