"""Bounded reads of what the kit and its trainers stored: session.json, results.jsonl, a run
directory's JSON files and throughput.csv.

A results folder is shared, copied, hand-edited and half-written by other programs, so every file is
read within bounds before anything trusts it: its size, how deep its JSON nests, that it is UTF-8 and
JSON, that each time it holds is a time between 1970 and 2200, that its fields have their types
(the caller's schema), and that it lies inside the results folder (a link that leaves it is not
followed). A file that breaks a bound is `Malformed`: its path and the reason in a few words. The
readers of results skip what is malformed for that session (or that cell) alone and say so, one line
each: `skipped: <path>: <reason>`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line

# A session.json, cell.json, sysinfo.json or summary.json is a few KiB; a results.jsonl a few MiB.
MAX_JSON_BYTES = 16 * 2**20
MAX_LINES_BYTES = 256 * 2**20
# The kit's files nest five or six levels; anything deeper is not one of them (and Python's parser
# and printer recurse: 100,000 levels is a RecursionError).
MAX_DEPTH = 64
# Times a run can have: a node without a clock reads 1970; year 1 or 9999 is not a time a run had,
# and overflows the conversions to local time and to a plot's axis.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2200, 1, 1, tzinfo=timezone.utc)


class Malformed(ReprokitError):
    """A stored file the kit will not read: `path: reason`."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path, self.reason = Path(path), reason
        super().__init__(f"{line(os.fsdecode(self.path))}: {reason}")

    def skipped(self) -> str:
        """The line that says it was left out: `skipped: <path>: <reason>`."""
        return f"skipped: {self}"


class NotJson(Malformed):
    """Text that is not JSON at all (as a line cut short is), unlike JSON that breaks a bound."""


def _show(value: Any) -> str:
    """A value in a reason: short, one line."""
    text = line(repr(value))
    return text if len(text) <= 40 else text[:39] + "…"


def outside(path: Path, root: Path | None) -> str | None:
    """Where `path` really is when that is outside `root` (a link that leaves the results folder);
    None when it stays inside (or there is no root to stay in)."""
    if root is None:
        return None
    text, top = os.fspath(path), os.fspath(root).rstrip(os.sep) or os.sep
    below = text[len(top) :].strip(os.sep).split(os.sep) if text.startswith(top + os.sep) else None
    if below is not None and ".." not in below:
        # The common case, cheaply (history reads thousands of files): no link between the root and the
        # path, so the path is inside.
        probe = top
        for part in below:
            probe = os.path.join(probe, part)
            if os.path.islink(probe):
                break
        else:
            return None
    real, base = os.path.realpath(path), os.path.realpath(root)
    if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return real


def check_inside(path: Path, root: Path | None, what: str = "the results folder") -> None:
    """Malformed when `path` is a link (or lies under one) that leaves `root`: never followed."""
    target = outside(path, root)
    if target is not None:
        raise Malformed(path, f"a link out of {what} (to {line(target)}): not followed")


def read_bytes(path: Path, root: Path | None = None, limit: int | None = None) -> bytes | None:
    """A file's bytes, None when it is not there; Malformed when it cannot be read, is not a regular
    file (a folder, a FIFO that would block), is larger than `limit` (MAX_JSON_BYTES) or lies outside
    `root`."""
    limit = limit or MAX_JSON_BYTES
    if not os.path.lexists(path):
        return None
    check_inside(path, root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        why = "a link loop" if exc.errno == errno.ELOOP else line(exc.strerror or str(exc))
        raise Malformed(path, why) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Malformed(
                path, "a folder, not a file" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            )
        if info.st_size > limit:
            raise Malformed(path, f"{info.st_size:,} bytes, more than the {limit:,} a kit's file holds")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise Malformed(path, line(exc.strerror or str(exc))) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # a file that grew while it was read
        raise Malformed(path, f"more than the {limit:,} bytes a kit's file holds")
    return data


def text(data: bytes, path: Path) -> str:
    """UTF-8 text, or Malformed naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(path, f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether a parsed JSON value nests deeper than `limit` (walked with a stack, never recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        for child in item.values() if type(item) is dict else item:
            if type(child) is dict or type(child) is list:
                stack.append((child, level + 1))
    return False


# A JSON escape of a UTF-16 surrogate: paired (an emoji) it is one character; alone it is no text at all,
# and a database or a terminal refuses it.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if _SURROGATE.search(item):
                return True
        elif type(item) is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


def parse(source: str, path: Path, where: str = "") -> Any:
    """JSON text as a value, or Malformed (NotJson when it is not JSON; nested too deep, a lone
    surrogate)."""
    # Fewer brackets than the limit cannot nest deeper: the kit's own files skip the walk.
    brackets = source.count("[") + source.count("{")
    try:
        found = json.loads(source)
    except RecursionError:
        raise Malformed(path, f"{where}nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        reason = f"{where}not JSON"
        if isinstance(exc, json.JSONDecodeError):
            reason += f" (line {exc.lineno} column {exc.colno}: {exc.msg})"
        raise NotJson(path, reason) from None
    if brackets > MAX_DEPTH and type(found) in (dict, list) and too_deep(found):
        raise Malformed(path, f"{where}nested deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(source) and _lone_surrogate(found):
        raise Malformed(path, f"{where}holds text that is not Unicode (a lone surrogate escape)")
    return found


def json_object(path: Path, root: Path | None = None) -> dict[str, Any] | None:
    """A JSON object from `path`, None when the file is not there; Malformed otherwise."""
    data = read_bytes(path, root)
    if data is None:
        return None
    found = parse(text(data, path), path)
    if not isinstance(found, dict):
        raise Malformed(path, f"a JSON {type(found).__name__}, not an object")
    return found


def time_of(value: Any, path: Path, key: str) -> datetime | None:
    """A stored time (ISO 8601) as an aware datetime; None for no time; Malformed for a value that is
    not a time, or a time outside 1970-2199."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise Malformed(path, f"{key} is {_show(value)}, not a time")
    try:
        found = datetime.fromisoformat(value)
    except ValueError:
        try:
            found = datetime.strptime(value, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            raise Malformed(path, f"{key} is {_show(value)}, not a time") from None
    try:
        aware = found if found.tzinfo else found.astimezone()
        inside = EARLIEST <= aware <= LATEST
    except (OverflowError, ValueError, OSError):
        inside = False
    if not inside:
        raise Malformed(path, f"{key} {_show(value)} is not a time a run had (1970 to 2200)")
    return aware


def checked(model: Any, raw: dict[str, Any], path: Path) -> Any:
    """`raw` validated by a pydantic model, or Malformed naming the first field that is wrong."""
    from pydantic import ValidationError

    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "the file"
        got = first.get("input")
        raise Malformed(
            path, f"{line(where)} is {_show(got)}: {first.get('msg', 'invalid').lower()}"
        ) from None
    except RecursionError:
        raise Malformed(path, f"nested deeper than {MAX_DEPTH} levels") from None
