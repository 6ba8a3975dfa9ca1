r"""A paired study's recipe, read from its runs' recorded configs: the
training recipe of graph runs in words, the table of settings beside the
experiments of ``table.beside`` and the published recipe
(``table.published``), where the data came from, and how many epochs the
runs trained and where their best validation epochs lie."""
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gnorm.results import value
from gnorm.results.keys import ADDED_KEYS

# (setting, config keys of a run, key of the table's ``published:``)
RECIPE_KEYS = [
    ('layers', ['layers'], 'layers'),
    ('hidden', ['model.hidden_channels'], 'hidden'),
    ('FFN', ['model.ffn_channels'], 'ffn'),
    ('heads', ['model.num_heads'], 'heads'),
    ('multi-hop max distance', ['model.max_dist'], 'max_dist'),
    ('epochs', ['train.epochs'], 'epochs'),
    ('batch', ['train.batch_size'], 'batch'),
    ('peak lr', ['train.lr'], 'lr'),
    ('warmup', ['train.warmup_steps'], 'warmup'),
    ('end lr', ['train.end_lr'], 'end_lr'),
    ('weight decay', ['train.weight_decay'], 'weight_decay'),
    ('dropout / input / attention', ['model.dropout', 'model.input_dropout',
                                     'model.attention_dropout'], 'dropout'),
    ('precision', ['train.precision'], 'precision'),
    ('batches', ['train.bucket_chunk'], 'batches'),
]


def precision(config: Dict[str, Any], device: Optional[str]) -> str:
    r"""The arithmetic of a run of :obj:`config` on :obj:`device` (both as
    its ``results.json`` records them): ``fp32``, or ``bf16 autocast on
    the CPU`` (graph runs autocast on every device). A config without
    ``train.precision`` ran in fp32 (:data:`gnorm.results.keys.ADDED_KEYS`)."""
    kind = value({'config': config}, 'train.precision',
                 ADDED_KEYS['train.precision'])
    if kind != 'bf16':
        return str(kind)
    where = ('the CPU' if str(device).startswith('cpu') else
             str(device).split(':')[0].upper() if device else 'an unrecorded '
             'device')
    return f'bf16 autocast on {where}'


def recipe(config: Dict[str, Any], device: Optional[str]) -> str:
    r"""The training recipe of a run of :obj:`config` on :obj:`device`
    (as its ``results.json`` records them), in words; ``?`` for a setting
    the config does not record."""
    def get(key, fmt=str):
        v = value({'config': config}, key)
        return '?' if v is None else fmt(v)

    def g(v):
        return f'{v:g}'
    chunk = value({'config': config}, 'train.bucket_chunk')
    bucket = (f', batches of similar-size molecules (chunks of '
              f'{chunk} batches; so the BN of the SepNorm rows '
              f'trains on batch statistics of similar-size molecules and '
              f'evaluates with running averages over all sizes, a handicap '
              f'the paper\'s shuffled batches do not have)'
              if chunk else ', uniformly shuffled batches')
    epochs = value({'config': config}, 'train.epochs')
    return (f"Graphormer, {get('layers')} layers, hidden "
            f"{get('model.hidden_channels')}, {get('model.num_heads')} "
            f"heads, FFN {get('model.ffn_channels')}, multi-hop max "
            f"distance {get('model.max_dist')}, dropout "
            f"{get('model.dropout')} / input {get('model.input_dropout')} / "
            f"attention {get('model.attention_dropout')}; AdamW lr "
            f"{get('train.lr', g)} (weight decay "
            f"{get('train.weight_decay', g)}) after "
            f"{get('train.warmup_steps')} warmup updates, decay to "
            f"{get('train.end_lr', g)} over {get('train.epochs')} "
            f'epoch{"s" if epochs != 1 else ""} of batch '
            f"{get('train.batch_size')}{bucket}, gradient clip "
            f"{get('train.grad_clip', g)}, {precision(config, device)}, "
            f'test at the best validation epoch')


