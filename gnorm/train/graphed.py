r"""The full-batch node step replayed as CUDA graphs (``train.cuda_graph``):
the training update (forward, backward, optimizer step) and the evaluation
pass are each captured once and then replayed every epoch, so that an
epoch costs two launches from the host instead of one per kernel. The
shapes are static (one graph, fixed runs), so one capture serves every
epoch.

The capture is a function argument (:obj:`capture`, default
:func:`cuda_capture`): the step's logic (warm-up epochs, static inputs,
the outputs read after each replay) is one code path on every device, and
a test drives it on the CPU with a stand-in that records the callable and
runs it at each replay."""
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from gnorm.errors import CaptureError, ConfigError
from gnorm.train.common import one_line

Capture = Callable[[Callable[[], torch.Tensor]],
                   Tuple[Callable[[], None], torch.Tensor]]


def cuda_capture(generators: Optional[Sequence[torch.Generator]] = None
                 ) -> Capture:
    r"""A capture on the current CUDA device: ``capture(fn)`` records
    :obj:`fn`'s kernels as a :class:`torch.cuda.CUDAGraph` (without running
    them) and returns ``(replay, output)``, :obj:`output` being the tensor
    :obj:`fn` returned, rewritten by each replay. The dropout
    :obj:`generators` are registered with each graph, so that a replay
    advances them as an eager epoch would."""
    def capture(fn):
        graph = torch.cuda.CUDAGraph()
        for generator in generators or ():
            if not hasattr(graph, 'register_generator_state'):
                raise ConfigError(
                    f"train.cuda_graph with per-run dropout generators needs "
                    f"torch.cuda.CUDAGraph.register_generator_state (torch "
                    f"{torch.__version__} lacks it); pass model.dropout=0.0 "
                    f"or train.cuda_graph=false")
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            output = fn()
        return graph.replay, output
    return capture


class GraphedStep:
    r"""A :class:`gnorm.train.node_loop.Step` whose two passes run as captured
    graphs. The first :obj:`warmup` epochs run eagerly (on a side stream
    on CUDA, as capture requires; they also create the optimizer's state),
    then the training update and the evaluation pass are captured
    (:obj:`capture`, default :func:`cuda_capture` with the step's
    generators) and replayed from then on. ``alive`` is copied into a
    static tensor before each replay; the outputs are cloned after it,
    since the next replay rewrites them. Called as the step is, it
    returns what the eager step returns."""
    def __init__(self, step, warmup: int = 3,
                 capture: Optional[Capture] = None):
        self.step, self.warmup, self.epochs = step, warmup, 0
        self.capture = capture or cuda_capture(step.generators)
        device = step.data.x.device
        self.stream = (torch.cuda.Stream(device) if device.type == 'cuda'
                       else None)
        self.alive: Optional[torch.Tensor] = None
        self.graphs: List[Tuple[Callable[[], None], torch.Tensor]] = []

    def _eager(self, optimizer: torch.optim.Optimizer, alive: torch.Tensor,
               evaluate: bool, record=None):
        if self.stream is None:
            return self.step(optimizer, alive, evaluate, record)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            result = self.step(optimizer, alive, evaluate, record)
        torch.cuda.current_stream().wait_stream(self.stream)
        return result

    def _capture(self, optimizer: torch.optim.Optimizer,
                 alive: torch.Tensor) -> None:
        r"""Captures both passes; any error of the capture is a
        :class:`~gnorm.errors.CaptureError` (the runs can train eagerly),
        told apart from a run that diverges."""
        self.alive = alive.clone()
        optimizer.zero_grad()  # to None: the graph allocates the gradients
        try:
            self.graphs = [
                self.capture(lambda: self.step.train(optimizer, self.alive)),
                self.capture(self.step.evaluate)]
        except Exception as e:  # whatever capture raises, said in a line
            raise CaptureError(f"the training step could not be captured "
                               f"as a CUDA graph: {type(e).__name__}: "
                               f"{one_line(e)}") from None

    def __call__(self, optimizer: torch.optim.Optimizer,
                 alive: torch.Tensor, evaluate: bool = True, record=None):
        r"""As the eager step's; :obj:`record` (a gradient record) is
        kept in the warm-up epochs only, which run eagerly: a replayed
        graph has no hooks."""
        self.epochs += 1
        if self.epochs <= self.warmup:
            return self._eager(optimizer, alive, evaluate, record)
        if not self.graphs:
            self._capture(optimizer, alive)
        self.alive.copy_(alive)
        (train, losses), (evaluation, metrics) = self.graphs
        train()
        losses = losses.clone()
        if not evaluate:
            return losses, self.step.skipped(losses)
        evaluation()
        return losses, metrics.clone()
