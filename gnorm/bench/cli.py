r"""The command line every benchmark script shares (:func:`arguments`,
:func:`parse`): where the report goes and ``--report-only``, the device,
torch's CPU threads, the data mirror and the datasets' folder; and
measuring rows into a fresh JSON-lines file (:func:`measure_into`)."""
import argparse
import os
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Optional, Sequence

import torch

from gnorm.bench.records import Records, Row

DEVICES = ('cpu', 'cuda', 'auto')


def default_mirror(checkout: Path) -> str:
    r"""The data mirror of a benchmark run from the repository
    :obj:`checkout`: ``$GNORM_DATA_MIRROR``, else ``shared/data`` beside
    the checkout."""
    return os.environ.get('GNORM_DATA_MIRROR',
                          str(checkout.parent / 'shared' / 'data'))


def arguments(parser: argparse.ArgumentParser, out: Any, *,
              device: Optional[str] = None, threads: Optional[int] = None,
              checkout: Optional[Path] = None) -> argparse.ArgumentParser:
    r"""Adds ``--out`` (default :obj:`out`) and ``--report-only`` (the
    report from the measurements kept, none made); ``--device`` (default
    :obj:`device`: ``cpu``, ``cuda``, or ``auto``, a GPU where torch sees
    one) unless :obj:`device` is :obj:`None`; ``--threads`` (default
    :obj:`threads`; :obj:`None`: torch's); and, given the repository
    :obj:`checkout`, ``--mirror`` (``$GNORM_DATA_MIRROR``, else
    ``shared/data`` beside the checkout) and ``--root`` (its ``data/``)."""
    parser.add_argument('--out', default=str(out),
                        help='the report folder (default: %(default)s)')
    parser.add_argument('--report-only', action='store_true',
                        help='write the report from the measurements kept')
    if device is not None:
        parser.add_argument('--device', default=device, choices=DEVICES)
    parser.add_argument('--threads', type=int, default=threads,
                        help="torch's CPU threads (default: %(default)s)")
    if checkout is not None:
        parser.add_argument('--mirror', default=default_mirror(checkout),
                            help='the data mirror (default: '
                            '$GNORM_DATA_MIRROR)')
        parser.add_argument('--root', default=str(checkout / 'data'),
                            help='the datasets\' folder')
    return parser


def parse(parser: argparse.ArgumentParser,
          argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    r"""Parses :obj:`argv` (:func:`arguments`): ``--device auto`` becomes
    ``cuda`` where torch sees a GPU, else ``cpu``; ``--device cuda``
    without one is an error in one line; ``--threads`` sets torch's."""
    args = parser.parse_args(argv)
    if getattr(args, 'device', None) == 'auto':
        args.device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if getattr(args, 'device', None) == 'cuda' and \
            not torch.cuda.is_available():
        parser.error('--device cuda: torch sees no CUDA device; run on a '
                     'GPU machine or pass --device cpu')
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def measure_into(args: argparse.Namespace, path: Any, rows: Iterable[Row],
                 key: Callable[[Row], Hashable]) -> None:
    r"""Unless ``--report-only``: appends each row of the iterable
    :obj:`rows` (measured as it is drawn) to the JSON-lines file
    :obj:`path`, which starts empty; ``key(row)`` names a row."""
    if not args.report_only:
        records = Records(path, key, resume=False)
        for row in rows:
            records.add(row)
