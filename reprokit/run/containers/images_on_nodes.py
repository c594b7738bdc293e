"""What the two Slurm container platforms (pyxis, Apptainer) share: an image file every node reads,
made by `inv export`, or one the user names."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from reprokit import images
from reprokit.contract.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.run.containers.base import SCRATCH_ENV


@dataclass(frozen=True)
class NodeImageOptions:
    # A squashfs/.sif file, or an image reference pyxis/Apptainer can pull (nvcr.io#nvidia/pytorch:25.01-py3).
    image: str | None = None


def looks_like_file(image: str) -> bool:
    return image.endswith((".sqsh", ".sif", ".squashfs")) or image.startswith(("/", "./", "../"))


def node_image(options: NodeImageOptions, profile: Profile, fmt: str, platform: str) -> str:
    """The image to run: --image, else the file `inv export --format FMT` writes; checked when a file."""
    image = options.image or str(images.export_path(profile, fmt))
    if looks_like_file(image) and not Path(image).exists():
        raise ReprokitError(
            f"no {platform} image at {image}; make it with "
            f"`inv export --accelerator {profile.name} --format {fmt}` or pass --image"
        )
    return image


def in_image_setup(profile: Profile) -> list[str]:
    """In the image: its own interpreter and trainers (sbatch passes the submitting shell's
    environment on, and a host path must not leak in)."""
    return [
        "# In the image: its own interpreter and trainers (sbatch passes the submitting shell's",
        "# environment on, and a host path must not leak in).",
        "unset PYTHON REPROKIT_TRAINERS_PATH",
        f"export REPROKIT_IMAGE_TAG={shlex.quote(images.image_tag(profile))}",
        "# --data folders are bound read-only; the trainer reads a cache it must write locks into through a",
        "# writable view made here (the session folder is bound read-write on every node).",
        f'export {SCRATCH_ENV}="$RUN_DIR/.scratch"',
    ]
