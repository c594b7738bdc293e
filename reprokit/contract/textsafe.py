"""Text from recipes, folders and run files, made safe for the place it goes.

A recipe title, a cell id, a host name or a session folder's name is whatever its author (or a
hostile file) made it: an ESC sequence that clears a terminal or retitles its window, a newline that
splits a table row, `<script>` in report.md, `[/]` that rich reads as markup, `$...$` that matplotlib
reads as math. Each function here makes such text inert for one destination; HTML is escaped where
the page is made (report/page_blocks.py), a shell word where a script is rendered (render/shell_values.py).
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, lone surrogates (a file name that is not UTF-8, decoded with
# surrogateescape), and the bidirectional controls that reorder what a terminal shows.
_CONTROL = "\x00-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_LINE = re.compile(f"[{_CONTROL}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): shown as that byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def line(text: object) -> str:
    """One line for a terminal: every control character shown escaped (`\\x1b`, `\\n`), never sent."""
    return _UNSAFE_LINE.sub(_visible, str(text))


def lines(text: object) -> str:
    """Text for a terminal that may span lines (a log's tail): newlines kept, other controls escaped."""
    return "\n".join(line(part) for part in str(text).split("\n"))


def markup(text: object) -> str:
    """One line for a rich table or message: controls escaped and rich's markup (`[/]`) made literal."""
    from rich.markup import escape

    return escape(line(text))


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


def markdown(text: object) -> str:
    """Text for a Markdown paragraph, heading or table cell: one line (a line break is a space: it could
    start a block of its own), no raw HTML, link or image reaches the page, controls are shown escaped;
    `code` spans stay code (inside one nothing is markup)."""
    found, at = [], 0
    text = re.sub(r"\r\n|\r|\n", " ", str(text))
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
