"""What the preflight reads in a Docker image (its base's facts, the trainers' import), kept by the
image's id and the command: a second preflight or dry run of the same image starts no container.

An image's id is the hash of its content (files, environment, entry point): the same id gives the same
answer, and a rebuilt or retagged-over image has another id, so nothing kept is ever stale. Only what
the image alone decides is read this way: the devices are counted in this machine's Python, never in
an image. A kept answer that cannot be written (a read-only home) costs the next run a container,
nothing else."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from reprokit.contract import files
from reprokit.contract.errors import ReprokitError


def folder() -> Path:
    """Where the answers are kept: the user's cache (XDG_CACHE_HOME, else ~/.cache), reprokit/image-reads."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "reprokit" / "image-reads"


def run(engine: Any, reference: str, argv: list[str], **options: Any) -> tuple[bytes, bool]:
    """The output of `argv` in the image `reference` (the engine's containers.run with `options`), and
    whether it was kept from an earlier run of the same command in the same image."""
    image_id = engine.images.get(reference).id
    key = json.dumps({"image": image_id, "argv": argv, "options": options}, sort_keys=True)
    path = folder() / hashlib.sha256(key.encode()).hexdigest()
    before = kept(path)
    if before is not None:
        return before, True
    output = engine.containers.run(reference, argv, remove=True, **options)
    keep(path, output)
    return output, False


def kept(path: Path) -> bytes | None:
    """An answer kept at `path`, or None (none kept, or it cannot be read)."""
    with contextlib.suppress(OSError):
        return path.read_bytes()
    return None


def keep(path: Path, answer: bytes) -> None:
    """`answer` kept at `path`; where it cannot be written, nothing is kept and nothing is said."""
    with contextlib.suppress(OSError, ReprokitError):
        files.make_dir(path.parent)
        files.write_bytes(path, answer)
