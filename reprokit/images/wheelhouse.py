"""A wheelhouse: exactly the wheels an image's pip layers install (its profile's lock), for the base's
Python and glibc, each checked against the lock's sha256, downloaded ahead so that `inv build --wheelhouse
DIR` fetches nothing from the internet; a kept folder downloads only the files it lacks. What the
base itself provides (the framework) is not in the lock, so it is never downloaded."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reprokit.contract.errors import ReprokitError
from reprokit.images import locks
from reprokit.images.pins import platform_flags
from reprokit.plan.accelerators import Profile


def wheelhouse_command(profile: Profile, dest: Path, python_version: str | None = None) -> list[str]:
    """`pip download` of the profile's lock, each wheel for the image's Python and platform."""
    base = profile.base_manifest
    problems = locks.lock_problems(profile)
    if problems:
        raise ReprokitError(
            f"{problems[0]}: the wheelhouse downloads the lock's files, each checked against its sha256; "
            f"make it with `inv pins --accelerator {profile.name} --write`"
        )
    version = python_version or base.python
    dest.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(dest),
        "--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version", version,
        "--abi", "cp" + version.replace(".", ""), *platform_flags(base.glibc),
    ]  # fmt: skip
    return [*argv, "--requirement", str(profile.lock_file)]


def wheelhouse(profile: Profile, dest: Path, python_version: str | None = None) -> list[Path]:
    """Fill dest with the wheels the profile's image installs; returns the wheels now there."""
    argv = wheelhouse_command(profile, dest, python_version)
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise ReprokitError(
            f"pip download failed: {lines[-1] if lines else f'exit code {result.returncode}'}"
        )
    return sorted(dest.glob("*.whl"))


# The wheelhouse URL is a build argument of the pip layer, so it is part of that layer's cache key:
# a fixed port lets a rebuild (a trainer edited) reuse the installed packages.
WHEELHOUSE_PORT = 38741


def wheelhouse_port(accelerator: str) -> int:
    """The fixed port an accelerator's wheelhouse is served on: one per accelerator, so that two images
    built at once (cuda's and gaudi2's on one machine) each keep their pip layers' cache key, where one
    shared port sent the second build to a free port and rebuilt its gigabytes of packages."""
    return WHEELHOUSE_PORT + int(hashlib.sha256(accelerator.encode()).hexdigest(), 16) % 1000


# A file's sha256 by (path, size, mtime): each file is read once per process, however often it is served.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _sha256(path: str) -> str:
    stat = os.stat(path)
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


class _WheelhouseHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder quietly, each file with its sha256 as ETag, so that pip's HTTP cache (a BuildKit
    cache mount) keeps a wheel and asks again only whether it is still the same file (304): as from an
    index, a rebuild fetches only the wheels it has not seen, from this wheelhouse or another."""

    record: list[tuple[str, int]] | None = None

    def _etag(self) -> str | None:
        path = self.translate_path(self.path)
        return f'"{_sha256(path)}"' if os.path.isfile(path) else None

    def send_head(self):  # noqa: ANN201 - the base class's signature
        etag = self._etag()
        if etag is not None and self.headers.get("If-None-Match") == etag:
            self.send_response(http.server.HTTPStatus.NOT_MODIFIED)
            self.end_headers()
            self._note(0)
            return None
        found = super().send_head()
        if found is not None and etag is not None:
            self._note(os.fstat(found.fileno()).st_size)
        return found

    def end_headers(self) -> None:
        etag = self._etag() if self.command in ("GET", "HEAD") else None
        if etag is not None:
            self.send_header("ETag", etag)
            self.send_header("Cache-Control", "no-cache")  # kept, but revalidated on every use
        super().end_headers()

    def _note(self, size: int) -> None:
        if self.record is not None:
            self.record.append((self.path.split("?", 1)[0], size))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def serve_directory(directory: Path, port: int, record: list[tuple[str, int]] | None = None) -> Iterator[str]:
    """Serve a folder on 127.0.0.1 for as long as the block runs; yields its URL. Each file served is
    appended to `record` as (path, bytes sent), 0 for a file the client still had."""
    handler_class = type("Handler", (_WheelhouseHandler,), {"record": record})
    handler = functools.partial(handler_class, directory=str(directory))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:  # taken: any free port (the pip layer is then rebuilt rather than reused)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="wheelhouse", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
