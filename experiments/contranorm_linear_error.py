"""How close ContraNorm's linear-time kernel (``kernel='nystrom'``) comes to
the exact layer, over the number of landmarks k: the error table from
which the default k is chosen.

Inputs, d channels, n nodes:

* ``gaussian``: i.i.d. standard normal rows, n = 10,000, d = 64, with a
  random graph of average degree 4 for non-neighbour negatives (the
  hardest case for a low-rank kernel: the similarities spread widest);
* the hidden states that reach the norm layers of trained models (the
  input of every ``norms.i``, eval mode, caught by forward pre-hooks,
  with the masked pairs the model hands to the norm): DeepGCN on Cora,
  L = 2 and L = 32 (``dataset=cora norm=contranorm``, the exact layer),
  and Luo et al.'s ResGNN block on Minesweeper, L = 2 and L = 8
  (``experiment=luo dataset=minesweeper norm=contranorm_lin``: the
  exact layer would take ~15 s an epoch at L = 8 on one thread, so these
  models train with the linear kernel at its default k). Each trains
  briefly (the epochs are in the table), full batch, by Adam with its
  config's learning rate and weight decay, seed 0, on the train split
  (index 0).

For each input, temperature tau in {1, 0.5}, negatives ``all`` and
``non_neighbors``, and k in {16, 32, 64, 128, 256, 512}, in float32 as
trained, against the exact layer in float64:

* node-specific error of X_neg: || (A - mean A) - (E - mean E) || /
  || E - mean E ||, the means over the nodes (the part of X_neg that
  differs between nodes, which the contrast acts on);
* output error: || y_A - y_E || / || y_E || of the layer's output
  (scale 1, LayerNorm of unit weight and zero bias).

For models of several layers: the median over the norm layers and the
largest. Also the exact layer in float32 against float64 (the floor a
float32 layer reaches anyway), the mean and spread of the cosine
similarities of each input, and forward+backward time at n = 10,000,
d = 64 (Gaussian, one thread) for each k. The default k is the smallest
k of the grid whose node-specific error on every trained model's hidden
states (largest over layers, both temperatures, both negatives) is at
most 2 %, if it is at least 20 times faster than the exact layer at
n = 10,000 (both negatives); the table says which k that is, its speed
and the layer's default.
Rows: ``<out>/contranorm_linear_error.jsonl``; report:
``<out>/contranorm_linear_error.md``. About 10 minutes on one thread.

    GNORM_DATA_MIRROR=/work/shared/data python experiments/contranorm_linear_error.py
    python experiments/contranorm_linear_error.py --report-only
"""
import argparse
import inspect
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnorm.bench import (arguments, markdown_table, measure_into,  # noqa: E402
                         parse, read_jsonl, write_report)
from gnorm.machine import machine_words, this_machine  # noqa: E402
from gnorm.nn import ContraNorm  # noqa: E402
from gnorm.nn.contra_norm import (approximate_negatives,  # noqa: E402
                                  contrastive_negatives, masked_pairs,
                                  normalize)

KS = (16, 32, 64, 128, 256, 512)
TEMPERATURES = (1.0, 0.5)
NEGATIVES = ('all', 'non_neighbors')
GOAL = 0.02  # node-specific error the default k keeps on trained models
SPEED = 20.0  # and how much faster than the exact layer at n = 10,000
# name: (overrides of python -m gnorm.train, epochs, what it is)
MODELS = {
    'cora_L2': (['dataset=cora', 'layers=2', 'norm=contranorm'], 50,
                'DeepGCN on Cora, L = 2, exact ContraNorm'),
    'cora_L32': (['dataset=cora', 'layers=32', 'norm=contranorm'], 50,
                 'DeepGCN on Cora, L = 32, exact ContraNorm'),
    'minesweeper_L2': (['experiment=luo', 'dataset=minesweeper', 'layers=2',
                        'norm=contranorm_lin'], 100,
                       'ResGNN (Luo block) on Minesweeper, L = 2, '
                       'ContraNorm nystrom'),
    'minesweeper_L8': (['experiment=luo', 'dataset=minesweeper', 'layers=8',
                        'norm=contranorm_lin'], 100,
                       'ResGNN (Luo block) on Minesweeper, L = 8, '
                       'ContraNorm nystrom'),
}
GAUSSIAN = 'gaussian'
METRIC_NAMES = {'acc': 'accuracy', 'rocauc': 'ROC-AUC'}


def default_landmarks() -> int:
    r"""The layer's default k (its signature's)."""
    return inspect.signature(ContraNorm).parameters['landmarks'].default


