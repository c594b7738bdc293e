"""Pages: the report's and the history's content as blocks, rendered to Markdown and to one
self-contained HTML file (plots embedded as data URIs, so the one file opens anywhere). Both
renderers read the same blocks, so the Markdown and the HTML cannot disagree. Every text reaches a page
through textsafe (`markdown`, `html`): inert, its controls shown escaped, within its length bound."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from urllib.parse import quote

from reprokit.contract.textsafe import fence, short
from reprokit.contract.textsafe import html as escape
from reprokit.contract.textsafe import lines as visible_lines
from reprokit.contract.textsafe import markdown as md
from reprokit.report.drawing import Plot


@dataclass
class Block:
    kind: str  # h1, h2, h3, p, note, table, details, plot, pre, link
    # A details block: `text` is the line shown, its table (headers, rows) a click away.
    text: str = ""
    headers: list[str] | None = None
    rows: list[list[str]] | None = None
    plot: Plot | None = None
    # A link: `text` points at `href` (relative to the report's folder); `tail` is the sentence after it.
    href: str = ""
    tail: str = ""
    # A table's columns whose cells never break across lines (cell ids, times): `vit-speedups--baseline`
    # broken at its hyphens reads as three words.
    nowrap: tuple[int, ...] = ()


def _md_cell(text: str) -> str:
    return md(text).replace("|", "\\|")


def markdown(blocks: list[Block]) -> str:
    """The blocks as Markdown. Text from recipes, folders and run files reaches the page as text: no raw
    HTML, link or image of its own, controls shown escaped, a log that cannot close its code block."""
    lines: list[str] = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            lines += ["#" * int(block.kind[1]) + " " + md(block.text), ""]
        elif block.kind == "p":
            lines += [md(block.text), ""]
        elif block.kind == "note":
            lines += [f"> {md(block.text)}", ""]
        elif block.kind == "pre":
            text = visible_lines(block.text)
            bar = fence(text)
            lines += [bar, text, bar, ""]
        elif block.kind == "plot" and block.plot is not None:
            lines += [f"![{md(block.plot.title)}]({quote(block.plot.name)})", ""]
        elif block.kind == "link":
            lines += [f"[{md(block.text)}]({quote(short(block.href))}){md(block.tail)}", ""]
        elif block.kind == "table":
            lines += _md_table(block)
        elif block.kind == "details":
            # GitHub's way of folding: the table shows when the line is opened; elsewhere it reads as is.
            lines += [
                f"<details><summary>{escape(block.text)}</summary>",
                "",
                *_md_table(block),
                "</details>",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def _md_table(block: Block) -> list[str]:
    headers, rows = block.headers or [], block.rows or []
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


# Laid out for a reader at a glance: text left, numbers right, tables and plots within the page (a plot
# is drawn no wider than the page, so its labels show at the size they were drawn), a long word or log
# line broken rather than pushed past the edge; a table wider than the window scrolls in its own box,
# never the page. On a phone (720 px and narrower) a table of more than two columns reads as a card
# per row: its first cell the card's title, each other cell under its column's name, so the verdict is
# in view without scrolling sideways; plots scale to the width. tests/test_pages_layout.py measures it
# in Chromium at 1,400, 500 and 390 px.
STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1150px; color: #222; line-height: 1.45; padding: 0 1em; }
h1, h2, h3, p, .note, summary { overflow-wrap: break-word; }
.table { margin: 0.68em 0; overflow-x: auto; }  /* a table's 0.8em, at its 0.85em */
table { border-collapse: collapse; font-size: 0.85em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f0f3f7; }
td.num { text-align: right; white-space: nowrap; }
.nowrap { white-space: nowrap; }
figure { margin: 1em 0; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; box-sizing: border-box; }
pre { background: #f6f8fa; padding: 0.8em; font-size: 0.8em; white-space: pre-wrap;
      overflow-wrap: anywhere; }
details { margin: 0.2em 0; } summary { cursor: pointer; }
details > table { margin: 0.3em 0 0.8em 1.2em; }
details td:last-child { overflow-wrap: anywhere; }  /* a path or a digest as long as the page */
.note { border-left: 4px solid #e0a800; background: #fff8e1; padding: 0.5em 1em; }
.reproduced { color: #1a7f37; } .faster { color: #0969da; } .slower { color: #9a6700; }
.failed, .timeout, .interrupted, .no-result { color: #cf222e; } .not-comparable { color: #8250df; }
@media (max-width: 720px) {
  body { margin: 1em auto; }
  table.cards, table.cards tbody, table.cards tr, table.cards td { display: block; }
  table.cards thead { display: none; }
  table.cards tr { border: 1px solid #ccc; margin: 0 0 0.6em; padding: 0.3em 0.6em; }
  table.cards td { border: 0; padding: 0.1em 0; text-align: left; white-space: normal;
                   overflow-wrap: anywhere; }
  table.cards td:first-child { font-weight: 600; }
  table.cards td[data-label]::before { content: attr(data-label) ": "; color: #57606a; }
}
"""
# The words a verdict or a status starts with, and the class that colours it.
CLASSES = {
    "reproduced": "reproduced",
    "faster": "faster",
    "slower": "slower",
    "failed": "failed",
    "timeout": "timeout",
    "interrupted": "interrupted",
    "no result": "no-result",
    "not comparable": "not-comparable",
}
# A figure: `1,234.56`, `12.5%`, `3.20 GiB`, `1.60x vs 2.00x`, `-` (nothing): right-aligned, on one line.
NUMBER = re.compile(r"-|[-+]?[\d.,]+(x|%)?( \S+){0,2}")


