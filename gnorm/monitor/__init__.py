r"""Which layer collapses, and when: collapse metrics of the layer outputs
of any PyTorch Geometric model, recorded during training.

.. code-block:: python

    monitor = CollapseMonitor(model)  # hooks every MessagePassing layer
    with monitor.record(step=epoch, edge_index=data.edge_index):
        model(data.x, data.edge_index)  # your forward, recorded
    monitor.to_csv('collapse.csv')

The hooks return at once outside :meth:`CollapseMonitor.record`. Inside,
each hooked layer's output gets every metric on the device, without a
value read to the host; the values of all layers are read once when the
:obj:`with` block ends. What needs the host (the graph count, the drawn
nodes of the pairwise metrics, their hop distances) is prepared once per
:meth:`~CollapseMonitor.record` and reused while the inputs are the same
tensors.

Why a run failed: :func:`diagnose` labels a run of :mod:`gnorm.train`
(or :meth:`CollapseMonitor.diagnose` a monitored model) as trains,
oversmoothed, rank-collapsed, untrainable or overfits, with the measure
that decided it (docs/diagnose.rst).

Modules, each importing only those before it:
:mod:`~gnorm.monitor.gradients` (per-layer gradient norms),
:mod:`~gnorm.monitor.diagnosis` (a run's failure, told),
:mod:`~gnorm.monitor.measure` (the metrics of the kept outputs),
:mod:`~gnorm.monitor.table` (the records as a table, without pandas),
:mod:`~gnorm.monitor.onset` (where collapse sets in),
:mod:`~gnorm.monitor.plot` (the plots, one monitor or several on shared
axes) and :mod:`~gnorm.monitor.hooks` (the monitor and its records).
"""
from gnorm.monitor.diagnosis import LABELS, Diagnosis, diagnose
from gnorm.monitor.gradients import GRADIENT_METRICS, Gradients
from gnorm.monitor.hooks import (COLUMNS, RUN_COLUMNS, CollapseMonitor,
                                 find_layers, read_csv)
from gnorm.monitor.measure import EDGE_METRICS, METRICS, OPTIONAL_METRICS
from gnorm.monitor.onset import COLLAPSED
from gnorm.monitor.plot import SCALED, plot_compare
from gnorm.monitor.table import Table

__all__ = ['CollapseMonitor', 'diagnose', 'Diagnosis', 'LABELS',
           'Gradients', 'GRADIENT_METRICS', 'find_layers', 'read_csv', 'plot_compare',
           'Table', 'METRICS', 'OPTIONAL_METRICS', 'EDGE_METRICS', 'COLLAPSED',
           'COLUMNS', 'RUN_COLUMNS', 'SCALED']
