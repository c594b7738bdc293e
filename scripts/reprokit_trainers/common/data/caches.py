"""Read-only caches, used as given: a writable view of a folder the run may read but not write.

datasets 3.6 takes a lock file beside the data it loads (a prepared dataset too: builder.py's
``<cache>/<path>.lock`` and ``<version>_builder.lock``) and writes the tokenized splits' cache files
next to the arrow files; huggingface_hub writes refs and ``.locks`` into the hub cache. A cache a
container mounts read-only (``--data dataset_cache=P``, or ``~/.cache/huggingface``) fails on the
first of them with ``OSError: [Errno 30] Read-only file system``. The trainer never trades that for
synthetic data or random weights: it reads the cache through a writable view instead, the same tree
of folders under a scratch folder in which each large file is a symlink to the original (read, and
memory-mapped, in place; never copied) and each small one (refs, JSON metadata) a copy the libraries
may rewrite. Locks and new cache files land in the view; the given folder is never written.

The scratch folder is ``REPROKIT_SCRATCH`` (each container platform of the kit sets one it may
write), else the run directory's ``.scratch``. A view is made once per scratch folder and source, by
whichever process gets there first (ranks race safely: each builds its own copy, one rename wins).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

SCRATCH_ENV = "REPROKIT_SCRATCH"
# Files up to this size are copied into the view (a hub ref, dataset_info.json, a lock): the libraries
# may rewrite them. Larger ones (arrow shards, weights) are linked.
COPY_AT_MOST = 64 * 1024


class ReadOnlyCache(OSError):
    """A read-only cache for which no writable view could be made: the one line says what to do."""


def is_writable(folder: str | os.PathLike) -> bool:
    """Whether a file can be created in ``folder`` (tried, not guessed from modes: root on a read-only
    mount passes every permission check and still fails)."""
    try:
        # Deleted on close: nothing is left behind in a folder that can be written.
        with tempfile.TemporaryFile(prefix=".reprokit-probe-", dir=folder):
            return True
    except OSError:
        return False


def scratch_root(run_dir: str | os.PathLike) -> Path:
    """Where writable views go: REPROKIT_SCRATCH, else ``<run_dir>/.scratch``."""
    return Path(os.environ.get(SCRATCH_ENV) or Path(run_dir) / ".scratch")


def writable(folder: str | os.PathLike, scratch: str | os.PathLike, what: str) -> tuple[Path, bool]:
    """``folder`` itself when the run can write into it, else a writable view of it under ``scratch``:
    (the folder to use, whether it is a view). ``what`` names the folder in the one-line error
    (ReadOnlyCache) raised when neither can be had."""
    source = Path(folder).expanduser().resolve()
    if not source.is_dir():
        return source, False  # nothing to protect: the library creates it (or says it is missing)
    if is_writable(source):
        return source, False
    key = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    view = Path(scratch) / f"{source.name or 'root'}-{key}"
    if view.is_dir():
        return view, True
    try:
        Path(scratch).mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{view.name}-", dir=scratch))
        _mirror(source, building)
        try:
            building.rename(view)
        except OSError:  # another rank renamed its view first: use that one
            shutil.rmtree(building, ignore_errors=True)
            if not view.is_dir():
                raise
    except OSError as error:
        raise ReadOnlyCache(
            f"{what} {source} is read-only and the libraries write lock and cache files into it; no writable "
            f"view of it could be made under {scratch} ({error.strerror or error}): mount it read-write, or set "
            f"{SCRATCH_ENV} to a folder the run may write"
        ) from None
    return view, True


def _mirror(source: Path, view: Path) -> None:
    """The folders of ``source`` under ``view``; small files copied, the others (and links) linked."""
    for folder, folders, files in os.walk(source):
        relative = Path(folder).relative_to(source)
        target = view / relative
        target.mkdir(exist_ok=True)
        for name in folders:
            if (Path(folder) / name).is_symlink():
                (target / name).symlink_to(Path(folder) / name)
        for name in files:
            original = Path(folder) / name
            if not original.is_symlink() and original.stat().st_size <= COPY_AT_MOST:
                shutil.copy2(original, target / name)
            else:
                # The original path, not what it resolves to: a hub snapshot's relative link to its blob
                # keeps working from the view.
                (target / name).symlink_to(original)
