r"""This repository's benchmarks: each script measures one property side by
side in one run (gnorm against a reference, a speed-up against what it
replaced) and writes its records and generated report to
``experiments/results/`` (``bench_<name>_<device>.jsonl`` and ``.md``).
Run one as ``python experiments/bench/<name>.py``; the shared harness
(timing, memory, records, reports) is :mod:`gnorm.bench`, the cases two
scripts share are :mod:`experiments.cases`. Guide: ``docs/benchmarks.rst``.
"""
