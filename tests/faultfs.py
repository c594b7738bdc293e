"""Storage that fails for real, without touching the host's mounts: the command runs in its own user
and mount namespace (unshare), where a folder is a read-only bind mount or a tiny tmpfs."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest


@functools.cache
def available() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        "mount -t tmpfs tmpfs /mnt 2>/dev/null || mount -t tmpfs tmpfs /tmp",
    ]
    return subprocess.run(probe, capture_output=True).returncode == 0


# Skipped where namespaces are refused, except in CI (CI=true), where a refusal is a failure: the
# tests that make storage fail for real must run there.
needs_namespaces = pytest.mark.skipif(
    not available() and os.environ.get("CI") != "true",
    reason="needs unprivileged user and mount namespaces (unshare --user --mount)",
)


def run(
    argv: Sequence[str],
    *,
    read_only: Sequence[Path] = (),
    tiny: dict[Path, str] | None = None,
    **kwargs,
) -> subprocess.CompletedProcess:
    """`argv` with each `read_only` folder mounted read-only over itself and each `tiny` folder
    (path -> size, e.g. "64k") a fresh tmpfs of that size."""
    steps = []
    for folder in read_only:
        where = shlex.quote(str(folder))
        steps.append(f"mount --bind {where} {where} && mount -o remount,bind,ro {where}")
    for folder, size in (tiny or {}).items():
        steps.append(f"mount -t tmpfs -o size={size},mode=0755 tmpfs {shlex.quote(str(folder))}")
    script = " && ".join([*steps, 'exec "$@"'])
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *argv], **kwargs
    )
