"""Checkpoints: model, optimizer, scheduler and accumulator state in one ``.npz`` file.

Arrays are stored as NumPy arrays under their path in the state tree ("optimizer/mu/0");
everything else (counts, hyperparameters, ``None``) goes into one JSON tree stored beside
them, with each array replaced by ``{"array": key}``. Loading checks the format marker
and every part before anything is written, so a truncated or foreign file raises
``ValueError`` and leaves the model and optimizer as they were.

Both check their arguments first: ``path`` must be a ``str`` or ``os.PathLike`` and each part
must have ``state_dict()`` and ``load_state_dict()`` (``TypeError`` naming the part
otherwise). A path that cannot be opened (a missing folder or file, a folder) raises the
``OSError`` of ``open``, which names the path; only what was read is judged a checkpoint or
not.
"""

import json
import os
import zipfile

import numpy as np

from minigrad.accumulate.guard import attributes, check_optimizer, restore_attributes
from minigrad.engine import backend

FORMAT = "minigrad-checkpoint-1"


def _flatten(tree, path, arrays):
    """The JSON-able structure of ``tree``, moving its arrays into ``arrays``."""
    if isinstance(tree, dict):
        return {"dict": {str(k): _flatten(v, f"{path}/{k}", arrays) for k, v in tree.items()}}
    if isinstance(tree, (list, tuple)):
        return {"list": [_flatten(v, f"{path}/{i}", arrays) for i, v in enumerate(tree)],
                "tuple": isinstance(tree, tuple)}
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return {"value": tree}
    if backend.is_array(tree) or isinstance(tree, np.generic):
        arrays[path] = np.asarray(backend.to_numpy(tree))
        return {"array": path}
    raise TypeError(f"cannot store {type(tree).__name__} at {path!r} in a checkpoint")


MAX_DEPTH = 64  # state trees are a few levels deep; a deeper file is crafted


def _unflatten(node, arrays, depth=0):
    """The state tree stored by ``_flatten``; ``ValueError`` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the state tree is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise ValueError(f"unexpected node {str(node)[:80]!r} in the state tree")
    if "dict" in node and isinstance(node["dict"], dict):
        return {k: _unflatten(v, arrays, depth + 1) for k, v in node["dict"].items()}
    if "list" in node and isinstance(node["list"], list):
        items = [_unflatten(v, arrays, depth + 1) for v in node["list"]]
        return tuple(items) if node.get("tuple") is True else items
    if "array" in node:
        if node["array"] not in arrays:
            raise ValueError(f"the state tree names an array {node['array']!r} the file lacks")
        return arrays[node["array"]]
    if "value" in node and (node["value"] is None or isinstance(node["value"], (bool, int,
                                                                                float, str))):
        return node["value"]
    raise ValueError(f"unexpected node {str(node)[:80]!r} in the state tree")


KINDS = {"model": "an nn.Module", "optimizer": "a minigrad optimizer such as optim.SGD",
         "scheduler": "an optim.Scheduler", "accumulator": "an accumulate.Accumulator"}


def _check_arguments(path, parts):
    """``TypeError`` naming ``path`` or the part that is not what ``save``/``load`` need."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (a file name), "
                        f"got {type(path).__name__} {path!r}")
    for name, part in parts:
        if part is None and name != "model":
            continue
        needs = ("state_dict", "load_state_dict") + (("parameters",) if name == "model" else ())
        if isinstance(part, type) or not all(callable(getattr(part, m, None)) for m in needs):
            given = f"the class {part.__name__}" if isinstance(part, type) else \
                type(part).__name__
            raise TypeError(f"{name} must be {KINDS[name]}, with {'(), '.join(needs)}(); "
                            f"got {given}")


def _check_together(model, optimizer, scheduler, accumulator):
    """The parts to load belong together; a scheduler or accumulator linked to other objects
    would change those, which a refused load could not put back."""
    check_optimizer(optimizer, model.parameters())
    if scheduler is not None and getattr(scheduler, "optimizer", optimizer) is not optimizer:
        raise ValueError("scheduler drives another optimizer than the one given; load it "
                         "with its optimizer: load(path, model, optimizer, scheduler=...)")
    if accumulator is not None and getattr(accumulator, "model", model) is not model:
        raise ValueError("accumulator trains another model than the one given")


UNREADABLE = (OSError, ValueError, EOFError, MemoryError, zipfile.BadZipFile)


