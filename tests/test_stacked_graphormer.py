import pytest
import torch

from gnorm.models import Graphormer, StackedGraphormer
from gnorm.models.graphormer_attention import ATTENTION_CHUNK

from test_graphormer import NORMS, _graph, _run

STACKABLE = ['layernorm', 'sepnorm_bn_ln', 'sepnorm_ln_ln', 'sepnorm_ln_bn',
             'sepnorm_bn_bn']


def _models(norm, seeds, **kwargs):
    args = dict(features='zinc', num_layers=2, hidden_channels=16,
                num_heads=2, ffn_channels=16, max_dist=3, norm=NORMS[norm])
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(Graphormer(1, **{**args, **kwargs}))
    return models


def _graphs(count):
    sizes = [(3 * seed) % 13 + 1 for seed in range(count)]
    return [_graph(n, seed, extra=seed % 2) for seed, n in enumerate(sizes)]


def _generators(seeds):
    return [torch.Generator().manual_seed(100 + s) for s in seeds]


@pytest.mark.parametrize('norm', STACKABLE)
@pytest.mark.parametrize('count', [3, ATTENTION_CHUNK + 5])
@pytest.mark.parametrize('kernels', ['explicit', 'fused'])
def test_each_run_gives_its_model_alone_float64(norm, count, kernels):
    # Evaluation mode, float64: run r of the stack == model r, with and
    # without the CPU's size groups (more graphs than ATTENTION_CHUNK), with
    # the explicit and the fused attention kernels.
    models = [m.double().eval()
              for m in _models(norm, [0, 1, 2], kernels=kernels)]
    stack = StackedGraphormer(models).eval()
    graphs = _graphs(count)
    out = _run(stack, graphs)
    assert out.shape == (3, count, 1)
    for r, model in enumerate(models):
        assert torch.allclose(out[r], _run(model, graphs), atol=1e-12)


@pytest.mark.parametrize('norm', STACKABLE)
@pytest.mark.parametrize('kernels', ['explicit', 'fused'])
def test_gradients_and_dropout_of_a_run_alone_equal_among_others(norm,
                                                                 kernels):
    # Training mode with dropout, float64: with one generator per run, run
    # r among others draws the masks it draws alone, and the gradient of
    # the runs' summed losses on run r's weights is its gradient alone.
    seeds = [3, 4, 5]
    graphs = _graphs(ATTENTION_CHUNK + 3)
    models = [m.double() for m in _models(norm, seeds, dropout=0.3,
                                          input_dropout=0.2,
                                          attention_dropout=0.25,
                                          kernels=kernels)]
    stack = StackedGraphormer(models, _generators(seeds)).train()
    out = _run(stack, graphs)
    out.square().sum().backward()
    for r, (seed, model) in enumerate(zip(seeds, models)):
        model.train().dropout_generator = _generators([seed])[0]
        alone = _run(model, graphs)
        assert torch.allclose(out[r], alone, atol=1e-12)
        alone.square().sum().backward()
        for name, p in model.named_parameters():
            stacked = stack.model.get_parameter(name).grad[r]
            assert torch.allclose(stacked, p.grad, atol=1e-10), name
        # Running statistics too (SepNorm's batch norms).
        for name, value in stack.run_state_dict(r).items():
            assert torch.allclose(value.double(),
                                  model.state_dict()[name].double(),
                                  atol=1e-12), name


def test_dropout_masks_differ_between_runs():
    # Same weights, other generators: the runs' outputs differ in training
    # (each run has its own masks) and agree in evaluation.
    models = _models('layernorm', [0, 0])
    stack = StackedGraphormer(models, _generators([1, 2]))
    graphs = _graphs(4)
    train = _run(stack.train(), graphs)
    assert not torch.allclose(train[0], train[1])
    evaluation = _run(stack.eval(), graphs)
    assert torch.equal(evaluation[0], evaluation[1])


def test_run_state_dict_round_trip():
    models = _models('sepnorm_bn_ln', [0, 1])
    stack = StackedGraphormer(models)
    state = stack.run_state_dict(1)
    assert set(state) == set(models[1].state_dict())
    for name, value in models[1].state_dict().items():
        assert torch.equal(state[name], value), name
    stack.load_run_state_dict(0, state)
    assert torch.equal(stack.model.head.weight[0], models[1].head.weight)
    with pytest.raises(ValueError, match='state of another model'):
        stack.load_run_state_dict(0, {'head.weight': state['head.weight']})


def test_per_run_gradient_clipping_equals_clipping_alone():
    seeds = [0, 1, 2]
    graphs = _graphs(5)
    models = [m.double().eval() for m in _models('layernorm', seeds)]
    stack = StackedGraphormer(models).eval()
    (_run(stack, graphs) * torch.tensor([1.0, 30.0, 0.01]).view(3, 1, 1)
     .double()).square().sum().backward()
    norms = stack.clip_grad_norm_(0.5)
    for r, (scale, model) in enumerate(zip([1.0, 30.0, 0.01], models)):
        (_run(model, graphs) * scale).square().sum().backward()
        alone = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        assert torch.allclose(norms[r], alone)
        for name, p in model.named_parameters():
            assert torch.allclose(stack.model.get_parameter(name).grad[r],
                                  p.grad, atol=1e-12), name


@pytest.mark.parametrize('norm', ['contranorm', 'contranorm_d'])
def test_refuses_norms_without_a_run_dimension(norm):
    with pytest.raises(ValueError, match='LayerNorm, SepNorm and Identity'):
        StackedGraphormer(_models(norm, [0, 1]))


def test_refuses_models_of_other_configurations():
    one = _models('layernorm', [0])[0]
    other = _models('layernorm', [0], hidden_channels=8, num_heads=2)[0]
    with pytest.raises(ValueError, match='one configuration'):
        StackedGraphormer([one, other])
    with pytest.raises(ValueError, match='one per run'):
        StackedGraphormer([one, one], _generators([0]))
    with pytest.raises(ValueError, match='one Graphormer per run'):
        StackedGraphormer([])
