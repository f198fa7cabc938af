"""Small helpers shared by several test modules (conftest.py puts this folder on sys.path)."""

import contextlib
import io
import pickle
import re

import numpy as np

from minigrad import backend
from minigrad.engine.tensor import Tensor


def to_np(tree):
    """A NumPy copy of every array (or Tensor) in a nested dict/list/tuple; other leaves
    as they are."""
    if isinstance(tree, dict):
        return {k: to_np(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [to_np(v) for v in tree]
    if isinstance(tree, Tensor):
        tree = tree.data
    if backend.is_array(tree):
        return np.array(backend.to_numpy(tree), copy=True)
    return tree


def assert_same(a, b, path="state"):
    """``a == b`` everywhere: same keys, same dtypes and shapes, every element equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b)):
            assert_same(u, v, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, path
        assert bool(np.all(a == b)), f"{path} differs: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


def other_namespace(xp):
    """The namespace of the fixture that is not ``xp``."""
    name = "array_api_strict" if xp is backend.resolve_namespace("numpy") else "numpy"
    return backend.resolve_namespace(name)


def as_numpy(a):
    """The NumPy array of a Tensor or array."""
    return backend.to_numpy(a.data if isinstance(a, Tensor) else a)


def equal(a, expected):
    """Whether the array ``a`` (of any namespace) equals ``expected`` elementwise."""
    return np.array_equal(backend.to_numpy(a), np.asarray(expected))


def leaf(xp, values, requires_grad=True, dtype="float64"):
    """A Tensor of ``values`` in namespace ``xp`` that requires grad unless told otherwise;
    ``dtype`` a name ("float32") or a dtype of ``xp``."""
    if isinstance(dtype, str):
        dtype = getattr(xp, dtype)
    return Tensor(xp.asarray(values, dtype=dtype), requires_grad=requires_grad)


def constant(xp, values, dtype="float64"):
    """A Tensor of ``values`` in namespace ``xp`` that does not require grad (a layer's input)."""
    return leaf(xp, values, requires_grad=False, dtype=dtype)



def uses_numpy_kernels(xp):
    """Whether ``xp`` computes with NumPy's own functions (NumPy, array-api-strict), so that
    the same operations on the same numbers give the same bits as NumPy does."""
    return backend.namespace_name(xp) in ("numpy", "array_api_strict")


def require_mpi():
    """Skip, saying why, unless mpi4py and an ``mpirun`` are there to launch real ranks."""
    import pytest

    from minigrad.apps import mpi_demo

    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install minigrad[dist])")
    if mpi_demo.mpirun() is None:
        pytest.skip("no mpirun beside the Python executable or on PATH "
                    "(pip install minigrad[dist] brings Open MPI)")


RESULTS = "RESULTS "  # the line of rank 0's output that carries every rank's results


def run_cases_on_ranks(cases):
    """On each rank of a launch: run every case, and rank 0 prints all ranks' results as
    one JSON line after ``RESULTS``."""
    import json

    from minigrad.accumulate import distributed

    comm = distributed.world()
    results = {name: run(comm) for name, run in cases.items()}
    gathered = comm.gather(results, root=0)
    if comm.Get_rank() == 0:
        print(RESULTS + json.dumps(gathered))


def launch_two_ranks(script, timeout):
    """Every case's result on rank 0 and rank 1, from one 2-rank launch of ``script``
    (whose main runs ``run_cases_on_ranks``); skips where MPI is missing."""
    import json

    from minigrad.apps import mpi_demo

    require_mpi()
    status, out, err = mpi_demo.launch(2, [script], timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith(RESULTS)]
    assert status == 0 and lines, f"mpirun failed ({status}):\n{out[-3000:]}\n{err[-3000:]}"
    return json.loads(lines[0][len(RESULTS):])


class OneRank:
    """A communicator of one rank with MPI's semantics, to run MPI code without MPI."""

    def Get_rank(self):  # noqa: N802
        return 0

    def Get_size(self):  # noqa: N802
        return 1

    def allgather(self, obj):
        return [pickle.loads(pickle.dumps(obj))]

    def Allreduce(self, send, receive):  # noqa: N802
        receive[...] = send

    def Bcast(self, buffer, root=0):  # noqa: N802
        pass


FENCE = re.compile(r"^```python exec=\"on\"(?P<options>[^\n]*)\n(?P<code>.*?)^```\s*$",
                   re.MULTILINE | re.DOTALL)
"""A markdown-exec block of a site page (```python exec="on" ...)."""


def exec_page(path):
    """Run the exec blocks of the page at ``path`` as the site build does (blocks of one
    ``session`` share their names): ``(outputs, sessions)``, what each block printed and
    session name -> the names it defined (a block without a session gets its own scope)."""
    sessions, outputs = {}, []
    for match in FENCE.finditer(path.read_text()):
        session = re.search(r'session="([^"]+)"', match["options"])
        scope = sessions.setdefault(session[1], {}) if session else {}
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(match["code"], path.name, "exec"), scope)
        outputs.append(buffer.getvalue())
    return outputs, sessions


def table_rows(output):
    """The body rows of the first Markdown table a page's block printed, as lists of cells."""
    lines = [line.strip().strip("|").split("|") for line in output.splitlines()
             if line.startswith("|")]
    return [[cell.strip() for cell in line] for line in lines[2:]]


def first_number(cell):
    """The first number written in a table cell."""
    return float(re.search(r"-?\d+(\.\d+)?(e[-+]\d+)?", cell)[0])


def rounding_limits(make, loss, x, y):
    """How far the gradient of ``make()`` on ``(x, y)``, accumulated over any split, may be
    from the full-batch one by rounding alone, relative: ``(max_rel, rel_error)``.

    b = ``bounds.gradient_bound`` (kappa from ``condition_number``) bounds |g_acc - g_full|
    elementwise, so max|g_acc - g_full| / max|g| <= max b / max|g| (``compare_named``'s
    max_rel) and |g_acc - g_full|_2 / |g|_2 <= |b|_2 / |g|_2 (``vector_gap``'s rel_error),
    with g = (1/items) sum_i a_i (to first order the computed full-batch gradient).
    """
    from minigrad.analysis import bounds

    per_item = bounds.per_item_gradients(make(), loss, x, y)
    items = loss.num_items(y)
    b = bounds.flat(bounds.gradient_bound(per_item, items, make().sizes,
                                          bounds.condition_number(make(), loss, x, y)).values())
    g = bounds.flat([sum(a[k] for a in per_item) / items for k in per_item[0]])
    return (float(np.max(b) / np.max(np.abs(g))),
            float(np.linalg.norm(b) / np.linalg.norm(g)))


def relative_rounding(make, loss, x, y):
    """|b|_2 / |g|_2 of ``rounding_limits``."""
    return rounding_limits(make, loss, x, y)[1]


def prose(text):
    """A page's ``text`` without code blocks, math and inline code."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"\$\$.*?\$\$|\$[^$]+\$|`[^`]*`", "", text, flags=re.DOTALL)


def typed_numbers(text):
    """Decimals and powers of ten in a page's prose: measurements that belong in exec blocks."""
    return re.findall(r"\d+\.\d+|\d[eE][-+]?\d+", prose(text))


def minigrad_check(argv):
    """Parse ``minigrad check ARGV`` as the ``minigrad`` parser does and run it: the status."""
    from minigrad.apps import check_command, cli

    parser = cli._Parser(prog="minigrad")
    check_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["check", *argv])
    return args.run(args)
