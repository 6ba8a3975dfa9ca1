r"""What each sanity flag of a cell (:mod:`gnorm.study.findings.sanity`)
means, in the words a report's legend and its verdicts' notes give it."""
from gnorm.study.findings.sanity import (CHANCE_ALPHA, CHANCE_Z, IMPROVING,
                                         NO_BETTER, NO_BETTER_AUC, ONE_CLASS,
                                         ONE_CLASS_SHARE)

MEANING = {
    ONE_CLASS: f'where the score is accuracy, most seeds put '
               f'{ONE_CLASS_SHARE:.0%} or more of their test nodes in one '
               f'class (the predictions each run records; where the score '
               f'is a ranking, ROC-AUC, a note with the class counts, never '
               f'a flag: its ranking test decides)',
    NO_BETTER: 'the seeds\' test accuracy, pooled, is not shown above the '
               'majority class of their test nodes (one-sided z below '
               f'{CHANCE_Z:.3f}, level {CHANCE_ALPHA:g}; the variance '
               'counts the test nodes the seeds\' splits share); a row '
               'far below it, e.g. one predicting a minority class, is '
               'flagged too',
    NO_BETTER_AUC: 'the seeds\' test ROC-AUC, pooled, is not shown above '
                   'a random ranking\'s 0.5 (one-sided z below '
                   f'{CHANCE_Z:.3f}, level {CHANCE_ALPHA:g}; the variance '
                   'counts the test nodes the seeds\' splits share)',
    IMPROVING: 'most seeds reach their best validation accuracy in the '
               'last tenth of their epochs: training stopped while the row '
               'was still improving',
}


def meaning(flag: str, said: str = 'accuracy') -> str:
    r"""The words of :obj:`flag` in a report whose cells are scored by
    :obj:`said` (:func:`gnorm.study.findings.select.scores_said`)."""
    return MEANING[flag].replace('validation accuracy', f'validation {said}')
