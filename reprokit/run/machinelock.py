"""One machine, one measurement: a session that runs cells on this machine holds its lock, so a
second session started beside it waits until the first one ends instead of halving both numbers.
On a cluster each node's run.sh takes the same lock on its node (scripts/jobs/run.sh.j2), so two jobs
sharing a node (--no-exclusive) measure one after the other.

The lock is flock(2) on a file in /run/lock (or the temporary folder where /run/lock cannot be
written), `REPROKIT_LOCK_DIR` elsewhere; the kernel releases it when its holder dies, however it
dies, so a killed session never leaves the machine locked.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from reprokit.contract import sessions
from reprokit.contract.errors import ReprokitError
from reprokit.contract.writelock import flocked

NAME = "reprokit-machine.lock"
SYSTEM_DIR = Path("/run/lock")
# Set while a session holds the lock: the run.sh it starts does not take it a second time.
HELD_ENV = "REPROKIT_MACHINE_LOCKED"
# The held lock's descriptor, handed to each trainer the session starts: flock(2) belongs to the open
# file, so a trainer that outlives its kit (one that ignores the SIGTERM of the kit's death) keeps the
# machine locked until it ends, and the next session waits for it rather than measuring beside it.
_held: list[int] = []


def inherited() -> tuple[int, ...]:
    """The descriptors a process started for a cell must keep open (the machine's lock, when held)."""
    return tuple(_held)


def lock_dir() -> Path:
    given = os.environ.get("REPROKIT_LOCK_DIR")
    if given:
        return Path(given)
    return SYSTEM_DIR if os.access(SYSTEM_DIR, os.W_OK | os.X_OK) else Path(tempfile.gettempdir())


def _open(path: Path) -> int:
    # Never through a link planted at the lock's name: the holder's line is written into the file
    # (truncated first), which would land in whatever file the link leads to.
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except PermissionError:  # another user's lock file: reading it is enough to lock it
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        try:
            os.unlink(path)  # our own link (another user's, in a shared lock folder, stays)
        except OSError:
            raise ReprokitError(
                f"{path} is a link, not this machine's lock file: remove it, or give another folder "
                "with REPROKIT_LOCK_DIR"
            ) from None
        return _open(path)
    if os.fstat(fd).st_uid == os.getuid():
        os.fchmod(fd, 0o644)
    return fd


def _holder(fd: int) -> str:
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        found = {}
    if not isinstance(found, dict) or not found:
        return "another session"
    return f"session {found.get('session')} of {found.get('user')} (pid {found.get('pid')}, since {found.get('since')})"


@contextlib.contextmanager
def held(session_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold this machine's lock for the session, waiting (and saying so once) while another holds it."""
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd = _open(folder / NAME)

    def me() -> dict:
        return {
            "session": str(session_dir),
            "user": getpass.getuser(),
            "pid": os.getpid(),
            "since": sessions.now(),
        }

    def waiting() -> None:
        say(f"waiting for this machine: {_holder(fd)} is measuring on it (Ctrl-C stops waiting)")

    try:
        with flocked(fd, me, waiting):
            os.environ[HELD_ENV] = "1"
            _held.append(fd)
            try:
                yield
            finally:
                _held.remove(fd)
                os.environ.pop(HELD_ENV, None)
    finally:
        os.close(fd)  # releases the lock
