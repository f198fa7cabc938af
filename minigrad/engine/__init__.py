"""The engine: array namespaces (``backend``), the Tensor, its ``primitives`` (one module per
family), the reverse walk (``graph``), and ``introspect``, which lists a graph's nodes (the
notebooks draw them). Everything above builds on these names."""

from minigrad.engine import backend, graph, introspect, primitives
from minigrad.engine.graph import is_grad_enabled, no_grad
from minigrad.engine.primitives.elementwise import maximum
from minigrad.engine.primitives.indexing import embedding, take_along_axis
from minigrad.engine.primitives.linalg import linear
from minigrad.engine.tensor import Parameter, Tensor, lift, primitive

__all__ = ["Parameter", "Tensor", "backend", "embedding", "graph", "introspect",
           "is_grad_enabled", "lift", "linear", "maximum", "no_grad", "primitive", "primitives",
           "take_along_axis"]
