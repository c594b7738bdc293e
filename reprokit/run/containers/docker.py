"""Docker: run.sh inside the accelerator's image, the session's runs/ bind-mounted.

The whole runs/ folder is mounted (not only the cell's run directory), so a cell that consumes
another's output (`$RUN_DIR/../<other cell>/checkpoint`) finds it. The container runs as the
host user when the kit does not run as root, so the results it writes belong to the user (a
root-owned results folder cannot be cleaned up without sudo); a profile can say otherwise with
`docker_run: {user: ...}` (a device plugin that needs root).

The container as it is started (mounts, environment, user, the `docker run` line): docker_spec.py.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit import images
from reprokit.contract import rundirs
from reprokit.contract.errors import ReprokitError, StartFailed
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.run.containers import warden
from reprokit.run.containers.base import LOCAL, Container, Launch
from reprokit.run.containers.docker_spec import ContainerSpec, container_spec
from reprokit.run.handles import Ended, Handle

STOP_GRACE_S = warden.STOP_GRACE_S


@dataclass(frozen=True)
class DockerOptions:
    # An image tag to run in, instead of the one `inv build` makes for this kit.
    image: str | None = None
    # uid[:gid] the container runs as (default: the kit's user; root when the kit runs as root).
    user: str | None = None


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
