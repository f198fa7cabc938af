"""The applications: the ``minigrad`` command line, the data sets it trains on, and the
notebooks' figures (``plotting``; matplotlib is imported only when a figure is made)."""

from minigrad.apps import cli, data, plotting

__all__ = ["cli", "data", "plotting"]
