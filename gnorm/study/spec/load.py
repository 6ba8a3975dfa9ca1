r"""A study's spec from its name or file: found and composed
(:mod:`~gnorm.study.spec.find`), checked (:mod:`~gnorm.study.spec.check`)
and, for gnorm's own studies, kept by content
(:mod:`~gnorm.study.spec.cache`).
"""



from gnorm.study.spec.cache import Store, context  # hashes gnorm's code first
from gnorm.study.spec.check import check_files, check_spec, check_targets
from gnorm.study.spec.find import compose, locate
from gnorm.study.spec.table import Spec, SpecError
from gnorm.train import CONF_DIR
from gnorm.train.common import one_line


def load_spec(ref: str) -> Spec:
    r"""The :class:`Spec` of :obj:`ref` (see :func:`locate`), checked
    (:func:`check_spec`). One of gnorm's studies that the cache holds
    (:mod:`gnorm.study.spec.cache`: composed and checked from the same
    ``conf/`` and code) is not composed again; the files it names and
    the classes its rows import are checked each time."""
    from omegaconf import OmegaConf
    experiment, source, folder = locate(ref)
    spec = Spec(experiment, experiment, source, folder, {})
    store = _spec_store(spec)
    kept = store.get('table') if store else None
    if kept is not None:
        spec.table = kept
        spec.name = str(spec.table.get('name') or experiment)
        check_files(spec)
        check_targets(spec)
        return spec
    try:
        cfg = compose(spec.overrides())
    except Exception as e:
        raise SpecError(f'{ref}: cannot compose: '
                        f"{one_line(e)}") from None
    if 'table' not in cfg:
        raise SpecError(f'{ref}: no table: section (the study: rows, '
                        f'seeds...); see docs/study.rst')
    spec.table = OmegaConf.to_container(cfg.table, resolve=True)
    spec.name = str(spec.table.get('name') or experiment)
    check_spec(spec)
    if store:
        store.put('table', spec.table)
        store.save()
    return spec


def _spec_store(spec: Spec):
    r"""The cache of :obj:`spec`'s checked ``table:`` for one of gnorm's
    studies (:class:`gnorm.study.spec.cache.Store`); :obj:`None` for a
    user's spec (its rows may name code outside gnorm)."""
    if not spec.own:
        return None
    conf, key = CONF_DIR, context(CONF_DIR)
    return Store('spec', spec.experiment, key, lambda: context(conf) == key)
