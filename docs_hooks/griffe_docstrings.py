"""Griffe extension for the API reference: minigrad's plain docstrings, read as Markdown.

minigrad's docstrings are short plain text (STYLE.md): a line, the formula, the shapes and a
doctest. Rendered as Markdown as they are, a doctest's ``>>>`` lines would become nested
block quotes and a reStructuredText table a run-on paragraph. This extension rewrites both
before mkdocstrings renders them: doctests as fenced ``pycon`` code (highlighted, with a
copy button), ``=====  =====`` simple tables as Markdown tables. Nothing else is changed.
"""

from __future__ import annotations

import re

import griffe

TABLE_RULE = re.compile(r"^\s*=+( +=+)+\s*$")


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def simple_table(lines: list[str]) -> list[str]:
    """A reStructuredText simple table (three ``=`` rules) as a Markdown table.

    Columns start where the first rule's runs of ``=`` start; a line with a blank cell
    continues the row above it (as text wrapped within its cells).
    """
    pad = _indent(lines[0])
    starts = [m.start() for m in re.finditer(r"=+", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None]))
    sections: list[list[list[str]]] = [[]]
    for line in lines[1:-1]:
        if TABLE_RULE.match(line):
            sections.append([])
            continue
        cells = [line[a:b].strip().replace("|", "\\|") for a, b in bounds]
        rows = sections[-1]
        if rows and not all(cells):
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells)]
        else:
            rows.append(cells)
    header, body = sections[0], sections[-1]
    out = [pad + "| " + " | ".join(header[0]) + " |", pad + "|---" * len(starts) + "|"]
    return [""] + out + [pad + "| " + " | ".join(row) + " |" for row in body] + [""]


def fence(text: str) -> str:
    """``text`` with its doctests in fenced code blocks and its simple tables in Markdown."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            pad = _indent(line)
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            out += [f"{pad}```pycon", *lines[i:j], f"{pad}```"]
            i = j
        elif TABLE_RULE.match(line):
            j, rules = i, 0
            while j < len(lines) and rules < 3:
                rules += bool(TABLE_RULE.match(lines[j]))
                j += 1
            out += simple_table(lines[i:j])
            i = j
        else:
            out.append(line)
            i += 1
    return "\n".join(out)


class Docstrings(griffe.Extension):
    """Fences doctests and tables in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)
