"""The groups of mutation testing and the committed list of justified equivalent mutants."""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the `mutation` extra brings tomli
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
EQUIVALENT = HERE / "equivalent.toml"

# Raise statements (with their messages) are not mutated: a wrong message is a bad error, not
# a wrong gradient, and the messages have tests of their own. Nor are docstrings (mutmut skips
# them) or `assert`s of internal invariants.
SKIP = [r"^\s*raise\b", r"^\s*assert\b"]


@dataclass(frozen=True)
class Group:
    slug: str
    name: str
    modules: tuple[str, ...]  # files mutated (paths from the repository root)
    tests: tuple[str, ...]  # pytest arguments selecting the group's own tests
    functions: tuple[str, ...] = ("*",)  # mutant-name patterns run and counted
    target: float = 0.99  # killed / (generated - justified equivalent)
    skip_patterns: tuple[str, ...] = tuple(SKIP)

    def counts(self, mutant_name: str) -> bool:
        return any(fnmatch.fnmatchcase(mutant_name, p) for p in self.functions)


GROUPS = (
    Group(
        slug="accumulation-rule",
        name="the accumulation rule",
        modules=tuple(f"minigrad/accumulate/{m}.py"
                      for m in ("split", "micro", "accumulator", "commit", "driver")),
        # the rule's own tests; not those of the other strategies (precision, GradCache, exact
        # BatchNorm: six times the time, for the same lines) nor those whose ranks are other
        # processes (launched by mpirun, they import the package unmutated)
        tests=tuple(f"tests/accumulate/test_{t}.py" for t in (
            "split", "accumulator", "driver", "windows", "all_or_nothing", "checkpoint",
            "host_reads", "strategies")) + (
            # the accumulator's own calls under a fault at any line (tests/faults.py)
            "tests/test_faults.py::test_accumulator_update",
            "tests/test_faults.py::test_accumulator_load_state_dict",
            "tests/test_faults.py::test_a_commit_with_sigint_held_is_whole_and_its_interrupt_"
            "comes_out"),
    ),
    Group(
        slug="optimizers",
        name="the optimizers' update rules",
        modules=tuple(f"minigrad/optim/{m}.py" for m in ("sgd", "adam", "adamw")),
        # less the test that counts the commit's allocated bytes: mutmut's trampoline, the
        # wrapper that picks the mutant at every call, allocates on its own
        tests=("tests/optim", "--deselect=tests/optim/test_optimizer.py::"
               "test_the_commit_allocates_no_array_and_the_workspace_is_reused"),
    ),
    Group(
        slug="losses",
        name="the losses",
        modules=("minigrad/nn/loss.py", "minigrad/nn/functional.py"),
        tests=("tests/nn/test_loss.py", "tests/nn/test_loss_rules.py",
               "tests/nn/test_functional.py"),
        functions=("minigrad.nn.loss.*",) + tuple(
            f"minigrad.nn.functional.x_{f}__mutmut_*"
            for f in ("_reduce", "_check_reduction", "label_counts", "_label_counts_on_host",
                      "cross_entropy", "_kept", "_kept_by", "mse_loss", "log_softmax")),
        target=0.97,
    ),
    Group(
        slug="embedding",
        name="the embedding",
        modules=("minigrad/nn/layers.py", "minigrad/engine/primitives/indexing.py"),
        tests=("tests/nn/test_embedding.py", "tests/nn/test_embedding_rules.py"),
        functions=("minigrad.nn.layers.xǁEmbeddingǁ*",
                   "minigrad.engine.primitives.indexing.x_embedding__mutmut_*",
                   "minigrad.engine.primitives.indexing.x_index_add__mutmut_*"),
        target=0.97,
    ),
)


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """The lines a mutant's diff removes and adds, stripped (a mutant's identity)."""
    minus, plus = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            minus.append(line[1:].strip())
        elif line.startswith("+"):
            plus.append(line[1:].strip())
    return minus, plus


def function_of(mutant_name: str) -> str:
    """`minigrad.optim.sgd.x_sgd__mutmut_3` -> `minigrad.optim.sgd.x_sgd`."""
    return mutant_name.rsplit("__mutmut_", 1)[0]


def equivalent_entries(path: Path = EQUIVALENT) -> list[dict]:
    """The committed list: [[mutant]] tables of function, removed, added, why."""
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text())["mutant"]
    for e in entries:
        missing = {"function", "removed", "added", "why"} - set(e)
        if missing:
            raise ValueError(f"{path.name}: an entry lacks {sorted(missing)}: {e}")
    return entries


def matches(entry: dict, mutant: dict) -> bool:
    minus, plus = changed_lines(mutant["diff"])
    return (function_of(mutant["name"]) == entry["function"]
            and minus == list(entry["removed"]) and plus == list(entry["added"]))


def match_equivalents(mutant: dict, entries: list[dict] | None = None) -> list[dict]:
    entries = equivalent_entries() if entries is None else entries
    return [e for e in entries if matches(e, mutant)]


def module_path(function: str) -> str:
    """`minigrad.optim.sgd.x_sgd` -> `minigrad/optim/sgd.py` (the file a mutant lives in)."""
    return "/".join(function.split(".")[:-1]) + ".py"


def group_of(path: str) -> Group:
    for group in GROUPS:
        if path in group.modules:
            return group
    raise KeyError(f"{path} is in no group of mutation testing")


@contextmanager
def configured(group: Group):
    """mutmut's configuration of ``group`` (mutmut reads it from the working folder's
    pyproject.toml only): a temporary folder holding that section, as the working folder."""
    from mutmut import configuration

    before = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "pyproject.toml").write_text(mutmut_section(group))
        os.chdir(folder)
        configuration.reset_config()
        try:
            yield
        finally:
            os.chdir(before)
            configuration.reset_config()


def generate(path: str, root: Path = HERE.parent) -> list[dict]:
    """Every mutant mutmut makes of ``path`` (from the repository root ``root``), with the
    group's settings: ``{"name", "diff"}``, without running any test."""
    import libcst as cst
    from mutmut.mutation.diff_apply import read_mutant_function, read_original_function
    from mutmut.mutation.file_mutation import mutate_file_contents

    group = group_of(path)
    code = (root / path).read_text()
    with configured(group):
        mutated = mutate_file_contents(path, code)
    module = cst.parse_module(mutated.code)  # once: mutmut's own diff parses it per mutant
    prefix = path[: -len(".py")].replace("/", ".") + "."
    out = []
    for short in mutated.mutant_names:
        name = short if short.startswith(prefix) else prefix + short
        if not group.counts(name):
            continue
        before, after = (cst.Module([f(module, name)]).code.strip().split("\n")
                         for f in (read_original_function, read_mutant_function))
        diff = "\n".join(difflib.unified_diff(before, after, path, path, lineterm=""))
        out.append({"name": name, "diff": diff})
    return out


def mutmut_section(group: Group) -> str:
    """The [tool.mutmut] section of a group's pyproject.toml."""
    def strings(values):
        return "[" + ", ".join(json.dumps(v) for v in values) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["minigrad"]\n'
        f"only_mutate = {strings(group.modules)}\n"
        f"pytest_add_cli_args_test_selection = {strings(group.tests)}\n"
        # no doctests of the package (the group's own tests only), no cache folder
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-o", "addopts="]\n'
        f"do_not_mutate_patterns = {strings(group.skip_patterns)}\n"
        "use_git_change_detection = false\n"
        # a mutant whose tests run past 10 x (their time + 1 s) of CPU counts as caught: it
        # loops (a doubling step that no longer doubles); mutmut's default is 30 x
        "timeout_multiplier = 5.0\n"
    )
