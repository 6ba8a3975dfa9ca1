r"""What depth does for each row of a depth study
(gnorm.study.findings.depth_gain): the best depth by validation against the
shallowest, paired by split, one family over the (dataset, row) pairs."""
import statistics

import pytest

from gnorm.study.findings import sanity
from gnorm.study.findings.compare import BEATS, OVER_CHANCE, UNDECIDED
from gnorm.study.findings.depth_gain import SHALLOWEST, depth_gains
from gnorm.study.reports.depth import gain_text
from gnorm.study.stats import CORRECTED_T, corrected_interval

SEEDS = range(10)
NOISE = [0.3, -0.2, 0.1, 0.4, -0.3, 0.0, 0.2, -0.1, 0.3, -0.4]


def _cell(row, layers, test, val=None, complete=True, modified=0,
          flags=(), dataset='minesweeper'):
    by_seed = {k: test + NOISE[k] * (layers % 5 + 1) for k in SEEDS}
    return dict(dataset=dataset, row=row, layers=layers, selection='',
                test_by_seed=by_seed if complete else {},
                test_mean=statistics.fmean(by_seed.values()),
                val_mean=test if val is None else val, complete=complete,
                settings_run=1, settings=1,
                cell_runs=10 if complete else 3, cell_expected=10,
                test_train=0.5, flags=list(flags), modified_runs=modified,
                fingerprint_by_seed={k: f'split{k}' for k in SEEDS})


def _one(gains, row):
    return next(g for g in gains if g.row == row)


def test_the_best_depth_by_validation_against_the_shallowest():
    cells = [_cell('bn', 2, 90.0), _cell('bn', 4, 93.0),
             _cell('bn', 12, 97.0)]
    g = _one(depth_gains(cells, 'seed', 0.95), 'bn')
    assert (g.shallow, g.best) == (2, 12)
    assert [d for d, _ in g.means] == [2, 4, 12]
    expected = corrected_interval(cells[0]['test_by_seed'],
                                  cells[2]['test_by_seed'], 0.5)
    assert g.found.interval.method == CORRECTED_T
    assert g.found.interval.diff == pytest.approx(expected.diff)
    assert g.found.interval.lo == pytest.approx(expected.lo)
    assert g.found.verdict == BEATS
    assert 'depth pays, L=12 over L=2 +' in gain_text(g)


def test_validation_chooses_the_depth_not_test():
    # L=8 has the best test score, L=4 the best validation score
    cells = [_cell('ln', 2, 90.0), _cell('ln', 4, 91.0, val=95.0),
             _cell('ln', 8, 96.0, val=92.0)]
    assert _one(depth_gains(cells, 'seed', 0.95), 'ln').best == 4


def test_a_row_best_at_its_shallowest_depth_has_nothing_to_test():
    cells = [_cell('pn', 2, 90.0), _cell('pn', 4, 80.0),
             _cell('bn', 2, 90.0), _cell('bn', 4, 99.0)]
    gains = depth_gains(cells, 'seed', 0.95)
    pn = _one(gains, 'pn')
    assert pn.best == 2 and pn.found.why == SHALLOWEST
    assert pn.found.p_adj is None
    assert 'best at L=2' in gain_text(pn)


def test_the_rows_are_one_family():
    # two rows with the same gain: each p doubles under Holm's first step
    cells = [_cell('a', 2, 90.0), _cell('a', 4, 90.4),
             _cell('b', 2, 90.0), _cell('b', 4, 90.4)]
    gains = depth_gains(cells, 'seed', 0.95)
    raw = _one(gains, 'a').found.interval.p
    assert _one(gains, 'a').found.p_adj == pytest.approx(min(1, 2 * raw))
    alone = depth_gains(cells[:2], 'seed', 0.95)
    assert _one(alone, 'a').found.p_adj == pytest.approx(raw)
    assert _one(gains, 'a').found.verdict == UNDECIDED


def test_uncommitted_and_incomplete_cells_are_not_read():
    # a cell left to another machine (table.not_run) is not listed
    gpu = dict(_cell('bn', 16, 99.0, complete=False), not_run='GPU work')
    cells = [_cell('bn', 2, 90.0), _cell('bn', 4, 99.0, modified=3),
             _cell('bn', 8, 99.0, complete=False), gpu]
    g = _one(depth_gains(cells, 'seed', 0.95), 'bn')
    assert [d for d, _ in g.means] == [2]
    assert (g.uncommitted, g.left) == ((4,), (8,))
    text = gain_text(g)
    assert 'only L=2 complete' in text
    assert 'runs of uncommitted code: L=4' in text
    assert 'not complete: L=8' in text


def test_a_row_without_complete_cells_has_no_depth():
    g = _one(depth_gains([_cell('cn', 2, 0.0, complete=False)], 'seed',
                         0.95), 'cn')
    assert g.best is None and g.means == ()


def test_depth_over_a_shallow_cell_at_chance_says_so():
    cells = [_cell('none', 2, 50.0, flags=[sanity.NO_BETTER_AUC]),
             _cell('none', 4, 95.0)]
    g = _one(depth_gains(cells, 'seed', 0.95), 'none')
    assert g.found.verdict == OVER_CHANCE
    assert g.at_chance == (2,)
    assert 'L=2 is at chance' in gain_text(g)


def test_datasets_are_read_apart():
    cells = [_cell('bn', 2, 90.0), _cell('bn', 4, 99.0),
             _cell('bn', 2, 80.0, dataset='tolokers'),
             _cell('bn', 4, 70.0, dataset='tolokers')]
    gains = depth_gains(cells, 'seed', 0.95)
    assert [(g.dataset, g.best) for g in gains] == [('minesweeper', 4),
                                                    ('tolokers', 2)]


def test_one_seed_has_a_difference_and_no_test():
    cells = [_cell('bn', 2, 90.0), _cell('bn', 4, 99.0)]
    for c in cells:
        c['test_by_seed'] = {0: c['test_by_seed'][0]}
    g = _one(depth_gains(cells, 'seed', 0.95), 'bn')
    assert g.best == 4 and g.found.verdict is None
    diff = cells[1]['test_by_seed'][0] - cells[0]['test_by_seed'][0]
    assert gain_text(g).endswith(f'best at L=4, +{diff:.2f} over L=2, too '
                                 'few seeds (n=1; 5 needed): no verdict')
