"""Accelerator profiles (accelerators.yaml, beside this file): base image, packages, run flags, launcher;
and the base images' manifests (bases.yaml): what each ships that the kit's pins touch."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reprokit.errors import ReprokitError
from reprokit.layout import DOCKER
from reprokit.plan.validation import one_line

PROFILES_FILE = DOCKER / "accelerators.yaml"
BASES_FILE = DOCKER / "bases.yaml"
LOCKS_DIR = DOCKER / "locks"
# Detection order: the most specific hardware first; cpu always matches.
DETECTION_ORDER = ("gaudi2", "cuda", "cpu")


class Slurm(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gres: str | None = None
    nic_env: str | None = None
    distributed_backend: Literal["nccl", "hccl", "gloo"]


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str
    title: str
    what: str


class StandIn(BaseModel):
    """CI's stand-in for a vendor base: what it preinstalls in its place and what it cannot mimic."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    python: str
    packages: list[str]
    system_packages: list[str] = Field(default_factory=list)
    differences: list[str]


class Base(BaseModel):
    """A base image: where it comes from, and what it ships that the kit's pins touch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    image: str = Field(pattern=r"^[^\s:@]+$")
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    digest_note: str | None = None
    os: str
    glibc: str = Field(pattern=r"^2\.\d+$")
    python: str = Field(pattern=r"^3\.\d+$")
    interpreter: str
    ships: dict[str, str] = Field(default_factory=dict)
    unverified: list[str] = Field(default_factory=list)
    protect: list[str] = Field(default_factory=list)
    may_replace: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    has_compiler: bool | None = None
    has_numactl: bool | None = None
    standin: StandIn | None = None
    sources: list[Source]

    @property
    def reference(self) -> str:
        """image:tag@digest where a digest is pinned, image:tag otherwise."""
        return f"{self.image}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


class VendorFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    url: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Vendor(BaseModel):
    """Files an image needs that no package ships: fetched by URL at a pinned tag and checked by sha256
    when the image is built (the kit carries no copy), importable from /opt/reprokit/vendor/<folder>."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    folder: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    why: str
    files: list[VendorFile]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    base: str = Field(description="the base image, by its name in bases.yaml")
    system_packages: list[str] = Field(default_factory=list)
    requirements: list[str]
    # How this profile's pins differ from the `train` extra (pyproject.toml), package -> why.
    differences: dict[str, str] = Field(default_factory=dict)
    vendor: Vendor | None = None
    docker_run: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    launcher: Literal["torchrun", "mpirun"]
    detect: str
    device_count: str
    device_names: dict[str, str]
    slurm: Slurm

    @property
    def base_manifest(self) -> Base:
        return bases()[self.base]

    @property
    def base_image(self) -> str:
        """The base as a user names it (image:tag)."""
        return f"{self.base_manifest.image}:{self.base_manifest.tag}"

    @property
    def pinned_base(self) -> str:
        return self.base_manifest.reference

    @property
    def python(self) -> str:
        return self.base_manifest.interpreter

    @property
    def lock_file(self) -> Path:
        """Every package the image's pip layer installs, pinned (`inv pins --write` makes it)."""
        return LOCKS_DIR / f"{self.name}.txt"

    def device_key(self, device_name: str | None) -> str | None:
        """Map a device name reported by the trainer (e.g. 'NVIDIA H100 80GB HBM3') to a reference key."""
        if not device_name:
            return None
        for key, pattern in self.device_names.items():
            if re.search(pattern, device_name, flags=re.IGNORECASE):
                return key
        return None

    def docker_flags(self) -> list[str]:
        """The profile's `docker run` flags, as a user would type them."""
        flags: list[str] = []
        opts = self.docker_run
        if "gpus" in opts:
            flags += ["--gpus", str(opts["gpus"])]
        if "runtime" in opts:
            flags.append(f"--runtime={opts['runtime']}")
        if "ipc_mode" in opts:
            flags.append(f"--ipc={opts['ipc_mode']}")
        if "network_mode" in opts:
            flags.append(f"--network={opts['network_mode']}")
        if "shm_size" in opts:
            flags.append(f"--shm-size={opts['shm_size']}")
        for cap in opts.get("cap_add", []):
            flags.append(f"--cap-add={cap}")
        for name, limit in opts.get("ulimits", {}).items():
            flags += ["--ulimit", f"{name}={limit}"]
        for key, value in self.env.items():
            flags += ["-e", f"{key}={value}"]
        return flags


def _load(path: Path, model: type[BaseModel], what: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ReprokitError(f"{path}: cannot read {what}: {exc}") from None
    result = {}
    for name, body in (raw or {}).items():
        try:
            result[name] = model.model_validate({"name": name, **(body or {})})
        except ValidationError as exc:
            raise ReprokitError(one_line(f"{path} ({name})", exc)) from None
    return result


@cache
def bases() -> dict[str, Base]:
    return _load(BASES_FILE, Base, "base image manifests")


@cache
def profiles() -> dict[str, Profile]:
    found = _load(PROFILES_FILE, Profile, "accelerator profiles")
    for profile in found.values():
        if profile.base not in bases():
            raise ReprokitError(
                f"{PROFILES_FILE} ({profile.name}): base {profile.base!r} is not in {BASES_FILE.name}; "
                f"known bases: {', '.join(bases())}"
            )
    return found


def get(name: str) -> Profile:
    known = profiles()
    if name not in known:
        raise ReprokitError(f"unknown accelerator {name!r}; known accelerators: {', '.join(known)} (or auto)")
    return known[name]


def _succeeds(command: str) -> bool:
    executable = command.split()[0]
    if executable != "true" and shutil.which(executable) is None:
        return False
    try:
        return subprocess.run(command, shell=True, capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def detect() -> str:
    """The accelerator of this machine, by each profile's detect command."""
    known = profiles()
    for name in DETECTION_ORDER:
        if name in known and _succeeds(known[name].detect):
            return name
    return "cpu"


def resolve(name: str) -> str:
    return detect() if name == "auto" else get(name).name


def device_count(name: str) -> int:
    profile = get(name)
    try:
        out = subprocess.run(profile.device_count, shell=True, capture_output=True, text=True, timeout=30)
        return max(1, int(out.stdout.strip() or 1))
    except (subprocess.TimeoutExpired, ValueError):
        return 1
