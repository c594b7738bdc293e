"""What a bare node has (node.yaml): its Python and platform, its packages at their versions, what it
lacks, which of its packages pip resolves against as metadata-only stand-ins (their CUDA builds'
dependencies are on NVIDIA's index), and which of the kit's pins win over its own."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reprokit.contract.errors import ReprokitError
from reprokit.plan.validation import one_line

NODE_FILE = Path(__file__).resolve().parent / "node.yaml"
STAND_IN_LABEL = "node"  # the local version label of a stand-in: torch==2.11.0+node


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


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[ \[=<>!~;]", requirement, maxsplit=1)[0])


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
