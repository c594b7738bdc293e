"""The docker runtime: run.sh inside the accelerator's image, the run directory bind-mounted."""

from __future__ import annotations

from .. import accelerators, images


def client(timeout: int = 5):
    import docker

    return docker.from_env(timeout=timeout)


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
        text = str(exc)
        if "FileNotFoundError" in text or "No such file" in text or "Connection refused" in text:
            return "no Docker engine is running (start dockerd, or set DOCKER_HOST)"
        return f"the Docker engine does not answer: {text.splitlines()[0][:160]}"
    except Exception as exc:  # the SDK raises requests' errors too
        return f"the Docker engine does not answer: {type(exc).__name__}"


def image_available(accelerator: str) -> bool:
    from docker.errors import DockerException, ImageNotFound

    try:
        client().images.get(images.image_tag(accelerators.get(accelerator)))
        return True
    except (ImageNotFound, DockerException):
        return False
