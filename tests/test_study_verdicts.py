r"""What a depth study's verdicts rest on: exact ties by counts, the
corrected resampled t over random splits, the family of a table (Holm),
budget-matched comparisons, sanity flags of collapsed or still-improving
rows, a report that states its protocol, and runs that record their split,
their code and their memory."""
import numpy as np
import pytest

from conftest import comparison_lines

from gnorm.study.findings import compare as study_compare
from gnorm.study.findings import sanity
from gnorm.study.findings import select as study_select
from gnorm.study.runs.budget import default_setting, defaults
from gnorm.study.spec.check import check_spec
from gnorm.study.spec.load import load_spec
from gnorm.study.spec.table import SpecError
from gnorm.study.stats import CORRECTED_T, PAIRED_T

# Two settings of table3_fair's chameleon L=2 cell (ContraNorm s=0.5 and
# s=0.8): 3,189 of 4,550 validation nodes right each, seed by seed these
# counts of 455; their accuracies stored as results.json stores float32.
COUNTS = {'s=0.5': [319, 330, 304, 304, 326, 319, 320, 334, 322, 311],
          's=0.8': [319, 327, 301, 305, 325, 320, 321, 335, 325, 311]}


def _stored(count, size=455):
    return float(str(np.float32(count / size)))


def _node_run(seed, val_count, test_count=300, size=455, split='random',
              best=100, epochs=200, fingerprint=None):
    return {'status': 'ok', 'task': 'node', 'best_epoch': best,
            'val_acc': _stored(val_count, size),
            'test_acc': _stored(test_count, size),
            'curve': {'epoch': list(range(1, epochs + 1))},
            'config': {'seed': seed, 'split': split, 'train': {
                'epochs': epochs}},
            'dataset': {'split_sizes': [3 * size, size, size],
                        'split_fingerprint': fingerprint}}


def test_equal_counts_tie_whatever_the_float_sums():
    groups = {s: [_node_run(k, c) for k, c in enumerate(counts)]
              for s, counts in COUNTS.items()}
    floats = {s: sum(r['val_acc'] for r in g) / 10 for s, g in
              groups.items()}
    assert floats['s=0.8'] > floats['s=0.5']  # the float means differ
    chosen, tied = study_select._choose(groups, 10, 'val_acc',
                                        ['s=0.5', 's=0.8'])
    # equal counts: a tie, given to the setting listed first
    assert (chosen, tied) == ('s=0.5', ['s=0.8'])
    assert study_select.exact_mean(groups['s=0.5'], 'val_acc') == \
        study_select.exact_mean(groups['s=0.8'], 'val_acc')


def test_a_count_more_wins_exactly():
    groups = {'a': [_node_run(0, 300), _node_run(1, 300)],
              'b': [_node_run(0, 301), _node_run(1, 300)]}
    assert study_select._choose(groups, 2, 'val_acc', ['a', 'b']) == \
        ('b', [])


def test_metrics_without_counts_tie_within_the_tolerance():
    runs = [{'val_metric': 0.7, 'dataset': {}}]
    assert study_select.correct(runs[0], 'val_metric') is None
    assert study_select.exact_mean(runs, 'val_metric') == 0.7


def _cell(row, by_seed, test_train=None, fingerprints=None, flags=()):
    return dict(dataset='chameleon', row=row, layers=2, selection='',
                test_by_seed=by_seed, complete=True, settings_run=1,
                settings=1, cell_runs=10, cell_expected=10,
                test_train=test_train, flags=list(flags),
                fingerprint_by_seed=fingerprints or {})


OURS = {k: 60.0 + v for k, v in enumerate([2, 3, 1, 4, 2, 3, 2, 1, 3, 2])}
OTHER = {k: 60.0 for k in range(10)}


def test_random_splits_use_the_corrected_resampled_t():
    found = study_compare.family(
        [_cell('contranorm', OURS, 1 / 3), _cell('pairnorm', OTHER, 1 / 3)],
        [('contranorm', ['pairnorm'])], 'seed', 0.95)
    f = found['chameleon', 'contranorm', 'pairnorm', 2]
    assert f.interval.method == CORRECTED_T
    assert f.naive.method == PAIRED_T
    # the variance of the mean times 1 + k n_test/n_train = 1 + 10/3
    assert (f.interval.hi - f.interval.lo) == pytest.approx(
        (f.naive.hi - f.naive.lo) * (1 + 10 / 3) ** 0.5)
    fixed = study_compare.family(
        [_cell('contranorm', OURS), _cell('pairnorm', OTHER)],
        [('contranorm', ['pairnorm'])], 'seed', 0.95)
    assert fixed['chameleon', 'contranorm', 'pairnorm', 2].interval.method \
        == PAIRED_T


