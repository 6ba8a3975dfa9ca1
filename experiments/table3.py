r"""Table 3 of the ContraNorm paper (deep GCNs, accuracy vs depth): an
alias of ``python -m gnorm.study table3_<protocol>`` (:mod:`gnorm.study`),
kept for the commands people have typed.

    python experiments/table3.py paper   # = python -m gnorm.study table3_paper
    python experiments/table3.py fair --datasets cora --depths 16 32
"""
import sys
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnorm.study.cli import main as study  # noqa: E402

PROTOCOLS = {'paper': 'table3_paper', 'fair': 'table3_fair'}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in PROTOCOLS:
        print(f"usage: python experiments/table3.py {{paper,fair}} [options "
              f"of python -m gnorm.study]", file=sys.stderr)
        return 2
    return study([PROTOCOLS[argv[0]], *argv[1:]])


if __name__ == '__main__':
    sys.exit(main())
