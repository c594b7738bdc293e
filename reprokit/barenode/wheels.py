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
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reprokit.contract import files
from reprokit.contract.errors import ReprokitError
from reprokit.plan.validation import one_line

NODE_FILE = Path(__file__).resolve().parent / "node.yaml"
MANIFEST = "manifest.json"
WHEELS = "wheels"
# What the device tool carries beside the working tree, in all; the bundle must leave room in it.
LIMIT_BYTES = 64 * 2**20
STAND_IN_LABEL = "node"  # the local version label of a stand-in: torch==2.11.0+node
FORMAT = 1


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = ""
    python: str = Field(pattern=r"^3\.\d+$")
    platform: str
    packages: dict[str, str | None]
    lacks: list[str] = Field(default_factory=list)
    stand_ins: list[str] = Field(default_factory=list)
    kit_pins_win: list[str] = Field(default_factory=list)
    leave_out: dict[str, str] = Field(default_factory=dict)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def load_node(path: Path = NODE_FILE) -> Node:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ReprokitError(f"{path}: cannot read the node's description: {error}") from None
    try:
        node = Node.model_validate(raw)
    except ValidationError as error:
        raise ReprokitError(one_line(str(path), error)) from None
    unknown = [n for n in node.stand_ins if n not in node.packages or not node.packages[n]]
    if unknown:
        raise ReprokitError(f"{path}: stand_ins {', '.join(unknown)} need a version under packages")
    return node


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


def _name(requirement: str) -> str:
    return canonical(re.split(r"[ \[=<>!~;]", requirement, maxsplit=1)[0])


def _pin(name: str, version: str | None) -> str:
    if not version:
        return name
    return f"{name}=={version}"


def stand_in_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of metadata only, `name==version+node`, no requirements: what pip resolves against
    in place of a package the node has and that must never travel."""
    dist = canonical(name).replace("-", "_")
    full = f"{version}+{STAND_IN_LABEL}"
    path = folder / f"{dist}-{full}-py3-none-any.whl"
    info = f"{dist}-{full}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {full}\n")
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: reprokit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    url: str
    sha256: str | None
    requires: tuple[str, ...]


def _target(node: Node) -> list[str]:
    return ["--only-binary=:all:", "--python-version", node.python, "--platform", node.platform]


def resolve(
    requirements: list[str], node: Node, stand_ins: Path, work: Path, what: str
) -> dict[str, Resolved]:
    """pip's resolution of `requirements` for the node's Python and platform (nothing installed)."""
    report = work / f"{what}.json"
    listed = work / f"{what}.txt"
    listed.write_text("\n".join(requirements) + "\n")
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--report", str(report), "--target", str(work / "unused"), "--find-links", str(stand_ins),
        *_target(node), "-r", str(listed),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        said = [
            line for line in done.stderr.splitlines() if line.startswith("ERROR")
        ] or done.stderr.splitlines()
        raise ReprokitError(
            f"pip cannot resolve {what} for Python {node.python} on {node.platform}: {said[-1] if said else 'no output'}"
        )
    found = {}
    for item in json.loads(report.read_text())["install"]:
        meta = item["metadata"]
        info = item.get("download_info", {})
        found[canonical(meta["name"])] = Resolved(
            name=meta["name"],
            version=meta["version"],
            url=info.get("url", ""),
            sha256=(info.get("archive_info", {}).get("hashes") or {}).get("sha256"),
            requires=tuple(meta.get("requires_dist") or ()),
        )
    return found


def marker_environment(node: Node) -> dict[str, str]:
    """The environment markers of the node's Python and platform (no extras requested)."""
    machine = node.platform.rsplit("_", 1)[-1] if "x86_64" not in node.platform else "x86_64"
    return {
        "python_version": node.python,
        "python_full_version": f"{node.python}.0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machine,
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }


def node_closure(node: Node, resolved: dict[str, Resolved]) -> dict[str, Resolved]:
    """The node's packages: those it lists and what they need (their metadata's requirements for its
    Python and platform, extras left out), less what it lacks and whatever only those need."""
    from packaging.requirements import InvalidRequirement, Requirement

    environment = marker_environment(node)
    lacks = {canonical(n) for n in node.lacks}
    found: dict[str, Resolved] = {}
    todo = [canonical(n) for n in node.packages]
    while todo:
        key = todo.pop()
        if key in found or key in lacks or key not in resolved:
            continue
        found[key] = resolved[key]
        for text in resolved[key].requires:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate(environment):
                todo.append(canonical(requirement.name))
    return found


def choose(node: Node, on_node: dict[str, Resolved], kit: dict[str, Resolved]) -> dict[str, str]:
    """The packages that travel, each with why: the node lacks it, the kit's pin wins, or the kit's
    packages need another version than the node's."""
    stand_ins = {canonical(n) for n in node.stand_ins}
    wins = {canonical(n) for n in node.kit_pins_win}
    chosen = {}
    for key, package in sorted(kit.items()):
        if key in stand_ins:
            continue
        mine = on_node.get(key)
        if mine is None:
            chosen[key] = "not on the node"
        elif key in wins and mine.version != package.version:
            chosen[key] = f"the kit's pin wins over the node's {mine.version}"
        elif mine.version != package.version:
            chosen[key] = f"the kit's packages need {package.version}, the node has {mine.version}"
    return chosen


def relied_on(
    node: Node, kit: dict[str, Resolved], chosen: dict[str, str], wanted: list[str]
) -> dict[str, str]:
    """name -> the version resolved against, of each package the kit or a carried wheel requires and
    the bundle does not carry: the node must have it (scripts/barenode/run.py checks)."""
    from packaging.requirements import InvalidRequirement, Requirement

    environment = marker_environment(node)
    needed = {_name(text) for text in wanted}
    for key in chosen:
        for text in kit[key].requires:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate(environment):
                needed.add(canonical(requirement.name))
    return {
        kit[k].name: kit[k].version.removesuffix(f"+{STAND_IN_LABEL}")
        for k in sorted(needed)
        if k in kit and k not in chosen
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
            key = _name(requirement)
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
                *_target(node),
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
        digest = _sha256(path)
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
        elif path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            problems.append(f"{path}: its sha256 is not the manifest's")
    extra = sorted(p.name for p in (folder / WHEELS).glob("*") if p.name not in listed)
    problems += [f"{folder / WHEELS / name}: not in the manifest" for name in extra]
    return problems
