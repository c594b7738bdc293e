"""One writer at a time: the tasks that write a session's results (collect, report, and reproduce's
own collect and report at its end) hold the session's writers' lock, and an MLflow export holds its
store's, so two of them started together take turns instead of racing (a TensorBoard copy removed
under another's feet, two exports each taking the other's unfinished runs for an interrupted one).
The second says once what it waits for, and waits.

flock(2) on a hidden file in the folder written: the kernel releases it when its holder dies, however
it dies. A folder that cannot be written (a read-only mount) takes no lock: nothing writes there.
The lock is re-entrant within a process (report collects first, under the same lock).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from reprokit.contract import files
from reprokit.contract.textsafe import line

SESSION_LOCK = ".reprokit-writing.lock"
# Locks this process holds, by the lock file's real path and the thread that took it: taken again by
# that thread, they are already its own (another thread waits, as another process does).
_held: dict[tuple[str, int], int] = {}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _holder(fd: int) -> str:
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        found = {}
    if not isinstance(found, dict) or not found.get("pid"):
        return "another writer"
    return line(f"{found.get('what', 'a writer')} (pid {found.get('pid')}, since {found.get('since')})")


def _open(lock_file: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
    try:
        return os.open(lock_file, flags, files.FILE_MODE)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    # A link where the lock file goes (never followed): replaced by the lock file.
    os.unlink(lock_file)
    return os.open(lock_file, flags, files.FILE_MODE)


@contextlib.contextmanager
def flocked(fd: int, holder: Callable[[], dict], waiting: Callable[[], None]) -> Iterator[None]:
    """An exclusive flock on `fd` (the machine's lock and the writers' share it): `waiting()` is called
    once when another holds it, then this waits; who holds it (`holder()`) is written in the file while
    held, so the next one waiting can say who, and cleared after. The caller closes `fd`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        waiting()
        fcntl.flock(fd, fcntl.LOCK_EX)
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder()).encode(), 0)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)


@contextlib.contextmanager
def held(lock_file: Path, what: str, say: Callable[[str], None] = _stderr) -> Iterator[None]:
    """Hold `lock_file` while `what` (`inv report`, an export) writes beside it, waiting while another
    process holds it, and saying so once."""
    key = (os.path.realpath(lock_file), threading.get_ident())
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    try:
        fd = _open(lock_file)
    except OSError as exc:
        if not files.is_storage_failure(exc):
            raise
        yield  # a folder nobody can write here: nothing to take turns for
        return

    def me() -> dict:
        return {
            "what": what,
            "pid": os.getpid(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def waiting() -> None:
        say(f"waiting: {_holder(fd)} is writing {line(lock_file.parent)} (Ctrl-C stops waiting)")

    try:
        with flocked(fd, me, waiting):
            _held[key] = 1
            try:
                yield
            finally:
                del _held[key]
    finally:
        os.close(fd)  # releases the lock


def session(
    folder: Path, what: str, say: Callable[[str], None] = _stderr
) -> contextlib.AbstractContextManager[None]:
    """The writers' lock of a session folder."""
    return held(folder / SESSION_LOCK, what, say)
