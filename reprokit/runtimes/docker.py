"""The docker runtime: run.sh inside the accelerator's image, the session's runs/ bind-mounted.

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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import accelerators, images, rundirs
from ..accelerators import Profile
from ..cells import Cell
from ..errors import ReprokitError
from ..render import write_run_dir_inputs

CONTAINER_RUNS = "/reprokit/runs"
CONTAINER_HF_HOME = "/reprokit/hf-home"
POLL_SECONDS = 0.5
STOP_GRACE_S = 10
# Host variables a trainer may need, passed at run time by name (never baked into an image).
PASSTHROUGH_ENV = ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
DOCKER_RUN_KEYS = ("gpus", "runtime", "ipc_mode", "network_mode", "shm_size", "ulimits", "cap_add", "user")


def client(timeout: int = 5):
    import docker

    return docker.from_env(timeout=timeout)


def describe_engine_error(exc: Exception) -> str:
    text = str(exc)
    if "FileNotFoundError" in text or "No such file" in text or "Connection refused" in text:
        return "no Docker engine is running; start dockerd or set DOCKER_HOST"
    if "Permission denied" in text:
        return "the Docker engine refuses this user; add it to the docker group or use rootless Docker"
    return f"the Docker engine does not answer: {text.splitlines()[0][:160] if text else type(exc).__name__}"


def engine_status() -> str | None:
    """None when a Docker engine answers; else why not, in a few words."""
    try:
        from docker.errors import DockerException
    except ImportError:
        return "the docker Python package is not installed"
    try:
        client().ping()
        return None
    except DockerException as exc:
        return describe_engine_error(exc)
    except Exception as exc:  # the SDK raises requests' errors too
        return f"the Docker engine does not answer: {type(exc).__name__}"


def image_available(accelerator: str) -> bool:
    from docker.errors import DockerException, ImageNotFound

    try:
        client().images.get(images.image_tag(accelerators.get(accelerator)))
        return True
    except (ImageNotFound, DockerException):
        return False


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
        for key in ("runtime", "ipc_mode", "network_mode", "shm_size", "cap_add"):
            if key in opts:
                kwargs[key] = opts[key]
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
            take = 2 if flags[0] in ("--gpus", "--ulimit", "-e") else 1
            lines.append(flags[:take])
            flags = flags[take:]
        for host, bind in self.volumes.items():
            lines.append(["-v", f"{host}:{bind['bind']}:{bind['mode']}"])
        lines += [["-e", f"{key}={value}"] for key, value in self.environment.items()]
        lines += [["-e", key] for key in self.passthrough]
        lines += [["--label", f"{key}={value}"] for key, value in self.labels.items()]
        lines.append([self.image, *self.command])
        return " \\\n  ".join(" ".join(shlex.quote(t) for t in line) for line in lines)


def _ulimit(ulimit_type, name: str, limit: Any):
    soft, _, hard = str(limit).partition(":")
    return ulimit_type(name=name, soft=int(soft), hard=int(hard or soft))


def container_spec(
    cell: Cell,
    run_dir: Path,
    profile: Profile,
    image: str,
    image_labels: dict[str, str] | None = None,
    image_id: str | None = None,
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
    }
    volumes = {str(runs): {"bind": CONTAINER_RUNS, "mode": "rw"}}
    hub_home = hf_home()
    if hub_home.is_dir():
        # Read-only: a run must not change the user's cache. The hub's files are read from it;
        # what the libraries write (datasets' cache, locks) goes to a scratch HF_HOME.
        volumes[str(hub_home.resolve())] = {"bind": CONTAINER_HF_HOME, "mode": "ro"}
        environment["HF_HUB_CACHE"] = f"{CONTAINER_HF_HOME}/hub"
        environment["HF_HOME"] = "/tmp/hf-home"
    user = profile.docker_run.get("user")
    if user is None and os.getuid() != 0:
        user = f"{os.getuid()}:{os.getgid()}"
        # An arbitrary uid has no home in the image; caches (torch, matplotlib) need a writable one.
        environment["HOME"] = "/tmp"
    return ContainerSpec(
        image=image,
        name=f"reprokit-{cell.cell_id}-{secrets.token_hex(3)}",
        command=["bash", f"{container_run_dir}/run.sh"],
        environment=environment,
        volumes=volumes,
        profile=profile,
        user=str(user) if user is not None else None,
        passthrough=[key for key in PASSTHROUGH_ENV if key in os.environ],
        # `docker ps --filter label=io.reprokit.run-dir=...` finds the container of a run directory.
        labels={"io.reprokit.cell": cell.cell_id, "io.reprokit.run-dir": str(run_dir.resolve())},
    )


def dry_run_command(cell: Cell, run_dir: Path, profile: Profile, image: str | None = None) -> str:
    """The `docker run` line of a cell, without asking the engine anything."""
    spec = container_spec(cell, run_dir, profile, image or images.image_tag(profile))
    spec.environment.pop("REPROKIT_IMAGE_ID")
    spec.environment.pop("REPROKIT_IMAGE_LABELS")  # known only once the image is inspected
    return spec.command_line()


class DockerRuntime:
    name = "docker"

    def __init__(self, image: str | None = None) -> None:
        self.image = image
        self._client = None
        self._images: dict[str, dict[str, Any]] = {}

    def _engine(self):
        if self._client is None:
            reason = engine_status()
            if reason is not None:
                raise ReprokitError(f"the docker runtime needs a Docker engine: {reason}")
            self._client = client(timeout=120)
        return self._client

    def _image(self, profile: Profile) -> dict[str, Any]:
        if profile.name not in self._images:
            tag = self.image or images.image_tag(profile)
            info = images.image_info(tag, self._engine())
            if info is None:
                raise ReprokitError(
                    f"no image {tag} here; build it with `inv build --accelerator {profile.name}`"
                )
            self._images[profile.name] = info
        return self._images[profile.name]

    def run(
        self,
        cell: Cell,
        run_dir: Path,
        profile: Profile,
        timeout: float | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict:
        image = self._image(profile)
        engine = self._engine()
        write_run_dir_inputs(cell, profile, run_dir)
        spec = container_spec(cell, run_dir, profile, image["tag"], image["labels"], image["id"])
        from docker.errors import DockerException

        container = None
        exit_code: int | None = None
        reason: str | None = None
        try:
            container = engine.containers.run(**spec.sdk_kwargs())
            exit_code, reason = _supervise(container, run_dir, timeout, progress)
        except KeyboardInterrupt:
            if container is not None:
                _stop(container)
                exit_code = _exit_code(container)
            rundirs.finish(run_dir, exit_code, "interrupted")
            raise
        except DockerException as exc:
            reason = f"docker: {str(exc).splitlines()[0][:240]}"
        finally:
            if container is not None:
                # Already gone is fine: its output and exit code were kept.
                with contextlib.suppress(DockerException):
                    container.remove(force=True)
        return rundirs.finish(run_dir, exit_code, reason)


def _supervise(
    container, run_dir: Path, timeout: float | None, progress: Callable[[str], None] | None
) -> tuple[int | None, str | None]:
    """Stream the container's output into stdout.log until it exits; returns (exit code, failure reason)."""
    started = time.monotonic()
    streamer = threading.Thread(target=_copy_logs, args=(container, run_dir / "stdout.log"), daemon=True)
    streamer.start()
    reason = None
    while streamer.is_alive():
        if timeout is not None and time.monotonic() - started > timeout:
            _stop(container)
            reason = "timeout"
            break
        if progress is not None:
            progress(
                rundirs.last_throughput(run_dir)
                or f"running {time.monotonic() - started:.0f}s in a container"
            )
        time.sleep(POLL_SECONDS)
    streamer.join(STOP_GRACE_S)
    exit_code = _exit_code(container)
    if reason is None and _oom_killed(container):
        reason = "out of memory: the container was killed by the kernel's OOM killer"
    return exit_code, reason


def _copy_logs(container, log_path: Path) -> None:
    from docker.errors import DockerException

    with open(log_path, "ab") as log:
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                log.write(chunk)
                log.flush()
        except DockerException:
            pass  # the container went away; the exit code says how


def _stop(container) -> None:
    from docker.errors import DockerException

    with contextlib.suppress(DockerException):
        container.stop(timeout=STOP_GRACE_S)


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