def _unreadable(path, err):
    return ValueError(f"{path} is not a readable minigrad checkpoint "
                      f"(truncated or not an .npz file): {err}")


def _arrays(path):
    """The arrays of the ``.npz`` file at ``path``; ``ValueError`` for any other content."""
    with open(path, "rb") as f:  # a missing file or a folder: open's OSError names the path
        try:
            data = np.load(f, allow_pickle=False)
        except UNREADABLE as err:
            raise _unreadable(path, err) from None
        if not isinstance(data, np.lib.npyio.NpzFile):  # np.load also reads .npy files
            what = "an .npy array" if isinstance(data, np.ndarray) else type(data).__name__
            raise ValueError(f"{path} is not a minigrad checkpoint ({what}, not an .npz "
                             "archive)")
        try:
            with data:
                return {key: data[key] for key in data.files}
        except UNREADABLE as err:
            raise _unreadable(path, err) from None


def _read(path):
    """The state tree of a checkpoint file; ``ValueError`` if it is not one of ours."""
    files = _arrays(path)
    if "__minigrad__" not in files:
        raise ValueError(f"{path} is an .npz file but not a minigrad checkpoint "
                         "(no __minigrad__ marker)")
    try:
        meta = json.loads(str(files.pop("__minigrad__")))
    except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} has an unreadable __minigrad__ marker: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{path} has checkpoint format {found!r}, expected {FORMAT!r}")
    try:
        tree = _unflatten(meta.get("tree"), files)
    except RecursionError:
        raise ValueError(f"{path}: the state tree is nested too deeply") from None
    except ValueError as err:
        raise ValueError(f"{path} is not a valid minigrad checkpoint: {err}") from None
    if not isinstance(tree, dict):
        raise ValueError(f"{path} is not a valid minigrad checkpoint: its state is not a dict")
    return tree


def save(path, model, optimizer=None, *, scheduler=None, accumulator=None):
    """Write the state of every part given to ``path`` (a ``.npz`` file)."""
    _check_arguments(path, (("model", model), ("optimizer", optimizer),
                            ("scheduler", scheduler), ("accumulator", accumulator)))
    tree = {"model": model.state_dict()}
    for name, part in (("optimizer", optimizer), ("scheduler", scheduler),
                       ("accumulator", accumulator)):
        if part is not None:
            tree[name] = part.state_dict()
    arrays = {}
    structure = _flatten(tree, "", arrays)
    meta = json.dumps({"format": FORMAT, "tree": structure})
    with open(path, "wb") as f:
        np.savez(f, __minigrad__=np.asarray(meta), **arrays)


def load(path, model, optimizer=None, *, scheduler=None, accumulator=None):
    """Restore every part given from ``path``.

    ``ValueError`` if the file is not a minigrad checkpoint, or holds state that does not fit
    a part given (another architecture, a missing key); then, and on any other exception
    (``KeyboardInterrupt`` included), every part is as it was before the call. The parts
    must belong together: the optimizer holds the model's parameters, the scheduler drives
    that optimizer and the accumulator trains that model (``ValueError`` otherwise), so that
    nothing outside them is changed.
    """
    given = (("model", model), ("optimizer", optimizer), ("scheduler", scheduler),
             ("accumulator", accumulator))
    _check_arguments(path, given)
    _check_together(model, optimizer, scheduler, accumulator)
    tree = _read(path)
    parts = [(name, part) for name, part in given if part is not None]
    missing = [name for name, _ in parts if name not in tree]
    if missing:
        raise ValueError(f"{path} holds no state for {', '.join(missing)}")
    # Each part checks its state before writing it; if a later part refuses, the earlier
    # ones are put back exactly (attributes a state_dict leaves out included, such as the
    # scheduler's count of updates seen), so nothing is left half-loaded.
    model_state = model.state_dict()
    grads = [p.grad for p in model.parameters()]
    others = [(part, attributes(part)) for name, part in parts if name != "model"]
    current = None
    try:
        for current, part in parts:
            part.load_state_dict(tree[current])
    except BaseException as err:
        model.load_state_dict(model_state)
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        for part, saved in others:
            restore_attributes(part, saved)
        if isinstance(err, (KeyError, TypeError, ValueError)):
            raise ValueError(f"{path}: the {current} state does not fit this {current}: "
                             f"{err}") from err
        raise
