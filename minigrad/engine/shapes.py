"""Shape arithmetic checked before an array library sees it, so a bad shape or axis gets
PyTorch's kind of message (naming the shapes and the operation) instead of one from deep
inside NumPy.

>>> broadcast_shapes((2, 1), (3,), "+")
(2, 3)
>>> axes(-1, 2, "sum")
(1,)
"""

import math

from minigrad.engine import validate


def broadcast_shapes(a, b, op):
    """The shape of ``a op b`` under broadcasting; ``ValueError`` naming both shapes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        m = a[-i] if i <= len(a) else 1
        n = b[-i] if i <= len(b) else 1
        if m != n and m != 1 and n != 1:
            raise ValueError(f"shapes {tuple(a)} and {tuple(b)} cannot be broadcast for "
                             f"{op}: dimension {-i} is {m} and {n}")
        out.append(max(m, n) if m != 1 and n != 1 else m * n)
    return tuple(reversed(out))


def axes(axis, ndim, op):
    """``axis`` (None, an int or a tuple of ints) as a tuple of distinct axes in
    ``[0, ndim)``; ``IndexError`` for an axis out of range, as in PyTorch."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        a = validate.integer(f"axis of {op}", a)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"axis {a} of {op} is out of range for a tensor with {ndim} "
                             f"dimensions (allowed: {-max(ndim, 1)} to {max(ndim, 1) - 1})")
        out.append(a % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"axis of {op} repeats an axis: {axis!r}")
    return tuple(out)


def permutation(perm, ndim):
    """``perm`` as a permutation of ``range(ndim)`` (negative axes allowed)."""
    if not isinstance(perm, (tuple, list)) or len(perm) != ndim:
        raise ValueError(f"axes of transpose must list each of the {ndim} dimensions once, "
                         f"got {perm!r}")
    return axes(tuple(perm), ndim, "transpose (axes)")


def reshaped(shape, size, old):
    """``shape`` (ints, at most one -1) for ``size`` elements, with -1 worked out."""
    shape = tuple(validate.integer(f"shape[{i}]", n, low=-1) for i, n in enumerate(shape))
    unknown = [i for i, n in enumerate(shape) if n == -1]
    known = math.prod(n for n in shape if n != -1)
    if len(unknown) > 1:
        raise ValueError(f"shape {shape} has more than one -1")
    if unknown and known and size % known == 0:
        shape = shape[:unknown[0]] + (size // known,) + shape[unknown[0] + 1:]
    if math.prod(shape) != size or -1 in shape:
        raise ValueError(f"shape {shape} is invalid for a tensor of shape {old} "
                         f"({size} elements)")
    return shape
