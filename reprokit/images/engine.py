"""The Docker engine: one client, and one line that says why there is none."""

from __future__ import annotations

from reprokit.contract.errors import ReprokitError

# A build can stay silent for minutes (pip unpacking torch, the daemon committing a multi-GB layer).
BUILD_HTTP_TIMEOUT_S = 6 * 3600


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
        import docker
        from docker.errors import DockerException
    except ImportError:
        return "the docker Python package is not installed"
    try:
        docker.from_env(timeout=5).ping()
        return None
    except DockerException as exc:
        return describe_engine_error(exc)
    except Exception as exc:  # the SDK raises requests' errors too
        return f"the Docker engine does not answer: {type(exc).__name__}"


def client(timeout: int = BUILD_HTTP_TIMEOUT_S):
    """A client of an engine that answers, or a ReprokitError that says why there is none."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise ReprokitError("the docker Python package is not installed (pip install docker)") from None
    try:
        found = docker.from_env(timeout=timeout)
        found.ping()
        return found
    except DockerException as exc:
        raise ReprokitError(describe_engine_error(exc)) from None
    except Exception as exc:
        raise ReprokitError(f"the Docker engine does not answer: {type(exc).__name__}") from None
