r"""The :class:`CollapseMonitor`: forward hooks on the layers of a model,
the records of :meth:`~CollapseMonitor.record` and their outputs (CSV,
TensorBoard, plots); see :mod:`gnorm.monitor`."""
import csv
import math
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor

from gnorm.monitor.diagnosis import Diagnosis, diagnose_measures
from gnorm.monitor.gradients import GRADIENT_METRICS, Gradients
from gnorm.monitor.measure import (METRICS, OPTIONAL_METRICS, Prepared,
                                   measure, need_edges)
from gnorm.monitor.onset import onsets
from gnorm.monitor.plot import SCALED, plot_records
from gnorm.monitor.table import Table, records_table

COLUMNS = ('step', 'layer', 'metric', 'value', 'graphs')
# The columns of the records of a model of stacked runs (DeepGCN's runs=R).
RUN_COLUMNS = ('step', 'run', 'layer', 'metric', 'value', 'graphs')


def _auto_types() -> tuple:
    from torch_geometric.nn import MessagePassing

    from gnorm.models.deep_gcn import LayerOutput
    from gnorm.models.graphormer_layer import GraphormerLayer
    return (MessagePassing, LayerOutput, GraphormerLayer)


def find_layers(model: torch.nn.Module,
                layers: Union[str, Sequence[Any]] = 'auto') -> List[str]:
    r"""The qualified names (as :meth:`~torch.nn.Module.named_modules` gives
    them) of the layers of :obj:`model` that :class:`CollapseMonitor` hooks:
    for :obj:`"auto"` every :class:`~torch_geometric.nn.conv.MessagePassing`
    module, the layer outputs of :class:`~gnorm.models.DeepGCN` and
    :class:`~gnorm.models.ResGNN` and the layers of
    :class:`~gnorm.models.Graphormer`, none inside another;
    otherwise the modules named, or of a type listed, in :obj:`layers`."""
    named = list(model.named_modules())
    if isinstance(layers, str) and layers == 'auto':
        types, names = _auto_types(), ()
    elif isinstance(layers, (list, tuple)) and len(layers) > 0:
        types = tuple(t for t in layers if isinstance(t, type))
        names = [n for n in layers if isinstance(n, str)]
        known = dict(named)
        unknown = [n for n in names if n not in known]
        if unknown or len(types) + len(names) != len(layers):
            bad = unknown or [x for x in layers
                              if not isinstance(x, (str, type))]
            some = ', '.join(repr(n) for n, _ in named[1:6])
            raise ValueError(f"CollapseMonitor: no layer {bad[0]!r} in the "
                             f"model; pass module names as named_modules() "
                             f"gives them (e.g. {some}) or module types")
    else:
        raise ValueError(f"CollapseMonitor expects layers='auto' or a "
                         f"non-empty list of module names or types (got "
                         f"{layers!r})")
    found: List[str] = []
    for name, module in named:
        if name == '' and not names:
            continue  # the model itself only when named
        inside = any(name.startswith(f + '.') or f == '' for f in found)
        if (name in names or (types and isinstance(module, types))) \
                and not inside:
            found.append(name)
    return found


class _Recording:
    def __init__(self, step, edge_index, batch, batch_size, seeds):
        self.step = step
        self.inputs = (edge_index, batch, batch_size, seeds)
        # layer -> (its output [rows, d], the Prepared inputs), in order
        self.outputs: Dict[str, Any] = {}


