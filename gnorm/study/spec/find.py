r"""Finding and composing a spec: gnorm's experiments and studies under
``conf/experiment/``, a user's YAML file (composed as ``experiment=<its
stem>`` from a search-path folder holding a link to it, so that its
``defaults:`` may name gnorm's experiments and every run, trained here or
by a Hydra launcher, composes exactly what the file says), and Hydra's
composition of the ``train`` config.
"""
import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import yaml

from gnorm.study.spec.table import SpecError
from gnorm.train import CONF_DIR


def hydra_folder(source: Path) -> Path:
    r"""A search-path folder whose ``experiment/<stem>.yaml`` links to the
    user's spec file :obj:`source` (made once per process)."""
    folder = Path(tempfile.mkdtemp(prefix='gnorm-study-'))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / 'experiment').mkdir()
    (folder / 'experiment' / source.name).symlink_to(source.resolve())
    return folder


def experiments() -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / 'experiment').glob('*.yaml'))


def studies() -> List[str]:
    r"""gnorm's experiments that are studies (have a ``table:``)."""
    return [name for name in experiments()
            if '\ntable:' in (CONF_DIR / 'experiment' /
                              f'{name}.yaml').read_text()]


def locate(ref: str) -> tuple:
    r"""(experiment, source file, search-path folder or :obj:`None`) of
    :obj:`ref`: a YAML file, or the name of one of gnorm's experiments."""
    path = Path(ref)
    if path.suffix in ('.yaml', '.yml') or os.sep in ref:
        if not path.is_file():
            raise SpecError(f'no spec file {ref}')
        if path.suffix != '.yaml':
            raise SpecError(f'a spec file ends in .yaml (Hydra reads no '
                            f'other), got {ref}')
        if path.stem in experiments():
            raise SpecError(f"{ref}: gnorm has an experiment named "
                            f"{path.stem!r}; rename the file")
        return path.stem, path.resolve(), hydra_folder(path)
    if ref not in studies():
        raise SpecError(f'unknown study {ref!r}: pass a spec file '
                        f'(.yaml) or one of {", ".join(studies())}')
    return ref, CONF_DIR / 'experiment' / f'{ref}.yaml', None


def compose(overrides: Sequence[str], hydra: bool = False):
    r"""The config ``train`` composed with :obj:`overrides` (with Hydra's
    own node when :obj:`hydra`)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):
        return hydra_compose('train', overrides=list(overrides),
                             return_hydra_config=hydra)


def known_datasets() -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / 'dataset').glob('*.yaml'))


def inherited_recipe(source) -> Optional[Tuple[str, Any]]:
    r"""The first of gnorm's experiments that the spec file :obj:`source`
    inherits (its ``defaults:`` list naming ``luo``, ``/experiment/luo``
    or ``{/experiment: luo}``) and the number of epochs that experiment
    trains (``train.epochs``, composed); :obj:`None` where it inherits
    none."""
    try:
        defaults = (yaml.safe_load(Path(source).read_text()) or {}).get(
            'defaults') or []
    except (OSError, yaml.YAMLError):
        return None
    known = experiments()
    for entry in defaults:
        names = ([entry] if isinstance(entry, str) else
                 [v for k, v in entry.items() if 'experiment' in str(k)]
                 if isinstance(entry, dict) else [])
        for name in names:
            name = str(name).rpartition('/')[2]
            if name in known and name != Path(source).stem:
                return name, compose([f'experiment={name}']).train.epochs
    return None
