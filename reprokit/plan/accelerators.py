"""The accelerators: one folder each under `accelerators/` (found through reprokit/contract/layout.py),
discovered, never listed in code. A folder holds its profile (`profile.yaml`: base image, packages, run
flags, launcher, device names, Slurm), its base image's facts (`base.yaml`: what the base ships that the
kit's pins touch, with their sources), its lock (`lock.txt`) and the trainers' vendor code
(`trainer.py`: energy and device memory, loaded by reprokit_trainers/common/vendor.py, never by the host).
What this machine has of one is reprokit/plan/listing.py's."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reprokit.contract.errors import ReprokitError
from reprokit.contract.layout import ACCELERATORS
from reprokit.plan.validation import one_line

PROFILE_FILE = "profile.yaml"
BASE_FILE = "base.yaml"
LOCK_FILE = "lock.txt"


class Slurm(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    gres: str | None = None
    nic_env: str | None = None
    # torch.distributed's name of the collective library (ROCm's RCCL is torch's `nccl`).
    distributed_backend: Literal["nccl", "hccl", "gloo"]
    # What `--container auto` means on Slurm: the image's stack runs the cells on the nodes.
    container: Literal["pyxis", "apptainer", "none"] = "none"
    # What `apptainer exec` is given to see the devices (--nv: NVIDIA's, --rocm: AMD's).
    apptainer_flags: list[str] = Field(default_factory=list)


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    url: str
    title: str
    what: str


class StandIn(BaseModel):
    """CI's stand-in for a vendor base: what it preinstalls in its place and what it cannot mimic; or
    (`of`) another base's stand-in, built once for both, where the same Python and framework stand in."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    of: str | None = None
    python: str | None = None
    packages: list[str] = Field(default_factory=list)
    system_packages: list[str] = Field(default_factory=list)
    differences: list[str]

    @model_validator(mode="after")
    def _one_kind(self) -> StandIn:
        if self.of is None and (self.python is None or not self.packages):
            raise ValueError(
                "a stand-in names its python and packages, or the base whose stand-in it is (of)"
            )
        if self.of is not None and (self.python or self.packages or self.system_packages):
            raise ValueError("a stand-in `of` another base takes that one's python and packages")
        return self


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
    # Rank binding (scripts/jobs/bind-rank.sh.j2): a command printing the PCI address of device
    # `{device}` as its last word, and the variable through which Slurm hands a job its devices.
    bus_id: str | None = None
    visible_env: str | None = None


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    # The folder it was found in (accelerators/<name>/): its base, lock and vendor code are beside it.
    folder: Path = Field(exclude=True)
    description: str
    # --accelerator auto tries the profiles in this order, the most specific hardware first; cpu last.
    detection_order: int
    base: str = Field(description="the base image, by its name in its folder's base.yaml")
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
    # The trainers' torch must be built for it: the `torch.version` attribute such a build sets (cuda,
    # hip); its devices are counted through torch.cuda where `torch_device` is cuda. None: any build.
    torch_build: str | None = None
    torch_device: Literal["cuda", "hpu", "cpu"] = "cpu"
    # The recipes' variants written for these accelerators run here as written (ROCm's torch is
    # CUDA's API over HIP): a variant's `accelerators: [cuda]` admits it.
    runs_variants_of: list[str] = Field(default_factory=list)
    # None: one device (the CPU).
    devices: DeviceListing | None = None
    device_names: dict[str, str]
    slurm: Slurm

    def runs(self, variant_accelerators: list[str] | None) -> bool:
        """Whether a variant that runs on `variant_accelerators` (None: any) runs on this accelerator."""
        if variant_accelerators is None:
            return True
        return bool({self.name, *self.runs_variants_of} & set(variant_accelerators))

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
        return self.folder / LOCK_FILE

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
        for device in opts.get("devices", []):
            flags.append(f"--device={device}")
        for group in opts.get("group_add", []):
            flags += ["--group-add", str(group)]
        for option in opts.get("security_opt", []):
            flags += ["--security-opt", str(option)]
        for name, limit in opts.get("ulimits", {}).items():
            flags += ["--ulimit", f"{name}={limit}"]
        for key, value in self.env.items():
            flags += ["-e", f"{key}={value}"]
        return flags


def _read(path: Path, what: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ReprokitError(f"{path}: cannot read {what}: {exc}") from None
    if raw is not None and not isinstance(raw, dict):
        raise ReprokitError(f"{path}: {what} is not a mapping of keys")
    return raw or {}


def folders() -> list[Path]:
    """The accelerators' folders: each folder of accelerators/ that holds a profile.yaml."""
    return sorted(p.parent for p in ACCELERATORS.glob(f"*/{PROFILE_FILE}"))


@cache
def bases() -> dict[str, Base]:
    """Every accelerator folder's base images (base.yaml: name -> facts), by name."""
    found: dict[str, Base] = {}
    for folder in folders():
        path = folder / BASE_FILE
        for name, body in _read(path, "base image facts").items():
            if name in found:
                raise ReprokitError(f"{path}: base {name!r} is also in another accelerator's base.yaml")
            try:
                found[name] = Base.model_validate({"name": name, **(body or {})})
            except ValidationError as exc:
                raise ReprokitError(one_line(f"{path} ({name})", exc)) from None
    return found


@cache
def profiles() -> dict[str, Profile]:
    """Every accelerator folder's profile, by the folder's name, in detection order."""
    found: dict[str, Profile] = {}
    for folder in folders():
        path = folder / PROFILE_FILE
        try:
            profile = Profile.model_validate(
                {**_read(path, "an accelerator profile"), "name": folder.name, "folder": folder}
            )
        except ValidationError as exc:
            raise ReprokitError(one_line(str(path), exc)) from None
        if profile.base not in bases():
            raise ReprokitError(
                f"{path}: base {profile.base!r} is not in {folder / BASE_FILE}; known bases: {', '.join(bases())}"
            )
        standin = profile.base_manifest.standin
        if standin is not None and standin.of is not None and standin.of not in bases():
            raise ReprokitError(
                f"{folder / BASE_FILE}: standin of {standin.of!r}: no such base; known: {', '.join(bases())}"
            )
        found[profile.name] = profile
    return dict(sorted(found.items(), key=lambda item: (item[1].detection_order, item[0])))


def get(name: str) -> Profile:
    known = profiles()
    if name not in known:
        raise ReprokitError(f"unknown accelerator {name!r}; known accelerators: {', '.join(known)} (or auto)")
    return known[name]


def flag_help(auto: str = "this machine's; default") -> str:
    """The one help text of --accelerator: the accelerators' folders found, and auto (read at import:
    the folders' names only, so that a broken profile is said by the command that reads it)."""
    return f"{', '.join(folder.name for folder in folders())} or auto ({auto})"
