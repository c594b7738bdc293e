"""The bundle's two resolutions by pip (`install --dry-run --report`, for the node's Python and
platform, binary wheels only): the node's packages, and the kit on the node; then which packages
travel (the node lacks them, the kit's pin wins, or the kit needs another version) and which the
kit relies on the node for."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reprokit.barenode.node import STAND_IN_LABEL, Node, canonical, requirement_name
from reprokit.contract.errors import ReprokitError


@dataclass(frozen=True)
class Resolved:
    name: str
    version: str
    url: str
    sha256: str | None
    requires: tuple[str, ...]


def target(node: Node) -> list[str]:
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
        *target(node), "-r", str(listed),
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


def needs(package: Resolved, environment: dict[str, str]) -> Iterator[str]:
    """The names of what `package` requires in this marker environment (extras left out; a requirement
    its metadata cannot spell is passed over, as pip would fail on it elsewhere)."""
    from packaging.requirements import InvalidRequirement, Requirement

    for text in package.requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate(environment):
            yield canonical(requirement.name)


def node_closure(node: Node, resolved: dict[str, Resolved]) -> dict[str, Resolved]:
    """The node's packages: those it lists and what they need (their metadata's requirements for its
    Python and platform, extras left out), less what it lacks and whatever only those need."""
    environment = marker_environment(node)
    lacks = {canonical(n) for n in node.lacks}
    found: dict[str, Resolved] = {}
    todo = [canonical(n) for n in node.packages]
    while todo:
        key = todo.pop()
        if key in found or key in lacks or key not in resolved:
            continue
        found[key] = resolved[key]
        todo += needs(resolved[key], environment)
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
    environment = marker_environment(node)
    needed = {requirement_name(text) for text in wanted}
    for key in chosen:
        needed.update(needs(kit[key], environment))
    return {
        kit[k].name: kit[k].version.removesuffix(f"+{STAND_IN_LABEL}")
        for k in sorted(needed)
        if k in kit and k not in chosen
    }
