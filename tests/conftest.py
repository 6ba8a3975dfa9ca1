import atexit
import datetime
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

# The tests read datasets from the offline mirror when one lies beside the
# checkout (as on CI); a user's own GNORM_DATA_MIRROR wins.
_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "GNORM_DATA_MIRROR" not in os.environ and _MIRROR.is_dir():
    os.environ["GNORM_DATA_MIRROR"] = str(_MIRROR)

# Where pytest-xdist is installed (the test extras) the tests run in
# parallel processes (pytest_cmdline_main below): each worker and each
# process a test starts gets one torch thread, so that the workers share
# the cores instead of oversubscribing them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    torch.set_num_threads(1)

# The cache of specs, compositions and run records (gnorm.study.spec.cache):
# the session's own, so that no test reads what another session or the
# user's calls kept (each process of a session shares it).
if not os.environ.get("GNORM_CACHE", "").startswith(
        os.path.join(tempfile.gettempdir(), "gnorm-cache-tests-")):
    os.environ["GNORM_CACHE"] = tempfile.mkdtemp(prefix="gnorm-cache-tests-")
    atexit.register(shutil.rmtree, os.environ["GNORM_CACHE"],
                    ignore_errors=True)

MIRROR = os.environ.get("GNORM_DATA_MIRROR")
# Tests that read real datasets: `from conftest import MIRROR, needs_mirror`.
needs_mirror = pytest.mark.skipif(
    not MIRROR or not Path(MIRROR).is_dir(),
    reason="needs the offline dataset mirror (GNORM_DATA_MIRROR)")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    r"""With pytest-xdist installed, ``-n auto`` unless ``-n`` is given
    (``-n 0``: one process), and a test module's tests in one worker
    (``--dist loadscope``: its module fixtures are built once)."""
    if not config.pluginmanager.hasplugin("xdist") or \
            hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None:
        config.option.numprocesses = "auto"
    if config.option.dist == "no":
        config.option.dist = "loadscope"  # xdist sets "no" again for -n 0


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, if installed
def pytest_xdist_auto_num_workers(config):
    r"""``-n auto``: a worker per core this process may run on, at most 4
    (each holds torch and its datasets in memory)."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    return max(1, min(cores, 4))


def experiment(name):
    r"""The script ``experiments/<name>.py`` as a module (``bench/layers``:
    ``experiments/bench/layers.py``; the folder on ``sys.path``: the
    scripts import each other): `from conftest import experiment`."""
    import importlib.util
    import sys
    folder = Path(__file__).resolve().parents[1] / "experiments"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name.replace('/', '.'),
                                                  folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose_train(*overrides):
    r"""The config of ``python -m gnorm.train <overrides>``:
    `from conftest import compose_train`."""
    from gnorm.train import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return compose('train', overrides=list(overrides))


# A user's own norm, as docs/training.rst ("Your own norm") writes it: a
# module outside gnorm and a config option for hydra.searchpath.
USER_NORM = """import torch


class HalfLN(torch.nn.Module):
    def __init__(self, in_channels, factor=0.5):
        super().__init__()
        self.norm = torch.nn.LayerNorm(in_channels)
        self.factor = factor

    def forward(self, x, batch=None, batch_size=None):
        return self.factor * self.norm(x)
"""


@pytest.fixture
def user_norm(tmp_path, monkeypatch):
    r"""A folder outside the repository holding ``mynorm.py`` (class
    ``HalfLN``, importable: the folder is on ``sys.path``) and the config
    option ``conf/norm/halfln.yaml`` (with a key of its own, ``factor``);
    returns the folder."""
    (tmp_path / 'mynorm.py').write_text(USER_NORM)
    (tmp_path / 'conf' / 'norm').mkdir(parents=True)
    (tmp_path / 'conf' / 'norm' / 'halfln.yaml').write_text(
        '_target_: mynorm.HalfLN\nfactor: 0.5\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.fixture
def one_thread():
    r"""One torch thread for the test (the test machines share few cores;
    one thread avoids oversubscription): `pytestmark =
    pytest.mark.usefixtures('one_thread')`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def saved_bytes(forward):
    r"""The bytes of the tensors that :obj:`forward()` keeps for its
    backward pass (each storage counted once) and its output:
    `from conftest import saved_bytes`."""
    storages = {}

    def keep(t):
        storages[t.untyped_storage().data_ptr()] = \
            t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        out = forward()
    return sum(storages.values()), out


def free_port() -> int:
    r"""A free TCP port on the loopback interface, for a process group."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def join_gloo(rank: int, world: int, port: int) -> None:
    r"""Makes this process :obj:`rank` of :obj:`world` gloo processes on the
    CPU as ``torchrun`` starts them (its environment variables set), with
    one thread; a collective that waits 30 s fails instead of hanging."""
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                      RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        'gloo', rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=30))


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    r"""One data folder for a test module: each dataset is processed once
    per module."""
    return tmp_path_factory.mktemp('data')


def comparison_lines(records, row, against, pairing, level,
                     spread_rule=False, correction='holm', view='val',
                     min_seeds=2):
    r"""A depth report's comparison section of :obj:`row` against
    :obj:`against` over :obj:`records`, its family alone: the findings
    (:func:`gnorm.study.findings.compare.family`, then
    :func:`~gnorm.study.findings.compare.section`), then their words
    (:func:`gnorm.study.words.verdicts.comparison`). :obj:`min_seeds`: 2,
    so that constructed cells of 3 seeds get verdicts (a study's default
    is :data:`gnorm.study.stats.MIN_SEEDS`)."""
    from gnorm.study.findings import compare as findings
    from gnorm.study.words import verdicts as verdict_words
    cells = (findings.chosen_by_validation(records) if view == 'val'
             else findings.at_default(records))
    rows = {r['row'] for r in cells}
    present = [o for o in against if o in rows]
    found = findings.family(cells, [(row, present)], pairing, level,
                            correction, min_seeds=min_seeds)
    return verdict_words.comparison(
        findings.section(records, row, against, found, level, correction,
                         view, spread_rule), level, correction)
