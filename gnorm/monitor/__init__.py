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

Modules: :mod:`~gnorm.monitor.hooks` (the monitor and its records),
:mod:`~gnorm.monitor.measure` (the metrics of the kept outputs) and
:mod:`~gnorm.monitor.plot` (the plots).
"""
from gnorm.monitor.hooks import (COLUMNS, RUN_COLUMNS, SCALED,
                                 CollapseMonitor, find_layers)
from gnorm.monitor.measure import EDGE_METRICS, METRICS, OPTIONAL_METRICS

__all__ = ['CollapseMonitor', 'find_layers', 'METRICS', 'OPTIONAL_METRICS',
           'EDGE_METRICS', 'COLUMNS', 'RUN_COLUMNS', 'SCALED']
