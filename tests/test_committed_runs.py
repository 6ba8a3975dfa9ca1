r"""Today's code replays committed runs: the first epochs of a run of each
kind that the README and the Table 3 report count, retrained alone from the
overrides its ``results.json`` records, give the losses and accuracies it
recorded, to rounding (the runs were trained 3 to 20 as one model, some on
other CPUs). A change that draws other random numbers or computes another
function fails here, and then the committed tables no longer describe the
code that would regenerate them.

A deep stack replays its first epoch only: the loss of the initial model on
the first dropout masks. Adam's first step moves every weight by about the
learning rate in the sign of its gradient, and at 32 layers some gradients
are so small that their sign is a rounding, so a machine or a batch that
rounds differently (``docs/training.rst``, Reproducibility) takes another
trajectory from the second epoch on."""
import json
from pathlib import Path

import pytest
from conftest import compose_train, needs_mirror

from gnorm.train import train

ROOT = Path(__file__).resolve().parents[1]
TABLE3 = 'experiments/runs/table3_paper/'
RUNS = [  # (run folder, epochs replayed)
    # the main command, as the README quotes it (non-neighbour ContraNorm)
    ('experiments/runs/main_command/main_b2b073a/0-cora-contranorm-L32,'
     'seed=0', 1),
    # Table 3, authors' protocol: PairNorm, ContraNorm on Planetoid and on a
    # Geom-GCN split
    (TABLE3 + 'dataset=cora,layers=2,norm.mode=PN-SI,norm.scale=1.0,'
     'norm=pairnorm,seed=0,tag=pairnorm', 3),
    (TABLE3 + 'dataset=cora,layers=8,model.shared_layer_norm=True,'
     'norm.layer_norm=False,norm.scale=0.5,norm=contranorm,seed=0,'
     'tag=contranorm', 3),
    (TABLE3 + 'dataset=squirrel,layers=4,model.shared_layer_norm=True,'
     'norm.layer_norm=False,norm.scale=0.2,norm=contranorm,seed=1,'
     'tag=contranorm', 3),
]
pytestmark = [needs_mirror, pytest.mark.usefixtures('one_thread')]


@pytest.mark.parametrize('run, epochs', RUNS,
                         ids=[r.split('/')[-1][:40] for r, _ in RUNS])
def test_a_committed_run_replays_with_todays_code(run, epochs, tmp_path):
    committed = json.loads((ROOT / run / 'results.json').read_text())
    assert committed['status'] == 'ok'
    overrides = [o for o in committed['overrides']
                 if not o.startswith(('hydra.', 'threads=', 'train.progress',
                                      'train.log_every'))]
    cfg = compose_train(*overrides, f'train.epochs={epochs}',
                        'train.eval_every=1', 'threads=1')
    replay = train(cfg, str(tmp_path))
    # The loss is the first epoch's forward pass; the accuracies are
    # measured after its step, at the epochs the run evaluated.
    for key in ('loss', 'train_acc', 'val_acc') if epochs > 1 else ('loss',):
        pairs = [(new, old) for new, old in zip(
            replay['curve'][key], committed['curve'][key][:epochs])
            if old is not None]
        assert [new for new, _ in pairs] == pytest.approx(
            [old for _, old in pairs], rel=1e-4), key
        assert pairs or key != 'loss'  # every epoch has its loss
