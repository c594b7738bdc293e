"""The image tasks: build the accelerator's pinned image, resolve its pins, fill an offline
wheelhouse, export the image for Slurm nodes. Thin: the work is in reprokit/images/."""

from __future__ import annotations

from pathlib import Path

from reprokit.cli.options import ACCELERATOR_HELP
from reprokit.cli.tasking import friendly, task
from reprokit.contract.console import console
from reprokit.contract.errors import ReprokitError
from reprokit.plan import listing


@task(
    help={
        "accelerator": ACCELERATOR_HELP,
        "base_image": "build on this base instead of the profile's (a private registry, or a local one)",
        "wheelhouse": "install the pins from this folder (`inv wheelhouse`), served on 127.0.0.1: no internet",
        "force": "rebuild even when the image is up to date",
        "dry_run": "print the `docker build` command and build nothing",
        "without_vendor": "build without the profile's vendor files (gaudi2: optimum-habana's mediapipe "
        "modules); the image then refuses the variants that need them",
        "builder": "auto (BuildKit where the engine has it, with pip's downloads kept in a cache mount; "
        "default), buildkit or legacy",
    }
)
@friendly
def build(
    c,
    accelerator="auto",
    base_image=None,
    wheelhouse=None,
    force=False,
    dry_run=False,
    without_vendor=False,
    builder="auto",
):
    """Build the accelerator's pinned image (a cache hit when nothing changed)."""
    from reprokit import images

    profile = listing.resolve(accelerator)
    if dry_run:
        print(images.dry_run(profile, base_image, wheelhouse, not without_vendor, console))
        return
    folder = Path(wheelhouse) if wheelhouse else None
    result = images.build(profile, base_image, folder, force, console, not without_vendor, builder)
    print(result.tag)


@task(
    help={
        "accelerator": ACCELERATOR_HELP,
        "dest": "folder to fill with wheels (default: wheelhouse/<accelerator>)",
        "python_version": "the image's Python (default: its base's, base.yaml)",
        "without_vendor": "leave out the profile's vendor files (for a build with --without-vendor)",
    }
)
@friendly
def wheelhouse(c, accelerator="auto", dest=None, python_version=None, without_vendor=False):
    """Download exactly the wheels the image's pip layer installs (its lock), for the base's Python and
    glibc, for an offline `inv build --wheelhouse`."""
    from reprokit import images

    profile = listing.resolve(accelerator)
    folder = Path(dest or f"wheelhouse/{profile.name}")
    wheels = images.wheelhouse(profile, folder, python_version)
    size = sum(w.stat().st_size for w in wheels) / 2**30
    print(f"{len(wheels)} wheels ({size:.1f} GiB) in {folder}")
    if profile.vendor is not None and not without_vendor:
        from reprokit.images import vendor

        staged = vendor.stage(profile, folder)
        print(f"{len(staged)} vendor files (sha256 checked) in {folder / 'vendor'}")


