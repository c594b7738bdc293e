"""A wheelhouse: exactly the wheels an image's pip layer installs (its profile's lock), for the base's
Python and glibc, downloaded ahead so that `inv build --wheelhouse DIR` fetches nothing. What the
base itself provides (the framework) is not in the lock, so it is never downloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
