"""How the kit writes a file: whole or not at all, with its mode set explicitly whatever the umask
(results 0644, folders and scripts 0755: nobody but their owner can change a measurement), no
temporary file left behind when the write fails, never through a link or file planted where it
writes (at a temporary name or at the file's own: nothing lands outside the folder written), and a
storage failure (a full disk, a read-only mount, a permission) said in one line that names the path
and the errno."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from reprokit.contract.errors import ReprokitError

FILE_MODE = 0o644
DIR_MODE = 0o755
SCRIPT_MODE = 0o755
# How much of a file's name its temporary twin keeps (`.<name>.<random>.tmp` stays within NAME_MAX).
TMP_NAME_KEPT = 200
# The umask bits the kit always adds: no file it (or a trainer it starts) writes is group- or
# other-writable, even under umask 000.
NO_SHARED_WRITE = 0o022
# Failures of the storage rather than of the kit: retrying the next cell on it would fail alike. A
# folder where the kit writes a file (results.jsonl made a folder by hand) is one too: said, not fixed.
STORAGE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EIO,
        errno.EISDIR,
        errno.ENOTDIR,
    }
)


class StorageFailed(ReprokitError):
    """The storage refused a write (ENOSPC, EROFS, EACCES, ...): one line naming the path and errno."""

    exit_code = 1


def describe(exc: OSError) -> str:
    """`/path: No space left on device (ENOSPC)`: the path and the errno of a failed write, one line."""
    where = exc.filename2 or exc.filename
    name = errno.errorcode.get(exc.errno or 0, f"errno {exc.errno}")
    what = exc.strerror or str(exc)
    return f"{os.fsdecode(where) if where is not None else 'a file'}: {what} ({name})"


def is_storage_failure(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def restrict_umask() -> None:
    """Add group/other write to the process's umask (inherited by every trainer it starts)."""
    os.umask(os.umask(0) | NO_SHARED_WRITE)


def make_dir(path: Path, mode: int = DIR_MODE) -> Path:
    """`path` and its missing parents, each created with `mode` (set explicitly: the umask may be 000)."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        os.chmod(folder, mode)
    if not path.is_dir():
        raise FileExistsError(errno.EEXIST, "a file is there, not a folder", str(path))
    return path


def cannot_make_folders_in(path: Path) -> str | None:
    """Why the kit could not make a folder in `path` (a session folder in a results folder), tried for
    real in it or, where it is still to be made, in its nearest existing parent: a folder made there
    and removed at once. None where it can. Permissions alone cannot tell: /proc/self looks writable
    to root and refuses every new name, a read-only mount refuses root too."""
    probe = Path(path)
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".reprokit-probe-", dir=probe))
    except OSError as exc:
        return describe(OSError(exc.errno, exc.strerror, str(probe)))
    return None


def own_dir(path: Path, mode: int = DIR_MODE) -> Path:
    """A folder the kit keeps inside one it writes (a session's systems/): a link planted at its name
    is removed and the folder made in its place, never written through (it would put the kit's files
    beside the link's target)."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
    return make_dir(path, mode)


def _temporary(path: Path) -> tuple[int, Path]:
    """A new, empty file beside `path` (so that replacing `path` with it is one rename), under a name
    nobody could have chosen beforehand and created by this call: mkstemp's O_CREAT | O_EXCL |
    O_NOFOLLOW, with a fresh random name on a collision. A link or a file planted at a name the kit
    would predict (`.results.jsonl.tmp<pid>` once) is never opened, followed nor truncated."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:TMP_NAME_KEPT]}.", suffix=".tmp")
    return fd, Path(name)


def write_bytes(path: Path, data: bytes, mode: int = FILE_MODE) -> Path:
    """Replace `path` with `data` atomically: readers see the old file or the new one, never half; a
    failed write (ENOSPC in the middle) leaves the old file and no temporary one. A link at `path`
    itself is replaced (rename(2) replaces the link, never what it points to)."""
    path = Path(path)
    tmp: Path | None = None
    try:
        fd, tmp = _temporary(path)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        if isinstance(exc, OSError) and exc.errno is not None:
            # Named for the file being written, not its temporary twin (which is gone).
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    return path


def write_text(path: Path, text: str, mode: int = FILE_MODE) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode)


def write_json(path: Path, payload: Any, mode: int = FILE_MODE) -> Path:
    return write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n", mode)


def open_append(path: Path, mode: int = FILE_MODE) -> IO[bytes]:
    """A log opened for appending, created with `mode`; a link planted at its name is replaced by the
    log, never followed (O_NOFOLLOW: a run's output cannot be appended to a file elsewhere)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        os.unlink(path)
        fd = os.open(path, flags | os.O_EXCL, mode)
    return os.fdopen(fd, "ab")
