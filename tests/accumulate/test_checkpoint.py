"""Checkpoints: a round trip of every part, resuming mid-window exactly as if never
stopped, NumPy checkpoints loaded into other namespaces, and files that are refused
(truncated, foreign, not a zip, wrong shapes) without changing anything.

Resumed runs are compared with ``==``: the same operations on the same numbers in the same
order give the same bits, so any difference means that some state was not restored.
"""

import json
import os
import warnings
import zipfile

import numpy as np
import pytest
from helpers import assert_same, to_np, uses_numpy_kernels

from minigrad import backend, checkpoint, nn, optim
from minigrad.accumulate import Accumulator

MICRO_BATCHES = 8  # of 4 samples each; with every=3 the windows are 3, 3 and a short 2
SAVE_AFTER = 4  # micro-batches: one update done, one micro-batch pending


# ----- helpers ----------------------------------------------------------------------------
def training(xp, kind="adam", seed=0, width=6):
    """Model (BatchNorm + dropout), optimizer, schedule and a streaming accumulator."""
    model = nn.MLP([3, width, 4], norm="batch", dropout=0.25, seed=seed, xp=xp)
    if kind == "sgd":
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    else:
        opt = optim.Adam(model.parameters(), lr=0.05, weight_decay=0.01)
    scheduler = optim.Scheduler(opt, optim.linear_warmup(optim.cosine(0.05, 10), 2))
    acc = Accumulator(model, nn.CrossEntropyLoss(), opt, every=3, scheduler=scheduler,
                      max_grad_norm=1.0)
    return model, opt, scheduler, acc


def everything(model, opt, scheduler, acc):
    """All state of a training run, as NumPy copies."""
    return to_np({"model": model.state_dict(),
                  "grads": [p.grad for p in model.parameters()],
                  "optimizer": opt.state_dict(),
                  "scheduler": {"t": scheduler.t, "lr": opt.lr},
                  "accumulator": acc.state_dict()})


