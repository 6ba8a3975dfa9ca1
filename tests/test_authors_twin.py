r"""``experiments.authors.twin`` (when their code is here:
``AUTHORS_GCN_CODE=<ContraNorm>/gnn``): their DeepGCN and gnorm's, trained
on the same random numbers in float64, take the same steps."""
import os
from pathlib import Path

import pytest

from conftest import MIRROR, needs_mirror

from experiments.authors import twin

pytestmark = pytest.mark.usefixtures('one_thread')
CODE = os.environ.get('AUTHORS_GCN_CODE')


@pytest.mark.skipif(not CODE or not Path(CODE, 'main.py').is_file(),
                    reason='their gnn/ code: set AUTHORS_GCN_CODE')
@needs_mirror
@pytest.mark.parametrize('layers,scale', [(3, 0.5), (4, 1.0)])
def test_their_model_and_gnorms_take_the_same_steps(layers, scale):
    from experiments.authors import code as ag
    targs = ag.their_parser(CODE).parse_args(
        ag.their_argv('cora', layers, scale, 3))
    cfg = twin.gnorm_config('cora', layers, scale, MIRROR)
    from gnorm.train import node_setup
    data = node_setup.load_data(cfg)
    with ag.their_code(CODE, 'cora', MIRROR) as their:
        tdata = ag.load_their_data(their, targs)
        twin.check_same_data(tdata, data)
        rows = twin.twin(their, targs, tdata, cfg, data, seed=0,
                         dtype='float64', every=1, log=False)
    assert rows['epoch'] == [1, 2, 3]
    assert rows['gnorm_loss'] == pytest.approx(rows['their_loss'], rel=1e-12)
    assert rows['gnorm_test_acc'] == pytest.approx(rows['their_test_acc'],
                                                   abs=1e-6)  # same nodes
    assert max(rows['weight_difference']) < 1e-9
    assert len(set(rows['their_loss'])) == 3  # training moved
