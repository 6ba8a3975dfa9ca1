r"""The generated reports of the benchmark scripts (``experiments/``): the
same measurements give the same bytes, and the figures draw what the
records hold. The studies' reports: tests/test_study*.py."""
import json

from conftest import experiment

_script = experiment


def _layer_row(layer, impl, n, status='ok', note=None):
    row = dict(key=f'cpu|float32|{layer}|{impl}|{n}|32', device='cpu',
               dtype='float32', layer=layer, impl=impl, n=n, d=32,
               machine='test cpu', status=status)
    if status == 'ok':
        row.update(seconds=1e-4 * n, peak_gib=0.01)
    if note:
        row['note'] = note
    return row


def test_layer_benchmark_names_what_it_did_not_measure(tmp_path):
    bench = _script('bench/layers')
    rows = [_layer_row('contranorm', 'gnorm', 1000),
            _layer_row('contranorm', 'reference', 1000),
            _layer_row('contranorm', 'gnorm', 50000, 'skipped', 'est. 900 s'),
            _layer_row('contranorm', 'reference', 50000, 'oom',
                       'needs ~56 GiB'),
            _layer_row('pairnorm', 'gnorm', 50000, 'skipped', 'est. 400 s')]
    assert bench.not_measured(rows) == [
        'n=50,000, skipped, estimated time over --max-seconds: contranorm, '
        'pairnorm',
        'n=50,000, out of memory (needs ~56 GiB): contranorm ref']
    rows = {r['key']: r for r in rows}
    bench.report(rows, tmp_path / 'a.md', tmp_path / 'a.png', 'cpu')
    bench.report(rows, tmp_path / 'b.md', tmp_path / 'b.png', 'cpu')
    assert (tmp_path / 'a.md').read_bytes() == (tmp_path / 'b.md').read_bytes()
    assert (tmp_path / 'a.png').read_bytes() == \
        (tmp_path / 'b.png').read_bytes()


def test_graphormer_benchmark_plot_shows_every_series(tmp_path):
    bench = _script('bench/graphormer')
    path = tmp_path / 'bench_graphormer_cpu.jsonl'
    rows = [dict(dataset='zinc', batch_size=b, dtype='float32', norm=norm,
                 bucket=0, version=version, rev='abc', data_s=0.01,
                 model_s=1.0, collation_share=0.01, graphs_per_s=20.0,
                 model_graphs_per_s=20.0, peak_gib=0.5, mean_nodes=23.0,
                 mean_max_nodes=35, host='test cpu', steps=3)
            for norm in ('layernorm', 'sepnorm') for version in
            ('before', 'after') for b in (32, 128)]  # all at the same speed
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    ax, = bench.report(path, 'cpu').axes
    looks = {(line.get_color(), line.get_marker(), line.get_linestyle(),
              str(line.get_markerfacecolor())) for line in ax.lines}
    assert len(looks) == len(ax.lines) == 4  # no series looks like another
    xs = {round(float(x), 3) for line in ax.lines for x in line.get_xdata()}
    assert len(xs) == 4  # the two norms side by side, not on each other


def test_graphormer_parts_report_gives_the_layers_share(tmp_path):
    parts = _script('bench/graphormer_parts')
    path = tmp_path / 'bench_graphormer_parts_cpu.jsonl'
    ms = {('full', 0.1): 380.0, ('full', 0.0): 320.0, ('layers', 0.1): 330.0,
          ('layers', 0.0): 250.0, ('linear', 0.0): 100.0}
    rows = [dict(dataset='zinc', norm='layernorm', part=part,
                 dropout=dropout, batch_size=128, cpu_ms=value, steps=5,
                 host='test cpu') for (part, dropout), value in ms.items()]
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    text = parts.report(path)
    assert text == path.with_suffix('.md').read_text()
    assert '| zinc | layernorm | 380.0 | 320.0 | 330.0 | 250.0 | 100.0 | ' \
        '2.50x | 1.52x |' in text


def test_graphormer_runs_report_gives_the_stack_speed_up(tmp_path):
    runs = _script('bench/graphormer_runs')
    path = tmp_path / 'bench_graphormer_runs_cpu.jsonl'
    rows = [dict(dataset='zinc', recipe='small', norm='sepnorm', runs=5,
                 batch_size=64, steps=5, separate_ms=150.0, stacked_ms=100.0,
                 threads=1, host='test cpu')]
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    text = runs.report(path)
    assert text == path.with_suffix('.md').read_text()
    assert '| zinc | small | sepnorm | 5 | 150.0 | 100.0 | 1.50x |' in text




def test_denormals_benchmark_reports_each_case_and_checks_the_bits():
    import torch
    bench = _script('bench/denormals')
    rows = [dict(case='layer', without_s=0.03, with_s=0.01, speedup=3.0,
                 bitwise_equal=True),
            dict(case='epochs', without_s=1.0, with_s=1.0, speedup=1.0)]
    for row in rows:
        row.update(machine='test cpu', date='2026-12-07', rounds=5)
    lines = bench.report(rows, 'cmd')
    assert '| layer | 30.0 ms | 10.0 ms | 3.00x | yes |' in lines
    assert '| epochs | 1000.0 ms | 1000.0 ms | 1.00x | - |' in lines
    a, b = {}, {}
    row = bench.compare(lambda: a.update(y=torch.zeros(2)),
                        lambda: b.update(y=torch.tensor([0.0, 1.0])), 1,
                        (a, b))
    assert row['bitwise_equal'] is False  # a difference is seen
