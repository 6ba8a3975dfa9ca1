r"""The harness of gnorm's benchmarks (``experiments/bench/*.py``,
``experiments/gpu_check.py``), depending on torch and the standard library
alone (matplotlib for plots):

* :mod:`gnorm.bench.timing`: :func:`alternate` times cases side by side,
  every case once a round in rotating order after warm-up rounds,
  synchronised with the device; :func:`medians` and :func:`ratio` of
  what it gives, on a wall or a process-CPU clock; :func:`profiled`, one
  call's operators, and :func:`kernel_time`, its kernels' share;
* :mod:`gnorm.bench.memory`: :class:`PeakMemory` of a block, CUDA or host;
* :mod:`gnorm.bench.process`: :func:`run_child`, a measurement alone in a
  fresh process, and :func:`code_at` and :func:`use_code`, another git
  revision's code to time beside the working tree;
* :mod:`gnorm.bench.records`: :class:`Records`, measurements as JSON lines
  appended as they are made, so that an interrupted sweep resumes;
* :mod:`gnorm.bench.report`: :func:`machine` in words,
  :func:`markdown_table`, :func:`line_plot`;
* :mod:`gnorm.bench.check`: :func:`run_steps`, named steps each within a
  time budget, each recorded as it ends, a step of tests
  (:func:`pytest_step`) and the check's report;
* :mod:`gnorm.bench.cli`: the command line the scripts share
  (:func:`arguments`, :func:`parse`) and :func:`measure_into`.

A benchmark script then says what it measures: its cases and sizes, and
its report."""
from gnorm.bench.check import (Budget, Step, attempt, check_report, environment,
                               one_line, pytest_rows, pytest_step, run_steps,
                               steps_report)
from gnorm.bench.cli import arguments, default_mirror, measure_into, parse
from gnorm.bench.memory import PeakMemory, peak_rss_gib
from gnorm.bench.process import (ChildFailed, child_env, code_at, run_child,
                                 use_code)
from gnorm.bench.records import Records, read_jsonl, write_jsonl
from gnorm.bench.report import (cell, cpu_name, line_plot, machine,
                                markdown_table, records_table, write_report)
from gnorm.bench.timing import (CPU, WALL, alternate, kernel_time, medians,
                                profiled, ratio, ratio_range, rotation, sync,
                                timed, wall_and_cpu)

__all__ = [
    'arguments', 'default_mirror', 'measure_into', 'parse', 'Budget', 'Step',
    'attempt', 'check_report', 'environment', 'one_line', 'pytest_rows',
    'pytest_step', 'run_steps', 'steps_report', 'PeakMemory', 'peak_rss_gib',
    'ChildFailed', 'child_env', 'code_at', 'run_child', 'use_code', 'Records',
    'read_jsonl', 'write_jsonl', 'cell', 'cpu_name', 'line_plot', 'machine',
    'markdown_table', 'records_table', 'write_report', 'CPU', 'WALL',
    'alternate', 'kernel_time', 'medians', 'profiled', 'ratio', 'ratio_range',
    'rotation', 'sync', 'timed', 'wall_and_cpu']
