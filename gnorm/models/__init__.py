r"""Models built from the :mod:`gnorm.nn` layers."""
from gnorm.models.deep_gcn import DeepGCN

__all__ = [
    'DeepGCN',
]
