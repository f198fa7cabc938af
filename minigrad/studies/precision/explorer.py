"""The numbers behind the precision explorer: the error of a low-precision window's sum
against the exact sum, beside its bound."""



from minigrad.accumulate.precision import ACCUMULATE, ORDER
from minigrad.engine import validate
from minigrad.studies.explorers import control, key, positive_ints
from minigrad.studies.precision import sums as precision


# ----- precision: a window's sum in low precision against the exact sum ---------------------
def precision_explorer(ks=precision.KS, dtypes=("float16", "bfloat16"),
                       accumulators=ACCUMULATE, orders=ORDER, seed=0):
    """Per number of micro-batches K, compute dtype, accumulator and order: the row
    ``precision.measure`` computes (loss scale 1): the rms error relative to the exact
    (Fraction) mean, the largest error over its bound, the statistical model u sqrt(K / 6)
    and the share of terms divide-then-sum flushes to zero (``minigrad precision``)."""
    controls = [control("k", "micro-batches K", positive_ints("ks", ks)),
                control("dtype", "compute dtype",
                         [validate.choice("dtypes", d, precision.DTYPES[:2]) for d in dtypes]),
                control("accumulate", "accumulator",
                         [validate.choice("accumulators", a, ACCUMULATE) for a in accumulators]),
                control("order", "order", [validate.choice("orders", o, ORDER) for o in orders],
                         [o.replace("_", " ") for o in orders])]
    cases = {}
    for i, k in enumerate(ks):
        for j, dtype in enumerate(dtypes):
            for a, accumulate in enumerate(accumulators):
                for o, order in enumerate(orders):
                    row = precision.measure(k, accumulate, order, dtype, seed=seed)
                    cases[key(i, j, a, o)] = {name: row[name] for name in (
                        "relative_error", "bound_ratio", "model", "flushed")}
    return {"controls": controls, "cases": cases}