class CollapseMonitor:
    r"""Records collapse metrics of the outputs of a model's layers, for
    the steps (epochs) a training loop chooses, with forward hooks.

    Hooked layers: with :obj:`layers="auto"`, the output of every
    :class:`~torch_geometric.nn.conv.MessagePassing` module (for PyG's
    :class:`~torch_geometric.nn.models.GCN`, :obj:`GAT`, :obj:`GraphSAGE`,
    :obj:`GIN`: each :obj:`convs.i` before its norm and activation), the
    output of every layer of :class:`~gnorm.models.DeepGCN` (after norm,
    activation and residual: :obj:`outputs.i`, the logits last), the
    residual stream after every block of :class:`~gnorm.models.ResGNN`
    (:obj:`outputs.i`, the logits last), and the tokens of every layer
    of :class:`~gnorm.models.Graphormer` (:obj:`layers.i`, per graph, the
    graph token and the nodes, with the edges between nodes; their
    :obj:`batch` and edges come from the layer, not from
    :meth:`record`). A :class:`~gnorm.models.DeepGCN` or
    :class:`~gnorm.models.ResGNN` of stacked runs (:obj:`runs=R`, outputs
    :obj:`[runs, num_nodes, channels]`) is
    measured run by run: each record then has a :obj:`run` field
    (:obj:`0` ... :obj:`R - 1`), absent for a model of one run. Or a list of module names as
    :meth:`~torch.nn.Module.named_modules` gives them (:obj:`"convs.3"`,
    :obj:`"norms.3"`) and module types. A layer that returns a tuple (a
    :class:`~torch_geometric.nn.conv.GATConv` with
    :obj:`return_attention_weights=True`) is measured on its first element.

    Metrics (:obj:`metrics`, those of :obj:`METRICS` by default; add
    :obj:`OPTIONAL_METRICS` by name), each of the hooked output
    :math:`\mathbf{H}` of every graph, then averaged over the graphs with
    nodes, leaving out undefined (:obj:`nan`) values, such as MADGap of a
    graph without remote pairs (the count of graphs is recorded,
    :obj:`graphs`):

    * :obj:`effective_rank`: :func:`gnorm.metrics.effective_rank`;
    * :obj:`cosine_similarity`:
      :func:`gnorm.metrics.feature_cosine_similarity`;
    * :obj:`variance`: :func:`gnorm.metrics.feature_variance` (its
      default :obj:`reduce="mean"`: mean squared distance to the mean
      row);
    * :obj:`dirichlet_energy`, :obj:`dirichlet_energy_normalized`:
      :func:`gnorm.metrics.dirichlet_energy` (Rusch et al., 2023) and with
      :obj:`normalized=True` (degree-normalised, Cai and Wang, 2020);
    * :obj:`mad`, :obj:`mad_gap`: :func:`gnorm.metrics.mad` of all pairs
      and :func:`gnorm.metrics.mad_gap` (Chen et al., 2020) of at most
      :obj:`max_samples` nodes per graph, drawn with a generator seeded by
      :obj:`seed`, the same nodes at every step;
    * :obj:`uniformity` (not recorded by default):
      :func:`gnorm.metrics.uniformity` (SepNorm Eq. 4) of at most
      :obj:`max_samples` nodes per graph, drawn as MAD's; of a
      :class:`~gnorm.models.Graphormer` layer, of each graph's node
      tokens (its graph token left out).

    With :obj:`num_seed_nodes` (a
    :class:`~torch_geometric.loader.NeighborLoader` batch's
    :obj:`batch_size`), the node metrics (effective rank, cosine
    similarity, variance, MAD, MADGap, uniformity) see the seed nodes,
    the first rows; the Dirichlet energies all nodes and edges of the
    sampled subgraph, and MADGap the seeds' hop distances in it.

    Args:
        model (torch.nn.Module): The model to watch.
        layers (str or list, optional): :obj:`"auto"`, or module names and
            types. (default: :obj:`"auto"`)
        metrics (sequence of str, optional): Which of :obj:`METRICS` and
            :obj:`OPTIONAL_METRICS` to record. (default: :obj:`METRICS`)
        max_samples (int, optional): Nodes per graph above which the
            pairwise metrics (MAD, MADGap, uniformity) subsample: their
            cost grows with its square, and 256 nodes give 32,640 pairs.
            (default: :obj:`256`)
        seed (int, optional): Seed of the subsampling. (default: :obj:`0`)
        neighbor_hops (int, optional): MADGap's neighbour pairs are at most
            this many hops apart. (default: :obj:`3`)
        remote_hops (int, optional): MADGap's remote pairs are at least
            this many hops apart. (default: :obj:`8`)
        writer (optional): A :class:`torch.utils.tensorboard.SummaryWriter`
            (anything with :obj:`add_scalar`) that gets the records of
            every :meth:`record` as it ends, tagged as in
            :meth:`to_tensorboard`. (default: :obj:`None`)
        dtype (torch.dtype, optional): The dtype the metrics are computed
            in, e.g. :obj:`torch.float64`; :obj:`None`: that of the
            outputs (half precision ones in :obj:`float32`).
            (default: :obj:`None`)
        nonfinite (str, optional): What a layer output with a :obj:`nan`
            or :obj:`inf` entry gives: :obj:`"raise"`, a
            :class:`ValueError` naming the layer; :obj:`"nan"`, records of
            value :obj:`nan` (a training loop that goes on with a diverged
            run beside others). (default: :obj:`"raise"`)
        gradients (bool, optional): Also record each layer's
            :data:`~gnorm.monitor.gradients.GRADIENT_METRICS` (the norm
            of the gradient reaching its output and of its parameters'
            gradient, :class:`~gnorm.monitor.gradients.Gradients`) of the
            backward pass run inside :meth:`record`: call
            :obj:`loss.backward()` inside the :obj:`with` block. Their
            hooks exist only inside it. (default: :obj:`False`)
    """
    def __init__(self, model: torch.nn.Module,
                 layers: Union[str, Sequence[Any]] = 'auto',
                 metrics: Sequence[str] = METRICS, max_samples: int = 256,
                 seed: int = 0, neighbor_hops: int = 3, remote_hops: int = 8,
                 writer: Any = None, dtype: Optional[torch.dtype] = None,
                 nonfinite: str = 'raise', gradients: bool = False):
        metrics = tuple(metrics)
        if nonfinite not in ('raise', 'nan'):
            raise ValueError(f"CollapseMonitor expects nonfinite='raise' or "
                             f"'nan' (got {nonfinite!r})")
        known = METRICS + OPTIONAL_METRICS
        bad = [m for m in metrics if m not in known]
        if bad or not metrics:
            raise ValueError(f"CollapseMonitor got metric "
                             f"{bad[0] if bad else None!r}; pass some of "
                             f"{', '.join(known)}")
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) \
                or max_samples < 2:
            raise ValueError(f"CollapseMonitor expects an integer "
                             f"'max_samples' of at least 2 (got "
                             f"{max_samples!r})")
        if not (isinstance(neighbor_hops, int)
                and isinstance(remote_hops, int)
                and 1 <= neighbor_hops < remote_hops):
            raise ValueError(f"CollapseMonitor expects integers 1 <= "
                             f"neighbor_hops < remote_hops (got "
                             f"{neighbor_hops!r}, {remote_hops!r})")
        self.layers = find_layers(model, layers)
        if not self.layers:
            raise ValueError(f"CollapseMonitor: {type(model).__name__} has "
                             f"no MessagePassing layer; pass layers=[module "
                             f"names or types] (its modules: "
                             f"{_some_names(model)})")
        # measured: the collapse metrics of the outputs; metrics: every
        # metric of the records (the gradient norms too)
        self.measured = metrics
        self.metrics = metrics + (GRADIENT_METRICS if gradients else ())
        self.max_samples, self.seed = max_samples, seed
        self.neighbor_hops, self.remote_hops = neighbor_hops, remote_hops
        self.records: List[Dict[str, Any]] = []
        self.writer = writer
        self.dtype, self.nonfinite = dtype, nonfinite
        # Stacked runs: outputs [runs, rows, d], measured run by run.
        from gnorm.models import DeepGCN, ResGNN
        self.runs = model.runs if isinstance(model, (DeepGCN, ResGNN)) \
            else None
        self.gradients = (Gradients(model, self.layers, self.runs,
                                    trace=True) if gradients else None)
        self._recording: Optional[_Recording] = None
        self._cache: Dict[str, Prepared] = {}
        modules = dict(model.named_modules())
        from gnorm.models.graphormer_layer import GraphormerLayer
        # Layers that carry their own batch and edges (gnorm's Graphormer).
        self._own_edges = all(isinstance(modules[n], GraphormerLayer)
                              for n in self.layers)
        self._handles = [
            modules[name].register_forward_hook(self._hook_for(name))
            for name in self.layers]

    # ------------------------------------------------------------ the hooks
    def _hook_for(self, name: str):
        def hook(module, args, output):
            if self._recording is None:  # not recording: nothing to do
                return None
            self._measure(name, module, args, output)
            return None
        return hook

    def _measure(self, name: str, module, args, output) -> None:
        rec = self._recording
        if name in rec.outputs:
            raise ValueError(f"CollapseMonitor: layer {name!r} ran twice in "
                             f"one record(); record one forward pass and "
                             f"hook modules called once per pass")
        x, inputs, kind = self._features(name, module, args, output,
                                        rec.inputs)
        prepared = self._prepare(x, inputs, kind)
        x = x.detach()  # kept as it is; cast to dtype chunk by chunk
        if self.dtype is None and x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        rec.outputs[name] = (x, prepared)

    def _features(self, name, module, args, output, inputs):
        r"""The node features :obj:`[num_nodes, channels]` of a layer's
        output, the inputs they go with, and a cache key for those."""
        from gnorm.models.graphormer_layer import GraphormerLayer
        if isinstance(output, (tuple, list)):
            output = next((o for o in output if isinstance(o, Tensor)), None)
        if not isinstance(output, Tensor):
            raise ValueError(f"CollapseMonitor: layer {name!r} returned "
                             f"{type(output).__name__}, not a tensor; pass "
                             f"layers= naming modules that output node "
                             f"features")
        if isinstance(module, GraphormerLayer):
            layout = args[1].layout
            if output.size(0) != 1:
                raise ValueError(f"CollapseMonitor: layer {name!r} holds "
                                 f"{output.size(0)} stacked runs; monitor a "
                                 f"model of one run")
            x = output[0].index_select(0, layout['order'])  # graph by graph
            inputs = (layout['token_edge_index'], layout['token_batch'],
                      layout['mask'].size(0), None)
            return x, inputs, 'tokens'
        if self.runs is not None:
            if output.dim() == 2:  # a layer the runs share (1-layer DeepGCN)
                output = output.expand(self.runs, *output.shape)
            if output.dim() == 3 and output.size(0) == self.runs:
                return output, inputs, 'nodes'  # [runs, rows, d]
        if output.dim() != 2:
            raise ValueError(f"CollapseMonitor: layer {name!r} returned "
                             f"shape {list(output.shape)}; it measures node "
                             f"features [num_nodes, channels]: hook a layer "
                             f"before to_dense_batch ([B, N, C])")
        return output, inputs, 'nodes'

    def _prepare(self, x: Tensor, inputs, kind: str) -> Prepared:
        r"""The :class:`Prepared` inputs of an output :obj:`x`: the last
        one of this :obj:`kind` (record()'s inputs, or a Graphormer
        layer's tokens) while they are the same tensors, unchanged."""
        ident = (x.size(-2), x.device,
                 *[(id(t), t._version) if isinstance(t, Tensor) else t
                   for t in inputs])
        found = self._cache.get(kind)
        if found is None or found.ident != ident:
            found = Prepared(self, x.size(-2), *inputs, x.device,
                             graph_tokens=kind == 'tokens')
            # The entry holds the inputs, so their ids stay theirs.
            found.ident, found.inputs = ident, inputs
            self._cache[kind] = found
        return found

    # ------------------------------------------------------------ recording
    def record(self, step: int, edge_index: Optional[Tensor] = None,
               batch: Optional[Tensor] = None,
               batch_size: Optional[int] = None,
               num_seed_nodes: Optional[int] = None) -> '_RecordContext':
        r"""Records the forward pass run inside the returned context
        manager as :obj:`step`: one record per hooked layer and metric.

        Args:
            step (int): The step (epoch) of the records.
            edge_index (torch.Tensor, optional): The edges of the forward
                pass's graph(s), :obj:`[2, num_edges]`; needed by the
                Dirichlet energies and MADGap. (default: :obj:`None`)
            batch (torch.Tensor, optional): The graph of each node
                :obj:`[num_nodes]` (mini-batches of graphs); one graph if
                :obj:`None`. (default: :obj:`None`)
            batch_size (int, optional): The number of graphs.
                (default: :obj:`None`)
            num_seed_nodes (int, optional): The seed nodes of a
                :class:`~torch_geometric.loader.NeighborLoader` batch, its
                first rows (:obj:`data.batch_size`). (default: :obj:`None`)
        """
        if self._handles is None:
            raise RuntimeError("CollapseMonitor: record() after remove(); "
                               "make a new monitor")
        return _RecordContext(self, step, edge_index, batch, batch_size,
                              num_seed_nodes)

    def _start(self, rec: _Recording) -> None:
        if self._recording is not None:
            raise RuntimeError("CollapseMonitor: record() inside record()")
        if rec.inputs[0] is None and not self._own_edges:
            need_edges(self.measured)
        self._recording = rec

    def _finish(self, rec: _Recording) -> None:
        self._recording = None
        if not rec.outputs:
            raise ValueError("CollapseMonitor: no hooked layer ran inside "
                             "record(); run the model's forward pass in the "
                             "with block")
        with torch.no_grad():
            values = measure(rec.outputs, self.measured, self.dtype)
        names = list(values)
        table = torch.stack([values[n] for n in names]).tolist()  # once
        if self.runs is None:
            table = [[row] for row in table]  # [layers, 1, metrics + 1]
        for name, rows in zip(names, table):
            for run, row in enumerate(rows):
                if row[-1] != 1.0 and self.nonfinite == 'nan':
                    row[:] = [math.nan] * len(row)
                elif row[-1] != 1.0:
                    which = '' if self.runs is None else f' of run {run}'
                    raise ValueError(f"CollapseMonitor: layer {name!r} "
                                     f"output non-finite values{which} at "
                                     f"step {rec.step}")
        new = [{'step': rec.step, **({} if self.runs is None else
                                     {'run': run}),
                'layer': name, 'metric': metric, 'value': value,
                'graphs': rec.outputs[name][1].graphs}
               for name, rows in zip(names, table)
               for run, row in enumerate(rows)
               for metric, value in zip(self.measured, row)]
        if self.gradients is not None:
            graphs = {n: rec.outputs[n][1].graphs for n in rec.outputs}
            new += [{**r, 'graphs': graphs.get(r['layer'], 1)}
                    for r in self.gradients.records(rec.step)]
        self.records.extend(new)
        if self.writer is not None:
            _add_scalars(self.writer, new)

    def remove(self) -> None:
        r"""Removes every hook; the records stay."""
        for handle in self._handles or ():
            handle.remove()
        self._handles, self._recording = None, None
        self._cache = {}

    def __enter__(self) -> 'CollapseMonitor':
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(layers={len(self.layers)}, '
                f'metrics={list(self.metrics)})')

    # -------------------------------------------------------------- outputs
    def to_csv(self, path) -> None:
        r"""Writes :obj:`records` as a tidy CSV file: columns :obj:`step`,
        (:obj:`run` for stacked runs), :obj:`layer`, :obj:`metric`,
        :obj:`value`, :obj:`graphs`."""
        with open(path, 'w', newline='') as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS if self.runs is None
                                    else RUN_COLUMNS)
            writer.writeheader()
            writer.writerows(self.records)

    def to_tensorboard(self, writer) -> None:
        r"""Adds every record as a TensorBoard scalar, tag
        :obj:`"collapse/{metric}/{layer}"` (for stacked runs
        :obj:`"collapse/{metric}/{layer}/run_{run}"`) at its step.

        Args:
            writer: A :class:`torch.utils.tensorboard.SummaryWriter` (or a
                log folder to open one in; needs the :obj:`tensorboard`
                package).
        """
        if isinstance(writer, str) or hasattr(writer, '__fspath__'):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError(f"CollapseMonitor.to_tensorboard needs the "
                                  f"tensorboard package ({e}); pip install "
                                  f"tensorboard") from None
            writer = SummaryWriter(str(writer))
        _add_scalars(writer, self.records)

    def to_pandas(self):
        r"""The records as a :class:`pandas.DataFrame`, columns as in
        :meth:`to_csv` (needs pandas; :meth:`table` does without)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("CollapseMonitor.to_pandas needs pandas (pip "
                              "install pandas); without it, print(monitor."
                              "table()) or read monitor.records") from None
        return pandas.DataFrame(self.records, columns=list(
            COLUMNS if self.runs is None else RUN_COLUMNS))

    def table(self, metric: Union[str, Sequence[str], None] = None,
              step: Optional[int] = None, run: int = 0) -> Table:
        r"""The records as a :class:`~gnorm.monitor.Table`, a row
        per layer: the columns are the metrics (or those named by
        :obj:`metric`) at :obj:`step` (:obj:`None`: the last step
        recorded), or, with one metric named as a string and no
        :obj:`step`, that metric at every step. :obj:`print(table)`
        aligns it, :meth:`~gnorm.monitor.Table.to_markdown` writes
        Markdown. For stacked runs, the records of run :obj:`run`."""
        return records_table(self._of_run(run), self.layers, self.metrics,
                             metric, step)

    def onset(self, metric: str, fraction: float = 0.5, run: int = 0,
              output: bool = False) -> Dict[Any, Optional[str]]:
        r"""For each recorded step, the first layer (after the first, and
        before the last, the model's output, unless :obj:`output`) where
        :obj:`metric` has come closer to its collapsed value than
        :obj:`fraction` of the first layer's distance, or :obj:`None`:
        :obj:`{step: layer}`. Metrics that fall as the outputs collapse
        (effective rank to :math:`1`; variance, the Dirichlet energies,
        MAD and MADGap to :math:`0`) and those that rise (cosine similarity
        to :math:`1`, uniformity to :math:`0`) are measured by their
        distance to that value, as
        :func:`~gnorm.monitor.onset.onsets` and
        :data:`~gnorm.monitor.onset.COLLAPSED` define. For stacked runs,
        the records of run :obj:`run`. The output layer (the logits: as
        many columns as classes) is left out unless :obj:`output`; so is
        it by :meth:`plot`'s onset marks."""
        return onsets(self._of_run(run), self.layers, metric, fraction,
                      output)

    def plot(self, path=None, kind: str = 'lines',
             metrics: Optional[Sequence[str]] = None,
             log: Sequence[str] = SCALED, run: int = 0,
             onset: Optional[float] = None):
        r"""Plots the records, one panel per metric: :obj:`"lines"` with
        the layers on the x axis and one line per step (coloured by step),
        or :obj:`"heatmap"`, layers by steps. The metrics in :obj:`log`
        (default: those that scale with the features, variance and the
        Dirichlet energies, which span orders of magnitude) are drawn on a
        log scale. With :obj:`onset` (a fraction, as in :meth:`onset`),
        each step's onset layer is marked: a triangle on its line and a
        dotted vertical line, or a cross in the heatmap. For stacked runs,
        the records of run :obj:`run`. Saves to :obj:`path` if given;
        returns the :class:`matplotlib.figure.Figure` (drawn without
        :mod:`matplotlib.pyplot`, so the backend stays as it is).
        :func:`~gnorm.monitor.plot_compare` draws several monitors on
        shared axes."""
        return plot_records(self._of_run(run), self.layers,
                            list(metrics or self.metrics), path, kind, log,
                            onset)

    def diagnose(self, step: Optional[int] = None, run: int = 0,
                 losses: Optional[Sequence[float]] = None,
                 num_classes: Optional[int] = None,
                 train_score: Optional[float] = None,
                 val_score: Optional[float] = None,
                 constant: Optional[Dict[str, float]] = None) -> Diagnosis:
        r"""Why the model fails, if it does
        (:func:`~gnorm.monitor.diagnosis.diagnose_measures`): the collapse
        metrics of :obj:`step` (:obj:`None`: the last recorded), the
        gradient norms of every recorded step (with :obj:`gradients=True`),
        and what the training loop knows: its :obj:`losses` per epoch with
        :obj:`num_classes`, its :obj:`train_score` and :obj:`val_score`
        (fractions), and the :obj:`constant` predictor's training loss and
        validation score (``train_loss``, ``val_score``: the entropy of the
        training labels and the majority class's validation share) against
        which "learns nothing" is judged. The recorded steps before
        :obj:`step` give each failure's onset. For stacked runs, those of
        run :obj:`run`. The last hooked layer is taken as the model's
        output."""
        records = self._of_run(run)
        steps = list(dict.fromkeys(r['step'] for r in records
                                   if r['metric'] in self.measured))
        at = steps[-1] if step is None and steps else step
        collapse = {m: [r['value'] for r in records if r['metric'] == m
                        and r['step'] == at] for m in self.measured}
        gradients = None if self.gradients is None else \
            self.gradients.field(None if self.runs is None else run)
        for epoch, norms in zip((gradients or {}).get('epoch', []),
                                (gradients or {}).get('squared_norm', [])):
            if epoch == at:  # the same forward pass as the metrics
                collapse['squared_norm'] = norms
        trace = {'epoch': steps, **{
            m: [[r['value'] for r in records if r['metric'] == m
                 and r['step'] == s] for s in steps]
            for m in self.measured}}
        norms = dict(zip((gradients or {}).get('epoch', []),
                         (gradients or {}).get('squared_norm', [])))
        trace['squared_norm'] = [norms.get(s) for s in steps]
        return diagnose_measures(collapse, gradients, losses, num_classes,
                                 train_score, val_score, constant, trace,
                                 at)

    def _of_run(self, run: int) -> List[Dict[str, Any]]:
        return self.records if self.runs is None else \
            [r for r in self.records if r['run'] == run]


def read_csv(path) -> List[Dict[str, Any]]:
    r"""The records of a CSV file of :meth:`CollapseMonitor.to_csv` (or
    one with more columns, kept as text), as :attr:`~CollapseMonitor.records`
    holds them: :obj:`step`, :obj:`run` and :obj:`graphs` integers,
    :obj:`value` a float; what :func:`~gnorm.monitor.plot_compare` takes."""
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ('step', 'run', 'graphs'):
            if key in row:
                row[key] = int(row[key])
        row['value'] = float(row['value'])
    return rows


class _RecordContext:
    r"""The context manager of :meth:`CollapseMonitor.record`: on an
    exception inside it (or a bad input) the monitor's hooks are
    removed."""
    def __init__(self, monitor, step, edge_index, batch, batch_size, seeds):
        self.monitor = monitor
        self.rec = _Recording(step, edge_index, batch, batch_size, seeds)

    def __enter__(self) -> CollapseMonitor:
        grads = self.monitor.gradients
        self.grads = None if grads is None else grads.record(self.rec.step)
        try:
            self.monitor._start(self.rec)
            if self.grads is not None:
                self.grads.__enter__()
        except BaseException:
            self.monitor.remove()
            raise
        return self.monitor

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.grads is not None:
            try:
                self.grads.__exit__(exc_type, exc, tb)
            except BaseException:
                self.monitor.remove()
                raise
        if exc_type is not None:
            self.monitor.remove()
            return None
        try:
            self.monitor._finish(self.rec)
        except BaseException:
            self.monitor.remove()
            raise
        return None


def _add_scalars(writer, records: Sequence[Dict[str, Any]]) -> None:
    for r in records:
        run = f"/run_{r['run']}" if 'run' in r else ''
        writer.add_scalar(f"collapse/{r['metric']}/{r['layer']}{run}",
                          r['value'], r['step'])
    if hasattr(writer, 'flush'):
        writer.flush()


def _some_names(model: torch.nn.Module) -> str:
    names = [n for n, _ in model.named_modules() if n][:5]
    return ', '.join(repr(n) for n in names) or 'none'

