"""The analysis layer: metrics (ULPs, cosine, accuracy), equivalence reports (full batch vs
accumulated), the exact Fraction mode, the HIPS-autograd reference and the BatchNorm
divergence measurements."""

from minigrad.analysis import batchnorm, equivalence, exact, metrics, reference

__all__ = ["batchnorm", "equivalence", "exact", "metrics", "reference"]
