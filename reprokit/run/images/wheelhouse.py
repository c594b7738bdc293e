"""A wheelhouse: exactly the wheels an image's pip layer installs (its profile's lock), for the base's
Python and glibc, downloaded ahead so that `inv build --wheelhouse DIR` fetches nothing. What the
base itself provides (the framework) is not in the lock, so it is never downloaded."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.run.images.pins import platform_flags


def wheelhouse_command(profile: Profile, dest: Path, python_version: str | None = None) -> list[str]:
    """`pip download` of the profile's lock, each wheel for the image's Python and platform."""
    base = profile.base_manifest
    if not profile.lock_file.exists():
        raise ReprokitError(
            f"{profile.name} has no lock ({profile.lock_file}); make it with `inv pins --accelerator {profile.name} --write`"
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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def serve_directory(directory: Path, port: int = WHEELHOUSE_PORT) -> Iterator[str]:
    """Serve a folder on 127.0.0.1 for as long as the block runs; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
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
