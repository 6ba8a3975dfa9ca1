r"""Node classification with deep GCN stacks, driven by Hydra.

    python -m gnorm.train dataset=cora layers=32 norm=contranorm
    python -m gnorm.train -m dataset=cora layers=2,32 seed=0,1,2,3,4

Configuration lives in ``conf/`` (primary config ``conf/train.yaml``). Each
run writes ``results.json`` into its Hydra output folder and prints one
summary line. :func:`train` is the plain function behind the command line.
"""
import copy
import json
import logging
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import hydra
import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

import gnorm
from gnorm.data import SPLITS, load_dataset
from gnorm.errors import ConfigError, GnormError, TrainingError
from gnorm.metrics import (
    dirichlet_energy,
    effective_rank,
    feature_cosine_similarity,
    feature_variance,
)

log = logging.getLogger(__name__)

CONF_DIR = Path(__file__).resolve().parents[1] / 'conf'
SELECT = ('best_val', 'last')
# Dataset config keys that are not arguments of gnorm.data.load_dataset.
_DATASET_META = ('name', 'default_split')


def seed_everything(seed: int, deterministic: bool = False) -> None:
    r"""Seeds python, numpy and torch (CPU and every CUDA device); with
    :obj:`deterministic`, also asks torch for deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if deterministic:
        os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    torch.use_deterministic_algorithms(deterministic, warn_only=True)


def resolve_device(name: str) -> torch.device:
    r"""``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:<i>``."""
    name = str(name)
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if name == 'cpu':
        return torch.device('cpu')
    if name.startswith('cuda'):
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but no CUDA device is "
                              f"visible; pass device=cpu or device=auto")
        try:
            device = torch.device(name)
        except RuntimeError:
            device = None
        if device is None or (device.index or 0) >= torch.cuda.device_count():
            raise ConfigError(f"device={name} does not exist; pass "
                              f"device=cuda or device=auto")
        return device
    raise ConfigError(f"unknown device={name!r}; pass auto, cpu or cuda")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(cfg: DictConfig) -> None:
    r"""Raises :class:`ConfigError` with a one-line fix for bad values."""
    if not _is_int(cfg.layers) or cfg.layers < 1:
        raise ConfigError(f"layers must be an integer >= 1, got "
                          f"{cfg.layers!r}; pass e.g. layers=2")
    if not _is_int(cfg.seed) or cfg.seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {cfg.seed!r}")
    if cfg.split not in SPLITS:
        raise ConfigError(f"unknown split={cfg.split!r}; pass one of "
                          f"{', '.join(SPLITS)}")
    if not _is_int(cfg.split_index):
        raise ConfigError(f"split_index must be an integer, got "
                          f"{cfg.split_index!r}")
    if cfg.select not in SELECT:
        raise ConfigError(f"unknown select={cfg.select!r}; pass best_val "
                          f"or last")
    if not _is_int(cfg.train.epochs) or cfg.train.epochs < 1:
        raise ConfigError(f"train.epochs must be an integer >= 1, got "
                          f"{cfg.train.epochs!r}")
    for key in ('lr', 'weight_decay'):
        value = cfg.train[key]
        if not isinstance(value, (int, float)) or value < 0:
            raise ConfigError(f"train.{key} must be a number >= 0, got "
                              f"{value!r}")
    scale = cfg.norm.get('scale', None)
    if scale is not None and (not isinstance(scale, (int, float))
                              or scale < 0):
        raise ConfigError(f"norm.scale must be a number >= 0, got "
                          f"{scale!r}; pass e.g. norm.scale=0.5")


def _one_line(error: BaseException) -> str:
    r"""The message of :obj:`error` (or of what Hydra wrapped) on one
    line."""
    cause = error.__cause__ if isinstance(error, InstantiationException) \
        and error.__cause__ is not None else error
    text = str(cause) or type(cause).__name__
    return ' '.join(text.split())


def load_data(cfg: DictConfig):
    r"""The graph of :obj:`cfg.dataset` with the split :obj:`cfg` asks for,
    its raw files copied from :obj:`cfg.data.mirror` or downloaded."""
    options = {k: v for k, v in OmegaConf.to_container(
        cfg.dataset, resolve=True).items() if k not in _DATASET_META}
    return load_dataset(cfg.dataset.name, cfg.data.root, cfg.data.mirror,
                        split=cfg.split, split_index=cfg.split_index,
                        seed=cfg.seed, **options)


def build_model(cfg: DictConfig, in_channels: int,
                out_channels: int) -> torch.nn.Module:
    r"""Instantiates :obj:`cfg.model` with the norm of :obj:`cfg.norm`
    (instantiated partially, the model passes the width)."""
    try:
        norm = instantiate(cfg.norm, _partial_=True)
        return instantiate(cfg.model, in_channels=in_channels,
                           out_channels=out_channels, norm=norm)
    except (InstantiationException, ValueError, TypeError) as e:
        raise ConfigError(f"cannot build the model: {_one_line(e)}") from None


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, hidden: bool = False,
             ) -> Dict[str, Any]:
    r"""Accuracies (fractions) and validation loss of :obj:`model` in
    evaluation mode; with :obj:`hidden`, also the output of every layer."""
    model.eval()
    out = model(data.x, data.edge_index, return_hidden=hidden)
    out, layers = out if hidden else (out, None)
    pred = out.argmax(dim=-1)
    result = {}
    for split in ('train', 'val', 'test'):
        mask = data[f'{split}_mask']
        result[f'{split}_acc'] = float((pred[mask] == data.y[mask]).float()
                                       .mean())
    result['val_loss'] = float(F.cross_entropy(out[data.val_mask],
                                               data.y[data.val_mask]))
    if hidden:
        result['layers'] = layers
    return result


@torch.no_grad()
def collapse_metrics(layers: List[torch.Tensor],
                     edge_index: torch.Tensor) -> Dict[str, List[float]]:
    r"""Per-layer collapse metrics of the full graph: effective rank, mean
    pairwise cosine similarity, variance (mean squared distance of a node's
    features to the mean node) and Dirichlet energy."""
    rows = {'layer': [], 'effective_rank': [], 'cosine_similarity': [],
            'variance': [], 'dirichlet_energy': []}
    for i, h in enumerate(layers, start=1):
        h = h.double()
        rows['layer'].append(i)
        rows['effective_rank'].append(float(effective_rank(h)))
        rows['cosine_similarity'].append(float(feature_cosine_similarity(h)))
        rows['variance'].append(float(feature_variance(h, reduce='mean')))
        rows['dirichlet_energy'].append(float(dirichlet_energy(h,
                                                               edge_index)))
    return rows


def _json_safe(value: Any) -> Any:
    r"""Replaces non-finite floats by :obj:`None` (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _dumps(value: Any, indent: str = '') -> str:
    r"""JSON with one key per line and lists of numbers on one line."""
    inner = indent + ' '
    if isinstance(value, dict) and value:
        items = [f'{inner}{json.dumps(str(k))}: {_dumps(v, inner)}'
                 for k, v in value.items()]
        return '{\n' + ',\n'.join(items) + f'\n{indent}}}'
    if isinstance(value, list) and any(isinstance(v, (dict, list))
                                       for v in value):
        items = [f'{inner}{_dumps(v, inner)}' for v in value]
        return '[\n' + ',\n'.join(items) + f'\n{indent}]'
    return json.dumps(value, allow_nan=False)


def write_json(path: Path, obj: Dict[str, Any]) -> None:
    r"""Writes :obj:`obj` to :obj:`path` atomically (temporary file, then
    :func:`os.replace`); non-finite numbers become :obj:`null`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f'.{path.name}.tmp')
    with open(tmp, 'w') as f:
        f.write(_dumps(_json_safe(obj)) + '\n')
    os.replace(tmp, path)


def _hydra_info() -> Dict[str, Any]:
    r"""The group choices and overrides of the current Hydra job, if any."""
    if not HydraConfig.initialized():
        return {}
    hc = HydraConfig.get()
    choices = {k: v for k, v in hc.runtime.choices.items()
               if not k.startswith('hydra/') and k != 'hydra'}
    return {'choices': choices, 'overrides': list(hc.overrides.task)}


def fit(model: torch.nn.Module, data, epochs: int, lr: float,
        weight_decay: float, progress: bool = True) -> Tuple[
            Dict[str, List[float]], Dict[str, Any], Optional[str]]:
    r"""Full-batch Adam on the training nodes. Returns the per-epoch curve,
    the best-validation epoch (highest accuracy, then lowest loss) with its
    weights, and a message if the loss stopped being finite (else
    :obj:`None`)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr,
                                 weight_decay=weight_decay)
    curve = {k: [] for k in ('epoch', 'loss', 'train_acc', 'val_acc',
                             'val_loss', 'test_acc')}
    best = {'epoch': 0, 'val_acc': -1.0, 'val_loss': math.inf, 'state': None}
    bar = tqdm(range(1, epochs + 1), desc='train', unit='epoch',
               dynamic_ncols=True, leave=False,
               disable=None if progress else True)
    for epoch in bar:
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        value = loss.item()
        if not math.isfinite(value):
            bar.close()
            return curve, best, (f"the training loss became {value} at "
                                 f"epoch {epoch}; lower train.lr, change the "
                                 f"norm or its scale")
        loss.backward()
        optimizer.step()

        metrics = evaluate(model, data)
        curve['epoch'].append(epoch)
        curve['loss'].append(value)
        for key in ('train_acc', 'val_acc', 'val_loss', 'test_acc'):
            curve[key].append(metrics[key])
        if (metrics['val_acc'] > best['val_acc']
                or (metrics['val_acc'] == best['val_acc']
                    and metrics['val_loss'] < best['val_loss'])):
            best.update(epoch=epoch, val_acc=metrics['val_acc'],
                        val_loss=metrics['val_loss'],
                        state=copy.deepcopy(model.state_dict()))
        bar.set_postfix(loss=f'{value:.4f}',
                        val_acc=f'{metrics["val_acc"]:.4f}')
    bar.close()
    return curve, best, None


