"""Checkpoints: model, optimizer, scheduler and accumulator state in one ``.npz`` file.

Arrays are stored as NumPy arrays under their path in the state tree ("optimizer/mu/0");
everything else (counts, hyperparameters, ``None``) goes into one JSON tree stored beside
them, with each array replaced by ``{"array": key}``. Loading checks the format marker
and every part before anything is written, so a truncated or foreign file raises
``ValueError`` and leaves the model and optimizer as they were.
"""

import json
import zipfile

import numpy as np

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


def _unflatten(node, arrays):
    if "dict" in node:
        return {k: _unflatten(v, arrays) for k, v in node["dict"].items()}
    if "list" in node:
        items = [_unflatten(v, arrays) for v in node["list"]]
        return tuple(items) if node["tuple"] else items
    if "array" in node:
        return arrays[node["array"]]
    return node["value"]


def save(path, model, optimizer=None, *, scheduler=None, accumulator=None):
    """Write the state of every part given to ``path`` (a ``.npz`` file)."""
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
    """Restore every part given from ``path``; ``ValueError`` if the file is not one of ours."""
    try:
        with np.load(path, allow_pickle=False) as data:
            files = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{path} is not a readable minigrad checkpoint "
                         f"(truncated or not an .npz file): {err}") from err
    if "__minigrad__" not in files:
        raise ValueError(f"{path} is an .npz file but not a minigrad checkpoint "
                         "(no __minigrad__ marker)")
    meta = json.loads(str(files.pop("__minigrad__")))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} has checkpoint format {meta.get('format')!r}, "
                         f"expected {FORMAT!r}")
    tree = _unflatten(meta["tree"], files)
    parts = [("model", model), ("optimizer", optimizer), ("scheduler", scheduler),
             ("accumulator", accumulator)]
    missing = [name for name, part in parts if part is not None and name not in tree]
    if missing:
        raise ValueError(f"{path} holds no state for {', '.join(missing)}")
    # Each part checks its state before writing it; if a later part refuses, the earlier
    # ones are rolled back, so nothing is left half-loaded.
    previous = [(part, part.state_dict()) for _, part in parts if part is not None]
    try:
        for name, part in parts:
            if part is not None:
                part.load_state_dict(tree[name])
    except Exception:
        for part, state in previous:
            part.load_state_dict(state)
        raise
