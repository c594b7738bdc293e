"""A profile's lock (accelerators/<name>/lock.txt) as the kit reads it: its pins (`name==version` with the
sha256 of every wheel it accepts), the framework's lines among them, and what makes a lock unusable for
a build, read from the file alone. pins.py resolves and writes it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from reprokit.plan.accelerators import Profile

# Packages the kit's pip layer must never bring: the base's framework and the GPU stacks it was built with
# (nvidia-ml-py is NVML's Python binding, no CUDA library). Where a profile brings them itself (cpu), they
# are the bulk of its download, installed as a layer of their own.
FRAMEWORK = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-(?!ml-py$).*|cuda-.*|habana-.*)$")
HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]
    line: int


def parse_lock(text: str) -> list[Pin]:
    """The pins of a lock: `name==version --hash=sha256:... ...` per line (a backslash continues a line,
    as pip reads it; `#` starts a comment)."""
    pins = []
    joined, first = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = "" if raw.lstrip().startswith("#") else raw.split(" #", 1)[0].strip()
        first = first or number
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        line, joined, at, first = (joined + line).strip(), "", first, 0
        if not line:
            continue
        requirement, *options = line.replace("--hash ", "--hash=").split()
        name, _, version = requirement.partition("==")
        hashes = tuple(option.removeprefix("--hash=") for option in options if option.startswith("--hash="))
        pins.append(Pin(normalize(name), version, hashes, at))
    return pins


def read_lock(path: Path) -> dict[str, str]:
    """name -> version of every pin of a lock (empty when there is none)."""
    if not path.exists():
        return {}
    return {pin.name: pin.version for pin in parse_lock(path.read_text())}


def read_hashes(path: Path) -> dict[str, list[str]]:
    """name -> the sha256 digests (hex) the lock accepts for it."""
    return {
        pin.name: sorted(h.removeprefix("sha256:") for h in pin.hashes)
        for pin in parse_lock(path.read_text())
    }


def lock_problems(profile: Profile) -> list[str]:
    """What makes the profile's lock unusable for a build, read from the file alone (no network): a line
    that is not `name==version`, a pin without a sha256 hash, a requirement of the profile it does not pin."""
    path = profile.lock_file
    if not path.exists():
        return [f"{profile.name} has no lock ({path})"]
    found = []
    pins = parse_lock(path.read_text())
    for pin in pins:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", pin.name) or not pin.version:
            found.append(f"{path}:{pin.line}: not a `name==version` pin")
        elif not pin.hashes:
            found.append(f"{path}:{pin.line}: {pin.name}=={pin.version} has no --hash")
        elif bad := [h for h in pin.hashes if not HASH.match(h)]:
            found.append(f"{path}:{pin.line}: {pin.name}'s hash {bad[0]} is not sha256:<64 hex digits>")
    locked = {pin.name: pin.version for pin in pins}
    for requirement in profile.requirements:
        name, _, version = requirement.partition("==")
        if locked.get(normalize(name)) != version.strip():
            found.append(f"{path} does not pin {requirement} of {profile.folder.name}/profile.yaml")
    return found


def framework_pins(text: str) -> list[str]:
    """The lock's lines of the framework (torch and its GPU stack), as they are written."""
    return [
        line
        for line in text.splitlines()
        if line and not line.startswith("#") and FRAMEWORK.match(normalize(line.split("==", 1)[0]))
    ]
