"""Images: the tag of each accelerator's image, derived from what goes into it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import __version__
from .accelerators import Profile
from .render import context_hash, write_build_context

BUILD_DIR = Path(__file__).resolve().parent.parent / "rendered" / "build"


def image_repository(profile: Profile) -> str:
    return f"reprokit/{profile.name}"


def image_tag(profile: Profile) -> str:
    """reprokit/<accelerator>:<kit version>-<hash of Dockerfile, pinned requirements and trainers>."""
    with tempfile.TemporaryDirectory() as tmp:
        digest = context_hash(write_build_context(profile, Path(tmp) / "context"))
    return f"{image_repository(profile)}:{__version__}-{digest}"
