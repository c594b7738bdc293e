"""How a trainer writes its run directory's files: never through a link or a file planted where it
writes. A run directory may hold anything before the run (one reused by hand with run.sh, a copy):
a link at a file's own name is replaced, never written through; a temporary file is made under a
name nobody could have chosen beforehand (mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW), so nothing a run
writes lands outside its folder, and nothing outside it is truncated. The host's writer is
reprokit/contract/files.py (the trainers never import the kit)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

FILE_MODE = 0o644
DIR_MODE = 0o755
# How much of a file's name its temporary twin keeps (`.<name>.<random>.tmp` stays within NAME_MAX).
TMP_NAME_KEPT = 200


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON so that a reader sees either nothing or the whole file, never half of it."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:TMP_NAME_KEPT]}.", suffix=".tmp")
    tmp = Path(name)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # a link at `path` is replaced, not followed
    except BaseException:
        # A full disk or a read-only folder: no half-written temporary file left behind.
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def open_own(path: Path, append: bool = False) -> TextIO:
    """`path` opened for writing (or appending) as the run directory's own file: a link planted at its
    name is removed and the file made in its place (O_NOFOLLOW), never written through."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        os.unlink(path)
        fd = os.open(path, flags | os.O_EXCL, FILE_MODE)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8", newline="")


def own_dir(path: Path) -> Path:
    """A folder of the run directory (tensorboard/): a link planted at its name is removed and the
    folder made in its place, never written through."""
    if path.is_symlink():
        path.unlink()
    path.mkdir(mode=DIR_MODE, exist_ok=True)
    return path
