r"""Preparing dataset files safely when several processes do it at once
(``torchrun`` starts one per GPU, and each loads the dataset): a copied
file appears whole, under its name, or not at all (:func:`copy_file`), and
under a process group one process prepares a dataset before the others
read it (:func:`one_process_first`)."""
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import torch.distributed as dist


def copy_file(src: Path, dst: Path) -> None:
    r"""Copies :obj:`src` to :obj:`dst` through a temporary file of its
    own in :obj:`dst`'s folder, renamed to :obj:`dst` at once: an
    interrupted copy leaves no truncated :obj:`dst`, and processes that
    copy the same file at the same time each rename a whole copy."""
    fd, tmp = tempfile.mkstemp(prefix=f'.{dst.name}.', suffix='.tmp',
                               dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def one_process_first():
    r"""Runs the block in process 0 first and in the other processes once
    process 0 has left it (whether it succeeded or raised: they then try
    themselves), when a :mod:`torch.distributed` process group of several
    processes is initialised; else simply runs it. For copying and
    processing a dataset into a shared folder once, the other processes
    then reading the files."""
    group = dist.is_available() and dist.is_initialized() and \
        dist.get_world_size() > 1
    if group and dist.get_rank() != 0:
        dist.barrier()
    try:
        yield
    finally:
        if group and dist.get_rank() == 0:
            dist.barrier()
