"""Cost of exact BatchNorm accumulation, by the number of BatchNorm layers L.

For each L, one update of an MLP with L hidden blocks (Linear, BatchNorm1d, ReLU) on a
global batch split into micro-batches, three ways:

* full batch: one forward and backward over the whole batch;
* accumulated: plain accumulation (BatchNorm uses micro-batch statistics; not equivalent);
* exact: ``accumulate.step(..., strategy="exact_batchnorm")`` (equivalent to full batch).

It prints the time of each (best of ``--repeats``), the ratio exact / accumulated, which the
design predicts near (2L + 1) forward + (L + 1) backward passes over (1 + 1), and the peak
memory NumPy allocated during the step (tracemalloc), which should stay at the micro-batch
scale for both accumulated runs. Also the largest relative gap of exact vs full batch.

    python benchmarks/exact_batchnorm.py [--batch 2048] [--micro 256] [--width 256]
"""

import argparse
import time
import tracemalloc

import numpy as np

from minigrad import accumulate, equivalence, nn, optim


def one_update(depth, width, x, y, **kwargs):
    model = nn.MLP([x.shape[1]] + [width] * depth + [10], norm="batch", seed=0)
    opt = optim.SGD(model.parameters(), lr=0.1)
    start = time.perf_counter()
    accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, **kwargs)
    return time.perf_counter() - start, model


def measure(depth, width, x, y, repeats, **kwargs):
    seconds = min(one_update(depth, width, x, y, **kwargs)[0] for _ in range(repeats))
    tracemalloc.start()
    _, model = one_update(depth, width, x, y, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=256)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, 64))
    y = rng.integers(0, 10, size=args.batch)
    print(f"global batch {args.batch}, micro-batch {args.micro}, width {args.width}, "
          f"float64, best of {args.repeats}")
    print(f"{'L':>2} {'full ms':>9} {'accum ms':>9} {'exact ms':>9} {'exact/accum':>11} "
          f"{'(2L+1+L+1)/2':>12} {'full MB':>8} {'accum MB':>8} {'exact MB':>8} "
          f"{'exact gap':>9}")
    for depth in args.depths:
        full = measure(depth, args.width, x, y, args.repeats)
        acc = measure(depth, args.width, x, y, args.repeats, micro_batch_size=args.micro)
        exact = measure(depth, args.width, x, y, args.repeats, micro_batch_size=args.micro,
                        strategy="exact_batchnorm")
        gap = equivalence.compare_named(equivalence.float_state(exact[2]),
                                        equivalence.float_state(full[2]))["all"]["max_rel"]
        predicted = (2 * depth + 1 + depth + 1) / 2
        mb = [r[1] / 2**20 for r in (full, acc, exact)]
        print(f"{depth:>2} {full[0] * 1e3:>9.1f} {acc[0] * 1e3:>9.1f} {exact[0] * 1e3:>9.1f} "
              f"{exact[0] / acc[0]:>11.2f} {predicted:>12.1f} {mb[0]:>8.1f} {mb[1]:>8.1f} "
              f"{mb[2]:>8.1f} {gap:>9.1e}")


if __name__ == "__main__":
    main()
