"""The bundle: the wheels a bare node lacks, for its Python and platform, with a manifest of hashes
(`python -m reprokit.barenode bundle`). What the node has is described in node.yaml; the kit's own
requirements (its host side and the `train` extra, at the kit's pins) are read from its metadata.

Two resolutions by pip (`install --dry-run --report`, for the node's Python and platform, binary
wheels only), the node's torch and torchvision as metadata-only stand-ins (their CUDA builds'
dependencies are on NVIDIA's index, not PyPI):

- the node: its packages, at the versions node.yaml gives, the rest as pip would install them today;
- the kit on the node: the kit's requirements, pinned where the node lacks a package or where the
  kit's pin must win (`kit_pins_win`: transformers 4.49, timm, accelerate), by name where the node has
  the package (its own version serves, unless a pinned package needs another).

The bundle carries every package of the second that the first lacks or has at another version, so
the node's Python is used as it is and the bundle, first on the path, adds or overrides the rest.
Nothing is installed here; `pip download --no-deps` fetches exactly the wheels the report names, and
each is checked against the report's sha256 before it is listed in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from reprokit.barenode import resolution
from reprokit.barenode.node import (
    NODE_FILE,
    STAND_IN_LABEL,
    canonical,
    load_node,
    requirement_name,
    stand_in_wheel,
)
from reprokit.barenode.resolution import choose, node_closure, relied_on, resolve
from reprokit.contract import files
from reprokit.contract.errors import ReprokitError

MANIFEST = "manifest.json"
WHEELS = "wheels"
# What the device tool carries beside the working tree, in all; the bundle must leave room in it.
LIMIT_BYTES = 64 * 2**20
FORMAT = 1


def kit_requirements() -> list[str]:
    """The kit's requirements on a node: its host side and the `train` extra, as its metadata says
    (`name==version`, markers dropped)."""
    names = metadata.packages_distributions().get("reprokit") or []
    if not names:
        raise ReprokitError(
            "the kit is not installed (pip install -e .): its requirements come from its metadata"
        )
    found = []
    for requirement in metadata.requires(names[0]) or []:
        text, _, marker = requirement.partition(";")
        if marker and 'extra == "train"' not in marker:
            continue
        found.append(text.strip())
    return found


def _pin(name: str, version: str | None) -> str:
    if not version:
        return name
    return f"{name}=={version}"


def build(
    out: Path, node_file: Path = NODE_FILE, python: str | None = None, platform: str | None = None
) -> dict[str, Any]:
    """Resolve, download and check the bundle into `out` (wheels/ and manifest.json); returns the
    manifest. `python` and `platform` override the node's (a rehearsal here builds for this Python)."""
    node = load_node(node_file)
    if python or platform:
        node = node.model_copy(update={k: v for k, v in (("python", python), ("platform", platform)) if v})
    wheels = out / WHEELS
    if out.exists() and any(out.iterdir()):
        if not (out / MANIFEST).is_file():
            raise ReprokitError(
                f"{out} is not empty and holds no bundle ({MANIFEST}): give an empty or new folder"
            )
        for old in wheels.glob("*.whl"):
            old.unlink()
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reprokit-bundle-") as temporary:
        work = Path(temporary)
        stubs = work / "stand-ins"
        stubs.mkdir()
        for name in node.stand_ins:
            stand_in_wheel(stubs, name, str(node.packages[name]))
        left_out = {canonical(n) for n in node.leave_out}
        stand_ins = {canonical(n) for n in node.stand_ins}
        wins = {canonical(n) for n in node.kit_pins_win}
        versions = {canonical(n): v for n, v in node.packages.items()}

        def as_node(name: str, version: str | None) -> str:
            return (
                f"{name}=={version}+{STAND_IN_LABEL}" if canonical(name) in stand_ins else _pin(name, version)
            )

        print(f"Resolving the node's packages ({node.description or node.platform}) ...", flush=True)
        on_node = node_closure(
            node, resolve([as_node(n, v) for n, v in node.packages.items()], node, stubs, work, "node")
        )
        wanted = []
        for requirement in kit_requirements():
            key = requirement_name(requirement)
            if key in left_out:
                continue
            if key in stand_ins:
                wanted.append(as_node(key, versions[key]))
            elif key in on_node and key not in wins:
                wanted.append(key)  # the node's own serves, unless a pinned package needs another
            else:
                wanted.append(requirement)
        print("Resolving the kit on the node ...", flush=True)
        kit = resolve(wanted, node, stubs, work, "kit")
        chosen = choose(node, on_node, kit)
        pins = [f"{kit[k].name}=={kit[k].version}" for k in chosen]
        print(f"Downloading {len(pins)} wheels ...", flush=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "-d",
                str(wheels),
                *resolution.target(node),
                *pins,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise ReprokitError(f"pip download failed: {said[-1] if said else 'no output'}")
    entries = []
    by_name = {}
    for path in sorted(wheels.glob("*.whl")):
        key = canonical(path.name.split("-", 1)[0])
        by_name[key] = path
    for key, why in chosen.items():
        package = kit[key]
        path = by_name.get(key)
        if path is None:
            raise ReprokitError(f"pip download gave no wheel of {package.name} {package.version}")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if package.sha256 and digest != package.sha256:
            raise ReprokitError(
                f"{path.name}: sha256 {digest} is not the index's {package.sha256} (a corrupted download?)"
            )
        entries.append(
            {"name": package.name, "version": package.version, "file": path.name, "sha256": digest,
             "bytes": path.stat().st_size, "why": why}
        )  # fmt: skip
    total = sum(e["bytes"] for e in entries)
    manifest = {
        "format": FORMAT,
        "made_by": "python -m reprokit.barenode bundle",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "node": {"python": node.python, "platform": node.platform, "description": node.description},
        "wheels": entries,
        "bytes": total,
        # What the bundle relies on the node for: the kit's requirements and the carried wheels'
        # requirements that it does not carry (the node's own packages need their own, not ours).
        "from_node": relied_on(node, kit, chosen, wanted),
        "stand_ins": {n: node.packages[n] for n in node.stand_ins},
        "left_out": dict(node.leave_out),
        "node_packages": {on_node[k].name: on_node[k].version for k in sorted(on_node)},
    }
    files.write_text(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    size = bundle_bytes(out)
    if size > LIMIT_BYTES:
        largest = sorted(entries, key=lambda e: -e["bytes"])[:3]
        raise ReprokitError(
            f"the bundle is {size / 2**20:.1f} MiB, over the {LIMIT_BYTES / 2**20:.0f} MiB that travel to the node; "
            "largest: " + ", ".join(f"{e['file']} {e['bytes'] / 2**20:.1f} MiB" for e in largest)
        )
    return manifest


def bundle_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def verify(folder: Path) -> list[str]:
    """What is wrong with a bundle folder (empty when its manifest's files and hashes hold)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        return [f"{folder / MANIFEST}: cannot read the manifest ({error})"]
    problems = []
    listed = set()
    for entry in manifest.get("wheels", []):
        path = folder / WHEELS / entry["file"]
        listed.add(entry["file"])
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif (
            path.stat().st_size != entry["bytes"]
            or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]
        ):
            problems.append(f"{path}: its sha256 is not the manifest's")
    extra = sorted(p.name for p in (folder / WHEELS).glob("*") if p.name not in listed)
    problems += [f"{folder / WHEELS / name}: not in the manifest" for name in extra]
    return problems
