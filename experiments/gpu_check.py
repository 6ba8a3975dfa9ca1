r"""The GPU check in one command: what a lent device computes and how fast.

One process runs the steps of :data:`STEPS` in order, each within its own
time budget (smaller under ``--quick``; :func:`gnorm.bench.run_steps`):
a. the CUDA suite (``pytest -m cuda``); b. layers (:mod:`experiments.cases.layers`) in
fp32 and bf16; c. a 32-layer DeepGCN step on Cora against its kernel time
in ``torch.profiler``; d. Graphormer-slim (:mod:`experiments.bench.graphormer`),
eager and compiled; e. the collapse monitor's overhead
(:mod:`experiments.cases.monitor`); f. one Table 3 cell end to end and the whole
table extrapolated. Report: ``<out>/gpu_check_<device>.{jsonl,md}``,
rewritten after every step (docs/benchmarks.rst).

    python experiments/gpu_check.py --device cuda            # on a lent GPU
    python experiments/gpu_check.py --device cpu --quick --out /tmp/check
    python experiments/gpu_check.py --device cuda --steps ad  # two steps
"""
import argparse
import functools
import hashlib
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's gnorm

from gnorm import bench  # noqa: E402
from gnorm.bench import Step  # noqa: E402
from experiments.cases import graphormer as graphormer_cases  # noqa: E402
from experiments.cases import layers as layer_cases  # noqa: E402
from experiments.cases.monitor import (  # noqa: E402
    deep_gcn_case, load_cora, overheads)

OUT = ROOT / 'experiments' / 'results'


def run_steps(steps: List[Step], ctx: argparse.Namespace,
              env: Dict[str, Any]) -> List[Dict[str, Any]]:
    r"""Runs :obj:`steps` (:func:`gnorm.bench.run_steps`) into
    ``<out>/gpu_check_<device>.{jsonl,md}``."""
    path = Path(ctx.out) / f'gpu_check_{ctx.device}.jsonl'
    return bench.run_steps(steps, ctx, path, env, report, ctx.quick)


def report(env: Dict[str, Any], records: List[Dict[str, Any]]) -> str:
    return bench.check_report('gnorm GPU check', env, records)


def commit() -> str:
    r"""The commit of the checkout, ``+modified`` where gnorm's code
    differs from it (:func:`gnorm.train.run.source`); ``$GNORM_COMMIT``
    where there is no git."""
    from gnorm.train.run import source
    found = source()
    if found is None:
        return os.environ.get('GNORM_COMMIT',
                              'unknown (no git; set GNORM_COMMIT)')
    return found['commit'] + ('+modified' if found['modified'] else '')


# The code a GPU runs: a change here since the last committed report asks
# for the full check (experiments/gpu_window.py decides).
GPU_PATHS = ('gnorm/nn', 'gnorm/models', 'gnorm/train', 'gnorm/bench',
             'experiments/cases', 'experiments/gpu_check.py')
DIGEST = 'GPU-path code digest'


def gpu_code_digest(root: Path = ROOT) -> str:
    r"""The sha256 (first 16 hex digits) of the Python files under
    :data:`GPU_PATHS` of :obj:`root`, their paths and bytes in path order:
    equal digests, equal GPU-path code (no git needed on the device)."""
    digest = hashlib.sha256()
    files = sorted(p for name in GPU_PATHS for p in
                   ([root / name] if name.endswith('.py')
                    else (root / name).rglob('*.py')))
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b'\0')
        digest.update(path.read_bytes() + b'\0')
    return digest.hexdigest()[:16]


def reported_digest(report: Path) -> Optional[str]:
    r"""The :func:`gpu_code_digest` a check's report records; :obj:`None`
    for a report without one (or no report)."""
    if not report.is_file():
        return None
    found = re.search(rf'^\* {DIGEST}: ([0-9a-f]+)', report.read_text(),
                      re.M)
    return found and found.group(1)


