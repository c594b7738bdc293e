"""A cell's container dies with the kit that started it. The engine owns a container, so the kernel's
request that ends a trainer with its kit (handles.die_with_the_kit) cannot reach it; this small
child process of the kit receives that signal instead, stops the container it watches (its trainer
gets SIGTERM, then SIGKILL after the grace) and removes it, as the kit itself does on every other way
out: python -m reprokit.run.containers.warden CONTAINER_ID."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable

from reprokit.run.handles import die_with_the_kit

# How long a container gets between SIGTERM to its trainer and SIGKILL, for the kit and the warden.
STOP_GRACE_S = 10


def preexec() -> Callable[[], None]:
    """What the kit's child runs before it becomes the warden: SIGTERM blocked from the fork on (the
    mask survives exec), so a kit that dies while the warden's interpreter still starts leaves a
    pending signal for the warden to take, not a warden killed by the signal's default action."""
    request = die_with_the_kit()

    def block_then_request() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if request is not None:
            request()

    return block_then_request


def main(argv: list[str]) -> None:
    (container_id,) = argv
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # run by hand: blocked here
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the kit's to handle, not ours
    # Imported before the wait: a second SIGTERM during the import (the kernel sends one for each
    # process the warden is reparented to that ends) once re-entered a handler mid-import.
    import docker
    from docker.errors import DockerException

    signal.sigwait({signal.SIGTERM})  # taken here, not in a handler: nothing can interrupt the stop
    # Already gone, or no engine to ask: nothing left to stop from here.
    with contextlib.suppress(DockerException):
        container = docker.from_env(timeout=STOP_GRACE_S + 20).containers.get(container_id)
        container.stop(timeout=STOP_GRACE_S)
        container.remove(force=True)


if __name__ == "__main__":
    main(sys.argv[1:])
