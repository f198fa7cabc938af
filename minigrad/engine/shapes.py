"""Shape arithmetic for broadcasting, reductions, reshape, transpose and matmul, checked
before an array library sees the arrays (broadcasting: once the library has refused them),
so a bad shape or axis gets PyTorch's kind of message (naming the shapes and the operation)
instead of one from deep inside NumPy.

>>> broadcast_shapes((2, 1), (3,), "+")
(2, 3)
>>> axes(-1, 2, "sum")
(1,)
>>> matmul((5, 2, 3), (3,))
(5, 2)
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


def broadcasting(op, x, y, name):
    """``op(x, y)`` for arrays ``x`` and ``y``; a broadcasting failure names both shapes.

    The shapes are checked only after the library refused them: the common case pays nothing.
    """
    try:
        return op(x, y)
    except ValueError:
        broadcast_shapes(tuple(x.shape), tuple(y.shape), name)  # raises, naming the shapes
        raise


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


def reduced_axes(axis, ndim, op):
    """The axes a reduction ``op`` over ``axis`` works on: None for all of them (``axis``
    None, or a 0-d tensor, whose ``axis`` is not checked), else as ``axes`` gives them."""
    return None if axis is None or ndim == 0 else axes(axis, ndim, op)


def matmul(a, b):
    """The shape of ``x @ y`` where ``x`` has shape ``a`` and ``y`` shape ``b``, as in NumPy:
    (..., n, k) @ (..., k, m) -> (..., n, m), the batch axes broadcast; a 1-d ``x`` is a row
    and a 1-d ``y`` a column, whose axis the result drops. ``ValueError`` naming both."""
    if not a or not b:
        raise ValueError(f"matmul needs operands with at least 1 dimension, got shapes {a} "
                         f"and {b}")
    inner = b[-2] if len(b) > 1 else b[0]
    if a[-1] != inner:
        raise ValueError(f"matmul shape mismatch: {a} @ {b} (inner dimensions {a[-1]} != "
                         f"{inner})")
    batch = broadcast_shapes(a[:-2], b[:-2], "@ (batch dimensions)")
    return batch + a[-2:-1] + (b[-1:] if len(b) > 1 else ())


def permutation(perm, ndim):
    """``perm`` as a permutation of ``range(ndim)`` with axes >= 0 (negative axes allowed in
    ``perm``); None is the reversal, as in ``numpy.transpose``."""
    if perm is None:
        return tuple(reversed(range(ndim)))
    if not isinstance(perm, (tuple, list)) or len(perm) != ndim:
        raise ValueError(f"axes of transpose must list each of the {ndim} dimensions once, "
                         f"got {perm!r}")
    return axes(tuple(perm), ndim, "transpose (axes)")


def inverse(perm):
    """The permutation that undoes ``perm`` (whose axes are >= 0).

    >>> inverse((2, 0, 1))
    (1, 2, 0)
    """
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


def reshaped(shape, size, old):
    """``shape`` (ints, at most one -1; or one tuple of them, as ``reshape((2, 3))`` passes
    it) for ``size`` elements, with -1 worked out."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
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
