"""Checkpoints: model, optimizer, scheduler and accumulator state in one ``.npz`` file.

Arrays are stored as NumPy arrays under their path in the state tree ("optimizer/mu/0");
everything else (counts, hyperparameters, ``None``) goes into one JSON tree stored beside
them, with each array replaced by ``{"array": key}``. Loading checks the format marker
and every part before anything is written, so a truncated or foreign file raises
``ValueError`` and leaves the model and optimizer as they were.

Both check their arguments first: ``path`` must be a ``str`` or ``os.PathLike`` and each part
must have ``state_dict()`` and ``load_state_dict()`` (``TypeError`` naming the part
otherwise). A path that cannot be opened (a missing folder or file, a folder) raises an
``OSError`` naming the path; only what was read is judged a checkpoint or not. Saving is
atomic: ``path`` holds the old checkpoint or the complete new one, never a mix.
"""

import contextlib
import errno
import json
import math
import os
import secrets
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


# Not MemoryError: a file too big for memory is a checkpoint all the same, and the user needs
# to hear "out of memory". A crafted header that claims more than the file holds is caught
# before anything is allocated (``_check_members``).
UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile)


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
        with data:
            _check_members(path, data)
            try:
                return {key: data[key] for key in data.files}
            except UNREADABLE as err:
                raise _unreadable(path, err) from None


HEADERS = {1: np.lib.format.read_array_header_1_0, 2: np.lib.format.read_array_header_2_0}


def _check_members(path, data):
    """``ValueError`` for an archive no ``save`` writes: a member name twice (``np.load``
    would silently keep the last copy), or an array header that declares more bytes than
    its member holds (reading it would first try to allocate them)."""
    seen = set()
    for name in data.files:
        if name in seen:
            raise ValueError(f"{path} holds the member {name!r} twice (a damaged or crafted "
                             "archive); refusing to choose one")
        seen.add(name)
    try:
        declared = [(info, _declared(data.zip, info)) for info in data.zip.infolist()]
    except UNREADABLE as err:
        raise _unreadable(path, err) from None
    for info, size in declared:
        if size is not None and size > info.file_size:
            raise ValueError(f"{path}: the member {info.filename!r} declares {size} bytes of "
                             f"array data but holds {info.file_size} (a damaged or crafted "
                             "archive)")


def _declared(archive, info):
    """The bytes of array data that member ``info`` declares, or None if it is no array."""
    with archive.open(info) as member:
        if member.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            return None
        major, _ = member.read(2)
        if major not in HEADERS:
            return None  # a format np.load judges itself
        shape, _, dtype = HEADERS[major](member)
    # Object arrays are stored as pickles of any length (and np.load refuses them anyway).
    return None if dtype.hasobject else math.prod(shape) * dtype.itemsize


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
    """Write the state of every part given to ``path`` (a ``.npz`` file), all or nothing.

    The archive is written to a new file in the same folder, synced to disk, then renamed
    over ``path`` (``os.replace``, atomic), so ``path`` always holds the old checkpoint
    (or nothing, if there was none) or the complete new one: if the call raises anything,
    ``KeyboardInterrupt`` included, before the rename, the old file is intact and the
    temporary one is removed. The same state gives the same bytes.
    """
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
    target = os.path.realpath(path)  # through a link: the file it names is replaced
    folder, name = os.path.split(target)
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, "a folder, not a checkpoint file", os.fspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "no such folder to save in", os.fspath(path))
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.tmp")
    try:
        with open(temporary, "xb") as f:
            np.savez(f, __minigrad__=np.asarray(meta), **arrays)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(temporary, target)  # atomic: ``path`` names the old file or the new one
    except BaseException:
        with contextlib.suppress(OSError):  # never created, or already renamed
            os.remove(temporary)
        raise
    _sync_folder(folder)


def _sync_folder(folder):
    """Make the rename durable (POSIX); Windows cannot open a folder, nor needs to."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
    except OSError:
        pass  # a file system that cannot sync folders: the new file is complete all the same
    finally:
        if fd is not None:
            os.close(fd)


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