def stream(xp, seed=0):
    """The micro-batches of the run: 4 samples each, some targets ignored."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(MICRO_BATCHES * 4, 3))
    y = rng.integers(0, 4, size=MICRO_BATCHES * 4)
    y[::7] = -100
    return [(xp.asarray(x[i:i + 4]), xp.asarray(y[i:i + 4]))
            for i in range(0, MICRO_BATCHES * 4, 4)]


def feed(acc, batches):
    for x, y in batches:
        acc.add(x, y)


def saved_mid_window(xp, tmp_path, kind="adam"):
    """A run stopped after SAVE_AFTER micro-batches and saved: (path, its parts)."""
    parts = training(xp, kind)
    feed(parts[3], stream(xp)[:SAVE_AFTER])
    assert parts[1].step_count == 1 and parts[3].pending_num_micro_batches == 1  # mid-window
    path = tmp_path / "run.npz"
    checkpoint.save(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    return path, parts


def load_fresh(path, xp, kind="adam"):
    """New, untrained objects built as the saved ones were, loaded from ``path``.

    Built with the same seed: it also fixes each Dropout's seed, which is configuration
    (like the layer sizes), not state, so a checkpoint does not hold it.
    """
    parts = training(xp, kind)
    checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    return parts


# ----- round trip and exact resumption ----------------------------------------------------
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_round_trip_restores_every_part(xp, tmp_path, kind):
    path, parts = saved_mid_window(xp, tmp_path, kind)
    fresh = load_fresh(path, xp, kind)
    state = everything(*fresh)
    assert_same(state, everything(*parts))
    assert state["accumulator"]["pending_num_micro_batches"] == 1
    assert all(g is not None for g in state["grads"])  # the pending window's sums
    if kind == "sgd":
        assert all(m is not None for m in state["optimizer"]["mu"])  # momentum buffers


def test_a_file_saved_before_the_count_was_renamed_loads(tmp_path):
    # Until the count of pending micro-batches was named ``pending_num_micro_batches``, the
    # accumulator saved it as ``pending_micro_batches``; such files keep loading.
    path, parts = saved_mid_window(np, tmp_path)
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    meta = json.loads(str(arrays.pop("__minigrad__")))
    counts = meta["tree"]["dict"]["accumulator"]["dict"]
    counts["pending_micro_batches"] = counts.pop("pending_num_micro_batches")
    old = tmp_path / "old.npz"
    np.savez(old, __minigrad__=np.asarray(json.dumps(meta)), **arrays)
    assert_same(everything(*load_fresh(old, np)), everything(*parts))
    state = parts[3].state_dict()
    state["pending_micro_batches"] = state.pop("pending_num_micro_batches")
    fresh = training(np)[3]
    fresh.load_state_dict(state)
    assert fresh.pending_num_micro_batches == 1 and "pending_micro_batches" in state


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_resuming_mid_window_continues_exactly(xp, tmp_path, kind):
    batches = stream(xp)
    model, opt, scheduler, acc = training(xp, kind)
    feed(acc, batches)
    last = acc.update()  # the short final window
    assert opt.step_count == 3 and scheduler.t == 3

    path, _ = saved_mid_window(xp, tmp_path, kind)
    resumed = load_fresh(path, xp, kind)
    feed(resumed[3], batches[SAVE_AFTER:])
    assert resumed[3].update() == last
    assert_same(everything(*resumed), everything(model, opt, scheduler, acc))


def test_a_numpy_checkpoint_loads_into_any_namespace(xp, tmp_path):
    numpy = backend.resolve_namespace("numpy")
    path, parts = saved_mid_window(numpy, tmp_path)
    model, opt, scheduler, acc = load_fresh(path, xp)
    arrays = [p.data for p in model.parameters()] + [b for _, b in model.named_buffers()]
    arrays += [p.grad for p in model.parameters()] + list(opt.state_dict()["mu"])
    assert all(backend.get_namespace(a) is xp for a in arrays)
    assert all(p.data.dtype == xp.float64 for p in model.parameters())
    # Loading copies: the state is the saved one, bit for bit, in any namespace.
    assert_same(everything(model, opt, scheduler, acc), everything(*parts))
    # Both runs go on, each in its own namespace. Where xp computes with NumPy's own kernels
    # they stay equal bit for bit; another library's kernels round differently (see
    # test_resuming_mid_window_continues_exactly for exact resumption within xp).
    feed(parts[3], stream(numpy)[SAVE_AFTER:])
    feed(acc, stream(xp)[SAVE_AFTER:])
    losses = parts[3].update(), acc.update()
    assert opt.step_count == parts[1].step_count == 3
    if uses_numpy_kernels(xp):
        assert losses[0] == losses[1]
        assert_same(everything(model, opt, scheduler, acc), everything(*parts))


# ----- refused files change nothing -------------------------------------------------------
def truncated(path, good):
    data = good.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def foreign(path, good):
    np.savez(path, weights=np.ones(3), bias=np.zeros(2))


def not_a_zip(path, good):
    path.write_text("step,loss\n1,0.5\n")


def wrong_format(path, good):
    np.savez(path, __minigrad__=np.asarray(json.dumps({"format": "minigrad-checkpoint-0"})))


@pytest.mark.parametrize("write, message", [
    (truncated, r"is not a readable minigrad checkpoint \(truncated or not an .npz file\)"),
    (not_a_zip, r"is not a readable minigrad checkpoint \(truncated or not an .npz file\)"),
    (foreign, r"is an .npz file but not a minigrad checkpoint \(no __minigrad__ marker\)"),
    (wrong_format, "has checkpoint format 'minigrad-checkpoint-0', "
                   "expected 'minigrad-checkpoint-1'"),
], ids=["truncated", "not-a-zip", "foreign-npz", "wrong-format"])
def test_unreadable_files_raise_value_error_and_change_nothing(xp, tmp_path, write, message):
    good, _ = saved_mid_window(xp, tmp_path)
    bad = tmp_path / "bad.npz"
    write(bad, good)
    parts = training(xp, seed=3)
    feed(parts[3], stream(xp)[:2])
    before = everything(*parts)
    with pytest.raises(ValueError, match=message):
        checkpoint.load(bad, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert_same(everything(*parts), before)


def test_a_missing_part_is_named_and_nothing_loaded(xp, tmp_path):
    path = tmp_path / "model_only.npz"
    saved = training(xp)
    checkpoint.save(path, saved[0])
    parts = training(xp, seed=3)
    before = everything(*parts)
    with pytest.raises(ValueError, match="holds no state for optimizer, scheduler, accumulator"):
        checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert_same(everything(*parts), before)


def test_a_wrong_shape_parameter_is_refused_and_changes_nothing(xp, tmp_path):
    path = tmp_path / "wide.npz"
    wide = training(xp, width=5)
    checkpoint.save(path, wide[0], wide[1], scheduler=wide[2], accumulator=wide[3])
    parts = training(xp, seed=3)
    feed(parts[3], stream(xp)[:4])
    before = everything(*parts)
    with pytest.raises(ValueError, match=r"has shape \(5, 3\), expected \(6, 3\)"):
        checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert_same(everything(*parts), before)


@pytest.mark.parametrize("mismatched", ["optimizer", "accumulator"])
def test_a_later_part_that_does_not_fit_rolls_back_the_earlier_ones(xp, tmp_path, mismatched):
    # The model (and scheduler) in the file fit, so they are loaded first; then the
    # optimizer's or accumulator's arrays, saved from a narrower model, do not fit.
    fits = training(xp, seed=11)
    feed(fits[3], stream(xp, seed=1)[:4])
    narrow = training(xp, width=5)
    feed(narrow[3], stream(xp)[:4])
    optimizer = narrow[1] if mismatched == "optimizer" else fits[1]
    accumulator = narrow[3] if mismatched == "accumulator" else fits[3]
    path = tmp_path / "mixed.npz"
    checkpoint.save(path, fits[0], optimizer, scheduler=fits[2], accumulator=accumulator)
    parts = training(xp, seed=3)
    feed(parts[3], stream(xp)[:2])
    before = everything(*parts)
    with pytest.raises(ValueError, match="has shape"):
        checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert_same(everything(*parts), before)
    # The rollback had something to undo: the file's model differs from the one kept.
    kept, in_file = before["model"]["0.weight"], to_np(fits[0].state_dict())["0.weight"]
    assert not np.array_equal(kept, in_file)


# ----- arguments of the wrong kind are refused before anything is read or written ---------
NUMPY = backend.resolve_namespace("numpy")


def not_a_function(optimizer):
    return optimizer.lr


WRONG_PARTS = [
    (dict(model=None), r"^model must be an nn.Module, with state_dict\(\), load_state_dict\(\), "
                       r"parameters\(\); got NoneType$"),
    (dict(model=nn.MLP), "^model must be an nn.Module, .*; got the class MLP$"),
    (dict(optimizer="opt"), r"^optimizer must be a minigrad optimizer such as optim.SGD, with "
                            r"state_dict\(\), load_state_dict\(\); got str$"),
    (dict(scheduler=not_a_function), "^scheduler must be an optim.Scheduler, .*; got function$"),
    (dict(accumulator=3), "^accumulator must be an accumulate.Accumulator, .*; got int$"),
]


def call(function, path, parts, **replaced):
    """``function(path, model, optimizer, scheduler=..., accumulator=...)`` with some replaced."""
    named = dict(zip(("model", "optimizer", "scheduler", "accumulator"), parts), **replaced)
    return function(path, named.pop("model"), named.pop("optimizer"), **named)


@pytest.mark.parametrize("wrong, message", WRONG_PARTS, ids=[
    "model-None", "model-class", "optimizer-str", "scheduler-function", "accumulator-int"])
def test_a_part_of_the_wrong_kind_is_a_type_error_naming_it(tmp_path, wrong, message):
    path, parts = saved_mid_window(NUMPY, tmp_path)
    before = everything(*parts)
    with pytest.raises(TypeError, match=message):
        call(checkpoint.save, tmp_path / "new.npz", parts, **wrong)
    assert not (tmp_path / "new.npz").exists()
    with pytest.raises(TypeError, match=message):
        call(checkpoint.load, path, parts, **wrong)
    assert_same(everything(*parts), before)


@pytest.mark.parametrize("path", [None, 3, ["run.npz"]])
def test_a_path_that_is_not_a_file_name_is_a_type_error(tmp_path, path):
    _, parts = saved_mid_window(NUMPY, tmp_path)
    before = everything(*parts)
    message = f"^path must be a str or os.PathLike \\(a file name\\), got {type(path).__name__}"
    with pytest.raises(TypeError, match=message):
        checkpoint.save(path, parts[0])
    with pytest.raises(TypeError, match=message):
        checkpoint.load(path, parts[0])
    assert_same(everything(*parts), before)


def test_an_npy_file_is_not_a_checkpoint(tmp_path):
    # np.load reads an .npy file as one array, not as an archive of named arrays.
    path = tmp_path / "weights.npy"
    np.save(path, np.ones(3))
    parts = training(NUMPY)
    before = everything(*parts)
    with pytest.raises(ValueError, match=r"weights.npy is not a minigrad checkpoint "
                                         r"\(an .npy array, not an .npz archive\)$"):
        checkpoint.load(path, parts[0])
    assert_same(everything(*parts), before)


def test_a_path_that_cannot_be_opened_raises_open_s_error_naming_it(tmp_path):
    # Not a ValueError: nothing was read, so nothing was found not to be a checkpoint.
    parts = training(NUMPY)
    before = everything(*parts)
    missing = tmp_path / "no_such_folder" / "run.npz"
    with pytest.raises(FileNotFoundError, match="no_such_folder"):
        checkpoint.save(missing, parts[0])
    with pytest.raises(FileNotFoundError, match="no_such_folder"):
        checkpoint.load(missing, parts[0])
    with pytest.raises(IsADirectoryError, match=str(tmp_path.name)):
        checkpoint.save(tmp_path, parts[0])
    with pytest.raises(IsADirectoryError, match=str(tmp_path.name)):
        checkpoint.load(tmp_path, parts[0])
    assert_same(everything(*parts), before)


@pytest.mark.parametrize("stranger, message", [
    ("optimizer", r"optimizer.params\[0\] is not a parameter of the model"),
    ("scheduler", "scheduler drives another optimizer than the one given"),
    ("accumulator", "accumulator trains another model than the one given"),
])
def test_parts_that_do_not_belong_together_are_refused_and_change_nothing(tmp_path, stranger,
                                                                          message):
    # Loading a scheduler sets its optimizer's lr, an accumulator its model's .grad: objects
    # outside the parts given, which a refused load could not put back.
    path, parts = saved_mid_window(NUMPY, tmp_path)
    others = training(NUMPY, seed=5)
    index = ("model", "optimizer", "scheduler", "accumulator").index(stranger)
    before = [everything(*parts), everything(*others)]
    with pytest.raises(ValueError, match=message):
        call(checkpoint.load, path, parts, **{stranger: others[index]})
    assert_same([everything(*parts), everything(*others)], before)


# ----- saving is atomic; archives are read strictly -----------------------------------------
MODULES = {"np": np, "os": os}


@pytest.mark.parametrize("where", ["np.savez", "os.fsync", "os.replace"])
@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError, OSError])
def test_an_interrupted_save_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path,
                                                                           monkeypatch, where,
                                                                           error):
    # The old save wrote in place: Ctrl-C half-way through np.savez left half an archive.
    path, parts = saved_mid_window(NUMPY, tmp_path)
    old = path.read_bytes()
    feed(parts[3], stream(NUMPY)[SAVE_AFTER:])  # the run moves on: its next save differs
    module, name = where.split(".")

    def failing(*args, **kwargs):
        if name == "savez":
            args[0].write(b"PK\x03\x04 the first bytes of an archive")
        raise error(f"injected in {where}")

    monkeypatch.setattr(MODULES[module], name, failing)
    with pytest.raises(error, match="injected"):
        checkpoint.save(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert [f.name for f in tmp_path.iterdir()] == ["run.npz"]


def test_a_save_replaces_the_file_a_link_names_with_the_same_bytes_as_a_fresh_one(tmp_path):
    path, parts = saved_mid_window(NUMPY, tmp_path)
    feed(parts[3], stream(NUMPY)[SAVE_AFTER:])
    link = tmp_path / "latest.npz"
    link.symlink_to(path.name)
    fresh = tmp_path / "fresh.npz"
    for target in (link, fresh):
        checkpoint.save(target, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert link.is_symlink() and path.read_bytes() == fresh.read_bytes()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["fresh.npz", "latest.npz", "run.npz"]


def test_an_archive_holding_a_member_twice_is_refused_naming_both(tmp_path):
    # np.load keeps the last copy of a name; a checkpoint must not be one of two readings.
    path, _ = saved_mid_window(NUMPY, tmp_path)
    with np.load(path) as data:
        name = next(key for key in data.files if key != "__minigrad__")
        shape = data[name].shape
    with zipfile.ZipFile(path, "a") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name" warning: that is the point
        with archive.open(f"{name}.npy", "w") as member:
            np.lib.format.write_array(member, np.zeros(shape))
    parts = training(NUMPY, seed=3)
    before = everything(*parts)
    with pytest.raises(ValueError, match=f"run.npz holds the member '{name}' twice"):
        checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    assert_same(everything(*parts), before)


def test_a_header_claiming_more_than_its_member_holds_is_refused_before_allocating(tmp_path):
    path = tmp_path / "crafted.npz"
    with zipfile.ZipFile(path, "w") as archive, archive.open("huge.npy", "w") as member:
        header = {"descr": "<f8", "fortran_order": False, "shape": (2**40,)}  # 8 TiB
        np.lib.format.write_array_header_1_0(member, header)
        member.write(bytes(8))
    parts = training(NUMPY)
    before = everything(*parts)
    with pytest.raises(ValueError, match="crafted.npz: the member 'huge.npy' declares "
                                         "8796093022208 bytes of array data but holds"):
        checkpoint.load(path, parts[0])
    assert_same(everything(*parts), before)


def test_out_of_memory_while_loading_is_a_memory_error_and_changes_nothing(tmp_path,
                                                                           monkeypatch):
    # Not "truncated or not an .npz file": the file is fine, the machine is short of memory.
    path, _ = saved_mid_window(NUMPY, tmp_path)
    parts = training(NUMPY, seed=3)
    before = everything(*parts)

    def no_memory(self, key):
        raise MemoryError("injected: no memory for the array")

    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", no_memory)
    with pytest.raises(MemoryError, match="injected"):
        checkpoint.load(path, parts[0], parts[1], scheduler=parts[2], accumulator=parts[3])
    monkeypatch.undo()
    assert_same(everything(*parts), before)
