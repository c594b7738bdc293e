"""Vendor files: what an image needs that no package ships (optimum-habana's mediapipe loader lives
beside its example script), fetched at the pinned tag and checked by sha256 when the image is built.
The kit carries no copy.

Where they come from, in order: a folder the user staged (the wheelhouse's vendor/, for an offline
build); REPROKIT_VENDOR_MIRROR (a site's mirror of the URLs, same file names); the URLs themselves.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path

from reprokit.contract.errors import ReprokitError
from reprokit.contract.files import write_bytes
from reprokit.plan.accelerators import Profile, VendorFile

FETCH_TIMEOUT_S = 60


def _check(item: VendorFile, data: bytes, where: str) -> bytes:
    found = hashlib.sha256(data).hexdigest()
    if found != item.sha256:
        raise ReprokitError(
            f"{where}: sha256 {found[:16]}... is not the pinned {item.sha256[:16]}... ({item.url})"
        )
    return data


def _fetch(item: VendorFile) -> bytes:
    mirror = os.environ.get("REPROKIT_VENDOR_MIRROR")
    url = f"{mirror.rstrip('/')}/{item.name}" if mirror else item.url
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 - a pinned https URL or a mirror
            return _check(item, response.read(), url)
    except OSError as exc:
        raise OSError(f"{url}: {exc}") from None


def how_to_stage(profile: Profile) -> str:
    vendor = profile.vendor
    names = ", ".join(f.name for f in vendor.files)
    return (
        f"the {profile.name} image needs {names} ({vendor.why}); fetch them where the URLs are reachable with "
        f"`inv wheelhouse --accelerator {profile.name} --dest DIR` (or put them in DIR/vendor/), then "
        f"`inv build --accelerator {profile.name} --wheelhouse DIR`; or build with --without-vendor"
    )


def files(profile: Profile, staged: Path | None = None) -> dict[str, bytes]:
    """The vendor files by path in the build context (vendor/<folder>/<name>), each checked."""
    vendor = profile.vendor
    if vendor is None:
        return {}
    found = {}
    for item in vendor.files:
        local = staged / "vendor" / item.name if staged is not None else None
        if local is not None and local.exists():
            data = _check(item, local.read_bytes(), str(local))
        elif staged is not None and not os.environ.get("REPROKIT_VENDOR_MIRROR"):
            raise ReprokitError(f"{local} is missing: {how_to_stage(profile)}")
        else:
            try:
                data = _fetch(item)
            except OSError as exc:
                raise ReprokitError(f"cannot fetch {exc}: {how_to_stage(profile)}") from None
        found[f"vendor/{vendor.folder}/{item.name}"] = data
    return found


def stage(profile: Profile, dest: Path) -> list[Path]:
    """Fetch the vendor files into dest/vendor/ (with the wheels of an offline build)."""
    written = []
    for path, data in files(profile).items():
        target = dest / "vendor" / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(target, data)
        written.append(target)
    return written


def manifest(profile: Profile, included: bool) -> bytes:
    """What the image tag hashes in place of the files' bytes (known without fetching them)."""
    if profile.vendor is None:
        return b""
    lines = (
        [f"{f.sha256}  {profile.vendor.folder}/{f.name}" for f in profile.vendor.files]
        if included
        else ["absent"]
    )
    return ("\n".join(lines) + "\n").encode()