def environment(ctx: argparse.Namespace, argv: List[str]) -> Dict[str, Any]:
    env = bench.environment(
        ctx.device, ['python', 'experiments/gpu_check.py', *argv], commit())
    why = getattr(ctx, 'why', '')
    env['notes'] = [f'{DIGEST}: {gpu_code_digest()}'] + (
        [f'why {"quick" if ctx.quick else "full"}: {why}'] if why else [])
    return env


def cuda_suite(ctx, budget):
    if ctx.device != 'cuda':
        return dict(status='skipped: no device')
    return bench.pytest_step(ROOT, 'cuda', budget)


# -------------------------------------------------------------- b. layers
LAYERS = ('contranorm', 'contranorm_nn', 'pairnorm', 'contranorm_d')


def layers(ctx, budget):
    cuda = ctx.device == 'cuda'
    sizes = (500, 2000) if ctx.quick else (2708, 10_000, 50_000, 169_000)
    d, repeats = (32, 1) if ctx.quick else (128, 3)
    # The dense reference runs where its n x n tensors take at most this.
    dense_limit = (0.5 * torch.cuda.mem_get_info()[1] / 2**30 if cuda
                   else 1.0)
    rows, notes = [], [
        f'd = {d}, median of {repeats} forward+backward after a warm-up; '
        f'random graph with {layer_cases.DEGREE} in-edges per node.',
        'peak GiB: torch.cuda.max_memory_allocated above the start' if cuda
        else 'peak GiB: n/a on the CPU (one process: its peak RSS is not '
        'the layer\'s; bench/layers.py measures it per subprocess)',
        f'dense n x n reference where its ~6 n x n tensors need at most '
        f'{dense_limit:.1f} GiB']
    cells = [(dtype, layer, ref) for dtype in ('float32', 'bfloat16')
             for layer in LAYERS for ref in ((False, True) if layer in
                                             layer_cases.QUADRATIC
                                             else (False, ))]
    for n in sizes:
        if budget.over():
            notes.append(budget.stop_note(f'n = {n:,}'))
            break
        for dtype, layer, ref in cells:
            row = dict(n=n, dtype=dtype, layer=layer,
                       impl='dense n x n' if ref else 'gnorm')
            rows.append(row)
            need = layer_cases.dense_gib(n, dtype)
            if ref and need > dense_limit:
                row['status'] = f'skipped: needs ~{need:.0f} GiB'
                continue
            res = bench.attempt(row, lambda: layer_cases.measure(
                layer, ref, n, d, ctx.device, dtype, repeats))
            if res:
                row.update(status='ok', ms=1e3 * res['seconds'],
                           peak_gib=res['peak_gib'] if cuda else 'n/a',
                           finite=res['finite'])
    return dict(rows=rows, notes=notes)


