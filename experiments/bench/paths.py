"""Shortest paths of ogbg-molhiv for the Graphormer: graph by graph (the
``ShortestPaths`` pre_transform) vs all graphs at once in batches
(``add_shortest_paths``), side by side in one process, at one thread.

From the 41,127 graphs ogb's ``process()`` reads (untimed): graph by graph,
``ShortestPaths()`` on every graph then ``InMemoryDataset.collate`` (what
``PygGraphPropPredDataset.process`` did), against ``collate`` then
``add_shortest_paths`` on the collated storage (what ``load_molhiv``
does), asserting both storages equal bit for bit; unless ``--no-load``,
the whole ``load_molhiv`` from a fresh root each way, in a child process
each, and their processed files compared. Report:
``<out>/bench_paths_cpu.md`` (docs/benchmarks.rst).

    python experiments/bench/paths.py  # experiments/results/bench_paths_cpu.md
    python experiments/bench/paths.py --no-load --out /tmp
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('MKL_NUM_THREADS', '1')

import torch  # noqa: E402
from torch_geometric.data import InMemoryDataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gnorm.bench import (default_mirror, markdown_table,  # noqa: E402
                         peak_rss_gib, run_child, timed,
                         write_report)
from gnorm.machine import machine_words, this_machine  # noqa: E402
from gnorm.data import molecules  # noqa: E402
from gnorm.data.molecules import (  # noqa: E402
    ShortestPaths,
    add_shortest_paths,
    load_molhiv,
)


class PerGraphPaths(ShortestPaths):
    """ShortestPaths under another type: the molhiv dataset class runs it
    graph by graph, as before the batched paths."""


def child(args):
    """Loads molhiv from the fresh root args.root (batched paths, or graph
    by graph with --per-graph) and prints a JSON line: seconds, max RSS."""
    torch.set_num_threads(1)

    def load():
        if not args.per_graph:
            return load_molhiv(args.root, args.mirror)[0]
        molecules._copy_tree(Path(args.mirror) / 'ogb_regenerated' /
                             'ogbg_molhiv', Path(args.root) / 'ogbg_molhiv')
        with molecules._full_torch_load():
            return molecules._molhiv_class()(
                'ogbg-molhiv', root=args.root, pre_transform=PerGraphPaths())
    seconds, dataset = timed(load)
    assert len(dataset) == 41127 and 'path_edge' in dataset._data
    print(json.dumps({'seconds': seconds, 'max_rss_gib': peak_rss_gib(),
                      'file': dataset.processed_paths[0]}))


def whole_load(args, root, per_graph):
    return run_child([__file__, '--child', '--root', root, '--mirror',
                      args.mirror] + ['--per-graph'] * per_graph)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 24), b''):
            digest.update(block)
    return digest.hexdigest()


def raw_graphs(root, mirror):
    """The graphs of ogbg-molhiv as ogb's process() reads them (labels
    set), without paths."""
    from ogb.io.read_graph_pyg import read_graph_pyg
    raw = Path(root) / 'ogbg_molhiv' / 'raw'
    molecules._copy_tree(Path(mirror) / 'ogb_regenerated' / 'ogbg_molhiv' /
                         'raw', raw)
    graphs = read_graph_pyg(str(raw), add_inverse_edge=True)
    import pandas as pd
    labels = pd.read_csv(raw / 'graph-label.csv.gz', header=None).values
    for g, y in zip(graphs, labels):
        g.y = torch.from_numpy(y).view(1, -1).to(torch.long)
    return graphs


def assert_same_storage(a, b):
    (data, slices), (other, other_slices) = a, b
    assert list(data.keys()) == list(other.keys())
    assert list(slices) == list(other_slices)
    for key in slices:
        assert data[key].dtype == other[key].dtype, key
        assert torch.equal(data[key], other[key]), key
        assert torch.equal(slices[key], other_slices[key]), key


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mirror', default=default_mirror(
        Path(__file__).resolve().parents[2]))
    parser.add_argument('--root', default=None, help='scratch folder '
                        '(default: a temporary one, removed afterwards)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='runs of the batched paths (median)')
    parser.add_argument('--no-load', action='store_true',
                        help='skip the whole load_molhiv timings')
    parser.add_argument('--out', default=str(
        Path(__file__).resolve().parents[1] / 'results'))
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--per-graph', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    torch.set_num_threads(1)
    scratch = Path(args.root or tempfile.mkdtemp(prefix='bench_paths_'))
    load = os.getloadavg()
    try:
        rows = measure(args, scratch)
    finally:
        if args.root is None:
            shutil.rmtree(scratch, ignore_errors=True)
    write(args, rows, load)


def measure(args, scratch):
    rows = {}
    graphs = raw_graphs(scratch / 'raw', args.mirror)
    print(f'{len(graphs)} graphs, {sum(g.num_nodes for g in graphs):,} '
          f'nodes, {sum(g.num_edges for g in graphs):,} edges', flush=True)

    new = []
    for _ in range(args.repeats):
        collate, batched = timed(InMemoryDataset.collate, graphs)
        new.append((collate, timed(add_shortest_paths, *batched)[0]))
        print('batched: collate {:.2f} s, paths {:.2f} s'.format(*new[-1]),
              flush=True)
    paths, with_paths = timed(list, map(ShortestPaths(), graphs))
    collate, per_graph = timed(InMemoryDataset.collate, with_paths)
    old = (paths, collate)
    print('graph by graph: paths {:.2f} s, collate {:.2f} s'.format(*old),
          flush=True)
    assert_same_storage(batched, per_graph)
    data = batched[0]
    rows['graphs'] = len(graphs)
    rows['pairs'] = data.spd.numel()
    rows['path_entries'] = data.path_edge.numel()
    rows['old_paths'], rows['old_collate'] = old
    rows['new_collate'] = statistics.median(t[0] for t in new)
    rows['new_paths'] = statistics.median(t[1] for t in new)
    rows['new_paths_all'] = [t[1] for t in new]
    del graphs, with_paths, per_graph, data, batched

    if not args.no_load:
        for name, per_graph in (('load_new', False), ('load_old', True)):
            root = scratch / name
            rows[name] = whole_load(args, root, per_graph)
            print(name, rows[name], flush=True)
        new_file, old_file = (rows[k]['file'] for k in ('load_new',
                                                         'load_old'))
        with molecules._full_torch_load():
            loaded = [torch.load(f, weights_only=False)
                      for f in (new_file, old_file)]
        assert_same_storage(*loaded)
        rows['same_file_bytes'] = sha256(new_file) == sha256(old_file)
        rows['file_mib'] = os.path.getsize(new_file) / 2**20
        print('processed files: same storage; same bytes:',
              rows['same_file_bytes'], flush=True)
    return rows


def write(args, rows, load):
    old, new = rows['old_paths'], rows['new_paths']
    old_all = old + rows['old_collate']
    new_all = new + rows['new_collate']
    print(f'paths: graph by graph {old:.2f} s, batched {new:.2f} s, '
          f'{old / new:.1f}x')
    lines = [
        '# ogbg-molhiv shortest paths: graph by graph vs batched (cpu)', '',
        f'Generated by `python experiments/bench/paths.py` on {date.today()}:'
        f' {machine_words(this_machine("cpu"))}; load average '
        f'{load[0]:.1f} when it started (the'
        f' machine\'s other jobs share its cores, so times are noisy).', '',
        f'All {rows["graphs"]:,} molhiv graphs as ogb\'s `process()` reads '
        f'them ({rows["pairs"]:,} ordered node pairs, {rows["path_entries"]:,}'
        f' path edges stored). Graph by graph: the `ShortestPaths` '
        f'pre_transform on every graph, then `InMemoryDataset.collate`. '
        f'Batched: `collate`, then `add_shortest_paths` on the collated '
        f'storage (median of {len(rows["new_paths_all"])} runs: '
        + ', '.join(f'{t:.2f}' for t in rows['new_paths_all']) + ' s). '
        'The two storages were asserted equal, key by key and bit for bit '
        '(values, dtypes, slices), so every graph\'s `spd` and `path_edge` '
        'are the same.', '']
    table = [['shortest paths', f'{old:.2f} s', f'{new:.2f} s',
              f'{old / new:.1f}x'],
             ['collate', f'{rows["old_collate"]:.2f} s',
              f'{rows["new_collate"]:.2f} s', ''],
             ['paths + collate', f'{old_all:.2f} s', f'{new_all:.2f} s',
              f'{old_all / new_all:.1f}x']]
    if 'load_new' in rows:
        a, b = rows['load_old'], rows['load_new']
        table.append(['whole `load_molhiv`, fresh root', *(
            f'{r["seconds"]:.1f} s (max RSS {r["max_rss_gib"]:.2f} GiB)'
            for r in (a, b)), f'{a["seconds"] / b["seconds"]:.1f}x'])
    lines += markdown_table(['step', 'graph by graph', 'batched', 'speed-up'],
                            table)
    if 'load_new' in rows:
        lines += [
            '', 'Whole `load_molhiv`: copy of the raw files from the mirror, '
            'ogb\'s reading and conversion, the paths, collation, saving '
            f'({rows["file_mib"]:.0f} MiB) and loading, in a subprocess '
            'each from a fresh root; graph by graph = the dataset with a '
            '`ShortestPaths` subclass as pre_transform (run graph by '
            'graph). The two processed files hold the same storage'
            + (' and are byte-identical.' if rows['same_file_bytes'] else
               ' (their bytes differ).')]
    out = Path(args.out) / 'bench_paths_cpu.md'
    write_report(out, lines)
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
