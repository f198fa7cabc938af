"""The claims of the four articles minigrad answers, as rows with verdicts: the plumbing of
notebook 08 ("What the articles say, tested") and of the site's claims page. The
experiments themselves are the notebook's loops; nothing here measures anything.

A claim is decided one of three ways (``HOW``): by an **experiment**, whose verdict
``verdict`` computes from the facts it measured; by a **citation** that settles it (who
introduced a technique, what a library does by default); or not at all, where minigrad
lacks what the claim is about (``untestable``). A verdict is one of ``VERDICTS``; "holds
only if" names its condition and "cannot be tested here" its reason. A published method's
result that the experiment does not reproduce is "not reproduced here", never "does not
hold": the row then says what the paper reports and what this setup differs in
(``published``), beside what was measured.

A verdict that rests on training outcomes (accuracy, loss, norms along training) carries
its ``outcome``, a record of ``minigrad.studies.claims.outcomes`` that meets the rule of outcome
verdicts (seeds, training lengths, every value kept); the table shows it as mean and
standard deviation over the seeds. Where the claim held at one length and not at another,
the verdict is "holds only if" and its condition names every length.

The notebook displays the rows with ``bundle``: a Markdown table for the reader, and the
rows themselves as JSON under ``MIME``, which ``from_notebook`` reads back from the
executed copy, so the site shows the verdicts the notebook computed, not a second copy.

>>> rows = [claim(1, "hyperai", "one update per window", evidence="gap within the bound",
...               verdict=verdict(True))]
>>> print(table(rows).splitlines()[2])
| 1 | HyperAI glossary | one update per window | experiment: gap within the bound | **holds** |
"""

import json
import re
from pathlib import Path

import numpy as np

from minigrad.studies.claims import outcomes

VERDICTS = ("holds", "holds only if", "does not hold", "not reproduced here",
            "cannot be tested here")
"""The verdicts a claim can get, in this order in the tables."""
HOW = ("experiment", "citation", "not testable")
"""How a claim was decided: by an experiment run here, by a cited source, or not at all."""
ARTICLES = {
    "hyperai": ("HyperAI glossary", 'the HyperAI glossary entry "Gradient Accumulation"'),
    "opengenus": ("OpenGenus", 'the OpenGenus article "Gradient Accumulation"'),
    "stackexchange": ("Stack Exchange Q&A", "the Data Science Stack Exchange question on "
                      "batch size and accumulation steps, and its answer"),
    "giselle": ("Giselle", 'the Giselle article "What is Gradient Accumulation?"'),
}
"""Key -> (short name for a table, full name for prose), in the order the notebook takes
them."""
MIME = "application/vnd.minigrad.claims+json"
"""The output type under which the notebook records its rows (``bundle``)."""


def verdict(holds, breaks_without_condition=False, *, published=False):
    """The verdict on a claim from two measured facts.

    ``holds``: the claim held where the article says it does (under the condition the
    experiment names, if any); ``breaks_without_condition``: it failed once that condition
    was dropped. Held and never broke: "holds"; held but broke without the condition:
    "holds only if"; did not hold: "does not hold", or "not reproduced here" when the
    claim is a ``published`` method's result (a small setup that differs from the paper's
    cannot refute it, only fail to reproduce it).

    >>> verdict(True), verdict(True, True), verdict(False), verdict(False, published=True)
    ('holds', 'holds only if', 'does not hold', 'not reproduced here')
    """
    if not _flag("holds", holds):
        return "not reproduced here" if _flag("published", published) else "does not hold"
    return "holds only if" if _flag("breaks_without_condition", breaks_without_condition) \
        else "holds"


def _flag(name, value):
    """``value`` as a Python bool: a bool or a NumPy bool (a comparison of arrays), nothing
    else (a list or a number would be truthy by accident)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def published(source, reports, differs):
    """What a paper reports (``reports``) and what this setup differs in from the paper's
    (``differs``: model, data, scale): the context of a claim about a published method's
    result, shown beside what was measured."""
    record = {"source": source, "reports": reports, "differs": differs}
    _check_published(record, "published")
    return record


def _check_published(record, where):
    if not isinstance(record, dict) or set(record) != {"source", "reports", "differs"} or \
            not all(isinstance(v, str) and v.strip() for v in record.values()):
        raise ValueError(f"{where}: a published result names its source, what it reports and "
                         f"what this setup differs in (make it with published())")


def claim(number, article, text, *, evidence, verdict, condition="", how="experiment",
          source="", outcome=None, published=None):
    """One row: claim ``number`` of ``article`` (a key of ``ARTICLES``), paraphrased as
    ``text``, decided ``how`` (one of ``HOW``) by ``evidence`` (what was measured, or what
    the cited ``source`` says), with its ``verdict`` and, for "holds only if" and "cannot be
    tested here", the ``condition`` or reason; ``outcome`` (``outcomes.record``) for a verdict
    that rests on training outcomes, ``published`` (from ``published()``) for a published
    method's result. Returns a JSON-able dict."""
    row = {"number": number, "article": article, "claim": text, "how": how,
           "evidence": evidence, "verdict": verdict, "condition": condition, "source": source,
           "outcome": outcome, "published": published}
    _check_row(row)
    return row


def untestable(number, article, text, *, reason, evidence=""):
    """A claim about something minigrad does not have: "cannot be tested here" and why."""
    return claim(number, article, text, evidence=evidence, verdict="cannot be tested here",
                 condition=reason, how="not testable")


