"""A wheelhouse: the wheels an image's pip layer installs, downloaded ahead for offline builds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..accelerators import Profile
from ..errors import ReprokitError
from .context import requirements

# manylinux tags a glibc 2.36 system (Debian bookworm, the cpu image) accepts: pip does not
# expand `--platform manylinux_2_28_x86_64` to the older tags on its own.
MANYLINUX_TAGS = (
    "manylinux1_x86_64",
    "manylinux2010_x86_64",
    "manylinux2014_x86_64",
    *(f"manylinux_2_{minor}_x86_64" for minor in range(5, 37)),
)


def wheelhouse_command(profile: Profile, dest: Path, python_version: str = "3.11") -> list[str]:
    """`pip download` of the profile's pins and their dependencies, as wheels for the image's Python."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = dest / f"requirements-{profile.name}.txt"
    pins.write_text(requirements(profile))
    abi = "cp" + python_version.replace(".", "")
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest),
        "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version,
        "--abi", abi,
    ]  # fmt: skip
    for tag in MANYLINUX_TAGS:
        argv += ["--platform", tag]
    return [*argv, "--requirement", str(pins)]


def wheelhouse(profile: Profile, dest: Path, python_version: str = "3.11") -> list[Path]:
    """Fill dest with the wheels the profile's image installs; returns the wheels now there."""
    argv = wheelhouse_command(profile, dest, python_version)
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        raise ReprokitError(
            f"pip download failed: {lines[-1] if lines else f'exit code {result.returncode}'}"
        )
    return sorted(dest.glob("*.whl"))
