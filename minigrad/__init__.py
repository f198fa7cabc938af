"""minigrad: an honest reference for gradient accumulation on any array-API library."""

from minigrad import accumulate, backend, checkpoint, equivalence, nn, optim
from minigrad.tensor import Parameter, Tensor, is_grad_enabled, maximum, no_grad, take_along_axis

__version__ = "0.1.0"

__all__ = [
    "Parameter", "Tensor", "accumulate", "backend", "checkpoint", "equivalence",
    "is_grad_enabled", "maximum", "nn", "no_grad", "optim", "take_along_axis",
]
