r"""Models built from the :mod:`gnorm.nn` layers."""
from gnorm.models.deep_gcn import DeepGCN
from gnorm.models.graphormer import Graphormer

__all__ = [
    'DeepGCN',
    'Graphormer',
]