def gaussian_input(n: int = 10_000, d: int = 64, seed: int = 0):
    r"""Standard normal rows and a random graph of average degree 4."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen)
    return [(x, masked_pairs(torch.randint(0, n, (2, 4 * n), generator=gen),
                             n))]


def trained_inputs(name: str, args):
    r"""The inputs (and masked pairs) of every norm layer of the model
    :obj:`name` of :data:`MODELS`, trained as it says."""
    from hydra import compose, initialize_config_dir

    from gnorm.train import CONF_DIR, build_model, load_data, seed_everything
    overrides, epochs, _ = MODELS[name]
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose('train', overrides=overrides + [
            f'data.root={args.root}', f'data.mirror={args.mirror}'])
    seed_everything(0)
    data = load_data(cfg)
    model = build_model(cfg, data.num_features, int(data.y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr,
                                 weight_decay=cfg.train.weight_decay)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask],
                        data.y[data.train_mask]).backward()
        optimizer.step()
    caught = []

    def hook(module, inputs, kwargs):
        caught.append((inputs[0].detach(), kwargs.get('edge_index')))
    handles = [norm.register_forward_pre_hook(hook, with_kwargs=True)
               for norm in model.norms]
    model.eval()
    with torch.no_grad():
        out = model(data.x, data.edge_index)
    for handle in handles:
        handle.remove()
    metric = cfg.dataset.metric
    score = test_score(out[data.test_mask], data.y[data.test_mask], metric)
    print(f'{name}: {epochs} epochs in {time.perf_counter() - start:.0f} s, '
          f'test {metric} {100 * score:.1f} %', flush=True)
    pairs = masked_pairs(data.edge_index, data.num_nodes)
    return [(x, p if p is not None else pairs) for x, p in caught], \
        dict(epochs=epochs, metric=metric, test_score=score)


def test_score(out, y, metric):
    r"""Accuracy, or ROC-AUC of class 1 (the Mann-Whitney statistic of
    the logits' difference; no ties in float logits)."""
    if metric == 'acc':
        return (out.argmax(-1) == y).float().mean().item()
    score = out[:, 1] - out[:, 0]
    ranks = torch.empty_like(score).scatter_(
        0, score.argsort(), torch.arange(1.0, score.numel() + 1))
    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return ((ranks[pos].sum() - n_pos * (n_pos + 1) / 2)
            / (n_pos * n_neg)).item()


def cosines(x, sample: int = 2000):
    r"""Mean and standard deviation of the cosine similarity of distinct
    pairs of a fixed sample of rows."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randperm(x.size(0), generator=gen)[:sample]
    xn = F.normalize(x[rows].double(), dim=1)
    cos = (xn @ xn.t())[~torch.eye(rows.numel(), dtype=torch.bool)]
    return cos.mean().item(), cos.std().item()


def node_error(approx, exact):
    a, e = approx - approx.mean(0), exact - exact.mean(0)
    return ((a - e).norm() / e.norm()).item()


def output(x, x_neg):
    r"""The layer's output, scale 1, LayerNorm without affine map."""
    return F.layer_norm(2 * x - x_neg, (x.size(-1), ))


def errors(x, pairs, temperature, negatives, k=None):
    r"""Node-specific and output errors of X_neg in float32 (the exact
    kernel for :obj:`k` = :obj:`None`, else Nystrom on k landmarks)
    against the exact kernel in float64."""
    edges = pairs if negatives == 'non_neighbors' else None
    x64 = x.double()
    exact = contrastive_negatives(x64, normalize(x64), temperature,
                                  edge_index=edges)
    out = {}
    for key in [None, *KS] if k is None else [k]:
        with torch.no_grad():
            approx = contrastive_negatives(
                x, normalize(x), temperature, edge_index=edges) \
                if key is None else approximate_negatives(
                    x, normalize(x), temperature, key, edge_index=edges)
        approx = approx.double()
        out['exact32' if key is None else key] = (
            node_error(approx, exact),
            ((output(x64, approx) - output(x64, exact)).norm()
             / output(x64, exact).norm()).item())
    return out


def measure_rows(args):
    r"""One row per input, layer, temperature and negatives, with both
    errors for the float32 exact layer and every k."""
    inputs = {GAUSSIAN: (gaussian_input(), dict(epochs=None))}
    for name in MODELS:
        inputs[name] = trained_inputs(name, args)
    for name, (layers, info) in inputs.items():
        for layer, (x, pairs) in enumerate(layers):
            mean, std = cosines(x)
            for temperature in TEMPERATURES:
                for negatives in NEGATIVES:
                    found = errors(x, pairs, temperature, negatives)
                    yield dict(input=name, layer=layer, n=x.size(0),
                               d=x.size(1), temperature=temperature,
                               negatives=negatives, cos_mean=mean,
                               cos_std=std, **info,
                               node={str(k): v[0] for k, v in found.items()},
                               output={str(k): v[1]
                                       for k, v in found.items()})
            print(f'{name} layer {layer}: done', flush=True)
    for row in timing_rows(args.repeats):
        yield row


def timing_rows(repeats: int):
    r"""Forward+backward seconds of the exact layer and of every k at
    n = 10,000, d = 64 (Gaussian, average degree 4), both negatives."""
    (x, pairs), = gaussian_input()
    for negatives in NEGATIVES:
        edges = pairs if negatives == 'non_neighbors' else None
        for k in [None, *KS]:
            norm = ContraNorm(64, negatives=negatives) if k is None else \
                ContraNorm(64, negatives=negatives, kernel='nystrom',
                           landmarks=k)

            def step():
                x_ = x.detach().requires_grad_()
                norm(x_, edge_index=edges).square().sum().backward()
            step()
            times = []
            for _ in range(1 if k is None else repeats):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            yield dict(input='timing', negatives=negatives,
                       k='exact' if k is None else k,
                       seconds=statistics.median(times))
            print(f'timing {negatives} {k}: {statistics.median(times):.3f} s',
                  flush=True)


def summary(rows, key, inp, temperature, negatives, k):
    r"""Median and largest error :obj:`key` over the layers."""
    values = [r[key][str(k)] for r in rows if r['input'] == inp
              and r['temperature'] == temperature
              and r['negatives'] == negatives]
    return statistics.median(values), max(values)


def cell(median, largest, layers):
    if layers == 1:
        return f'{median:.2g}'
    return f'{median:.2g} ({largest:.2g})'


def chosen_k(rows):
    r"""The smallest k whose node-specific error on every trained model's
    inputs (any layer, temperature, negatives) is at most :data:`GOAL`."""
    trained = [r for r in rows if r['input'] in MODELS]
    for k in KS:
        if trained and max(r['node'][str(k)] for r in trained) <= GOAL:
            return k
    return None


def report(rows, command):
    error_rows = [r for r in rows if r['input'] != 'timing']
    timing = [r for r in rows if r['input'] == 'timing']
    default, chosen = default_landmarks(), chosen_k(error_rows)
    names = [GAUSSIAN, *MODELS]
    lines = [
        '# ContraNorm, kernel="nystrom": error against the exact layer '
        'over k', '',
        f'Generated by `{command}` on {date.today()}: '
        f'{machine_words(this_machine("cpu"))}.', '',
        'The approximation: the kernel exp(x̂_i·x̂_j/τ) expanded around the '
        'mean direction u of the rows, exp(|u|²/τ) a_i a_j (1 + κ(r_i, '
        'r_j)), r = x̂ − u, a_i = exp(u·r_i/τ), κ = exp(r·r\'/τ) − 1; the '
        'constant summed exactly, κ by Nyström on k k-means landmarks '
        '(2 Lloyd steps on a fixed sample of 32 k nodes). Errors of the '
        'float32 layer against the exact layer in float64. **node**: '
        'node-specific error of X_neg, ‖(A − Ā) − (E − Ē)‖ / ‖E − Ē‖ '
        '(means over nodes). **output**: ‖y_A − y_E‖ / ‖y_E‖ of the '
        'layer\'s output (scale 1, LayerNorm). Models of several layers: '
        'median over their norm layers (largest in parentheses). '
        '"exact f32": the exact layer in float32, the floor any float32 '
        'layer reaches.', '',
        '## Inputs', '']
    header = ['input', 'n', 'd', 'layers', 'trained', 'cosine mean',
              'cosine std']
    table = []
    for name in names:
        rs = [r for r in error_rows if r['input'] == name]
        if not rs:
            continue
        layers = sorted({r['layer'] for r in rs})
        what = 'i.i.d. N(0, 1), random graph (degree 4)' if name == GAUSSIAN \
            else MODELS[name][2]
        first = rs[0]
        trained = '-' if first['epochs'] is None else (
            f"{first['epochs']} epochs (test "
            f"{METRIC_NAMES[first['metric']]} "
            f"{100 * first['test_score']:.1f} %)")
        means = [r['cos_mean'] for r in rs]
        stds = [r['cos_std'] for r in rs]
        table.append([f'{name}: {what}', f"{rs[0]['n']:,}", rs[0]['d'],
                      len(layers), trained,
                      f'{min(means):.2f} to {max(means):.2f}',
                      f'{min(stds):.2f} to {max(stds):.2f}'])
    lines += markdown_table(header, table)
    for key, title in (('node', 'Node-specific error of X_neg'),
                       ('output', 'Relative error of the layer output')):
        lines += ['', f'## {title}', '']
        header = ['input', 'negatives', 'τ', 'exact f32',
                  *[f'k = {k}' for k in KS]]
        table = []
        for name in names:
            rs = [r for r in error_rows if r['input'] == name]
            if not rs:
                continue
            layers = len({r['layer'] for r in rs})
            for negatives in NEGATIVES:
                for temperature in TEMPERATURES:
                    table.append([name, negatives, temperature] + [
                        cell(*summary(error_rows, key, name, temperature,
                                      negatives, k), layers)
                        for k in ('exact32', *KS)])
        lines += markdown_table(header, table)
    if timing:
        lines += ['', '## Forward + backward time, n = 10,000, d = 64 '
                  '(Gaussian, one thread)', '']
        header = ['negatives', 'exact', *[f'k = {k}' for k in KS]]
        table = []
        for negatives in NEGATIVES:
            t = {r['k']: r['seconds'] for r in timing
                 if r['negatives'] == negatives}
            table.append([negatives, f"{1e3 * t['exact']:.0f} ms"] + [
                f"{1e3 * t[k]:.0f} ms ({t['exact'] / t[k]:.0f}x)"
                for k in KS])
        lines += markdown_table(header, table)
    lines += ['', '## The default k', '']
    if chosen is None:
        lines.append(f'No k of the grid keeps the node-specific error on '
                     f'the trained models\' hidden states at or below '
                     f'{100 * GOAL:g} %. The layer\'s default: k = '
                     f'{default}.')
    else:
        def largest(k, inputs):
            return max(r['node'][str(k)] for r in error_rows
                       if r['input'] in inputs)
        lines.append(
            f'The smallest k whose node-specific error on every trained '
            f'model\'s hidden states (every norm layer, τ = 1 and 0.5, both '
            f'negatives) is at most {100 * GOAL:g} %: k = {chosen} (largest '
            f'{100 * largest(chosen, MODELS):.2g} %; on the Gaussian inputs '
            f'{100 * largest(chosen, [GAUSSIAN]):.2g} %).')
        smaller = [k for k in KS if k < chosen]
        if smaller:
            k = smaller[-1]
            lines[-1] += (f' k = {k} reaches {100 * largest(k, MODELS):.2g} '
                          f'% on the trained models and '
                          f'{100 * largest(k, [GAUSSIAN]):.2g} % on the '
                          f'Gaussian inputs, whose similarities spread '
                          f'widest (intrinsic dimension d).')
        speed = {r['negatives']: r['seconds'] for r in timing
                 if r['k'] == chosen}
        exact = {r['negatives']: r['seconds'] for r in timing
                 if r['k'] == 'exact'}
        if speed:
            ratios = {neg: exact[neg] / speed[neg] for neg in speed}
            met = min(ratios.values()) >= SPEED
            lines[-1] += f' At n = 10,000, k = {chosen} is ' + ' and '.join(
                f'{x:.0f}x ({neg})' for neg, x in ratios.items()) \
                + f' faster than the exact layer (goal: {SPEED:g}x, ' \
                + ('met).' if met else 'NOT met).')
        larger = [k for k in KS if k > chosen]
        if larger:
            k = larger[0]
            lines[-1] += (f' k = {k} is more accurate (largest '
                          f'{100 * largest(k, MODELS):.2g} % on the trained '
                          f'models, {100 * largest(k, [GAUSSIAN]):.2g} % on '
                          f'the Gaussian inputs) at about twice the time.')
        lines[-1] += (f' The layer\'s default (`ContraNorm(..., '
                      f'kernel="nystrom")`, `conf/norm/contranorm_lin.yaml`):'
                      f' k = {default}'
                      + (', the same.' if chosen == default else '.'))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments(parser, ROOT / 'experiments' / 'results', threads=1,
              checkout=ROOT)
    parser.add_argument('--repeats', type=int, default=3,
                        help='timing repeats of each k (default: 3)')
    args = parse(parser, argv)
    out = Path(args.out)
    rows_path = out / 'contranorm_linear_error.jsonl'
    measure_into(args, rows_path, measure_rows(args),
                 key=lambda r: (r['input'], r.get('layer'),
                                r.get('temperature'), r['negatives'],
                                r.get('k')))
    command = 'python experiments/contranorm_linear_error.py' + (
        f' --threads {args.threads}' if args.threads != 1 else '')
    text = write_report(out / 'contranorm_linear_error.md',
                        report(read_jsonl(rows_path), command))
    print(text)


if __name__ == '__main__':
    main()
