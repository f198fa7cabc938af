"""argparse ``type`` functions for the ``minigrad`` commands: each parses a value and checks
it as ``minigrad.engine.validate`` checks the library's arguments, so the command line and
Python judge a value the same, and a bad one is reported in one line naming the flag."""

import argparse

from minigrad.engine import validate


def number(kind, check, flag, **limits):
    """An argparse ``type``: parse ``kind`` (int or float), then ``check`` it as
    ``minigrad.engine.validate`` does for the library (``check(flag, value, **limits)``)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        try:
            return check(flag, value, **limits)
        except (TypeError, ValueError) as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(f"{flag} ")) from None

    return parse


def widths(text):
    """``--sizes``: comma-separated widths, inputs first, at least two, each positive."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as "
                                         f"784,256,10, got {text!r}") from None
    if len(sizes) < 2:
        raise argparse.ArgumentTypeError(f"expected at least 2 widths (inputs, ..., "
                                         f"classes), got {text!r}")
    try:
        return [validate.positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
