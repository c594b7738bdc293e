"""A cell's container dies with the kit that started it. The engine owns a container, so the kernel's
request that ends a trainer with its kit (handles.die_with_the_kit) cannot reach it; this small
child process of the kit receives that signal instead and stops the container it watches:
python -m reprokit.run.containers.warden CONTAINER_ID."""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any

# As long as the kit's own stop waits: SIGTERM to the trainer, then SIGKILL.
STOP_GRACE_S = 10


def _stop(container_id: str) -> None:
    import docker
    from docker.errors import DockerException

    # Already gone, or no engine to ask: nothing left to stop from here.
    with contextlib.suppress(DockerException):
        docker.from_env(timeout=STOP_GRACE_S + 20).containers.get(container_id).stop(timeout=STOP_GRACE_S)


def main(argv: list[str]) -> None:
    (container_id,) = argv

    def stop(signum: int, frame: Any) -> None:
        _stop(container_id)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the kit's to handle, not ours
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
