"""The path through the site: the home page states the question and its answer first, its
"Start here" lists the pages in reading order (the story, the notebooks, the internals), the
glossary defines the words the pages share, every Concepts page links a notebook that shows
it, and the navigation keeps the internals in a section of their own.

These read the sources (mkdocs.yml, docs/*.md) and the navigation that the build's hooks make
of mkdocs.yml, so they run in a fraction of a second; tests/docs/test_site.py walks the same
path through the built site in a browser.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from helpers import prose, typed_numbers

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
STORY = ["concepts/accumulation.md", "concepts/step-accounting.md",
         "concepts/loss-normalisation.md", "concepts/token-losses.md", "concepts/batchnorm.md",
         "concepts/dropout.md", "concepts/memory.md", "concepts/recomputation.md",
         "concepts/mixed-precision.md", "concepts/contrastive.md", "distributed.md"]
INTERNALS = ["concepts/autodiff.md", "concepts/floating-point.md", "concepts/array-dispatch.md"]
CONCEPTS = sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "concepts").glob("*.md"))
# glossary anchor: what its one paragraph must say (beside a link to where it is shown)
TERMS = {
    "item": ["loss's mean", "ignore", "MSE", "every output value of every sample"],
    "micro-batch": ["window", "forward and backward"],
    "window": ["micro-batches of one update"],
    "update": ["optimizer step", "once per update"],
    "step": ["*update*", "micro-batch", "ambiguous", "gradient_accumulation_steps"],
    "ulp": ["last place"],
    "bound": ["derived", "rounding", "gap"],
    "textbook": ["mean", "number of micro-batches", 'normalize="micro_batch_mean"', "Accelerate"],
    "item-weighted": ["sum", "once", "item count", 'normalize="items"', "default"],
    "sum": ['normalize="sum"', "nothing divides"],
    "strategy": ["how one window is run", '"micro"', '"exact_batchnorm"', "user's object",
                 "concepts/accumulation.md#strategies-how-one-window-is-run"],
    "reduction": ["where a window's sums meet", "one process", "MPI"],
    "recomputation": ["activation checkpointing", "second forward", "nn.Recompute", "equal",
                      "once"],
}
# other names for the loops, which the Concepts pages do not use outside quotes (a quoted
# label such as the demo's row "textbook mean" is the label's own name)
OTHER_NAMES = ["naive", "standard loop", "usual loop", "loop most people write",
               "textbook mode", "textbook mean", "correct rule", "mean rule"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml with its tags (!ENV, !!python/name) read as plain values."""


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)


def _hook(name):
    path = ROOT / "docs_hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"path_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def nav():
    """mkdocs.yml's nav as the build sees it: after docs_hooks/nav.py and notebooks.py."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    config["docs_dir"] = str(DOCS)
    for name in ("nav", "notebooks"):  # the order of mkdocs.yml's hooks
        config = _hook(name).on_config(config)
    return config["nav"]


def _pages(items) -> list[str]:
    pages = []
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _pages(value) if isinstance(value, list) else [value]
    return pages


def _section(nav, title) -> list[str]:
    (pages,) = [_pages(item[title]) for item in nav if isinstance(item, dict) and title in item]
    return pages


def _notebooks(nav) -> list[str]:
    return [page for page in _section(nav, "Notebooks") if page.endswith(".ipynb")]


def _text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def _resolve(page: str, target: str) -> Path:
    """The file a link of ``page`` to ``target`` (no anchor) points at."""
    return (DOCS / page).parent.joinpath(target).resolve()


def _anchors(path: Path) -> set[str]:
    """The ids of the headings of a Markdown page: explicit ``{ #id }`` or slugified text."""
    ids = set()
    for heading in re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.M):
        explicit = re.search(r"\{\s*#([\w-]+)\s*\}\s*$", heading)
        if explicit:
            ids.add(explicit[1])
            continue
        words = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        ids.add(re.sub(r"[-\s]+", "-", words))
    return ids


def _home_blocks() -> list[str]:
    body = re.sub(r"\A---\n.*?\n---\n", "", _text("index.md"), flags=re.DOTALL)
    return [block.strip() for block in re.split(r"\n\s*\n", body) if block.strip()]


def _start_here() -> list[str]:
    """The link targets of the numbered lists of the home page's "Start here", in order."""
    section = _text("index.md").split("\n## Start here\n", 1)[1].split("\n## ", 1)[0]
    items = [line for line in section.splitlines() if re.match(r"\d+\. ", line)]
    return [LINK.search(line)[1] for line in items]