def recipes(runs: List[Dict[str, Any]], config: Dict[str, Any]) -> str:
    r"""The recipe of :obj:`runs` from their recorded configs and devices
    (each distinct one, with its number of runs, where they differ); the
    recipe of the resolved :obj:`config` where there is no run yet."""
    if not runs:
        device = config.get('device')
        return (recipe(config, device if device != 'auto' else None)
                + ' (the config: no run yet)')
    seen: Dict[str, int] = {}
    for run in runs:
        text = recipe(run.get('config', {}), run.get('device'))
        seen[text] = seen.get(text, 0) + 1
    if len(seen) == 1:
        return next(iter(seen))
    return 'the runs differ: ' + '; '.join(
        f'{n} of {len(runs)} runs: {text}' for text, n in seen.items())


def _setting(key: str, v: Any) -> str:
    if key == 'train.bucket_chunk':
        return f'similar-size (chunks of {v})' if v else 'shuffled'
    if key == 'train.warmup_steps':
        return f'{v:,} updates'
    return f'{v:g}' if isinstance(v, float) else str(v)


def _settings(config: Dict[str, Any], keys: Sequence[str]) -> Optional[str]:
    values = [value(config, k) for k in keys]
    if any(v is None for v in values):
        return None
    return ' / '.join(_setting(k, v) for k, v in zip(keys, values))


def _ours(runs: List[Dict[str, Any]], cfg: Dict[str, Any],
          keys: Sequence[str]) -> str:
    r"""The setting :obj:`keys` of the runs (distinct values joined), or
    of the config where no run records it."""
    seen = sorted({s for s in (_settings(r, keys) for r in runs)
                   if s is not None})
    return '; '.join(seen) or f'{_settings(cfg, keys)} (config, no run)'


def recipe_lines(published: Dict[str, Any], config: Dict[str, Any],
                 beside: Sequence[Tuple[str, Dict[str, Any]]],
                 runs: List[Dict[str, Any]]) -> List[str]:
    r"""Our recipe (the runs' configs; the resolved :obj:`config` where no
    run records a setting) beside the experiments of ``table.beside``
    (:obj:`beside`: each name and its resolved config) and the published
    recipe (``table.published``: its ``source`` and a value per key of
    :data:`RECIPE_KEYS`)."""
    configs = [{'config': config}]
    heads = ['ours (the runs\' configs)']
    for other, composed in beside:
        configs.append({'config': composed})
        heads.append(f"experiment={other} (gnorm's setting)")
    heads.append(published['source'])
    lines = [f"| setting | {' | '.join(heads)} |",
             '|---' * (len(heads) + 1) + '|']
    for setting, keys, key in RECIPE_KEYS:
        cells = [_ours(runs, configs[0], keys)]
        cells += [_settings(c, keys) for c in configs[1:]]
        v = published.get(key)
        cells.append('' if v is None else v if isinstance(v, str)
                     else _setting(keys[0], v))
        lines.append(f"| {setting} | {' | '.join(cells)} |")
    return lines


def data_note(spec, runs: List[Dict[str, Any]]) -> str:
    r"""Where the runs' data came from (``data.mirror`` of their configs)
    and what ``table.mirror_note`` says of the mirror's copy."""
    mirror = spec.table.get('mirror_note')
    kinds = [('?' if value(r, 'data') is None else
              'mirror' if value(r, 'data.mirror') else 'ogb') for r in runs]
    parts = [f'{kinds.count(k)} of {len(runs)} runs {text}'
             for k, text in (('mirror', 'read it from a data mirror'
                              + (f', {mirror}' if mirror else '')),
                             ('ogb', "read the dataset's own files"),
                             ('?', 'do not record where it came from'))
             if kinds.count(k)]
    names = sorted({str(value(r, 'dataset.name')) for r in runs
                    if value(r, 'dataset.name') is not None})
    dataset = spec.table.get('dataset') or ', '.join(names) or 'no runs yet'
    return (f"**Data**: {dataset}; "
            + ('; '.join(parts) or 'no runs yet') + '.')


