r"""``python -m gnorm.study SPEC`` (see :mod:`gnorm.study.cli`) and ``python -m
    gnorm.study queue`` (see :mod:`gnorm.study.queue.command`)."""
import sys

from gnorm.study.cli import main

if __name__ == '__main__':
    sys.exit(main())
