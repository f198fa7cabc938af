"""Gradient accumulation: many micro-batches, ONE optimizer update.

For a global batch B split into micro-batches B_1..B_k of any sizes and a loss that is a
mean over items (samples, or non-ignored targets), the full-batch gradient is

    g = (1 / |items(B)|) * sum_j sum_{i in B_j} grad l_i

so the rule is: accumulate per-item SUMS, divide ONCE by the item count of the whole
window (``normalize="items"``, the default, right for every split). The textbook loop,
each micro-batch mean divided by k (``normalize="micro_batch_mean"``), is kept by name for
teaching: it is wrong for uneven splits and for ``ignore_index``. ``"sum"`` never divides.

Everything that happens "per step" happens once per optimizer update:

============================  =============================================  =========
what                          when                                           how often
============================  =============================================  =========
zeroing of gradients          after each update (and before ``step``)        1 / update
division by the item count    on the summed gradient, just before clipping   1 / update
gradient clipping             on the accumulated, divided gradient           1 / update
optimizer step (Adam's t,     ``optimizer.step()``                           1 / update
weight decay, momentum)
learning-rate schedule        ``scheduler.step()`` after the update          1 / update
dropout masks                 keyed by (seed, update count, sample index)    1 / update
BatchNorm running statistics  every forward in training mode                 k / update
============================  =============================================  =========

The last row is the exception minigrad shows rather than hides: BatchNorm couples the
samples of a micro-batch, so accumulated BatchNorm training is not full-batch training.

How one window is run is a **strategy** (``strategy``: ``"micro"``, ``"exact_batchnorm"``,
the contrastive ``"naive"``, ``"gradcache"`` and ``Bank(...)``, or your own object) and
where its sums meet is a **reduction** (``reduction``: one process, or ``mpi.AllReduce``);
the two are independent, so ``distributed.step`` is ``step`` with the MPI reduction: each
rank accumulates its shard, one all-reduce per update adds the sums and the item counts
(mpi4py, imported lazily).

A non-finite loss or gradient never reaches the parameters: the update is refused
(``FloatingPointError``) or, with ``on_nonfinite="skip"``, dropped; the parameters, the
optimizer, the schedule and the model's buffers stay exactly as they were.
"""

from minigrad.accumulate import (
    checkpoint,
    contrastive,
    distributed,
    exact_batchnorm,
    micro,
    mpi,
    reduction,
    split,
    strategy,
)
from minigrad.accumulate.accumulator import Accumulator, Window
from minigrad.accumulate.commit import NORMALIZE, ON_NONFINITE
from minigrad.accumulate.contrastive import Bank, GradCache, Naive
from minigrad.accumulate.driver import accumulated_gradients, step
from minigrad.accumulate.exact_batchnorm import ExactBatchNorm
from minigrad.accumulate.guard import as_loss
from minigrad.accumulate.micro import Micro
from minigrad.accumulate.precision import Precision
from minigrad.accumulate.split import MicroBatch, micro_batches, split_sizes
from minigrad.accumulate.strategy import STRATEGIES

__all__ = ["NORMALIZE", "ON_NONFINITE", "STRATEGIES", "Accumulator", "Bank", "ExactBatchNorm",
           "GradCache", "Micro", "MicroBatch", "Naive", "Precision", "Window",
           "accumulated_gradients", "as_loss", "checkpoint", "contrastive", "distributed",
           "exact_batchnorm", "micro", "micro_batches", "mpi", "reduction", "split",
           "split_sizes", "step", "strategy"]
