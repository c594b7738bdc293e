"""Accelerator profiles (docker/accelerators.yaml, found through reprokit/contract/layout.py): base image,
packages, run flags, launcher, device names; and the base images' manifests (docker/bases.yaml): what
each ships that the kit's pins touch."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reprokit.contract.errors import ReprokitError
from reprokit.contract.layout import DOCKER
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
    # What `--container auto` means on Slurm: the image's stack runs the cells on the nodes.
    container: Literal["pyxis", "apptainer", "none"] = "none"


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


class DeviceListing(BaseModel):
    """How a machine's devices are listed: a command, and the patterns of its output's lines."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    command: str
    # A device's line; its `model` group names the device.
    device: str
    # A line of a partition of the device above it (a MIG device): what a process gets instead of the
    # whole device, when there is one.
    partition: str | None = None


@dataclass(frozen=True)
class Devices:
    """What this machine has of an accelerator: its devices' models and their partitions (MIG devices)."""

    accelerator: str
    models: tuple[str, ...]
    partitions: int = 0

    @property
    def count(self) -> int:
        return len(self.models)

    @property
    def model(self) -> str | None:
        return self.models[0] if self.models else None

    def describe(self) -> str:
        mig = f", in MIG mode: {self.partitions} MIG device(s)" if self.partitions else ""
        return f"{self.count} x {self.model}{mig}"

    def refusal(self, wanted: int, asked: bool = True) -> str | None:
        """Why `wanted` ranks of one cell cannot run on these devices, in a line; None where they can.
        `asked`: the user gave the count (--devices); otherwise the published cells want whole devices."""
        if self.partitions and (wanted > 1 or not asked):
            return (
                f"this machine's {self.accelerator} GPUs are in MIG mode ({self.describe()}): a CUDA process sees "
                f"one MIG device, a slice of a GPU, and NCCL cannot join MIG devices, so {wanted} rank(s) on whole "
                "devices cannot run; turn MIG off (nvidia-smi -mig 0, as root), or run one rank on one MIG device "
                "with --devices 1"
            )
        if wanted > self.count:
            return f"--devices {wanted}: this machine has {self.describe()}"
        return None


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
    # Modules the trainers need beyond the train extra, in the Python that runs them (Habana's bridge
    # on a Gaudi): the image has them; this machine's Python is checked for them without importing.
    python_modules: list[str] = Field(default_factory=list)
    detect: str
    # None: one device (the CPU).
    devices: DeviceListing | None = None
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
        """The recipes' key of a device as its driver or the trainer names it ('NVIDIA H100 80GB HBM3'
        -> h100): the whole name matched against `device_names`, in their order; None for a device no
        key names (its cells run with no reference)."""
        if not device_name:
            return None
        for key, pattern in self.device_names.items():
            if re.fullmatch(pattern, device_name.strip(), flags=re.IGNORECASE):
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


# Seconds a driver's listing tool may take (a wedged driver hangs nvidia-smi for minutes).
TOOL_TIMEOUT_S = 30


def run_tool(command: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """A driver's tool, run as its command says (no shell), in a process group of its own: on a hang
    the whole group is killed, so nothing it started outlives the kit's limit. Raises
    subprocess.TimeoutExpired after killing it, FileNotFoundError where it is not installed."""
    argv = shlex.split(command)
    timeout = TOOL_TIMEOUT_S if timeout is None else timeout
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Before it is reaped: its pid, the group's id, cannot have been reused yet.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def tool_failure(command: str) -> str | None:
    """Why `command` (a driver's listing tool) gave no listing, in a phrase; None when it exited 0."""
    try:
        done = run_tool(command)
    except subprocess.TimeoutExpired as timed_out:
        return f"`{command}` gave no answer in {timed_out.timeout:.0f} s (stopped)"
    except OSError as error:
        return f"`{command}` could not run: {error.strerror or error}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"`{command}` exited {done.returncode}{': ' + said[-1].strip() if said else ''}"
    return None


def detect() -> str:
    """The accelerator of this machine, by each profile's detect command. A profile's tool that is
    not installed means not that accelerator; one that is installed but fails or hangs is a refusal
    naming it (a broken driver is not a CPU machine: its smoke cells would be no answer)."""
    known = profiles()
    for name in DETECTION_ORDER:
        if name not in known:
            continue
        command = known[name].detect
        if command == "true":
            return name
        if shutil.which(shlex.split(command)[0]) is None:
            continue
        failure = tool_failure(command)
        if failure is None:
            return name
        raise ReprokitError(
            f"--accelerator auto: the {name} driver's tool does not answer ({failure}); fix the driver, or "
            f"name the accelerator: --accelerator cpu, or --accelerator {name} --devices N"
        )
    return "cpu"


def resolve(name: str) -> str:
    return detect() if name == "auto" else get(name).name


class CannotCount(ReprokitError):
    """This machine's devices cannot be listed (the driver's tool is missing, fails or hangs): a count is
    never guessed, and one given with --devices is used as given (planner.fitted_devices, the
    preflight's devices check), which the refusal advises."""

    def __init__(
        self, accelerator: str, why: str, advice: str = "fix the driver, or give the count with --devices N"
    ):
        self.reason = f"cannot count this machine's {accelerator} devices: {why}"
        super().__init__(f"{self.reason}; {advice}")


def devices_here(name: str) -> Devices:
    """This machine's devices of accelerator `name`, listed by its profile's command. A listing that
    cannot be made (the tool is missing, fails, lists nothing) is a one-line error: a device count is
    never guessed."""
    profile = get(name)
    listing = profile.devices
    if listing is None:
        return Devices(name, ("cpu",))
    executable = shlex.split(listing.command)[0]
    if shutil.which(executable) is None:
        raise CannotCount(
            name,
            f"{executable} is not on PATH (the driver's tools)",
            "install them, or give the count with --devices N",
        )
    try:
        done = run_tool(listing.command)
    except subprocess.TimeoutExpired as timed_out:
        raise CannotCount(
            name, f"`{listing.command}` gave no answer in {timed_out.timeout:.0f} s (stopped)"
        ) from None
    except OSError as error:
        raise CannotCount(name, f"`{listing.command}` could not run: {error.strerror or error}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CannotCount(
            name, f"`{listing.command}` exited {done.returncode}{': ' + said[-1].strip() if said else ''}"
        )
    models: list[str] = []
    partitions = 0
    for line in done.stdout.splitlines():
        found = re.search(listing.device, line)
        if found:
            models.append(found.groupdict().get("model") or line.strip())
        elif listing.partition and re.search(listing.partition, line):
            partitions += 1
    if not models:
        raise CannotCount(name, f"`{listing.command}` lists none")
    return Devices(name, tuple(models), partitions)


def device_count(name: str) -> int:
    """The devices one cell's ranks can use here (one error line where they cannot be counted)."""
    return devices_here(name).count
