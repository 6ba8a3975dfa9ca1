r"""gnorm.perf, what the benchmarks measure: each layer's reference is the
same function as the layer (so a ratio compares like with like), every
case runs, and the monitor's overheads are the stated fractions."""
import pytest
import torch

from experiments.cases import layers, monitor


@pytest.mark.parametrize('layer', list(layers.QUADRATIC))
def test_the_dense_reference_computes_what_contranorm_does(layer):
    assert layers.max_abs_difference(layer, 60, 8, 'cpu', 'float64') < 1e-12


@pytest.mark.parametrize('layer,reference', [
    (layer, reference) for layer, name in layers.REFERENCE.items()
    for reference in (False, True)[:1 + bool(name)]])
def test_every_layer_case_measures(layer, reference):
    found = layers.measure(layer, reference, 40, 8, 'cpu', 'float32', 1)
    assert found['finite'] and found['seconds'] > 0


def test_an_unknown_layer_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match='contranorm_d'):
        layers.build('batchnorm', False, 10, 4, torch.device('cpu'),
                     torch.float32)


def test_dense_memory_is_six_n_by_n_tensors():
    assert layers.dense_gib(2**14, 'float32') == 6.0
    assert layers.dense_gib(2**14, 'bfloat16') == 3.0


def test_overheads_are_fractions_of_the_loop():
    row = monitor.overheads(dict(train_s=0.8, forward_s=0.2, record_s=0.5))
    assert row['eval_every_1'] == pytest.approx(0.3)  # (0.5 - 0.2) / 1.0
    assert row['eval_every_10'] == pytest.approx(0.03)
    assert row['every_1'] == pytest.approx(0.625)  # 0.5 / 0.8
    assert row['every_10'] == pytest.approx(0.0625)


def test_the_monitor_case_times_both_copies_and_every_measurement():
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(30, 5, generator=gen),
                y=torch.randint(0, 3, (30, ), generator=gen),
                edge_index=torch.randint(0, 30, (2, 90), generator=gen),
                train_mask=torch.arange(30) < 10)
    row = monitor.deep_gcn_case(data, repeats=1, layers=3,
                                metrics=monitor.TWO_METRICS)
    assert row['model'] == 'DeepGCN, 3 layers, full batch (effective_rank, ' \
        'dirichlet_energy only)'
    assert row['records'] == row['layers'] * 2
    assert all(row[f'{k}_s'] > 0 for k in (
        'train', 'train_hooked', 'forward', 'record', 'first_record'))