def epochs_note(runs: List[Dict[str, Any]], why: str) -> str:
    r"""How many epochs the :obj:`runs` train and why, and where their
    best validation epochs lie."""
    if not runs:
        return '**Epochs**: no runs yet' + (f' (the recipe: {why}).'
                                             if why else '.')
    last = [run['curve']['epoch'][-1] for run in runs]
    epochs = sorted(set(last))
    before = sum(run['selected_epoch'] < e for run, e in zip(runs, last))
    return (f"**Epochs**: {'/'.join(map(str, epochs))} per run"
            + (f' ({why}). ' if why else '. ')
            + f'The best validation epoch lies before the last in {before} '
            f'of {len(runs)} runs'
            + (' (one epoch per run: the only epoch is the best one, so '
               'nothing shows whether longer training would plateau)'
               if epochs == [1] else '')
            + '; a recipe trained to a plateau has most best epochs well '
            'before the last.')


PROTOCOL = (
    ('train.epochs', '{} epochs'),
    ('split', 'split: {}'),
    ('split_index', 'split index {}'),
    ('select', 'tested at: {}'),
    ('test_set', 'test set: {}'),
    ('model.hidden_channels', 'hidden {}'),
    ('model.dropout', 'dropout {}'),
    ('train.lr', '{optimizer} lr {}'),
    ('train.weight_decay', 'weight decay {}'),
)
WORDS = {'best_val': 'the best validation epoch', 'last': 'the last epoch',
         'rest': 'every node outside train and validation',
         'random': 'random 60/20/20, seed k draws split k',
         'split': "the split's own test nodes"}


def _get(config: Dict[str, Any], key: str) -> Any:
    for part in key.split('.'):
        config = config.get(part, {}) if isinstance(config, dict) else {}
    return None if config == {} else config


def protocol_items(counted: List[Dict[str, Any]]) -> str:
    r"""What every node run of :obj:`counted` did, from the configs the
    runs recorded: epochs, split, selection, test set, model and
    optimiser, separated by semicolons; a key whose value differs between
    runs says so; empty without runs."""
    said = []
    for key, form in PROTOCOL:
        values = sorted({json.dumps(_get(r.get('config', {}), key))
                         for r in counted})
        if not values:
            continue
        if len(values) > 1:
            said.append(f'{key} differs between runs')
            continue
        found = json.loads(values[0])
        if found is None or (key == 'split_index'
                             and _get(counted[0]['config'], 'split')
                             == 'random'):
            continue
        said.append(form.format(WORDS.get(found, found),
                                optimizer=optimizer_name(counted)))
    return '; '.join(said)


# train.optimizer as a protocol names it (a run made before the key: Adam).
OPTIMIZERS = {None: 'Adam', 'adam': 'Adam', 'adamw': 'AdamW'}


def optimizer_name(counted: List[Dict[str, Any]]) -> str:
    r"""The optimiser of the node runs :obj:`counted`
    (``train.optimizer``), or each one's where they differ."""
    names = sorted({OPTIMIZERS.get(_get(r.get('config', {}),
                                        'train.optimizer'), 'Adam')
                    for r in counted})
    return ' or '.join(names)


def protocol_text(counted: List[Dict[str, Any]],
                  recipe: Optional[Tuple[str, Any]] = None) -> str:
    r"""The protocol of a depth report (:func:`protocol_items`), and,
    where the runs trained fewer epochs than the :obj:`recipe` the spec
    inherits (:func:`gnorm.study.spec.find.inherited_recipe`), that they did."""
    said = protocol_items(counted)
    if not said:
        return 'Protocol: no runs yet.'
    epochs = {_get(r.get('config', {}), 'train.epochs') for r in counted}
    if recipe and recipe[1] and any(isinstance(e, int) and e < recipe[1]
                                     for e in epochs):
        said += (f'; fewer epochs than the {recipe[1]} of the {recipe[0]} '
                 f'recipe it inherits: a best epoch late in the run says '
                 f'the rows were still improving')
    return f'Protocol, as the runs recorded it: {said}.'
