"""The applications: the ``minigrad`` command line and the data sets it trains on."""

from minigrad.apps import cli, data

__all__ = ["cli", "data"]