# ------------------------------------------------------------ c. DeepGCN
def _cora(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        return load_cora(tmp).to(ctx.device)


def deep_gcn(ctx, budget):
    from gnorm.models import DeepGCN
    from gnorm.nn import ContraNorm
    data = _cora(ctx)
    num_layers = 4 if ctx.quick else 32
    repeats = 3 if ctx.quick else 10
    train = data.train_mask
    norms = {'none': None,
             'contranorm_nn': functools.partial(ContraNorm,
                                                negatives='non_neighbors')}
    rows, notes = [], [
        f'DeepGCN, {num_layers} layers, hidden 32, Cora full batch, Adam; '
        f'step = forward + backward + optimizer step, median of {repeats} '
        f'after a warm-up.',
        'kernel ms: the profiler\'s self device time of one step, launches: '
        'its cudaLaunchKernel calls' if ctx.device == 'cuda' else
        'kernel ms: the profiler\'s self CPU total of one step (every '
        'operator), launches: the aten ops it ran (nested ones counted)']
    for name, norm in norms.items():
        if budget.over():
            notes.append(budget.stop_note(f'norm {name}'))
            break
        torch.manual_seed(0)
        model = DeepGCN(data.num_features, int(data.y.max()) + 1,
                        num_layers=num_layers, hidden_channels=32,
                        dropout=0.2, norm=norm).to(ctx.device)
        opt = torch.optim.Adam(model.parameters(), lr=0.005)

        def step():
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            F.cross_entropy(out[train], data.y[train]).backward()
            opt.step()

        steps = {'hand-written': step,
                 **gnorm_steps(model, data, ctx.device, graphed=False)}
        if ctx.device == 'cuda':
            steps.update(gnorm_steps(model, data, ctx.device, graphed=True))
        for kind, fn in steps.items():
            step_ms = 1e3 * statistics.median(bench.alternate(
                {'step': fn}, repeats, device=ctx.device)['step'])
            prof = bench.kernel_time(fn, device=ctx.device)
            rows.append(dict(norm=name, layers=num_layers, step=kind,
                             step_ms=step_ms, **prof,
                             kernel_share=prof['kernel_ms'] / step_ms))
    notes.append('step: hand-written = forward, backward, Adam as above; '
                 'gnorm = gnorm.train.node_loop.Step (the training update and '
                 'the evaluation pass of every epoch, AdamW); gnorm, CUDA '
                 'graphs = the same step replayed as two CUDA graphs '
                 '(train.cuda_graph, gnorm.train.graphed.GraphedStep), '
                 'timed after its capture.')
    return dict(rows=rows, notes=notes)


def gnorm_steps(model, data, device: str, graphed: bool):
    r"""{name: one epoch of :obj:`model` on :obj:`data`} through gnorm's
    training step (:class:`gnorm.train.node_loop.Step`, as ``gnorm.train``
    runs it), replayed as CUDA graphs with :obj:`graphed`; the graphs are
    captured before it is returned, so that a timing sees replays only."""
    from gnorm.train.graphed import GraphedStep
    from gnorm.train.node_loop import Step, make_optimizer
    data = data.clone()
    for split in ('train', 'val', 'test'):  # one run: masks [1, nodes]
        data[f'{split}_mask'] = data[f'{split}_mask'].unsqueeze(0)
    generators = [torch.Generator(device).manual_seed(0)]
    optimizer = make_optimizer(model, 'adamw', 0.005, 5e-4)
    step = Step(model, data, generators, static=graphed)
    alive = torch.ones(1, dtype=torch.bool, device=device)
    if graphed:
        step = GraphedStep(step)
        for _ in range(step.warmup + 1):  # warm-up epochs, then capture
            step(optimizer, alive)
    return {'gnorm, CUDA graphs' if graphed else 'gnorm':
            lambda: step(optimizer, alive)}


# ---------------------------------------------------------- d. Graphormer
def _tiny_graphormer(name, norm):
    from gnorm.models import Graphormer
    return Graphormer(1, features='zinc' if name == 'zinc' else 'ogb',
                      num_layers=1, hidden_channels=16, num_heads=2,
                      ffn_channels=16,
                      max_dist=graphormer_cases.MAX_DIST[name])


def _compiled(model_fn):
    def build(name, norm):
        return torch.compile(model_fn(name, norm), fullgraph=True,
                             dynamic=True)
    return build


def graphormer(ctx, budget):
    steps = 2 if ctx.quick else 5
    model_fn = _tiny_graphormer if ctx.quick else graphormer_cases.model
    batch_size = 16 if ctx.quick else 256
    norm = 'layernorm'
    rows, notes = [], [
        f'{"a tiny Graphormer (1 layer, hidden 16)" if ctx.quick else "Graphormer-slim (12 layers, hidden 80)"}, '
        f'LayerNorm, batch {batch_size}, median of {steps} AdamW steps '
        f'after a warm-up (experiments.cases.graphormer.measure); graphs/s counts data '
        f'(collation, copy) + model, model-only graphs/s the model alone; '
        f'compiled = torch.compile(fullgraph=True, dynamic=True), as '
        f'train.compile=true, its first (compiling) step not timed.']
    for compiled in (False, True):  # eager first: compiling takes long
        for name in ('zinc', 'molhiv'):
            for dtype in ('float32', 'bfloat16'):
                row = dict(graphs=name, dtype=dtype, compiled=compiled,
                           batch=batch_size)
                rows.append(row)
                if name == 'molhiv' and ctx.quick:
                    row['status'] = ('skipped: --quick (processing the '
                                     '41k ogbg-molhiv graphs takes ~15 s)')
                    continue
                if compiled and ctx.quick and ctx.device == 'cpu':
                    row['status'] = ('skipped: --quick on the CPU (the '
                                     'first compile of even the tiny '
                                     'model took 40-75 s here, over the '
                                     'step\'s budget)')
                    continue
                if budget.over():
                    row['status'] = 'skipped: ' + budget.stop_note(
                        'this setting')
                    continue
                key = (name, batch_size, dtype, norm, 0)
                res = bench.attempt(row, lambda: graphormer_cases.measure(
                    *key[:4], device=ctx.device, mirror=ctx.mirror,
                    root=str(ROOT / 'data'), steps=steps, model_fn=_compiled(
                        model_fn) if compiled else model_fn))
                if res is None:
                    continue
                found = graphormer_cases.row(key, [res], device=ctx.device)
                row.update(status='ok', step_ms=1e3 * found['step_s'],
                           data_ms=1e3 * found['data_s'],
                           graphs_per_s=found['graphs_per_s'],
                           model_graphs_per_s=found['model_graphs_per_s'],
                           nodes_per_graph=found['mean_nodes'],
                           peak_gib=found['peak_gib'] if ctx.device == 'cuda'
                           else 'n/a')
    if ctx.device != 'cuda':
        notes.append('peak GiB: n/a on the CPU (one process)')
    failed = sum(r['status'].startswith('failed') for r in rows)
    return dict(rows=rows, notes=notes, status=f'failed: {failed} of '
                f'{len(rows)} settings' if failed else 'ok')


# ------------------------------------------------------------- e. monitor
def monitor(ctx, budget):
    data = _cora(ctx)
    num_layers, repeats = (4, 1) if ctx.quick else (32, 5)
    row = overheads(deep_gcn_case(data, repeats, layers=num_layers))
    keep = ('model', 'layers', 'records', 'train_s', 'train_hooked_s',
            'forward_s', 'record_s', 'first_record_s', 'eval_every_1',
            'eval_every_10', 'every_1', 'every_10')
    return dict(rows=[{k: row[k] for k in keep}], notes=[
        f'experiments.cases.monitor\'s DeepGCN case on Cora, {num_layers} layers, all '
        f'metrics, medians of {repeats} rotating rounds after a warm-up; '
        f'*_s in seconds. eval_every_k: (record - forward) / (k x (train + '
        f'forward)), every_k: record / (k x train) (docs/monitor.rst).'])


# ------------------------------------------------------------ f. Table 3
def table3_cell(ctx, budget):
    from gnorm.study.runs.compose import cells
    from gnorm.study.spec.find import compose
    from gnorm.study.spec.load import load_spec
    spec = load_spec('table3_paper')
    t = spec.table
    dataset, row = 'cora', 'contranorm'
    depth = 2 if ctx.quick else 8
    seeds = [0, 1] if ctx.quick else list(t['seeds'])
    epochs = 5 if ctx.quick else None
    sets = [f'device={ctx.device}'] + ([f'train.epochs={epochs}']
                                        if epochs else [])
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, '-m', 'gnorm.study', 'table3_paper',
               '--datasets', dataset, '--rows', row, '--depths', str(depth),
               '--seeds', *map(str, seeds), '--set', *sets,
               '--runs', f'{tmp}/runs', '--out', f'{tmp}/report',
               '--scratch', f'{tmp}/scratch']
        env = bench.child_env(ROOT)
        times = {}
        for name, extra in (('fixed', ['--dry-run']), ('cell', [])):
            try:
                times[name], proc = bench.timed(
                    functools.partial(subprocess.run, cmd + extra, cwd=tmp,
                                      env=env, capture_output=True, text=True,
                                      timeout=max(budget.left(), 1)))
            except subprocess.TimeoutExpired:
                return dict(notes=[budget.stop_note(
                    'the cell finished' if name == 'cell' else 'the cell')])
            if proc.returncode:
                tail = (proc.stderr or proc.stdout).strip().splitlines()
                raise RuntimeError(f'gnorm.study exited {proc.returncode}: '
                                   f'{tail[-1] if tail else ""}')
        runs = len(list(Path(tmp, 'runs').glob('*/results.json')))
    table_epochs = compose([*spec.overrides(), f'dataset={dataset}']
                           ).train.epochs
    cell = cells(spec, [dataset], [row], [depth], seeds)[0]
    every = cells(spec, t['datasets'], list(t['rows']), t['depths'],
                  t['seeds'])
    scale = sum(c['cost'] for c in every) / cell['cost'] * \
        table_epochs / (epochs or table_epochs)
    fixed, work = times['fixed'], max(times['cell'] - times['fixed'], 0.0)
    return dict(rows=[dict(
        cell=f'{dataset} {row} L={depth}', settings=len(cell['settings']),
        seeds=len(seeds), runs=runs, epochs=epochs or table_epochs,
        cell_s=times['cell'], fixed_s=fixed, cost_ratio=scale,
        table_cells=len(every),
        table_runs=sum(len(c['settings']) * len(t['seeds']) for c in every),
        table_h=(fixed + work * scale) / 3600)],
        notes=[f'`{shlex.join(["python", *cmd[1:-6]])}` (runs and report '
               f'in a temporary folder), timed end to end (cell_s: process '
               f'start, imports, data, training, report); fixed_s: the same '
               f'command with --dry-run (start, imports, composing the runs).',
               f'Extrapolation: table_h = fixed_s + (cell_s - fixed_s) x '
               f'cost_ratio, cost_ratio = the sum over the table\'s '
               f'{len(every)} cells at {len(t["seeds"])} seeds of '
               f'gnorm.study.runs.compose\'s run cost (runs x depth x (edges + '
               f'32 nodes, + nodes^2/6 for ContraNorm)) / this cell\'s cost'
               + (f' x {table_epochs}/{epochs} epochs' if epochs else '')
               + '. Per-cell data loading counts as work, so the rule '
               'overestimates where it dominates.'])