def test_pairs_on_other_splits_are_not_compared():
    records = [_cell('contranorm', OURS, fingerprints={0: 'aa', 1: 'bb'}),
               _cell('pairnorm', OTHER, fingerprints={0: 'aa', 1: 'cc'})]
    lines = comparison_lines(records, 'contranorm', ['pairnorm'],
                                     'seed', 0.95)
    row = next(x for x in lines if x.startswith('| chameleon | 2 |'))
    assert "not compared, splits differ: seed 1: the runs' splits differ" \
        in row
    words = next(x for x in lines if x.startswith('In words'))
    assert 'not compared, the splits differ: chameleon L=2' in words


def test_a_verdict_against_a_flagged_row_is_flagged():
    records = [_cell('contranorm', OURS),
               _cell('none', OTHER, flags=[sanity.ONE_CLASS])]
    lines = comparison_lines(records, 'contranorm', ['none'],
                                     'seed', 0.95)
    assert '; flagged: none predicts one class |' in \
        next(x for x in lines if x.startswith('| chameleon | 2 |'))
    assert any(x.startswith('Flagged, at chance or undertrained (a verdict '
                            'against such a row says little about the '
                            'norms), cell by cell: none predicts one class '
                            'at chameleon L=2.')
               for x in lines)


def test_a_section_without_flags_says_no_cell_is_flagged():
    records = [_cell('contranorm', OURS), _cell('none', OTHER)]
    lines = comparison_lines(records, 'contranorm', ['none'], 'seed', 0.95)
    assert 'No compared cell is flagged (at chance or undertrained).' \
        in lines


def test_correction_none_reads_each_comparison_alone():
    records = [_cell('contranorm', OURS), _cell('pairnorm', OTHER)]
    lines = comparison_lines(records, 'contranorm', ['pairnorm'],
                                     'seed', 0.95, correction='none')
    text = '\n'.join(lines)
    assert 'Holm' not in text and 'unadjusted p' in text


def test_still_improving_is_a_best_epoch_in_the_last_tenth():
    r"""Best epochs 96, 98, 99 and 100 of 100 (a user's study at a twentieth
    of its recipe's epochs) are all still improving; 90 of 100 is not."""
    for best in (96, 98, 99, 100):
        assert sanity.still_improving(_node_run(0, 300, best=best,
                                                epochs=100))
    assert not sanity.still_improving(_node_run(0, 300, best=90, epochs=100))
    assert sanity.still_improving(_node_run(0, 300, best=181))
    assert not sanity.still_improving(_node_run(0, 300, best=180))
    runs = [_node_run(k, 300, best=b) for k, b in enumerate([200, 190, 90])]
    assert sanity.flags(runs, 3) == [sanity.IMPROVING]
    assert sanity.flags(runs[1:], 3) == []  # 1 of 3 expected: not most


def test_a_verdict_on_a_row_still_improving_says_so():
    records = [_cell('contranorm', OURS, flags=[sanity.IMPROVING]),
               _cell('pairnorm', OTHER)]
    lines = comparison_lines(records, 'contranorm', ['pairnorm'], 'seed',
                             0.95)
    words = next(x for x in lines if x.startswith('In words'))
    assert '(still improving, more epochs may change it: contranorm at ' \
        'chameleon L=2)' in words


def test_chance_accuracy_of_coras_public_split():
    # Cora's public test nodes: 319 of 1,000 in their largest class
    run = {'task': 'node', 'config': _cora_public_config()}
    assert sanity.chance_accuracy(run) == pytest.approx(0.319)


def _cora_public_config():
    from omegaconf import OmegaConf
    from gnorm.study.spec.find import compose
    return OmegaConf.to_container(compose(['dataset=cora',
                                           'split=public']), resolve=True)


def test_defaults_are_the_rows_config_defaults():
    paper = load_spec('table3_paper')
    assert defaults(paper) == {'pairnorm': 'PN, s=1', 'contranorm': 's=1'}
    assert default_setting(paper, 'none') is None  # no grid


def test_equal_budget_refuses_grids_of_other_sizes():
    spec = load_spec('table3_fair')
    spec.table['budget'] = 'equal'
    with pytest.raises(SpecError, match='budget: equal, but the compared '
                       'rows try different numbers of settings '
                       r'\(layernorm 1, pairnorm 1, contranorm 4\)'):
        check_spec(spec)
    spec.table['grid'] = {'contranorm': {'norm.scale': [1.0]}}
    check_spec(spec)
    spec.table['correction'] = 'bonferroni'
    with pytest.raises(SpecError, match='table.correction must be one of '
                       'holm, none'):
        check_spec(spec)


