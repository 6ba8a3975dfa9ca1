r"""Which runs a paired comparison may pair: the runs of the config the
spec asks for (:func:`study_runs`, by the identity of
:func:`gnorm.results.keys.identity`, as a depth study counts its runs), and,
seed by seed, two runs that trained and were tested on one split
(:func:`check_fingerprints`, from the ``split_fingerprint`` node runs
record)."""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.results import value
from gnorm.results.keys import config_identity
from gnorm.study.runs.compose import index, run_key
from gnorm.study.runs.runner import run_overrides
from gnorm.study.spec.find import compose
from gnorm.study.spec.table import Spec

Run = Dict[str, Any]


def fingerprint(run: Run) -> Optional[str]:
    r"""The fingerprint of the split :obj:`run` trained and was tested on
    (:func:`gnorm.data.split_fingerprint`); :obj:`None` for a run that
    records none (graph runs, runs older than the field)."""
    return (run.get('dataset') or {}).get('split_fingerprint')


# Two rows' runs of one seed on different splits: (seed, the fingerprint
# of one row's run, the other's).
Mismatch = Tuple[int, str, str]


def split_mismatch(a: Dict[int, Optional[str]],
                   b: Dict[int, Optional[str]]) -> Optional[Mismatch]:
    r"""Why two rows whose runs have the split fingerprints :obj:`a` and
    :obj:`b` (seed -> fingerprint) are no pairs: the first seed of both
    whose fingerprints differ, with the two (:data:`Mismatch`);
    :obj:`None` when none does (a run that records no fingerprint
    passes)."""
    for seed in sorted(set(a) & set(b)):
        if a[seed] and b[seed] and a[seed] != b[seed]:
            return seed, a[seed], b[seed]
    return None


def check_fingerprints(a_runs_by_seed: Dict[int, Run],
                       b_runs_by_seed: Dict[int, Run]
                       ) -> Optional[Mismatch]:
    r""":func:`split_mismatch` of two rows' runs (seed -> run)."""
    return split_mismatch(
        {s: fingerprint(r) for s, r in a_runs_by_seed.items()},
        {s: fingerprint(r) for s, r in b_runs_by_seed.items()})


def _key(cfg, seed: int) -> str:
    r"""The :func:`~gnorm.study.runs.compose.run_key` of the run of the
    composed :obj:`cfg` with :obj:`seed`, as its ``results.json`` would
    record it."""
    from omegaconf import OmegaConf
    from gnorm.train.common import json_safe
    cfg.seed = seed
    return run_key(config_identity(json_safe(OmegaConf.to_container(
        cfg, resolve=True))))


def study_runs(spec: Spec, runs: List[Run], sets: Sequence[str]
               ) -> List[Run]:
    r"""The finished runs of :obj:`runs` that are runs of the paired study
    :obj:`spec` with the overrides :obj:`sets`: of a row of the study, and
    of the config that row asks for with the run's seed (any seed: a
    selection may have run seeds beyond the table's). Runs of another
    config (another number of epochs...) are left out."""
    composed: Dict[str, Any] = {}
    kept = []
    for key, run in index(runs).items():
        row, seed = value(run, 'tag'), value(run, 'seed')
        if row not in spec.table['rows'] or not isinstance(seed, int):
            continue
        if row not in composed:
            composed[row] = compose(run_overrides(spec, row, seed, sets))
        if key == _key(composed[row], seed):
            kept.append(run)
    return kept
