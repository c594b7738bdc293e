"""Pages: the report's and the history's content as blocks, rendered to Markdown and to one
self-contained HTML file (plots embedded as data URIs, so the one file opens anywhere). Both
renderers read the same blocks, so the Markdown and the HTML cannot disagree."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from html import escape

from reprokit.results.plots import Plot


@dataclass
class Block:
    kind: str  # h1, h2, h3, p, note, table, plot, pre, link
    text: str = ""
    headers: list[str] | None = None
    rows: list[list[str]] | None = None
    plot: Plot | None = None
    # A link: `text` points at `href` (relative to the report's folder); `tail` is the sentence after it.
    href: str = ""
    tail: str = ""


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            lines += ["#" * int(block.kind[1]) + " " + block.text, ""]
        elif block.kind == "p":
            lines += [block.text, ""]
        elif block.kind == "note":
            lines += [f"> {block.text}", ""]
        elif block.kind == "pre":
            lines += ["```", block.text, "```", ""]
        elif block.kind == "plot" and block.plot is not None:
            lines += [f"![{block.plot.title}]({block.plot.name})", ""]
        elif block.kind == "link":
            lines += [f"[{block.text}]({block.href}){block.tail}", ""]
        elif block.kind == "table":
            headers, rows = block.headers or [], block.rows or []
            lines.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            lines.append("|" + "---|" * len(headers))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1150px; color: #222; line-height: 1.45; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f3f7; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
.note { border-left: 4px solid #e0a800; background: #fff8e1; padding: 0.5em 1em; }
.reproduced { color: #1a7f37; } .faster { color: #0969da; } .slower { color: #9a6700; }
.failed, .timeout, .interrupted, .no-result { color: #cf222e; } .not-comparable { color: #8250df; }
"""


def _embed(plot: Plot) -> str:
    # A data URI, so the HTML file is the whole report: it can be mailed or attached as is.
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(plot.title)}">'


def _css_class(text: str) -> str:
    word = text.split(" (")[0].replace(" ", "-")
    return (
        f' class="{word}"'
        if word
        in (
            "reproduced",
            "faster",
            "slower",
            "failed",
            "timeout",
            "interrupted",
            "no-result",
            "not-comparable",
        )
        else ""
    )


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
            parts.append(f"<pre>{escape(block.text)}</pre>")
        elif block.kind == "plot" and block.plot is not None:
            parts.append(f"<figure>{_embed(block.plot)}</figure>")
        elif block.kind == "link":
            parts.append(
                f'<p><a href="{escape(block.href)}">{escape(block.text)}</a>{escape(block.tail)}</p>'
            )
        elif block.kind == "table":
            head = "".join(f"<th>{escape(h)}</th>" for h in block.headers or [])
            body = "".join(
                "<tr>" + "".join(f"<td{_css_class(c)}>{escape(c)}</td>" for c in row) + "</tr>"
                for row in block.rows or []
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