def test_the_committed_fair_report_names_its_family_and_budgets():
    text = (load_spec('table3_fair').out_dir() / 'table3_fair.md'
            ).read_text()
    assert 'Protocol, as the runs recorded it: 200 epochs; split: random ' \
        '60/20/20, seed k draws split k; tested at: the best validation ' \
        "epoch; test set: the split's own test nodes" in text
    assert 'contranorm: `norm=contranorm`; grid norm.scale ∈ {0.2, 0.5, ' \
        '0.8, 1.0} (4 settings, default s=1)' in text
    assert '### contranorm against pairnorm and layernorm, at equal ' \
        'budgets (secondary view)' in text
    assert 'In words (Holm-adjusted over a family of 48 planned, 32 run)' \
        in text
    # the tie of chameleon L=2 goes to s=0.5 (equal counts)
    assert '66.95 ± 2.50, s=0.5<br>tie, not chosen: s=0.8: 67.14 ± 2.13' \
        in text


def test_variant_words_say_which_verdicts_hold_on_the_variant():
    from gnorm.study.words.variants import variant_summary, variant_words
    found = {}
    for depth, (orig, var) in {2: ('beats', 'beats'),
                               4: ('beats', 'undecided'),
                               8: ('undecided', 'loses')}.items():
        found['cham', 'cn', 'ln', depth] = study_compare.Comparison(None,
                                                               verdict=orig)
        found['cham_f', 'cn', 'ln', depth] = study_compare.Comparison(
            None, verdict=var)
    found['cham', 'cn', 'pn', 2] = study_compare.Comparison(
        None, verdict='undecided')
    found['cham_f', 'cn', 'pn', 2] = study_compare.Comparison(
        None, why=study_compare.PARTIAL)
    words = variant_words('cn', found, {'cham': 'cham_f'},
                          'Holm-adjusted over a family of 8')
    assert words == (
        'On the variants (Holm-adjusted over a family of 8): against ln, '
        'cn beats at L=2/4, is undecided at ±1 at L=8 on cham and beats at '
        'L=2, loses at L=8, is undecided at ±1 at L=4 on cham_f: 1 of its 2 '
        'verdicts on cham holds on cham_f; against pn, cn is undecided at '
        '±1 at L=2 on cham and is not compared yet (incomplete) at L=2 on '
        'cham_f (no verdict on cham to keep).')
    found['cham', 'cn', 'pn', 4] = study_compare.Comparison(None,
                                                       verdict='loses')
    assert variant_summary('cn', found, {'cham': 'cham_f'}) == (
        'Kept on the variants: cn has 3 verdicts on cham (beats ln at cham '
        'L=2/4; loses pn at cham L=4); 1 holds on cham_f (beats ln at cham '
        'L=2); 1 not compared there yet (loses pn at cham L=4); on cham_f '
        'it has 1 verdict the originals lack (loses ln at cham_f L=8).')
    del found['cham', 'cn', 'pn', 4]
    assert variant_summary('cn', found, {'cham': 'cham_f'}) == (
        'Kept on the variants: cn has 2 verdicts on cham (beats ln at cham '
        'L=2/4); 1 holds on cham_f (beats ln at cham L=2); on cham_f it has '
        '1 verdict the originals lack (loses ln at cham_f L=8).')


def test_variants_must_be_datasets_of_the_study():
    spec = load_spec('filtered_heterophily')
    check_spec(spec)
    assert spec.table['variants'] == {'chameleon': 'chameleon_filtered',
                                      'squirrel': 'squirrel_filtered'}
    spec.table['variants'] = {'chameleon': 'cora'}
    with pytest.raises(SpecError, match="table.variants names 'cora', not "
                       'a dataset of the study'):
        check_spec(spec)




def test_unpaired_runs_on_resampled_splits_get_the_test_their_splits_imply():
    r"""A spec on resampled splits that leaves out ``pairing: seed``: the
    runs' fingerprints decide, so the corrected resampled t (paired by
    split) reads them, never Welch's test; splits that differ seed by seed
    are not compared."""
    prints = {k: f'fp{k}' for k in range(10)}
    cells = [_cell('contranorm', OURS, 1 / 3, prints),
             _cell('pairnorm', OTHER, 1 / 3, prints)]
    found = study_compare.family(cells, [('contranorm', ['pairnorm'])],
                                 'none', 0.95)
    f = found['chameleon', 'contranorm', 'pairnorm', 2]
    assert f.interval.method == CORRECTED_T
    other = {k: f'other{k}' for k in range(10)}
    cells[1] = _cell('pairnorm', OTHER, 1 / 3, other)
    found = study_compare.family(cells, [('contranorm', ['pairnorm'])],
                                 'none', 0.95)
    assert found['chameleon', 'contranorm', 'pairnorm', 2].why == \
        study_compare.SPLITS_DIFFER
    fixed = [_cell('contranorm', OURS), _cell('pairnorm', OTHER)]
    found = study_compare.family(fixed, [('contranorm', ['pairnorm'])],
                                 'none', 0.95)
    assert found['chameleon', 'contranorm', 'pairnorm', 2].interval.method \
        == 'Welch'
