"""BuildKit through the Engine API, as the kit builds: which builder an engine gives, the build request,
and BuildKit's progress read back.

The Docker SDK only speaks the legacy builder (docker/docker-py#2230), and the docker CLI needs the
buildx plugin for BuildKit. The engine itself runs BuildKit for any client that asks
(`POST /build?version=2`, API 1.39 on; the build context uploaded as the request's body), and from
API 1.41 (Docker 20.10) its built-in Dockerfile frontend takes `RUN --mount=type=cache` without a
`# syntax=` line, which would make BuildKit pull a frontend image from Docker Hub (an offline build
cannot). Its progress comes as `moby.buildkit.trace` messages: base64 protobuf StatusResponses
(moby/buildkit api/services/control/control.proto), of which the kit reads the steps and their
output.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The first API version whose built-in frontend takes RUN --mount (Docker Engine 20.10).
BUILDKIT_API = (1, 41)
BUILDERS = ("auto", "buildkit", "legacy")


@dataclass(frozen=True)
class Builder:
    name: str  # buildkit | legacy
    why: str

    @property
    def buildkit(self) -> bool:
        return self.name == "buildkit"


def choose(version: dict[str, Any], wanted: str = "auto") -> Builder:
    """The builder of an engine (its `docker version` answer): BuildKit where it takes cache mounts."""
    engine = f"engine {version.get('Version', '?')}, API {version.get('ApiVersion', '?')}"
    try:
        api = tuple(int(part) for part in str(version.get("ApiVersion", "0.0")).split(".")[:2])
    except ValueError:
        api = (0, 0)
    capable = api >= BUILDKIT_API and version.get("Os", "linux") == "linux"
    if wanted == "legacy":
        return Builder("legacy", f"asked for ({engine})")
    if wanted == "buildkit" or capable:
        why = "asked for" if wanted == "buildkit" else "the engine has it"
        return Builder("buildkit", f"{why} ({engine}); pip's downloads kept in a cache mount")
    return Builder(
        "legacy",
        f"{engine}: no BuildKit with cache mounts before API {'.'.join(map(str, BUILDKIT_API))}; "
        "the framework layer is reused while its pins hold, and `inv wheelhouse` into a kept folder "
        "downloads only what changed",
    )


def build_stream(api, context, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """POST /build?version=2 (BuildKit) with the context as the body; the engine's JSON messages."""
    query = {
        **{k: v for k, v in params.items() if v is not None and k not in {"buildargs", "labels"}},
        "buildargs": json.dumps(params.get("buildargs") or {}),
        "labels": json.dumps(params.get("labels") or {}),
        "version": "2",
    }
    # The SDK's own request helpers (docker 7.1.0): its build() has no way to ask for BuildKit.
    response = api._post(
        api._url("/build"),
        data=context,
        params=query,
        headers={"Content-Type": "application/x-tar"},
        stream=True,
        timeout=None,
    )
    api._raise_for_status(response)
    yield from api._stream_helper(response, decode=True)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"protobuf wire type {wire} is not in BuildKit's status messages")
        yield number, value


@dataclass
class Step:
    digest: str
    name: str
    cached: bool = False
    started: float | None = None  # seconds since the epoch
    completed: float | None = None
    error: str = ""


def _seconds(timestamp: bytes) -> float:
    """A google.protobuf.Timestamp {seconds = 1; nanos = 2} in seconds."""
    parts = {k: v for k, v in _fields(timestamp) if isinstance(v, int)}
    return parts.get(1, 0) + parts.get(2, 0) / 1e9


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    # (step digest, output bytes)
    logs: list[tuple[str, bytes]] = field(default_factory=list)


def decode(aux: str) -> Trace:
    """One moby.buildkit.trace message: StatusResponse {vertexes = 1; statuses = 2; logs = 3; ...}, a
    Vertex {digest = 1; name = 3; cached = 4; started = 5; completed = 6; error = 7}, a VertexLog
    {vertex = 1; msg = 4}. A step comes again in later messages as it starts, is found cached, ends."""
    trace = Trace()
    for number, value in _fields(base64.b64decode(aux)):
        if number == 1 and isinstance(value, bytes):
            step = Step("", "")
            for key, part in _fields(value):
                if key == 1:
                    step.digest = part.decode()
                elif key == 3:
                    step.name = part.decode(errors="replace")
                elif key == 4:
                    step.cached = bool(part)
                elif key == 5:
                    step.started = _seconds(part)
                elif key == 6:
                    step.completed = _seconds(part)
                elif key == 7:
                    step.error = part.decode(errors="replace")
            trace.steps.append(step)
        elif number == 3 and isinstance(value, bytes):
            parts = dict(_fields(value))
            trace.logs.append((bytes(parts.get(1, b"")).decode(), bytes(parts.get(4, b""))))
    return trace


def shown(step: Step) -> str:
    """A finished step in one line: its name (whitespace folded, cut) and CACHED or its duration."""
    name = " ".join(step.name.split())
    name = name if len(name) <= 120 else f"{name[:60]} ... {name[-55:]}"
    if step.cached:
        return f"{name}  CACHED"
    if step.started is not None and step.completed is not None:
        return f"{name}  {step.completed - step.started:.1f}s"
    return name
