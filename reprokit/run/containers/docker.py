"""Docker: run.sh inside the accelerator's image, the session's runs/ bind-mounted.

The whole runs/ folder is mounted (not only the cell's run directory), so a cell that consumes
another's output (`$RUN_DIR/../<other cell>/checkpoint`) finds it. The container runs as the
host user when the kit does not run as root, so the results it writes belong to the user (a
root-owned results folder cannot be cleaned up without sudo); a profile can say otherwise with
`docker_run: {user: ...}` (a device plugin that needs root).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit import images
from reprokit.contract import rundirs
from reprokit.contract.errors import ReprokitError, StartFailed
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers import warden
from reprokit.run.containers.base import LOCAL, Container, Launch
from reprokit.run.handles import Ended, Handle

CONTAINER_RUNS = "/reprokit/runs"
CONTAINER_HF_HOME = "/reprokit/hf-home"
# Where the trainer makes writable views of what is mounted read-only (the --data caches, the hub
# cache): the container's own layer, gone with it; the user's folders are never written.
CONTAINER_SCRATCH = "/tmp/reprokit-scratch"
STOP_GRACE_S = warden.STOP_GRACE_S
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


@dataclass(frozen=True)
class DockerOptions:
    # An image tag to run in, instead of the one `inv build` makes for this kit.
    image: str | None = None
    # uid[:gid] the container runs as (default: the kit's user; root when the kit runs as root).
    user: str | None = None


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


class DockerHandle(Handle):
    """A cell's container: its output streamed into stdout.log, removed when closed."""

    def __init__(self, engine, spec: ContainerSpec, run_dir: Path) -> None:
        from docker.errors import DockerException

        try:
            self.container = engine.containers.run(**spec.sdk_kwargs())
        except DockerException as exc:
            raise StartFailed(f"docker: {str(exc).splitlines()[0][:240]}") from None
        except BaseException:
            # Ctrl-C while the engine made it: it may run already, and no one would stop it.
            _remove(engine, spec.name)
            raise
        try:
            self.streamer = threading.Thread(
                target=_copy_logs, args=(self.container, run_dir / rundirs.FILES["stdout"]), daemon=True
            )
            self.streamer.start()
            # The container outlives a kit killed with -9 unless someone removes it: the warden does.
            self.warden = subprocess.Popen(
                [sys.executable, "-m", "reprokit.run.containers.warden", self.container.id],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=warden.preexec(),
            )
        except BaseException:
            _remove(engine, self.container.id)
            raise

    def poll(self) -> Ended | None:
        if self.streamer.is_alive():
            return None
        exit_code = _exit_code(self.container)
        reason = (
            "out of memory: the container was killed by the kernel's OOM killer"
            if _oom_killed(self.container)
            else None
        )
        return Ended(exit_code, reason)

    def stop(self) -> Ended:
        from docker.errors import DockerException

        with contextlib.suppress(DockerException):
            self.container.stop(timeout=STOP_GRACE_S)
        self.streamer.join(STOP_GRACE_S)
        return Ended(_exit_code(self.container))

    def describe(self, elapsed: float) -> str:
        return f"running {elapsed:.0f}s in a container"

    def close(self) -> None:
        from docker.errors import DockerException

        self.streamer.join(STOP_GRACE_S)
        # Already gone is fine: its output and exit code were kept.
        with contextlib.suppress(DockerException):
            self.container.remove(force=True)
        self.warden.kill()  # its container is gone: nothing left for it to stop
        self.warden.wait()

    def process(self) -> tuple[int, int]:
        # While the warden lives, the container may still run: a resume must not start a second one.
        return self.warden.pid, self.warden.pid


def _remove(engine, name: str) -> None:
    """Remove a container the kit started, running or not; one already gone is fine."""
    from docker.errors import DockerException

    with contextlib.suppress(DockerException):
        engine.containers.get(name).remove(force=True)


def _copy_logs(container, log_path: Path) -> None:
    """The container's output into stdout.log until it ends (the handle's poll reads this thread's
    life as the container's). A log the storage refuses (a full disk) is given up, never the stream:
    the cell's end is still followed, and its summary's write names the storage in one line."""
    from docker.errors import DockerException

    try:
        log = open(log_path, "ab")  # noqa: SIM115 -- closed below, once the stream has ended
    except OSError:
        log = None
    try:
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            if log is None:
                continue
            try:
                log.write(chunk)
                log.flush()
            except OSError:
                with contextlib.suppress(OSError):
                    log.close()
                log = None
    except DockerException:
        pass  # the container went away; the exit code says how
    finally:
        if log is not None:
            with contextlib.suppress(OSError):
                log.close()


def _exit_code(container) -> int | None:
    try:
        return int(container.wait(timeout=STOP_GRACE_S + 20)["StatusCode"])
    except Exception:  # requests' timeouts are not DockerExceptions
        return None


def _oom_killed(container) -> bool:
    from docker.errors import DockerException

    try:
        container.reload()
        return bool(container.attrs.get("State", {}).get("OOMKilled"))
    except DockerException:
        return False


class Docker(Container):
    name = "docker"
    options_class = DockerOptions
    launches = frozenset({LOCAL})

    def __init__(self, options: DockerOptions) -> None:
        super().__init__(options)
        self._engine = None
        self._images: dict[str, dict[str, Any]] = {}

    def check(self, profile: Profile, runtime: str) -> None:
        self._image(profile)

    def _client(self):
        if self._engine is None:
            reason = images.engine_status()
            if reason is not None:
                raise ReprokitError(f"the docker container platform needs a Docker engine: {reason}")
            self._engine = images.client(timeout=120)
        return self._engine

    def _image(self, profile: Profile) -> dict[str, Any]:
        if profile.name not in self._images:
            tag = self.options.image or images.image_tag(profile)
            info = images.image_info(tag, self._client())
            if info is None:
                raise ReprokitError(
                    f"no image {tag} here; build it with `inv build --accelerator {profile.name}`"
                )
            self._images[profile.name] = info
        return self._images[profile.name]

    def launch(self, cell: Cell, run_dir: Path, profile: Profile, how: str, mount: Path) -> Launch:
        # Through the engine's API, not a command: the handle follows the container itself.
        shown = container_spec(
            cell, run_dir, profile, self.options.image or images.image_tag(profile), run_as=self.options.user
        )
        shown.environment.pop("REPROKIT_IMAGE_ID")
        shown.environment.pop("REPROKIT_IMAGE_LABELS")  # known only once the image is inspected

        def start() -> Handle:
            image = self._image(profile)
            if self.options.user and os.getuid() == 0:
                # The kit runs as root and the container as another uid: the run directory becomes
                # theirs, or they could not write their results into it.
                uid, _, gid = self.options.user.partition(":")
                for path in [run_dir, *run_dir.rglob("*")]:
                    os.chown(path, int(uid), int(gid or uid))
            spec = container_spec(
                cell, run_dir, profile, image["tag"], image["labels"], image["id"], run_as=self.options.user
            )
            return DockerHandle(self._client(), spec, run_dir)

        return Launch(
            image=shown.image,
            shown="# in the image, with the session's runs/ mounted:\n" + shown.command_line() + "\n",
            start=start,
        )