def _embed(plot: Plot) -> str:
    # A data URI, so the HTML file is the whole report: it can be mailed or attached as is.
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(plot.title)}">'


def _classes(text: str, nowrap: bool) -> str:
    found = [css for word, css in CLASSES.items() if text == word or text.startswith(_after(word))]
    if NUMBER.fullmatch(text):
        found.append("num")
    elif nowrap:
        found.append("nowrap")
    return f' class="{" ".join(found)}"' if found else ""


def _after(word: str) -> tuple[str, ...]:
    # `not comparable: smoke scale`, `reproduced (0.98x ...)`, `faster; speedup ...`, `failed (...)`.
    return f"{word} ", f"{word}:", f"{word};"


def _table(block: Block) -> str:
    nowrap = ' class="nowrap"'
    headers = block.headers or []
    head = "".join(
        f"<th{nowrap if i in block.nowrap else ''}>{escape(h)}</th>" for i, h in enumerate(headers)
    )
    # More than two columns: a card per row on a phone, each cell after the first under its column's name.
    cards = len(headers) > 2
    labels = [f' data-label="{escape(h)}"' if cards and i else "" for i, h in enumerate(headers)]
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{_classes(c, i in block.nowrap)}{labels[i] if i < len(labels) else ''}>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in block.rows or []
    )
    table = ' class="cards"' if cards else ""
    return f"<table{table}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _inline_code(escaped: str) -> str:
    """Markdown's `code` spans, the only inline markup the blocks use."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def html(title: str, blocks: list[Block]) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
    ]
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            parts.append(f"<{block.kind}>{escape(block.text)}</{block.kind}>")
        elif block.kind == "p":
            parts.append(f"<p>{_inline_code(escape(block.text))}</p>")
        elif block.kind == "note":
            parts.append(f'<p class="note">{escape(block.text)}</p>')
        elif block.kind == "pre":
            parts.append(f"<pre>{escape(block.text, keep_lines=True)}</pre>")
        elif block.kind == "plot" and block.plot is not None:
            parts.append(f"<figure>{_embed(block.plot)}</figure>")
        elif block.kind == "link":
            parts.append(
                f'<p><a href="{escape(block.href)}">{escape(block.text)}</a>{escape(block.tail)}</p>'
            )
        elif block.kind == "table":
            parts.append(f'<div class="table">{_table(block)}</div>')
        elif block.kind == "details":
            parts.append(f"<details><summary>{escape(block.text)}</summary>{_table(block)}</details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
