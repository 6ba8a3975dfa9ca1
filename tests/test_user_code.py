r"""A user's own code in a run's identity (gnorm.results.user_code): the
hash of each module outside gnorm that a run's config names is recorded
in ``source.user_code``; ``resume`` (gnorm.train, the study engine, the
queue) trains a run again once such a file changed; a report's Code line
names the files that made its runs."""
import hashlib
import json
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import gnorm
from gnorm.results import code, load_runs, user_code_words
from gnorm.results.user_code import (changed_user_code, is_user_file,
                                     user_code)
from gnorm.study.cli import main as study
from gnorm.study.queue.plan import Finished
from gnorm.study.queue.run import finished_here
from gnorm.study.reports.paired import user_code_line
from gnorm.train import train
from gnorm.train.common import finished_run
from conftest import USER_NORM, compose_train

pytestmark = pytest.mark.usefixtures('one_thread')

TINY = ['dataset=csbm', 'dataset.num_nodes=60', 'layers=2',
        'train.epochs=2', 'train.progress=false', 'collapse_metrics=false']


@pytest.fixture
def mine(tmp_path, monkeypatch):
    r"""A module of the user's, ``norm_<test>.py`` (class ``HalfLN``), on
    ``sys.path`` under a name no other test imports; returns its name and
    a function that edits it (as the user would: the next import reads
    the new file)."""
    name = f'norm_{tmp_path.name}'
    path = tmp_path / f'{name}.py'
    path.write_text(USER_NORM)
    monkeypatch.syspath_prepend(str(tmp_path))

    def edit(text='\n# edited\n'):
        path.write_text(path.read_text() + text)
        sys.modules.pop(name, None)
    yield name, path, edit
    sys.modules.pop(name, None)


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _cfg(name, *overrides):
    return compose_train(*TINY, 'norm=none', f'norm._target_={name}.HalfLN',
                         *overrides)


def test_a_run_records_the_hash_of_the_users_module(tmp_path, mine):
    name, path, _ = mine
    results = train(_cfg(name), output_dir=tmp_path / 'run')
    expected = {name: {'path': str(path.resolve()),
                       'sha256': _sha256(path)}}
    assert results['source']['user_code'] == expected
    written = json.loads((tmp_path / 'run' / 'results.json').read_text())
    assert written['source']['user_code'] == expected
    assert changed_user_code(written) == []


def test_gnorms_own_targets_record_nothing(tmp_path):
    results = train(compose_train(*TINY, 'norm=pairnorm'),
                    output_dir=tmp_path / 'run')
    assert 'user_code' not in (results['source'] or {})
    config = {'model': {'_target_': 'gnorm.models.DeepGCN'},
              'norm': {'_target_': 'torch.nn.LayerNorm'},
              'other': [{'_target_': 'builtins.dict'},
                        {'_target_': 'collections.OrderedDict'}]}
    assert user_code(config) == {}
    # The rule, by file: gnorm's package, site-packages and the standard
    # library are no one's code; a file elsewhere is the user's.
    assert not is_user_file(gnorm.nn.__file__)
    assert not is_user_file(torch.__file__)
    assert not is_user_file(Path(sysconfig.get_paths()['stdlib']) / 'json'
                            / '__init__.py')
    assert is_user_file(tmp_path / 'mynorm.py')


def test_resume_retrains_a_run_once_its_module_changed(tmp_path, mine,
                                                       capsys):
    name, path, edit = mine
    folder = tmp_path / 'run'
    first = train(_cfg(name, 'resume=true'), output_dir=folder)
    stamp = (folder / 'results.json').stat().st_mtime_ns
    capsys.readouterr()
    # Unchanged: the finished run is taken as it is.
    again = train(_cfg(name, 'resume=true'), output_dir=folder)
    out = capsys.readouterr().out
    assert 'done already' in out and 'retraining' not in out
    assert (folder / 'results.json').stat().st_mtime_ns == stamp
    assert again['source'] == first['source']
    # Edited: trained again, said in one line naming the file, and the
    # run records the new hash.
    edit()
    assert finished_run(folder / 'results.json', _cfg(name)) is None
    third = train(_cfg(name, 'resume=true'), output_dir=folder)
    out = capsys.readouterr().out
    assert f'retraining: {name}.py changed since this run ' \
        f'({folder / "results.json"})' in out.splitlines()
    assert 'done already' not in out
    assert third['source']['user_code'][name]['sha256'] == _sha256(path) \
        != first['source']['user_code'][name]['sha256']
    assert json.loads((folder / 'results.json').read_text())['source'] \
        == third['source']


