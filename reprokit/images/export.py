"""The built image as a file every Slurm node can run: an enroot squashfs (pyxis) or an Apptainer .sif."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from reprokit.contract.errors import ReprokitError
from reprokit.images.context import image_tag
from reprokit.plan.accelerators import Profile

EXPORT_FORMATS = {"enroot": ".sqsh", "apptainer": ".sif"}
EXPORTS_DIR = Path("exports")


def export_path(profile: Profile, fmt: str, tag: str | None = None) -> Path:
    """Where `inv export` puts the image: exports/reprokit+cpu+0.1.0-<hash>.sqsh (enroot's own naming)."""
    if fmt not in EXPORT_FORMATS:
        raise ReprokitError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
    name = (tag or image_tag(profile)).replace("/", "+").replace(":", "+")
    return (EXPORTS_DIR / f"{name}{EXPORT_FORMATS[fmt]}").resolve()


def export_command(tag: str, fmt: str, dest: Path) -> list[str]:
    """The command that turns the built Docker image into a file every node can read."""
    if fmt == "enroot":
        return ["enroot", "import", "--output", str(dest), f"dockerd://{tag}"]
    if fmt == "apptainer":
        return ["apptainer", "build", str(dest), f"docker-daemon://{tag}"]
    raise ReprokitError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")


def export(
    profile: Profile, fmt: str, dest: Path | None = None, dry_run: bool = False
) -> tuple[list[str], Path]:
    """Run (or, dry, only make) the export command; returns it and the file it writes."""
    tag = image_tag(profile)
    target = dest or export_path(profile, fmt, tag)
    command = export_command(tag, fmt, target)
    if dry_run:
        return command, target
    if shutil.which(command[0]) is None:
        raise ReprokitError(
            f"`{command[0]}` is not installed here; run this where it is: {shlex.join(command)}"
        )
    if target.exists():
        # Both tools refuse to overwrite; the tag names the content, so the file is this image.
        return command, target
    target.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()
        raise ReprokitError(
            f"{shlex.join(command)} failed (exit {result.returncode}): {last[-1] if last else 'no output'}"
        )
    return command, target
