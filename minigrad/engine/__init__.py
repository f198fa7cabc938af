"""The engine: array namespaces (``backend``), the Tensor with its primitives, the reverse
walk (``graph``), and ``introspect``, which lists a graph's nodes (the notebooks draw
them). Everything above builds on these names."""

from minigrad.engine import backend, graph, introspect
from minigrad.engine.functions import linear, maximum, take_along_axis
from minigrad.engine.graph import is_grad_enabled, no_grad
from minigrad.engine.tensor import Parameter, Tensor, primitive

__all__ = ["Parameter", "Tensor", "backend", "graph", "introspect", "is_grad_enabled",
           "linear", "maximum", "no_grad", "primitive", "take_along_axis"]