STEPS = [
    Step('a', 'CUDA suite (pytest -m cuda)', 150, 60, cuda_suite),
    Step('b', 'layer benchmarks', 80, 30, layers),
    Step('c', 'DeepGCN step vs kernel time', 30, 20, deep_gcn),
    Step('d', 'Graphormer-slim training throughput', 150, 30, graphormer),
    Step('e', 'collapse monitor overhead', 30, 20, monitor),
    Step('f', 'one Table 3 cell, whole table extrapolated', 90, 40,
         table3_cell),
]


def parser() -> argparse.ArgumentParser:
    r"""The command line of the check."""
    found = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    found.add_argument('--device', choices=('cuda', 'cpu'),
                        default='cuda' if torch.cuda.is_available()
                        else 'cpu')
    found.add_argument('--quick', action='store_true',
                        help='every step at tiny sizes')
    found.add_argument('--out', default=str(OUT))
    found.add_argument('--why', default='', help='why this check is full '
                        'or quick, for its report (gpu_window.py says)')
    found.add_argument('--steps', default=''.join(s.key for s in STEPS),
                        help='the steps to run, by letter (default: all), '
                        'e.g. "ad" to rerun the suite and the Graphormer')
    return found


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cli = parser()
    ctx = cli.parse_args(argv)
    unknown = set(ctx.steps) - {s.key for s in STEPS}
    if unknown:
        cli.error(f'--steps: no step {", ".join(sorted(unknown))} '
                     f'(steps: {"".join(s.key for s in STEPS)})')
    if ctx.device == 'cuda' and not torch.cuda.is_available():
        cli.error('--device cuda: torch sees no CUDA device')
    ctx.mirror = bench.default_mirror(ROOT)
    env = environment(ctx, argv)
    records = run_steps([s for s in STEPS if s.key in ctx.steps], ctx, env)
    print(f'wrote {Path(ctx.out) / f"gpu_check_{ctx.device}.md"}')
    return 1 if any(r['status'].startswith('failed') for r in records) \
        else 0


if __name__ == '__main__':
    sys.exit(main())