def summary(results: Dict[str, Any], cfg: DictConfig) -> str:
    r"""The one line printed at the end of a run."""
    norm = results.get('choices', {}).get(
        'norm', str(cfg.norm._target_).rsplit('.', 1)[-1])
    parts = [f"{cfg.dataset.name} L={cfg.layers} {norm} seed={cfg.seed}",
             f"epoch {results['selected_epoch']} ({cfg.select})",
             'acc ' + ' '.join(f"{split} {100 * results[f'{split}_acc']:.2f}"
                               for split in ('train', 'val', 'test'))]
    if 'collapse' in results:
        erank = results['collapse']['effective_rank']
        parts.append(f'erank last {erank[-1]:.2f}' + (
            f' hidden {erank[-2]:.2f}' if len(erank) > 1 else ''))
    parts += [f"{results['runtime_s']:.1f}s {results['device']}",
              str(results['path'])]
    return ' | '.join(parts)


def train(cfg: DictConfig, output_dir: Optional[str] = None) -> Dict[str, Any]:
    r"""Trains and evaluates one model as :obj:`cfg` says and writes
    ``results.json`` into :obj:`output_dir` (default: the Hydra output
    folder). Returns the results. Raises a :class:`gnorm.errors.GnormError`
    for bad input and for a non-finite loss (after writing a results file
    with ``status: failed``)."""
    start = time.perf_counter()
    if output_dir is None:
        if not HydraConfig.initialized():
            raise ValueError("train(cfg) outside a Hydra job needs "
                             "output_dir")
        output_dir = HydraConfig.get().runtime.output_dir
    path = Path(output_dir) / 'results.json'
    check_config(cfg)
    device = resolve_device(cfg.device)
    seed_everything(cfg.seed, cfg.train.deterministic)

    data = load_data(cfg)
    num_classes = int(data.y.max()) + 1
    model = build_model(cfg, data.num_features, num_classes)
    data, model = data.to(device), model.to(device)
    log.info('%s: %d nodes, %d edges, %d features, %d classes, split %s '
             '(%d/%d/%d)', cfg.dataset.name, data.num_nodes, data.num_edges,
             data.num_features, num_classes, cfg.split,
             int(data.train_mask.sum()), int(data.val_mask.sum()),
             int(data.test_mask.sum()))
    log.info('model: %s on %s', model, device)
    results: Dict[str, Any] = {
        'status': 'running',
        'error': None,
        'config': OmegaConf.to_container(cfg, resolve=True),
        **_hydra_info(),
        'dataset': {'name': cfg.dataset.name, 'num_nodes': data.num_nodes,
                    'num_edges': data.num_edges,
                    'num_features': data.num_features,
                    'num_classes': num_classes, 'split': cfg.split,
                    'split_sizes': [int(data[f'{s}_mask'].sum())
                                    for s in ('train', 'val', 'test')]},
        'model': str(model),
        'num_parameters': sum(p.numel() for p in model.parameters()),
        'device': str(device),
        'path': str(path),
        'versions': {'gnorm': gnorm.__version__, 'torch': torch.__version__,
                     'torch_geometric': torch_geometric.__version__},
    }
    curve, best, failure = fit(model, data, cfg.train.epochs, cfg.train.lr,
                               cfg.train.weight_decay, cfg.train.progress)
    if failure is not None:
        message = f'{failure} (results: {path})'
        results.update(status='failed', error=message, curve=curve,
                       best_epoch=best['epoch'],
                       runtime_s=time.perf_counter() - start)
        write_json(path, results)
        raise TrainingError(message)

    if cfg.select == 'best_val':
        model.load_state_dict(best['state'])
        selected = best['epoch']
    else:
        selected = cfg.train.epochs
    final = evaluate(model, data, hidden=cfg.collapse_metrics)
    results.update(
        status='ok',
        select=cfg.select,
        selected_epoch=selected,
        best_epoch=best['epoch'],
        train_acc=final['train_acc'],
        val_acc=final['val_acc'],
        test_acc=final['test_acc'],
        val_loss=final['val_loss'],
        curve=curve,
    )
    if cfg.collapse_metrics:
        results['collapse'] = collapse_metrics(final['layers'],
                                               data.edge_index)
    results['runtime_s'] = time.perf_counter() - start
    write_json(path, results)

    print(summary(results, cfg), flush=True)
    return results


