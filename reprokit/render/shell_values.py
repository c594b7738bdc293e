"""Values on their way into a shell file (run.sh, sbatch.sh, bind-rank.sh): the one place that
decides how a value is written there. A recipe's text (a title, a note, a published command), a
path the user gave and an option's value reach these files; none of them may end a comment,
open a command substitution or close a quote.

- `comment`: text in a `#` line: one line, control characters removed (a newline would end the
  comment and make the rest a command).
- `quote`: a value the shell reads, as one word on one line: single-quoted, or `$'...'` where it
  holds a control character (run.sh and sbatch.sh are bash scripts).
- `sbatch`: a value in an `#SBATCH` line, which sbatch parses with its own rules: quotes as the
  shell's, but the line ends at a newline whatever the quotes say, a backslash escapes even inside
  single quotes, and `%` is a pattern in file names (`%j`); a value holding those is refused.
- `code`: shell the kit composed from quoted parts (a trainer's argument line, a platform's setup
  line): kept as it is, but never more than one line.

Every other value must be a plain word (letters, digits, `._,:/=+@%-`): the templates' finalizer
refuses anything else, so a value that skipped its filter stops the render instead of running.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from reprokit.contract.errors import ReprokitError

# C0 and C1 control characters (newline, carriage return, escape sequences), DEL, and the Unicode
# line and paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
WORD = re.compile(r"[A-Za-z0-9_.,:/=+@%-]*")


class Shell(str):
    """Text already made safe for a shell file by one of this module's filters."""


def _one_line(value: Any, what: str) -> str:
    text = str(value)
    if CONTROL.search(text):
        raise ReprokitError(
            f"{what} {text!r} holds a newline or a control character: a shell file cannot carry it"
        )
    return text


def comment(value: Any) -> Shell:
    """`value` as the rest of a `#` comment line: control characters become spaces, on one line."""
    return Shell(" ".join(CONTROL.sub(" ", str(value)).split()))


def comment_lines(value: Any, width: int = 96) -> list[Shell]:
    """A long text as comment lines of at most `width` characters (words are never broken)."""
    words = comment(value).split(" ")
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return [Shell(line) for line in lines]


def quote(value: Any) -> Shell:
    """`value` as one shell word on one line, whatever it holds: single-quoted, or as bash's
    `$'...'` with escapes where it holds a newline or another control character."""
    text = str(value)
    if not CONTROL.search(text):
        return Shell(shlex.quote(text))
    return Shell("$'" + "".join(_escaped(c) for c in text) + "'")


def _escaped(char: str) -> str:
    if char in ("\\", "'"):
        return "\\" + char
    if not CONTROL.fullmatch(char):
        return char
    return f"\\x{ord(char):02x}" if ord(char) < 0x80 else f"\\u{ord(char):04x}"


def words(values: list[Any]) -> Shell:
    """A list of values as quoted words on one line."""
    return Shell(" ".join(quote(v) for v in values))


def sbatch(value: Any, what: str = "an #SBATCH value") -> Shell:
    """`value` in an `#SBATCH --opt=VALUE` line, quoted as one word."""
    text = _one_line(value, what)
    if "\\" in text:
        raise ReprokitError(f"{what} {text!r} holds a backslash, which sbatch reads as an escape")
    return Shell(shlex.quote(text))


def sbatch_path(value: Any, what: str = "the path") -> Shell:
    """A file name in an `#SBATCH` line, where sbatch would expand `%j`, `%x`, ... in it."""
    text = _one_line(value, what)
    if "%" in text:
        raise ReprokitError(f"{what} {text!r} holds a %, which sbatch expands in file names (%j: the job id)")
    return sbatch(text, what)


def code(value: Any) -> Shell:
    """Shell the kit composed from quoted parts: kept as it is, refused if it spans lines."""
    return Shell(_one_line(value, "a shell line"))


def finalize(value: Any) -> Any:
    """Jinja's finalizer for shell templates: filtered text, numbers and plain words pass; anything
    else is refused, naming the value, so nothing unfiltered reaches a shell file."""
    if isinstance(value, Shell) or value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    if WORD.fullmatch(text):
        return text
    raise ReprokitError(
        f"{text[:80]!r} would reach a shell file unfiltered: the template must pass it through "
        "comment, shquote, sbatch or code"
    )


FILTERS = {
    "comment": comment,
    "comment_lines": comment_lines,
    "shquote": quote,
    "shwords": words,
    "sbatch": sbatch,
    "sbatch_path": sbatch_path,
    "code": code,
}
