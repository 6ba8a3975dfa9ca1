r"""gnorm.train.hydra_adapter: what gnorm relies on in Hydra's internals.
A Hydra upgrade that changes it fails here, not in the middle of a
sweep."""
import inspect

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from gnorm.train.hydra_adapter import job_overrides


def test_split_arguments_is_what_the_adapter_calls():
    split = inspect.getattr_static(BasicSweeper, 'split_arguments')
    assert isinstance(split, staticmethod)
    assert list(inspect.signature(BasicSweeper.split_arguments).parameters
                ) == ['overrides', 'max_batch_size']


def test_jobs_are_every_combination_in_hydras_order():
    jobs = job_overrides(None, {'seed': '0,1'},
                         ['norm=none,pairnorm', 'layers=2', '+tag=a'])
    assert jobs == [
        ['seed=0', 'norm=none', 'layers=2', '+tag=a'],
        ['seed=0', 'norm=pairnorm', 'layers=2', '+tag=a'],
        ['seed=1', 'norm=none', 'layers=2', '+tag=a'],
        ['seed=1', 'norm=pairnorm', 'layers=2', '+tag=a'],
    ]
    assert job_overrides(None, None, ['layers=2']) == [['layers=2']]
    # A key given twice: the last value, at the place of the first.
    assert job_overrides(None, None, ['layers=2', 'seed=0', 'layers=3,4']
                         ) == [['layers=3', 'seed=0'], ['layers=4', 'seed=0']]


def test_a_jobs_folder_is_named_by_its_overrides_as_hydra_names_it():
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from gnorm.train.hydra_adapter import override_dirname
    parsed = OverridesParser.create().parse_overrides(
        ['seed=1', 'norm=pairnorm', 'threads=2', 'experiment=table3_fair',
         'norm.scale=0.5'])
    assert override_dirname(parsed, ['threads', 'experiment'], ',', '=') == \
        'norm.scale=0.5,norm=pairnorm,seed=1'
