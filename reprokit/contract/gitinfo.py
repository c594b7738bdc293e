"""Where the kit comes from: the git revision and remote of the checkout it runs from, if any.

An installed kit (a wheel in a venv) has no checkout; then every answer is None rather than the
revision of whatever repository happens to enclose the venv.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def git(*args: str) -> str | None:
    """A git command's output in the kit's own checkout; None where there is none."""
    root = checkout()
    if root is None:
        return None
    return _git(root, *args)


def _git(where: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def checkout() -> Path | None:
    """The git work tree the running package lives in (an editable install or `inv` in a clone)."""
    top = _git(PACKAGE, "rev-parse", "--show-toplevel")
    if not top or (Path(top) / "reprokit").resolve() != PACKAGE:
        return None
    return Path(top)


def kit_revision() -> str | None:
    revision = git("rev-parse", "--short=12", "HEAD")
    if not revision:
        return None
    return revision + ("-dirty" if git("status", "--porcelain") else "")


def kit_source() -> str | None:
    """The git remote of the checkout, with any credentials in the URL removed."""
    url = git("config", "--get", "remote.origin.url") or ""
    return re.sub(r"//[^/@]+@", "//", url) or None
