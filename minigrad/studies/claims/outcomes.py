"""Verdicts that rest on training outcomes (accuracy, loss, norms along training), and the
rule they meet: such an outcome moves with the seed and with the length of training, so a
verdict on it is computed over at least ``MIN_SEEDS`` seeds and at two training lengths or
more, the longest at least ``MIN_LENGTH_RATIO`` times the shortest. ``record`` keeps what the
verdict rests on (every seed's value at every length, and whether the claim held at each
length) and refuses a record that breaks the rule; ``said`` reports it as mean and standard
deviation over the seeds; ``lengths_held`` says where the claim held ("after 600 updates, not
after 150"). ``minigrad.studies.claims.verdicts`` puts a record in a claim's row.

>>> r = record("test accuracy", seeds=[0, 1, 2], lengths=[100, 400],
...            values={"a": [[0.5, 0.6, 0.7], [0.8, 0.8, 0.9]]}, held=[False, True])
>>> spread(r["values"]["a"][1]), lengths_held(r["lengths"], r["held"], r["unit"])
('0.833 ± 0.058', 'after 400 updates, not after 100')
"""

import numpy as np

MIN_SEEDS = 3
"""The fewest seeds an outcome verdict may rest on."""
MIN_LENGTH_RATIO = 4
"""An outcome verdict is checked at two training lengths or more, the longest at least this
many times the shortest."""


def record(measure, *, seeds, lengths, values, held, unit="updates"):
    """What a verdict on training outcomes rests on: ``measure`` (what was measured, and
    how), for every seed of ``seeds`` at every training length of ``lengths`` (in ``unit``,
    shortest first); ``values``: arm -> one row per length of one value per seed; ``held``:
    whether the claim held at each length. Refused (``ValueError``) unless it meets the
    rule. Returns a JSON-able dict."""
    kept = {"measure": measure, "unit": unit, "seeds": [_whole("a seed", s) for s in seeds],
            "lengths": [_whole("a length", n) for n in lengths],
            "values": {str(arm): [[float(v) for v in row] for row in rows]
                       for arm, rows in values.items()},
            "held": [_flag(h) for h in held]}
    check(kept, "record")
    return kept


def _whole(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _flag(value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"held must hold bools, got {type(value).__name__} {value!r}")
    return bool(value)


def check(record, where):
    """``ValueError`` naming ``where`` unless ``record`` is complete and meets the rule."""
    if not isinstance(record, dict) or set(record) != {"measure", "unit", "seeds", "lengths",
                                                       "values", "held"}:
        raise ValueError(f"{where}: an outcome record has measure, unit, seeds, lengths, "
                         f"values and held (make it with outcomes.record())")
    seeds, lengths = record["seeds"], record["lengths"]
    if len(set(seeds)) < MIN_SEEDS:
        raise ValueError(f"{where}: an outcome verdict rests on at least {MIN_SEEDS} seeds, "
                         f"got {seeds}")
    if len(set(lengths)) < 2 or lengths != sorted(lengths) or min(lengths) < 1:
        raise ValueError(f"{where}: an outcome verdict is checked at two training lengths "
                         f"or more, shortest first, got {lengths}")
    if lengths[-1] < MIN_LENGTH_RATIO * lengths[0]:
        raise ValueError(f"{where}: the longest training length must be at least "
                         f"{MIN_LENGTH_RATIO} times the shortest, got {lengths}")
    if len(record["held"]) != len(lengths):
        raise ValueError(f"{where}: held says, for each of the {len(lengths)} lengths, "
                         f"whether the claim held; got {record['held']}")
    values = record["values"]
    if not isinstance(values, dict) or not values:
        raise ValueError(f"{where}: values maps each arm to its measurements")
    for arm, rows in values.items():
        if len(rows) != len(lengths) or any(len(row) != len(seeds) for row in rows):
            raise ValueError(f"{where}: values[{arm!r}] holds one row per length of one value "
                             f"per seed ({len(lengths)} x {len(seeds)})")
    if not all(isinstance(record[k], str) and record[k].strip() for k in ("measure", "unit")):
        raise ValueError(f"{where}: an outcome record names its measure and its unit")


def spread(values):
    """Mean and standard deviation (over seeds, ``ddof=1``) as the tables show them."""
    values = np.asarray(values, dtype=np.float64)
    return f"{values.mean():.3g} ± {values.std(ddof=1):.2g}"


def lengths_held(lengths, held, unit="updates"):
    """Where a claim held, in words: "at 150 and 600 updates", "at neither 150 nor 600
    updates", or "after 600 updates, not after 150" (``held``: one bool per length)."""
    yes = [str(n) for n, h in zip(lengths, held) if h]
    no = [str(n) for n, h in zip(lengths, held) if not h]
    if not no:
        return f"at {' and '.join(yes)} {unit}"
    if not yes:
        return f"at neither {' nor '.join(no)} {unit}"
    return f"after {' and '.join(yes)} {unit}, not after {' or '.join(no)}"


def said(record):
    """The record in words: its measure, seeds and lengths, each arm's mean ± standard
    deviation at each length."""
    lengths = " and ".join(map(str, record["lengths"]))
    arms = "; ".join(f"{arm} " + ", ".join(spread(row) for row in rows)
                     for arm, rows in record["values"].items())
    return (f"{record['measure']} over seeds {', '.join(map(str, record['seeds']))} after "
            f"{lengths} {record['unit']} (mean ± standard deviation over the seeds, at each "
            f"length in turn): {arms}")


__all__ = ["MIN_LENGTH_RATIO", "MIN_SEEDS", "check", "lengths_held", "record", "said", "spread"]
