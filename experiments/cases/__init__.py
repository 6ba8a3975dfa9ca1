r"""What this repository's benchmarks and GPU check measure, as cases timed
with :mod:`gnorm.bench` (the harness a user calls); not part of the
installed package:

* :mod:`experiments.cases.layers`: one layer's forward and backward pass beside
  its reference (ContraNorm beside the dense n x n formulation,
  ContraNorm-D beside ``GCNConv``, PairNorm beside PyG's), and a deep
  GCN's training epoch;
* :mod:`experiments.cases.monitor`: the collapse monitor's cost beside training,
  full batch and on neighbour-sampled batches;
* :mod:`experiments.cases.graphormer`: a Graphormer training step, its data
  (fetch, collation, copy) timed apart from the model.

The scripts of ``experiments/`` choose the sizes and write the reports
(docs/benchmarks.rst)."""
