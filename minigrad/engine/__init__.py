"""The engine: array namespaces (``backend``), the Tensor with its primitives, the reverse
walk (``graph``). Everything above builds on these names."""

from minigrad.engine import backend, graph
from minigrad.engine.functions import linear, maximum, take_along_axis
from minigrad.engine.graph import is_grad_enabled, no_grad
from minigrad.engine.tensor import Parameter, Tensor, primitive

__all__ = ["Parameter", "Tensor", "backend", "graph", "is_grad_enabled", "linear", "maximum",
           "no_grad", "primitive", "take_along_axis"]
