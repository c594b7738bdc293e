"""The image: built or pulled, and its base read back and held to the accelerator's base.yaml (OS, glibc,
Python, what it ships, its environment; `unverified` facts confirmed or corrected); without a container,
this Python with the train extra (and the accelerator's own stack)."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys

from reprokit import images
from reprokit.contract.errors import ReprokitError
from reprokit.images import locks
from reprokit.preflight import baseimage, imagereads
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

READ_BACK_TIMEOUT_S = 180
# Said of an answer kept from an earlier read of the same image (imagereads.py).
KEPT = "as read before from this image id"


def kit_layer(context: Context) -> frozenset[str]:
    """What the kit's own image layer installs over its base: the lock's packages and the profile's
    system packages (read from the kit's image, they say nothing about the base)."""
    profile = context.profile
    names = {baseimage.normalized(p) for p in profile.system_packages}
    names |= {baseimage.normalized(name) for name in locks.read_lock(profile.lock_file)}
    protected = {baseimage.normalized(p) for p in profile.base_manifest.protect}
    return frozenset(names - protected)


class Image(Check):
    name = "image"

    def run(self, context: Context) -> list[Finding]:
        try:
            # What a session checks before its first cell: the engine, the image, the train extra, ...
            context.runtime.check(context.profile)
        except ReprokitError as error:
            return [self.finding(str(error), blocks=True)]
        if context.container == "none":
            return [
                self.finding(
                    f"no container: the trainers run in this Python ({sys.executable}, {platform.python_version()}) "
                    "with the train extra"
                )
            ]
        try:
            text, source, layer = self._read_back(context)
        except Exception as error:  # noqa: BLE001 -- the engine's and the tools' errors alike: said, not raised
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
            return [self.finding(f"the image's base could not be read back: {first}", True)]
        if text is None:
            return [self.finding(source)]
        return self._compared(context, baseimage.parse(text), source, layer)

    def _read_back(self, context: Context) -> tuple[str | None, str, frozenset[str]]:
        """(the facts script's output, what was read, the packages to leave out); None and why not
        where the image cannot be read from here."""
        profile = context.profile
        script = baseimage.script(profile.python)
        options = context.runtime.container.options
        if context.container == "docker":
            engine = images.client(timeout=READ_BACK_TIMEOUT_S)
            for reference in (profile.pinned_base, profile.base_image):
                try:
                    engine.images.get(reference)
                except Exception:  # noqa: BLE001 -- not here: try the next name, then the kit's image
                    continue
                output, kept = imagereads.run(engine, reference, ["sh", "-c", script])
                said = f"the base {reference}" + (f" ({KEPT})" if kept else "")
                return output.decode(errors="replace"), said, frozenset()
            tag = getattr(options, "image", None) or images.image_tag(profile)
            output, kept = imagereads.run(engine, tag, ["sh", "-c", script])
            said = f"the kit's image {tag} (its own layer left out" + (f"; {KEPT})" if kept else ")")
            return output.decode(errors="replace"), said, kit_layer(context)
        if context.container == "apptainer" and context.plan.runtime == "local" and shutil.which("apptainer"):
            image = getattr(options, "image", None) or str(images.export_path(profile, "apptainer"))
            done = subprocess.run(
                ["apptainer", "exec", image, "sh", "-c", script],
                capture_output=True,
                text=True,
                timeout=READ_BACK_TIMEOUT_S,
            )
            return done.stdout, f"the image {image} (its own layer left out)", kit_layer(context)
        return (
            None,
            f"{context.container} image on the nodes: its base is read back where it runs, not from here",
            frozenset(),
        )

    def _compared(
        self, context: Context, facts: baseimage.Facts, source: str, layer: frozenset[str]
    ) -> list[Finding]:
        base = context.profile.base_manifest
        compared = baseimage.compare(base, facts, layer)
        found = [
            self.finding(
                f"read back {source}: {len(compared.confirmed)} fact(s) of base.yaml ({base.name}) confirmed"
            )
        ]
        found += [
            self.finding(f"confirmed: {line}") for line in compared.confirmed if "now confirmed" in line
        ]
        found += [self.finding(f"corrected: {line}") for line in compared.corrected]
        found += [
            self.finding(
                f"{line} (verified): the pins were resolved against base.yaml; fix it and `inv pins`", True
            )
            for line in compared.wrong
        ]
        return found
