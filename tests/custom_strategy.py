"""A strategy written outside the library, as a user would: the micro-batches of a window
in reverse order. The same per-item sums, added in another order; nothing in minigrad
knows it, yet it runs through ``accumulate.step``, checkpoints and MPI (test_strategies.py,
test_distributed.py). It also records the sample positions it visited."""

from minigrad.accumulate.micro import add_micro_batch


class Reversed:
    """Accumulate the window's micro-batches last to first."""

    name = "reversed"

    def __init__(self):
        self.visited = []  # per window: the first global sample position of each micro-batch

    def check(self, acc):
        if acc.normalize == "micro_batch_mean":  # a refusal, to show where one goes
            raise ValueError("Reversed accumulates item sums; use normalize='items'")

    def run(self, acc, micro_batches, reduction):
        self.visited.append([int(mb.index[0]) for mb in reversed(micro_batches)])
        for mb in reversed(micro_batches):
            if add_micro_batch(acc, mb) is None:
                return None  # a non-finite loss dropped the window (on_nonfinite="skip")
        return reduction.update(acc)
