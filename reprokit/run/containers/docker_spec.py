"""A cell's Docker container as it is started: its image, the session's runs/ and the data and hub
caches mounted, the environment (what is passed through by name, the image's labels), the profile's
`docker_run` settings and the user it runs as; as the SDK's arguments and as the `docker run` line shown.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.contract.errors import ReprokitError
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell

CONTAINER_RUNS = "/reprokit/runs"
CONTAINER_HF_HOME = "/reprokit/hf-home"
# Where the trainer makes writable views of what is mounted read-only (the --data caches, the hub
# cache): the container's own layer, gone with it; the user's folders are never written.
CONTAINER_SCRATCH = "/tmp/reprokit-scratch"
# Host variables a trainer may need, passed at run time by name (never baked into an image). The
# OpenMP thread count too: a trainer run without a container, in Apptainer or under Slurm inherits it,
# and one in Docker must not be the one that spins a thread per core on a machine the user shares.
PASSTHROUGH_ENV = (
    "HF_TOKEN",
    "HF_ENDPOINT",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "OMP_NUM_THREADS",
)
DOCKER_RUN_KEYS = (
    "gpus", "runtime", "ipc_mode", "network_mode", "shm_size", "ulimits", "cap_add", "user",
    # Device nodes and what may open them, where a vendor has no Docker runtime (AMD: /dev/kfd, /dev/dri).
    "devices", "group_add", "security_opt",
)  # fmt: skip


def hf_home() -> Path:
    """The host's Hugging Face folder (HF_HOME, else ~/.cache/huggingface)."""
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


@dataclass
class ContainerSpec:
    """One cell's container, as the SDK starts it and as `docker run` would."""

    image: str
    name: str
    command: list[str]
    environment: dict[str, str]
    volumes: dict[str, dict[str, str]]
    profile: Profile
    working_dir: str
    user: str | None = None
    passthrough: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def sdk_kwargs(self) -> dict[str, Any]:
        from docker.types import DeviceRequest, Ulimit

        opts = self.profile.docker_run
        kwargs: dict[str, Any] = {
            "image": self.image,
            "name": self.name,
            "command": self.command,
            "environment": {
                **self.profile.env,
                **self.environment,
                **{k: os.environ[k] for k in self.passthrough if k in os.environ},
            },
            "volumes": self.volumes,
            "working_dir": self.working_dir,
            "detach": True,
            "labels": self.labels,
            # An init as PID 1 passes `docker stop`'s SIGTERM on (a PID 1 trainer would ignore it).
            "init": True,
        }
        if self.user:
            kwargs["user"] = self.user
        if "gpus" in opts:
            count = -1 if str(opts["gpus"]) == "all" else int(opts["gpus"])
            kwargs["device_requests"] = [DeviceRequest(count=count, capabilities=[["gpu"]])]
        for key in (
            "runtime",
            "ipc_mode",
            "network_mode",
            "shm_size",
            "cap_add",
            "group_add",
            "security_opt",
        ):
            if key in opts:
                kwargs[key] = opts[key]
        if "devices" in opts:
            kwargs["devices"] = [f"{device}:{device}:rwm" for device in opts["devices"]]
        if "ulimits" in opts:
            kwargs["ulimits"] = [_ulimit(Ulimit, name, limit) for name, limit in opts["ulimits"].items()]
        return kwargs

    def command_line(self) -> str:
        """`docker run` as a user would type it (secrets by name only: `-e HF_TOKEN`)."""
        lines: list[list[str]] = [["docker", "run", "--rm", "--init", "--name", self.name]]
        if self.user:
            lines.append(["--user", self.user])
        flags = self.profile.docker_flags()
        while flags:
            take = 2 if flags[0] in ("--gpus", "--ulimit", "-e", "--group-add", "--security-opt") else 1
            lines.append(flags[:take])
            flags = flags[take:]
        for host, bind in self.volumes.items():
            lines.append(["-v", f"{host}:{bind['bind']}:{bind['mode']}"])
        lines.append(["-w", self.working_dir])
        lines += [["-e", f"{key}={value}"] for key, value in self.environment.items()]
        lines += [["-e", key] for key in self.passthrough]
        lines += [["--label", f"{key}={value}"] for key, value in self.labels.items()]
        lines.append([self.image, *self.command])
        return " \\\n  ".join(" ".join(shlex.quote(t) for t in line) for line in lines)


