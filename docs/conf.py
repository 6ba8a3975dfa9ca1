r"""Sphinx configuration of gnorm's documentation.

Build it from the repository root with
``sphinx-build -W -b html docs docs/_build/html`` (``pip install -e ".[docs]"``);
``tests/test_docs.py`` runs the same build with warnings as errors.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # document this checkout, installed or not

import gnorm  # noqa: E402

project = 'gnorm'
author = 'the gnorm authors'
copyright = 'the gnorm authors, MIT License'
release = version = gnorm.__version__

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.mathjax',
    'sphinx.ext.viewcode',
]

# The docstrings follow PyG's style: Google-style ``Args:`` sections,
# ``.. math::`` blocks, ``:obj:`` roles.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'none'  # the signatures show the defaults; types are in Args:
# Defaults as the source spells them (conf_dir=CONF_DIR), not their value
# on the build machine (PosixPath('/home/.../conf')).
autodoc_preserve_defaults = True
# Command lines are pasted: keep -- and quotes as typed (no en dash).
smartquotes = False
autodoc_default_options = {'members': True, 'show-inheritance': False}

exclude_patterns = ['_build']
html_theme = 'alabaster'
html_title = f'gnorm {release}'
html_theme_options = {'description': 'Normalisation layers against '
                                     'oversmoothing in deep GNNs'}
