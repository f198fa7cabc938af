"""MkDocs hook: the teaching notebooks, executed at build time, rendered with their figures.

Before each build every ``notebooks/NN_title.ipynb`` runs top to bottom through
``scripts/notebooks.py`` (``execute``: a failing cell fails the build; a copy in
``build/notebooks/`` whose key matches the notebook and the package is reused). The executed
copies go to ``docs/notebooks/`` (git-ignored), where mkdocs-jupyter renders them without
running them again. The hook also

* adds one navigation entry per notebook under "Notebooks", named by its first heading;
* fills ``<!-- notebooks:index -->`` in ``docs/notebooks.md`` with a section per notebook;
* serves each clean source (no outputs) as ``downloads/NN_title.ipynb`` and puts a download
  link at the top of its page.
"""

from __future__ import annotations

import html
import importlib.util
import json
import logging
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("notebooks_runner",
                                              ROOT / "scripts" / "notebooks.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)

SECTION = "Notebooks"
MARKER = "<!-- notebooks:index -->"

log = logging.getLogger(f"mkdocs.hooks.{__name__}")
_seconds: dict[str, float] = {}


def _intro(path: Path) -> tuple[str, str]:
    """The notebook's title (its first ``# `` heading) and the paragraph that follows it."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        lines = "".join(cell["source"]).strip().splitlines()
        if cell["cell_type"] != "markdown" or not lines or not lines[0].startswith("# "):
            continue
        paragraph = []
        for line in lines[1:]:
            if line.strip():
                paragraph.append(line.strip())
            elif paragraph:
                break
        # The notebook links the site from its own page (/notebooks/NN_name/): ../../concepts/
        # NAME/; the overview page is docs/notebooks.md, whose links name the source files.
        intro = re.sub(r"\]\(\.\./\.\./([\w/-]+?)/?(#[\w-]+)?\)", r"](\1.md\2)",
                       " ".join(paragraph))
        return lines[0][2:].strip(), "" if intro.startswith("#") else intro
    raise PluginError(f"{path.relative_to(ROOT)}: no markdown cell starts with a '# ' title")


def _page(path: Path) -> str:
    return f"notebooks/{path.name}"


def on_config(config, **kwargs):
    entries = [{f"{int(path.name[:2])}. {_intro(path)[0]}": _page(path)}
               for path in runner.notebooks()]
    for item in config["nav"]:
        if isinstance(item, dict) and SECTION in item:
            item[SECTION] = [*item[SECTION], *entries]
            return config
    raise PluginError(f"mkdocs.yml's nav has no '{SECTION}' section")


def on_pre_build(config, **kwargs):
    target = Path(config["docs_dir"]) / "notebooks"
    wanted = set()
    for path in runner.notebooks():
        try:
            executed, seconds = runner.execute(path)
        except Exception as err:  # nbclient's CellExecutionError names the cell
            raise PluginError(f"{path.relative_to(ROOT)} failed while building the site:"
                              f"\n{err}") from err
        _seconds[path.name] = seconds
        copy = target / path.name
        wanted.add(copy)
        data = _static(executed.read_bytes())
        if not copy.exists() or copy.read_bytes() != data:  # `mkdocs serve` watches docs/
            target.mkdir(exist_ok=True)
            copy.write_bytes(data)
        log.info("%s: executed copy (%.1f s to run)", path.name, seconds)
    for stale in target.glob("[0-9][0-9]_*.ipynb"):
        if stale not in wanted:
            stale.unlink()


WIDGET = "application/vnd.jupyter.widget-view+json"
FIGURE = "application/vnd.minigrad.figure+json"  # minigrad.studies.interactive.MIME
WIDGET_NOTE = ("[The controls of this cell move in JupyterLab: `make lab`. The output above "
               "is the engine's answer for their default values.]")


def _static(data: bytes) -> bytes:
    """The executed notebook as a static page shows it: without its ipywidgets state and
    views (rendered, they would load the widget manager from a CDN, and a static page cannot
    run the engine anyway: each view becomes a one-line note), and with each figure that
    ``publish`` gave as data drawn again by the site (see ``_figure``)."""
    nb = json.loads(data)
    if ("widgets" not in nb.get("metadata", {}) and WIDGET.encode() not in data
            and FIGURE.encode() not in data):
        return data
    nb["metadata"].pop("widgets", None)
    names = set()
    for cell in nb["cells"]:
        outputs = cell.get("outputs", [])
        for output in outputs:
            if WIDGET in output.get("data", {}):
                output["data"] = {"text/plain": WIDGET_NOTE}
        for i, output in enumerate(outputs):
            if FIGURE in output.get("data", {}):
                outputs[i:] = _figure(output["data"][FIGURE], outputs[i + 1:], names)
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode()


def _figure(figure: dict, after: list, names: set) -> list:
    """A published figure and the outputs after it -> one HTML output in place of the
    figure and of its PNG, the next image in ``after``: a ``<div class="minigrad-figure">``
    holding the figure's data, that ``javascripts/figures.js`` draws with the site's
    plotly.js, and the PNG below it in a closed "static figure" toggle."""
    name = figure["name"]
    if name in names:
        raise PluginError(f"two figures of one notebook are published as '{name}'")
    names.add(name)
    png = next((i for i, out in enumerate(after) if "image/png" in out.get("data", {})), None)
    if png is None:
        raise PluginError(f"figure '{name}': no PNG follows publish(); call it before "
                          f"plt.show()")
    image = "".join(after[png]["data"]["image/png"]).strip()  # a string or a list of lines
    text = json.dumps(figure, allow_nan=False, separators=(",", ":"))
    html_ = (f'<div class="minigrad-figure" id="figure-{name}" '
             f'data-figure="{html.escape(text)}">'
             f'<p class="explorer-note">This figure needs JavaScript: it is drawn in the '
             f'browser from the numbers the notebook computed. The static figure is below.'
             f'</p></div><details class="minigrad-figure-static"><summary>Static figure (the '
             f'notebook\'s PNG)</summary><img alt="the figure {name}" '
             f'src="data:image/png;base64,{image}"></details>')
    return [{"output_type": "display_data", "metadata": {}, "data": {"text/html": html_}},
            *after[:png], *after[png + 1:]]


def on_files(files, config, **kwargs):
    for path in runner.notebooks():
        files.append(File.generated(config, f"downloads/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    if MARKER not in markdown:
        return markdown
    parts = []
    for path in runner.notebooks():
        title, intro = _intro(path)
        link = f"downloads/{path.name}"
        parts.append(f"## [{title}]({_page(path)})\n\n{intro}\n\n"
                     f'[:material-download: {path.name}]({link}){{ download="{path.name}" }}')
    if not parts:
        parts = ["*No notebook has been written yet.*"]
    return markdown.replace(MARKER, "\n\n".join(parts))


def on_page_content(content, page, config, files, **kwargs):
    name = Path(page.file.src_uri).name
    if not page.file.src_uri.startswith("notebooks/") or name not in _seconds:
        return content
    link = get_relative_url(f"downloads/{name}", page.file.url)
    note = (f'<div class="admonition info minigrad-notebook">'
            f'<p class="admonition-title">A notebook, executed when this site was built</p>'
            f'<p>This page is <code>notebooks/{html.escape(name)}</code>, run top to bottom '
            f'in {_seconds[name]:.1f} s by the code of this commit. '
            f'<a href="{link}" download>Download the notebook</a> (without outputs) and run '
            f'it with <code>make lab</code>.</p></div>')
    return note + content