def _ulimit(ulimit_type, name: str, limit: Any):
    soft, _, hard = str(limit).partition(":")
    return ulimit_type(name=name, soft=int(soft), hard=int(hard or soft))


def non_root_environment(user: str) -> dict[str, str]:
    """What Python and torch need where the uid has no passwd entry in the image: a name for
    getpass.getuser() (inductor's cache dir asks for it, and raises KeyError on torch < 2.13 without
    one) and writable homes for the caches (torch, triton, matplotlib, the hub)."""
    uid = user.split(":")[0]
    return {
        "HOME": "/tmp",
        "USER": f"reprokit-{uid}",
        "LOGNAME": f"reprokit-{uid}",
        "TORCHINDUCTOR_CACHE_DIR": f"/tmp/torchinductor_{uid}",
        "TRITON_CACHE_DIR": f"/tmp/triton_{uid}",
    }


def container_spec(
    cell: Cell,
    run_dir: Path,
    profile: Profile,
    image: str,
    image_labels: dict[str, str] | None = None,
    image_id: str | None = None,
    run_as: str | None = None,
) -> ContainerSpec:
    """The container of one cell: its image, mounts, user and environment."""
    unknown = sorted(set(profile.docker_run) - set(DOCKER_RUN_KEYS))
    if unknown:
        raise ReprokitError(
            f"accelerator {profile.name}: docker_run has {', '.join(unknown)}; "
            f"known keys: {', '.join(DOCKER_RUN_KEYS)}"
        )
    runs = run_dir.resolve().parent
    container_run_dir = f"{CONTAINER_RUNS}/{run_dir.name}"
    environment = {
        "RUN_DIR": container_run_dir,
        "PYTHONUNBUFFERED": "1",
        "REPROKIT_IMAGE_TAG": image,
        "REPROKIT_IMAGE_ID": image_id or "",
        "REPROKIT_IMAGE_LABELS": json.dumps(image_labels or {}, sort_keys=True),
        "REPROKIT_SCRATCH": CONTAINER_SCRATCH,
        # The container's hostname is its id: the trainer records this machine's name beside it (Docker
        # starts cells on this machine only: `launches` is local).
        "REPROKIT_MACHINE": socket.gethostname(),
    }
    volumes = {str(runs): {"bind": CONTAINER_RUNS, "mode": "rw"}}
    for path in cell.data.values():
        # The user's real data, read-only, at the path the trainer's arguments name.
        volumes[path] = {"bind": path, "mode": "ro"}
    hub_home = hf_home()
    if hub_home.is_dir():
        # Read-only: a run must not change the user's cache. The hub's files are read from it (through
        # the trainer's writable view, for the refs and locks huggingface_hub writes); what the libraries
        # write elsewhere (datasets' cache) goes to a scratch HF_HOME.
        volumes[str(hub_home.resolve())] = {"bind": CONTAINER_HF_HOME, "mode": "ro"}
        environment["HF_HUB_CACHE"] = f"{CONTAINER_HF_HOME}/hub"
        environment["HF_HOME"] = "/tmp/hf-home"
    user = run_as or profile.docker_run.get("user")
    if user is None and os.getuid() != 0:
        user = f"{os.getuid()}:{os.getgid()}"
    if user is not None and str(user).split(":")[0] not in ("0", "root"):
        environment.update(non_root_environment(str(user)))
    return ContainerSpec(
        image=image,
        name=f"reprokit-{cell.cell_id}-{secrets.token_hex(3)}",
        command=["bash", f"{container_run_dir}/run.sh"],
        environment=environment,
        volumes=volumes,
        profile=profile,
        working_dir=container_run_dir,
        user=str(user) if user is not None else None,
        passthrough=[key for key in PASSTHROUGH_ENV if key in os.environ],
        # `docker ps --filter label=io.reprokit.run-dir=...` finds the container of a run directory.
        labels={"io.reprokit.cell": cell.cell_id, "io.reprokit.run-dir": str(run_dir.resolve())},
    )
