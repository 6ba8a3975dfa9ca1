r"""The SepNorm comparison on ogbg-molhiv: an alias of ``python -m
gnorm.study <experiment>`` (:mod:`gnorm.study`, a paired study), kept for
the commands people have typed; ``key=value`` arguments become ``--set``.

    python experiments/sepnorm.py cpu    # = python -m gnorm.study sepnorm_molhiv_cpu
    python experiments/sepnorm.py long   # = python -m gnorm.study sepnorm_molhiv_cpu_long
    python experiments/sepnorm.py slim train.epochs=20 --seeds 0
"""
import sys
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnorm.study.cli import main as study  # noqa: E402

RECIPES = {'cpu': 'sepnorm_molhiv_cpu', 'long': 'sepnorm_molhiv_cpu_long',
           'slim': 'sepnorm_molhiv'}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in RECIPES:
        print(f"usage: python experiments/sepnorm.py {{{','.join(RECIPES)}}} "
              f"[key=value ...] [options of python -m gnorm.study]",
              file=sys.stderr)
        return 2
    sets = [a for a in argv[1:] if '=' in a and not a.startswith('-')]
    rest = [a for a in argv[1:] if a not in sets]
    return study([RECIPES[argv[0]], *rest, *(['--set', *sets] if sets
                                             else [])])


if __name__ == '__main__':
    sys.exit(main())
