r"""The cache of what studies compute before they train
(:mod:`gnorm.study.spec.cache`) and the short records of finished runs
(:mod:`gnorm.study.runs.index`): an entry is what composing or reading
again gives, it is found by content (an edit that keeps a file's size and
time is another key), and a process whose code changed writes none."""
import dataclasses
import json
import os
import shutil

import pytest
from omegaconf import OmegaConf

from gnorm.results.keys import record_identity
from gnorm.study.runs import compose
from gnorm.study.runs import index as run_index
from gnorm.study.runs.compose import cells, compose_cells, run_key
from gnorm.study.spec import check as spec_check
from gnorm.study.spec import find as spec_find
from gnorm.study.spec import load as spec_load
from gnorm.study.spec import cache
from gnorm.study.spec.load import load_spec

SPEC = '''# @package _global_
collapse_metrics: false
train:
  epochs: 2
dataset:
  num_nodes: 60
table:
  name: tiny_own
  kind: depth
  datasets: [csbm]
  depths: [1, 2]
  seeds: [0, 1]
  rows:
    none: [norm=none]
    layernorm: [norm=layernorm]
'''


@pytest.fixture
def own(tmp_path, monkeypatch):
    r"""A tiny depth study of gnorm's own (``experiment=tiny_own``, kept
    in the cache as gnorm's studies are) in a copy of gnorm's ``conf/``,
    and that copy."""
    user = tmp_path / 'user' / 'tiny_own.yaml'
    user.parent.mkdir()
    user.write_text(SPEC)
    found = load_spec(str(user))
    conf = tmp_path / 'conf'
    shutil.copytree(spec_find.CONF_DIR, conf)
    (conf / 'experiment' / 'tiny_own.yaml').write_text(SPEC)
    for module in (spec_find, spec_check, spec_load):
        monkeypatch.setattr(module, 'CONF_DIR', conf)
    monkeypatch.setenv('GNORM_CACHE', str(tmp_path / 'cache'))
    return dataclasses.replace(
        found, source=conf / 'experiment' / 'tiny_own.yaml',
        folder=None), conf


def runs_of(spec, runs_dir):
    r"""The runs of every cell of :obj:`spec`, composed into
    :obj:`runs_dir`, and their composer."""
    table = spec.table
    todo = cells(spec, table['datasets'], list(table['rows']),
                 table['depths'], table['seeds'])
    composer = compose_cells(spec, todo, [], runs_dir)
    return [r for c in todo for r in c['runs']], composer


def test_a_cell_the_cache_holds_is_the_cell_composed(own, tmp_path,
                                                     monkeypatch):
    spec, _ = own
    first, composer = runs_of(spec, tmp_path / 'runs')
    assert len(first) == 8 and spec.own
    assert len(list((tmp_path / 'cache' / 'cells').glob(
        'tiny_own-*.json'))) == 1

    def composed(*args):
        raise AssertionError('a cell the cache holds was composed')
    monkeypatch.setattr(compose.Composer, 'run', composed)
    again, other = runs_of(spec, tmp_path / 'elsewhere')
    assert again == [{**r, 'dir': tmp_path / 'elsewhere' /
                      r['dir'].relative_to(tmp_path / 'runs')}
                     for r in first]
    # A cached run's config, composed where it trains, is the run's own.
    assert all(OmegaConf.to_container(other.config(b)) ==
               OmegaConf.to_container(composer.config(a))
               for a, b in zip(first, again))


def test_the_cache_is_keyed_on_the_content_of_the_configs(own, tmp_path,
                                                           monkeypatch):
    r"""A conf YAML edited without changing its size or time is another
    key: the cells are composed again, as without a cache."""
    spec, conf = own
    before, _ = runs_of(spec, tmp_path / 'runs')
    key = cache.context(conf)
    train = conf / 'train.yaml'
    stat, text = train.stat(), train.read_text()
    assert '  lr: 0.005 ' in text
    train.write_text(text.replace('  lr: 0.005 ', '  lr: 0.007 '))
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert train.stat().st_size == stat.st_size
    assert cache.context(conf) != key
    calls = []
    real = compose.Composer.run
    monkeypatch.setattr(compose.Composer, 'run',
                        lambda *a: calls.append(a) or real(*a))
    after, composer = runs_of(spec, tmp_path / 'runs')
    assert len(calls) == 8  # composed again
    assert {composer.config(r).train.lr for r in after} == {0.007}
    assert not {r['key'] for r in after} & {r['key'] for r in before}
    monkeypatch.setenv('GNORM_CACHE', str(tmp_path / 'none'))
    fresh, _ = runs_of(spec, tmp_path / 'runs')
    assert fresh == after


def test_a_spec_of_gnorms_is_checked_once_for_its_content(monkeypatch):
    first = load_spec('table3_paper')  # checked, kept (or kept already)

    def checked(spec):
        raise AssertionError('a spec the cache holds was checked again')
    monkeypatch.setattr(spec_load, 'check_spec', checked)
    again = load_spec('table3_paper')
    assert again == first and again.own


def test_short_records_follow_each_files_bytes(tmp_path, monkeypatch):
    folder = tmp_path / 'runs'
    (folder / 'b').mkdir(parents=True)
    (folder / 'b' / 'results.json').write_text('{"status": "ok", "conf')
    path = folder / 'a' / 'results.json'
    path.parent.mkdir()
    run = {'status': 'ok', 'config': {'layers': 2, 'seed': 0},
           'source': {'commit': 'c' * 40, 'modified': False}}
    path.write_text(json.dumps(run))
    first, broken = run_index.short_runs(folder)
    assert first['key'] == run_key(record_identity(run))
    assert first['_path'] == str(path) and not run_index.modified(first)
    assert broken['status'] == 'unreadable' and broken['key'] is None
    assert list(run_index.finished([first, broken])) == [first['key']]
    # Read again from the cache, not parsed...
    real = run_index.short_record
    monkeypatch.setattr(run_index, 'short_record', lambda run: 1 / 0)
    assert run_index.short_runs(folder) == [first, broken]
    # ... until the bytes change, whatever the size and time say.
    stat, text = path.stat(), path.read_text()
    path.write_text(text.replace('false', 'true '))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    monkeypatch.setattr(run_index, 'short_record', real)
    now, _ = run_index.short_runs(folder)
    assert run_index.modified(now) and now['key'] == first['key']


def test_a_process_whose_code_changed_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv('GNORM_CACHE', str(tmp_path))
    store = cache.Store('spec', 'mine', ['a key'], lambda: True)
    store.put('table', {1: 'an integer key'})  # not exact as JSON
    assert store.get('table') is None
    store.put('table', {'rows': [1, 2]})
    monkeypatch.setattr(cache, 'code_digest', lambda: 'edited since')
    store.save()
    assert not store.path.exists()
    monkeypatch.undo()
    monkeypatch.setenv('GNORM_CACHE', str(tmp_path))
    store.save()
    again = cache.Store('spec', 'mine', ['a key'], lambda: True)
    assert again.get('table') == {'rows': [1, 2]}
    assert cache.Store('spec', 'mine', ['another key'],
                       lambda: True).get('table') is None
