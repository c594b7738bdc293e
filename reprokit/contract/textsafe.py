"""Text from recipes, folders and run files, made safe for the place it goes.

A recipe title, a cell id, a host name or a session folder's name is whatever its author (or a
hostile file) made it: an ESC sequence that clears a terminal or retitles its window, a newline that
splits a table row, `<script>` in report.md, `[/]` that rich reads as markup, `$...$` that matplotlib
reads as math. Each function here makes such text inert for one destination (a terminal, rich, Markdown,
HTML: the pages, report/page_blocks.py, take `html`); a shell word is made safe where a script is
rendered (render/shell_values.py).

Each also bounds the text's length: a file within its size bound still holds a name of megabytes, and
what it costs to show grows faster than it (rich folds a word into a column, matplotlib measures a
label and draws an image as wide as it, a page repeats it in every table). Past its bound a text is
shown cut, with an ellipsis and how long it was (`short`); results.csv, results.jsonl and every
`--json` keep it whole.
"""

from __future__ import annotations

import html as _html
import re

# C0 and C1 controls, DEL, lone surrogates (a file name that is not UTF-8, decoded with
# surrogateescape), and the bidirectional controls that reorder what a terminal shows.
_CONTROL = "\x00-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_LINE = re.compile(f"[{_CONTROL}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BREAK = re.compile(r"\r\n|\r|\n")

# A name as a table, a plot's label or a page shows it: a device, a cell id, a host, a variant, an image's
# digest (71 characters) are all shorter.
NAME = 100
# Any one text a line, a table's cell or a page's paragraph shows: a reason, a log line, a path
# (PATH_MAX is 4,096 bytes).
TEXT = 4096


def short(text: object, limit: int | None = TEXT, counted: bool = True) -> str:
    """`text` within `limit` characters: whole, or cut with an ellipsis and (`counted`) how long it was,
    `GPUxxxx… (500,003 characters)`, so a shortened name never reads as a real one. None: no bound."""
    text = str(text)
    if limit is None or len(text) <= limit:
        return text
    tail = f"… ({len(text):,} characters)" if counted and limit >= 40 else "…"
    return text[: max(limit - len(tail), 0)] + tail


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text: object, limit: int | None = TEXT) -> str:
    """One line for a terminal: every control character shown escaped (`\\x1b`, `\\n`), never sent;
    within `limit` characters before they are (`short`)."""
    text = short(text, limit)
    if text.isascii() and text.isprintable():  # the common case, cheaply (history shows thousands)
        return text
    return _UNSAFE_LINE.sub(_visible, text)


def lines(text: object, limit: int | None = TEXT) -> str:
    """Text for a terminal that may span lines (a log's tail): newlines kept, other controls escaped,
    each line within `limit`."""
    return "\n".join(line(part, limit) for part in str(text).split("\n"))


def markup(text: object, limit: int | None = TEXT) -> str:
    """One line for a rich table or message: controls escaped and rich's markup (`[/]`) made literal."""
    from rich.markup import escape

    return escape(line(text, limit))


def html(text: object, limit: int | None = TEXT, keep_lines: bool = False) -> str:
    """Text for an HTML page (an element's text or an attribute's value): controls shown escaped as
    `line` shows them, `<`, `&` and quotes escaped; a line break is a space as in `markdown` (a page's
    two renderings say the same), unless `keep_lines` (a log in a <pre>)."""
    if keep_lines:
        return _html.escape(lines(text, limit))
    return _html.escape(line(_BREAK.sub(" ", short(text, limit)), None))


def _markdown_plain(text: str) -> str:
    # Raw HTML and link/image syntax are Markdown's ways into a page: made literal text.
    return (
        text.replace("\\", "\\\\")
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("[", "\\[")
        .replace("]", "\\]")
    )


# A code span as CommonMark finds one: a run of backticks, and the next run of exactly as many.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


def markdown(text: object, limit: int | None = TEXT) -> str:
    """Text for a Markdown paragraph, heading or table cell: one line (a line break is a space: it could
    start a block of its own), no raw HTML, link or image reaches the page, controls are shown escaped;
    `code` spans stay code (inside one nothing is markup); within `limit` characters."""
    found, at = [], 0
    text = _BREAK.sub(" ", short(text, limit))
    for span in _CODE_SPAN.finditer(text):
        found.append(_markdown_plain(line(text[at : span.start()])))
        found.append(line(span.group()))
        at = span.end()
    found.append(_markdown_plain(line(text[at:])))
    return "".join(found)


def fence(text: str) -> str:
    """A fence for a Markdown code block around `text`: longer than any run of backticks inside it,
    so no line of a log can close the block and become markup."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)
