r"""Models built from the :mod:`gnorm.nn` layers."""
from gnorm.models.deep_gcn import DeepGCN
from gnorm.models.graphormer import Graphormer
from gnorm.models.res_gnn import ResGNN
from gnorm.models.stacked_graphormer import StackedGraphormer

__all__ = [
    'DeepGCN',
    'Graphormer',
    'ResGNN',
    'StackedGraphormer',
]
