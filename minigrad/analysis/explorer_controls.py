"""The shape every explorer's data shares: its controls, and the key of a case."""

from minigrad.engine import validate


def control(name, label, values, labels=None):
    """One control of an explorer: its ``values`` and how the page labels them."""
    return {"name": name, "label": label, "values": list(values),
            "labels": [str(v) for v in values] if labels is None else list(labels)}


def key(*indices):
    """The key of the case at these positions in each control's values: ``"i|j|..."``."""
    return "|".join(str(i) for i in indices)


def positive_ints(name, values):
    """``values`` checked as positive ints (errors name ``name``)."""
    return [validate.positive_int(name, v) for v in values]