@task(
    help={
        "accelerator": ACCELERATOR_HELP,
        "write": "write the resolved set, each pin with its files' sha256, as the profile's lock "
        "(accelerators/<accelerator>/lock.txt)",
        "check": "resolve with the lock as constraints and fail when its versions or hashes no longer hold",
        "upgrade": "resolve every package afresh (newest versions the pins allow); without it --write keeps "
        "the lock's versions of the packages the profile does not pin itself",
    }
)
@friendly
def pins(c, accelerator="auto", write=False, check=False, upgrade=False):
    """Resolve the image's pins against what its base ships (pip, without pulling the base): what the
    pip layer installs, whether it would replace anything the base provides, and the sha256 of every
    file of each pinned version the base can install (from the package index)."""
    from reprokit.images import index_hashes, locks
    from reprokit.images import pins as resolving

    if check and upgrade:
        raise ReprokitError("--check holds the lock to a resolution with its versions: drop --upgrade")
    profile = listing.resolve(accelerator)
    base = profile.base_manifest
    console.print(
        f"Resolving the {profile.name} pins against {base.reference} (Python {base.python}, glibc {base.glibc})"
    )
    keep = profile.lock_file.exists() and not upgrade
    with console.status("pip resolving against the base's model"):
        found = resolving.resolve(profile, lock=profile.lock_file if keep else None)
    problems = found.problems(base)
    if problems:
        hint = "; `--upgrade` resolves afresh, without the lock's versions" if keep and not check else ""
        raise ReprokitError(
            f"{profile.name} pins do not resolve on {base.reference}: {'; '.join(problems)}{hint}"
        )
    for name, (old, new) in found.replaced.items():
        print(f"replaces the base's {name} {old} with {new}: {base.may_replace.get(name, '?')}")
    index = index_hashes.index_url()
    with console.status(f"reading the {len(found.install)} pins' files from {index}"):
        hashes = index_hashes.locked_hashes(found.install, base, index)
    # The file pip chose must be among those hashed: else the tags of the base were read wrong.
    unhashed = sorted(n for n, digest in found.chosen.items() if digest not in hashes.get(n, []))
    if unhashed:
        raise ReprokitError(
            f"pip chose files of {', '.join(unhashed)} that are not among the wheels {index} lists for "
            f"Python {base.python} on glibc {base.glibc}: a file from another index or folder (pip's "
            "find-links), or a tag the kit does not know; the lock would refuse it"
        )
    if check:
        _check_lock(profile, found.install, hashes, index)
        console.print(
            f"{profile.lock_file} holds: {len(found.install)} pins, their files' hashes as {index} lists them"
        )
    if write:
        before = locks.read_lock(profile.lock_file)
        for name in sorted(set(before) | set(found.install)):
            if before.get(name) != found.install.get(name):
                print(f"{name}: {before.get(name, '-')} -> {found.install.get(name, '-')}")
        profile.lock_file.write_text(resolving.lock_text(found, base, hashes, index))
        files = sum(len(h) for h in hashes.values())
        print(f"{len(found.install)} pins, {files} files' sha256 -> {profile.lock_file}")
        return
    if not check:
        for name, version in sorted(found.install.items()):
            print(f"{name}=={version}" + "".join(f" --hash=sha256:{d}" for d in hashes[name]))


def _check_lock(profile, install: dict[str, str], hashes: dict[str, list[str]], index: str) -> None:
    """The lock's versions are the resolution's, and its hashes those the index lists, in one line."""
    from reprokit.images import locks

    fix = f"rewrite it with `inv pins --accelerator {profile.name} --write`"
    problems = locks.lock_problems(profile)
    if problems:
        raise ReprokitError(f"{problems[0]}; {fix}")
    locked = locks.read_lock(profile.lock_file)
    if locked != install:
        changed = sorted(set(locked.items()) ^ set(install.items()))
        raise ReprokitError(
            f"{profile.lock_file} no longer matches the resolution ({len(changed)} differences, e.g. {changed[0]}); {fix}"
        )
    differ = [n for n, digests in locks.read_hashes(profile.lock_file).items() if digests != hashes[n]]
    if differ:
        raise ReprokitError(
            f"{profile.lock_file}: the hashes of {', '.join(f'{n}=={install[n]}' for n in differ)} are not "
            f"the files {index} lists for the base; {fix} if the index changed, else find out who changed the lock"
        )


@task(
    name="export",
    help={
        "accelerator": ACCELERATOR_HELP,
        "format": "enroot (a squashfs for pyxis: `enroot import`) or apptainer (a .sif: `apptainer build`)",
        "dest": "file to write (default: exports/<image tag>.sqsh|.sif, what --container pyxis|apptainer looks for)",
        "dry_run": "print the command and run nothing",
    },
)
@friendly
def export_(c, accelerator="auto", format="enroot", dest=None, dry_run=False):  # noqa: A002 - the flag's name
    """Turn the built image (`inv build`) into a file for Slurm nodes: enroot squashfs or Apptainer .sif."""
    from reprokit import images

    profile = listing.resolve(accelerator)
    command, target = images.export(profile, format, Path(dest) if dest else None, dry_run=dry_run)
    print(" ".join(command) if dry_run else target)