# Failures of the jobs of this process: (exit code, message).
_FAILURES: List[tuple] = []


@hydra.main(version_base='1.3', config_path='../conf', config_name='train')
def main(cfg: DictConfig) -> Optional[float]:
    r"""The command line: runs :func:`train`, turns a
    :class:`~gnorm.errors.GnormError` into ``error: ...`` on stderr; returns
    the validation accuracy (for sweepers)."""
    try:
        return train(cfg)['val_acc']
    except GnormError as e:
        print(f'error: {e}', file=sys.stderr, flush=True)
        # Later jobs of a multirun still run; the exit status reports it.
        _FAILURES.append((e.exit_code, str(e)))
        return None


def _group_options(group: str) -> List[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob('*.yaml'))


def check_choices(argv: List[str]) -> None:
    r"""Raises :class:`ConfigError` for a command-line override that picks
    an unknown option of a config group (``dataset=foo``), before Hydra
    composes the config (whose own report spans many lines)."""
    if any(a.split('=')[0] in ('--config-dir', '-cd', '--config-path', '-cp')
           for a in argv):
        return  # other config folders may hold other options
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith('-') or '=' not in arg:
            continue
        try:
            override = parser.parse_overrides([arg])[0]
        except Exception:
            continue  # Hydra reports syntax errors itself
        group = override.key_or_group.lstrip('/')
        if (group not in ('dataset', 'model', 'norm', 'experiment')
                or override.package is not None or override.is_delete()):
            continue
        values = (list(override.sweep_string_iterator())
                  if override.is_sweep_override() else [override.value()])
        options = _group_options(group)
        for value in values:
            if value is None and group == 'experiment':
                continue
            if str(value) not in options:
                raise ConfigError(f"unknown {group} {str(value)!r}; pass "
                                  f"{group}= one of {', '.join(options)}")


def cli() -> None:
    r"""Entry point of ``python -m gnorm.train``."""
    try:
        check_choices(sys.argv[1:])
    except ConfigError as e:
        print(f'error: {e}', file=sys.stderr)
        sys.exit(e.exit_code)
    main()
    if _FAILURES:
        sys.exit(max(code for code, _ in _FAILURES))


if __name__ == '__main__':
    cli()
