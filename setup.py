r"""Packages of the wheel: every ``gnorm*`` package, gnorm's Hydra sweeper
plugin (``hydra_plugins.gnorm_sweeper``), plus the Hydra configs
of ``conf/`` shipped as package data under ``gnorm/conf/`` (they stay at the
top of the repository; :data:`gnorm.train.run.CONF_DIR` finds either)."""
from setuptools import find_namespace_packages, find_packages, setup

setup(packages=(find_packages(include=['gnorm*']) + ['gnorm.conf']
                + find_namespace_packages(include=['hydra_plugins.*'])),
      package_dir={'gnorm.conf': 'conf'},
      package_data={'gnorm.conf': ['**/*.yaml']})