def test_a_run_made_before_user_code_was_recorded_trains_again(tmp_path,
                                                               mine, capsys):
    name, _, _ = mine
    folder = tmp_path / 'run'
    train(_cfg(name), output_dir=folder)
    path = folder / 'results.json'
    record = json.loads(path.read_text())
    del record['source']['user_code']
    path.write_text(json.dumps(record))
    capsys.readouterr()
    train(_cfg(name, 'resume=true'), output_dir=folder)
    assert f'retraining: {name}.py not recorded by this run' in \
        capsys.readouterr().out


def test_the_queue_trains_again_a_run_whose_module_changed(tmp_path, mine):
    name, _, edit = mine
    from gnorm.results.keys import record_identity
    from gnorm.study.runs.compose import run_key
    folder = tmp_path / 'runs' / 'run'
    run = {'dir': folder, 'key': run_key(record_identity(
        train(_cfg(name), output_dir=folder)))}
    assert finished_here(run)
    assert len(Finished().below([tmp_path / 'runs'])) == 1
    edit()
    assert not finished_here(run)
    assert Finished().below([tmp_path / 'runs']) == {}
    # An edit that breaks the module is a change too (its run says why
    # it does not import when it trains).
    edit('\nthis is ( broken\n')
    assert changed_user_code(json.loads(
        (folder / 'results.json').read_text())) == [f'{name}.py']


def test_a_checkpoint_of_a_changed_module_is_left(tmp_path, mine, capsys):
    r"""``resume=true`` continues a graph run from its checkpoint only
    while the user's code is that of the checkpoint; after an edit, the
    run trains from the start."""
    from gnorm.train.checkpoints import load_checkpoints
    name, _, edit = mine
    cfg = _cfg(name, 'resume=true')
    config = OmegaConf.to_container(cfg, resolve=True)
    checkpoint = tmp_path / 'checkpoint.pt'
    torch.save({'epoch': 3, 'config': config, 'world_size': 1,
                'source': {'user_code': user_code(config)}}, checkpoint)
    states = load_checkpoints([cfg], [checkpoint], torch.device('cpu'))
    assert states[0]['epoch'] == 3
    edit()
    capsys.readouterr()
    assert load_checkpoints([cfg], [checkpoint], torch.device('cpu')) is None
    assert f'retraining: {name}.py changed since this run ({checkpoint})' \
        in capsys.readouterr().out


SPEC = '''# @package _global_
split: random
test_set: split
select: best_val
collapse_metrics: false
train:
  epochs: 2
dataset:
  num_nodes: 60
table:
  name: {name}
  datasets: [csbm]
  depths: [2]
  seeds: [0, 1]
  rows:
    mine: [norm=none, norm._target_={module}.HalfLN]
'''


