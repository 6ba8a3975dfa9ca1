r"""``python -m gnorm.study SPEC``: see :mod:`gnorm.study.cli`."""
import sys

from gnorm.study.cli import main

if __name__ == '__main__':
    sys.exit(main())
