r"""The ContraNorm authors' published GCN code run beside gnorm, for this
repository's reproduction of their Table 3 (docs/table3.rst); not part of
the installed package:

* :mod:`experiments.authors.code`: imports and runs their ``gnn/`` folder
  (``experiments/authors_gcn.py``);
* :mod:`experiments.authors.twin`: their model beside gnorm's on the same
  random numbers (``experiments/authors_twin.py``);
* :mod:`experiments.authors.report` and :mod:`experiments.authors.speed`:
  their runs beside gnorm's, run by run, and their time per run
  (``experiments/authors_spread.py``).
"""