def _check_row(row):
    where = f"claim {row.get('number')!r}"
    if not isinstance(row.get("number"), int) or row["number"] < 1:
        raise ValueError(f"{where}: number must be a positive int")
    if row.get("article") not in ARTICLES:
        raise ValueError(f"{where}: article must be one of {sorted(ARTICLES)}, got "
                         f"{row.get('article')!r}")
    if row.get("verdict") not in VERDICTS:
        raise ValueError(f"{where}: verdict must be one of {VERDICTS}, got "
                         f"{row.get('verdict')!r}")
    if row.get("how") not in HOW:
        raise ValueError(f"{where}: how must be one of {HOW}, got {row.get('how')!r}")
    for key in ("claim", "evidence", "condition", "source"):
        if not isinstance(row.get(key), str):
            raise ValueError(f"{where}: {key} must be a string")
    if not row["claim"].strip():
        raise ValueError(f"{where}: the claim is empty")
    needs_condition = row["verdict"] in ("holds only if", "cannot be tested here")
    if needs_condition != bool(row["condition"].strip()):
        raise ValueError(f"{where}: a condition (or reason) goes with 'holds only if' and "
                         f"'cannot be tested here', and only with them; got verdict "
                         f"{row['verdict']!r} and condition {row['condition']!r}")
    if (row["how"] == "not testable") != (row["verdict"] == "cannot be tested here"):
        raise ValueError(f"{where}: how='not testable' goes with 'cannot be tested here'")
    if row["how"] == "citation" and not row["source"].strip():
        raise ValueError(f"{where}: a citation names its source")
    if row.get("published") is not None:
        _check_published(row["published"], where)
        if row["how"] == "experiment" and row["verdict"] == "does not hold":
            raise ValueError(f"{where}: an experiment here does not refute a published "
                             "result; it is 'not reproduced here'")
    if row["verdict"] == "not reproduced here" and (row.get("published") is None
                                                    or row["how"] != "experiment"):
        raise ValueError(f"{where}: 'not reproduced here' is an experiment's verdict on a "
                         "published result: it says what the paper reports (published=)")
    if row.get("outcome") is not None:
        outcomes.check(row["outcome"], where)
        if row["how"] != "experiment":
            raise ValueError(f"{where}: an outcome record goes with an experiment")
        if len(set(row["outcome"]["held"])) > 1:
            missing = [n for n in row["outcome"]["lengths"]
                       if not re.search(rf"(?<![\d.]){n}(?![\d.])", row["condition"])]
            if row["verdict"] != "holds only if" or missing:
                raise ValueError(f"{where}: the claim held at some training lengths and not "
                                 f"at others: the verdict is 'holds only if' and its "
                                 f"condition names every length")


def check_rows(rows):
    """``rows`` checked: each row complete, numbered 1, 2, ... in order. Returns a list."""
    rows = list(rows)
    for i, row in enumerate(rows, 1):
        _check_row(row)
        if row["number"] != i:
            raise ValueError(f"row {i} is numbered {row['number']}: claims are numbered "
                             "1, 2, ... in order")
    return rows


def said(row):
    """The verdict as the table shows it: bold, with its condition or reason after it."""
    text = f"**{row['verdict']}**"
    return f"{text} {row['condition']}" if row["condition"] else text


def _decided(row):
    if row["how"] == "citation":
        return f"citation: {row['evidence']} ({row['source']})"
    if row["how"] == "not testable":
        return row["evidence"] or "-"
    text = f"experiment: {row['evidence']}"
    if row.get("outcome") is not None:
        text += f"; {outcomes.said(row['outcome'])}"
    if row.get("published") is not None:
        p = row["published"]
        text += f"; published: {p['source']} reports {p['reports']}; this setup differs: " \
                f"{p['differs']}"
    return text


def _cell(text):
    """One table cell: pipes escaped, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows, article=None):
    """A Markdown table of ``rows`` (only ``article``'s, when given): number, article (when
    not given), the claim, how it was decided and what was found, the verdict."""
    rows = check_rows(rows)
    if article is not None and article not in ARTICLES:
        raise ValueError(f"article must be one of {sorted(ARTICLES)}, got {article!r}")
    head = ["Claim", "claim (paraphrased)", "how it was decided", "verdict"]
    if article is None:
        head.insert(1, "article")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if article is not None and row["article"] != article:
            continue
        cells = [row["number"], row["claim"], _decided(row), said(row)]
        if article is None:
            cells.insert(1, ARTICLES[row["article"]][0])
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def counts(rows):
    """Verdict -> how many rows have it, for every verdict of ``VERDICTS``."""
    rows = check_rows(rows)
    return {v: sum(row["verdict"] == v for row in rows) for v in VERDICTS}


def bundle(rows):
    """What the notebook displays (``IPython.display.display(bundle(rows), raw=True)``):
    the table as Markdown, and the rows as JSON under ``MIME`` for ``from_notebook``."""
    rows = check_rows(rows)
    return {"text/markdown": table(rows), MIME: {"claims": rows}}


def from_notebook(path):
    """The rows an executed notebook recorded with ``bundle`` (the last such output)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    found = [output["data"][MIME]["claims"] for cell in cells if cell["cell_type"] == "code"
             for output in cell.get("outputs", ()) if MIME in output.get("data", {})]
    if not found:
        raise ValueError(f"{path} holds no output of type {MIME}: was it executed?")
    return check_rows(found[-1])


__all__ = ["ARTICLES", "HOW", "MIME", "VERDICTS", "bundle", "check_rows", "claim", "counts",
           "from_notebook", "published", "said", "table", "untestable", "verdict"]
