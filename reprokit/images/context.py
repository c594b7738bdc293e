"""An image's build context: Dockerfile, the hash-pinned lock (and its framework slice) and the trainers,
and its tag.

As TensorFlow's tools/dockerfiles does, the Dockerfile is assembled from a spec (the accelerator
profile) and partials that each own one concern. The tag is
``reprokit/<accelerator>:<kit version>-<hash of the context>``, the hash taken over the files in
memory, so an unchanged kit finds its image again and planning a run copies nothing.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from reprokit import __version__
from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError
from reprokit.contract.files import write_bytes
from reprokit.contract.layout import DOCKER
from reprokit.contract.trainers import PACKAGE as TRAINERS_PACKAGE
from reprokit.images import locks, vendor
from reprokit.plan.accelerators import Profile
from reprokit.render.templates import render

SKIPPED = ("__pycache__", ".pyc", ".pyo")


def dockerfile(profile: Profile, with_vendor: bool = True, buildkit: bool = False) -> str:
    """The Dockerfile every builder builds; with `buildkit`, the same with pip's cache mounts (the legacy
    builder refuses `RUN --mount`). Both make the same image: the tag is taken over the first."""
    protect = [re.sub(r"[-_.]+", "[-_.]", name) for name in profile.base_manifest.protect]
    return render(
        DOCKER,
        "Dockerfile.j2",
        profile=profile,
        protect_pattern="|".join(protect) or "(none)",
        vendor=profile.vendor if with_vendor else None,
        framework=bool(framework_lock(profile)),
        buildkit=buildkit,
    )


def framework_lock(profile: Profile) -> str:
    """The lock's slice that the framework layer installs (empty where the base ships the framework)."""
    lines = locks.framework_pins(profile.lock_file.read_text())
    if not lines:
        return ""
    header = f"# The framework's pins of {profile.lock_file.name} (its first pip layer), with their hashes.\n"
    return header + "".join(f"{line}\n" for line in lines)


def trainer_files() -> dict[str, bytes]:
    """Every file of the trainers package, by its path in the context (reprokit_trainers/...): the
    shared package's, and each publication folder's trainer package copied in flat
    (reprokit_trainers/<name>/), so that the image imports it with no path of the recipes."""
    found = _files_under(trainers.package_dir(), TRAINERS_PACKAGE)
    for name, folder in trainers.publication_packages().items():
        found.update(_files_under(folder, f"{TRAINERS_PACKAGE}/{name}"))
    return dict(sorted(found.items()))


def _files_under(root: Path, prefix: str) -> dict[str, bytes]:
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not any(part in SKIPPED or path.suffix in SKIPPED for part in path.parts):
            found[f"{prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return found


def accelerator_files(profile: Profile) -> dict[str, bytes]:
    """The accelerator's code for the trainers (its folder's *.py: trainer.py), by its path in the
    context (accelerators/<name>/...): the image has it where reprokit_trainers/common/vendor.py looks."""
    return {
        f"accelerators/{profile.name}/{path.name}": path.read_bytes()
        for path in sorted(profile.folder.glob("*.py"))
    }


def context_files(
    profile: Profile, vendor_files: dict[str, bytes] | None = None, with_vendor: bool = True
) -> dict[str, bytes]:
    """What `docker build` is given, by path in the context. The vendor files' bytes come at build time
    (vendor.files); until then their pinned checksums (vendor.sha256) stand for them."""
    problems = locks.lock_problems(profile)
    if problems:
        raise ReprokitError(
            f"{problems[0]}: the image installs its lock with --require-hashes; "
            f"make it with `inv pins --accelerator {profile.name} --write`"
        )
    found = {
        "Dockerfile": dockerfile(profile, with_vendor).encode(),
        "lock.txt": profile.lock_file.read_bytes(),
        **trainer_files(),
        **accelerator_files(profile),
    }
    if framework := framework_lock(profile):
        found["lock-framework.txt"] = framework.encode()
    if profile.vendor is not None:
        found["vendor.sha256"] = vendor.manifest(profile, with_vendor)
        found.update(vendor_files or {})
    return found


def context_hash(files: dict[str, bytes]) -> str:
    """The hash the tag carries: every file but the vendor files, which vendor.sha256 stands for."""
    digest = hashlib.sha256()
    for name in sorted(n for n in files if not n.startswith("vendor/")):
        digest.update(name.encode())
        digest.update(files[name])
    return digest.hexdigest()[:12]


def image_repository(profile: Profile) -> str:
    return f"reprokit/{profile.name}"


def image_tag(profile: Profile, files: dict[str, bytes] | None = None) -> str:
    """reprokit/<accelerator>:<kit version>-<hash of Dockerfile, requirements and trainers>."""
    return f"{image_repository(profile)}:{__version__}-{context_hash(files or context_files(profile))}"


def write_context(profile: Profile, dest: Path, files: dict[str, bytes] | None = None) -> Path:
    """Write the context into dest, emptied first so that no stale file goes into the build."""
    import shutil

    if dest.is_symlink():  # a link planted there: removed, never emptied nor written through
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    for name, data in (files or context_files(profile)).items():
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, data)
    return dest