def test_the_home_page_opens_with_the_question_and_the_answer():
    title, first = _home_blocks()[:2]
    assert title == "# minigrad"
    question = re.match(r"\*\*([^*]+)\*\*", first)
    assert question and question[1].endswith("?"), "the first paragraph opens with a question"
    assert "gradient accumulation" in question[1] and "whole batch" in question[1]
    answer = first[question.end():]
    assert answer.lstrip().startswith("Yes") and " No " in answer
    for said in ("divided once", "item count", "item-weighted rule", "textbook rule",
                 "BatchNorm"):
        assert said in answer, f"the answer does not say {said!r}"
    # the array-library status comes lower, not first
    assert not re.search(r"CuPy|GPU|array API|array-api", first)


def test_the_home_page_keeps_the_cupy_status_honest_below():
    blocks = _home_blocks()
    status = [i for i, block in enumerate(blocks) if "CuPy" in block]
    assert status and min(status) > blocks.index("## Start here")
    # what ran where: the one GPU run, and CI's lack of one (the CuPy tests skip there)
    assert any("NVIDIA H100" in blocks[i] and "CI has no GPU" in blocks[i] for i in status)


def test_start_here_lists_the_story_then_the_notebooks_then_the_internals(nav):
    assert _start_here() == STORY + _notebooks(nav) + INTERNALS
    assert [int(Path(page).name[:2]) for page in _notebooks(nav)] == list(range(1, 14))


def test_every_start_here_link_is_a_page_of_the_built_nav(nav):
    built = _pages(nav)
    missing = [page for page in _start_here() if page not in built]
    assert not missing, f"'Start here' links pages outside the built navigation: {missing}"
    for page in _start_here():
        source = ROOT / page if page.endswith(".ipynb") else DOCS / page
        assert source.exists(), page


def test_the_nav_reads_in_the_same_order(nav):
    titles = [next(iter(item)) for item in nav if isinstance(item, dict)]
    assert titles.index("Concepts") < titles.index("Notebooks") < titles.index("Internals")
    assert _section(nav, "Concepts") == STORY


def test_the_nav_has_an_internals_section_of_exactly_three_pages(nav):
    assert _section(nav, "Internals") == INTERNALS
    assert sorted(STORY + INTERNALS) == sorted(CONCEPTS + ["distributed.md"])


@pytest.mark.parametrize("term", TERMS)
def test_the_glossary_defines(term):
    text = _text("glossary.md")
    match = re.search(rf"^## .+\{{ #{re.escape(term)} \}}\n\n(?P<body>.*?)(?=\n## |\Z)", text,
                      re.M | re.S)
    assert match, f"glossary.md has no heading with the id {term!r}"
    body = match["body"].strip()
    assert "\n\n" not in body, f"{term}: one short paragraph"
    assert len(body.split()) <= 110, f"{term}: {len(body.split())} words, not short"
    flat = " ".join(body.split())
    for said in TERMS[term]:
        assert said.lower() in flat.lower(), f"the definition of {term!r} does not say {said!r}"
    links = [target for target in LINK.findall(body) if not target.startswith("#")]
    assert links, f"{term}: no link to where it is shown"
    for target in links:
        path, _, anchor = target.partition("#")
        assert _resolve("glossary.md", path).exists(), target
        assert not anchor or anchor in _anchors(_resolve("glossary.md", path)), target


def test_the_glossary_types_no_measured_number():
    typed = typed_numbers(_text("glossary.md"))
    assert not typed, f"glossary.md types numbers in its prose: {typed}"


def test_the_glossary_is_in_the_nav_and_linked_from_the_home_page(nav):
    assert "glossary.md" in _pages(nav)
    assert "glossary.md" in LINK.findall(_text("index.md"))


@pytest.mark.parametrize("page", CONCEPTS)
def test_every_concepts_page_links_a_notebook_and_the_glossary(page):
    targets = [target.partition("#")[0] for target in LINK.findall(_text(page))]
    notebooks = [t for t in targets if re.fullmatch(r"\.\./notebooks/\d\d_\w+\.ipynb", t)]
    assert notebooks, f"{page} links no notebook"
    for target in notebooks:
        assert (ROOT / "notebooks" / Path(target).name).exists(), f"{page}: {target}"
    assert "../glossary.md" in targets, f"{page} links no term of the glossary"


@pytest.mark.parametrize("page", CONCEPTS)
def test_concepts_pages_name_the_loops_as_the_glossary_does(page):
    words = re.sub(r'"[^"\n]*"', "", prose(_text(page))).lower()  # quoted labels and titles
    # "naive" is the contrastive strategy's own name (in-micro-batch negatives), not a loop's
    others = [n for n in OTHER_NAMES if not (n == "naive" and page.endswith("contrastive.md"))]
    used = [name for name in others if name in words]
    assert not used, f"{page} calls a loop {used}; the glossary's names are the textbook " \
                     f"loop, the item-weighted rule and the undivided sum"
