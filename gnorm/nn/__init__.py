r"""Normalisation layers for deep graph networks, PyG-compatible: each takes
``forward(x, batch=None, batch_size=None, ...)``. ContraNorm, DualContraNorm
and PairNorm normalise every graph of a mini-batch on its own; IsoBN and
SepNorm's BN use statistics over the whole mini-batch, as BatchNorm does."""
from gnorm.nn.contra_norm import ContraNorm
from gnorm.nn.dual_contra_norm import DualContraNorm
from gnorm.nn.pair_norm import PairNorm
from gnorm.nn.sep_norm import SepNorm
from gnorm.nn.iso_bn import IsoBN
from gnorm.nn.layer_fusion import LayerFusion
from gnorm.nn.stacked import Stacked
from gnorm.nn._inputs import validate_inputs

__all__ = [
    'ContraNorm',
    'DualContraNorm',
    'PairNorm',
    'SepNorm',
    'IsoBN',
    'LayerFusion',
    'Stacked',
    'validate_inputs',
]