def test_a_study_retrains_runs_of_a_changed_module_and_says_which_made_them(
        tmp_path, mine, capsys):
    name, path, edit = mine
    spec = tmp_path / 'study.yaml'
    spec.write_text(SPEC.format(name='study', module=name))
    runs = tmp_path / 'runs' / 'study'
    report = tmp_path / 'results' / 'study.md'
    assert study([str(spec), '--threads', '1']) == 0
    before = _sha256(path)
    assert ' Code: ' in report.read_text()
    assert f'user code: {name}.py (sha256 {before[:8]})' in \
        report.read_text()
    capsys.readouterr()
    assert study([str(spec), '--threads', '1']) == 0  # unchanged
    assert '2 runs in 1 cells, 2 done, 0 to run' in capsys.readouterr().out
    # Edited: the runs of seed 1 train again (a selection), each said in
    # a line; the report names both versions and the cell they share.
    edit()
    after = _sha256(path)
    assert study([str(spec), '--dry-run']) == 0  # the runs' short records
    out = capsys.readouterr().out
    assert '2 runs in 1 cells, 0 done, 2 to run' in out
    assert sum(line.startswith(f'retraining: {name}.py changed since this '
                               f'run') for line in out.splitlines()) == 2
    assert study([str(spec), '--threads', '1', '--seeds', '1']) == 0
    out = capsys.readouterr().out
    assert '1 runs in 1 cells, 0 done, 1 to run' in out
    assert sum(line.startswith(f'retraining: {name}.py changed since this '
                               f'run') for line in out.splitlines()) == 1
    hashes = {r['config']['seed']: r['source']['user_code'][name]['sha256']
              for r in load_runs(runs)}
    assert hashes == {0: before, 1: after}
    assert study([str(spec), '--report-only']) == 0
    text = report.read_text()
    first, second = sorted((before[:8], after[:8]))  # 1 run each
    assert (f'user code: {name}.py (2 versions: sha256 {first} in 1 run, '
            f'sha256 {second} in 1 run); different versions of {name}.py '
            f'made the runs of one cell: csbm mine L=2') in text
    # The whole study again: seed 0 trains again too, and one version
    # made every run.
    assert study([str(spec), '--threads', '1']) == 0
    assert '2 runs in 1 cells, 1 done, 1 to run' in capsys.readouterr().out
    assert f'user code: {name}.py (sha256 {after[:8]})' in report.read_text()


def test_the_code_line_names_each_version_of_a_users_file():
    def run(sha, tag='mine', layers=2):
        return {'config': {'dataset': {'name': 'csbm'}, 'tag': tag,
                           'layers': layers},
                'batch_runs': 1,
                'source': {'commit': 'c' * 40, 'modified': False,
                           'user_code': {'mynorm': {
                               'path': '/home/me/mynorm.py',
                               'sha256': sha}}}}

    def cell(r):
        c = r['config']
        return f"{c['dataset']['name']} {c['tag']} L={c['layers']}"
    one = [run('1a2b3c4d' + '0' * 56), run('1a2b3c4d' + '0' * 56)]
    assert user_code_words(one, cell) == \
        'user code: mynorm.py (sha256 1a2b3c4d)'
    assert code(one, cell) == ('2 runs name the commit that made them '
                               '(1 commit); user code: mynorm.py (sha256 '
                               '1a2b3c4d)')
    mixed = [*one, run('9f8e7d6c' + '0' * 56),
             run('9f8e7d6c' + '0' * 56, layers=4)]
    assert user_code_words(mixed, cell) == (
        'user code: mynorm.py (2 versions: sha256 1a2b3c4d in 2 runs, '
        'sha256 9f8e7d6c in 2 runs); different versions of mynorm.py made '
        'the runs of one cell: csbm mine L=2')
    # gnorm's own runs name no user code; a run of an installed gnorm (no
    # commit) still names its user code.
    assert user_code_words([{'source': {'commit': 'c' * 40}}]) == ''
    assert code([{'source': {'user_code': one[0]['source']['user_code']},
                  'batch_runs': 1}]) == \
        'user code: mynorm.py (sha256 1a2b3c4d)'
    # The paired report's line: a row's runs are its cell.
    assert user_code_line(mixed) == (
        ' Code: user code: mynorm.py (2 versions: sha256 1a2b3c4d in 2 runs, '
        'sha256 9f8e7d6c in 2 runs); different versions of mynorm.py made '
        'the runs of one cell: row mine.')
    assert user_code_line([{'source': None}]) == ''
