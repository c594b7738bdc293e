"""Accelerator profiles (accelerators.yaml, beside this file): base image, packages, run flags, launcher."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ReprokitError
from ..recipes import _format_errors

PROFILES_FILE = Path(str(files(__name__))) / "accelerators.yaml"
# Detection order: the most specific hardware first; cpu always matches.
DETECTION_ORDER = ("gaudi2", "cuda", "cpu")


class Slurm(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gres: str | None = None
    nic_env: str | None = None
    distributed_backend: Literal["nccl", "hccl", "gloo"]


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    base_image: str = Field(pattern=r"^[^\s:]+(:[^\s]+)?$")
    digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    python: str
    system_packages: list[str] = Field(default_factory=list)
    requirements: list[str]
    docker_run: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    launcher: Literal["torchrun", "mpirun"]
    detect: str
    device_count: str
    device_names: dict[str, str]
    slurm: Slurm

    @property
    def pinned_base(self) -> str:
        return f"{self.base_image}@{self.digest}" if self.digest else self.base_image

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


@cache
def profiles() -> dict[str, Profile]:
    try:
        raw = yaml.safe_load(PROFILES_FILE.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ReprokitError(f"{PROFILES_FILE}: cannot read accelerator profiles: {exc}") from None
    result = {}
    for name, body in (raw or {}).items():
        try:
            result[name] = Profile.model_validate({"name": name, **(body or {})})
        except ValidationError as exc:
            raise ReprokitError(_format_errors(f"{PROFILES_FILE} ({name})", exc)) from None
    return result


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
