r"""What gnorm's benchmarks and GPU check measure, as cases a user can run
beside their own layer or model (timed with :mod:`gnorm.bench`):

* :mod:`gnorm.perf.layers`: one layer's forward and backward pass beside
  its reference (ContraNorm beside the dense n x n formulation,
  ContraNorm-D beside ``GCNConv``, PairNorm beside PyG's), and a deep
  GCN's training epoch;
* :mod:`gnorm.perf.monitor`: the collapse monitor's cost beside training,
  full batch and on neighbour-sampled batches;
* :mod:`gnorm.perf.graphormer`: a Graphormer training step, its data
  (fetch, collation, copy) timed apart from the model.

The scripts of ``experiments/`` choose the sizes and write the reports
(docs/benchmarks.rst)."""
