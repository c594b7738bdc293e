"""An image's build as it runs: each of the Dockerfile's steps shown as it starts and ends, the newest
output line beside it, the whole output in the build's log, and a failure said in one line (pip's
hash refusals by name, else the step's last error line). build.py plans the build and starts it here."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from reprokit.contract.errors import ReprokitError
from reprokit.contract.files import open_append
from reprokit.images import buildkit

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# pip's words for a file whose sha256 is not the lock's, and for a pin without one.
HASH_MISMATCH = "DO NOT MATCH THE HASHES"
HASH_MISSING = "Hashes are required in --require-hashes mode"


def failure(lines: list[str], error: str) -> str:
    """Why a build failed, in one line: pip's hash refusals said as such (naming the package), else the
    last error line of the step's output, else the engine's own words."""
    text = [ANSI.sub("", line).strip() for line in lines if line.strip()]
    if any(HASH_MISMATCH in line for line in text):
        start = next(i for i, line in enumerate(text) if HASH_MISMATCH in line)
        packages = [
            line.split(" from ")[0] for line in text[start + 1 :] if " from " in line and "==" in line
        ]
        return (
            f"pip refused {', '.join(packages) or 'a file'}: the file fetched does not match the lock's sha256 "
            "(a wheelhouse or index serving another file than was locked; if the index changed it, "
            "rewrite the lock with `inv pins --write`)"
        )
    if any(HASH_MISSING in line for line in text):
        start = next(i for i, line in enumerate(text) if HASH_MISSING in line)
        packages = [line.split(" ")[0] for line in text[start + 1 :] if "--hash=" in line]
        return f"pip refused pins without a hash ({', '.join(packages) or 'see the log'}): rewrite the lock with `inv pins --write`"
    errors = [line for line in text if line.startswith(("ERROR:", "reprokit:"))]
    if errors:
        return errors[-1][:300]
    return _last_meaningful([*lines, error])


def _last_meaningful(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip() and not line.startswith(" --->"):
            return line.strip()[:300]
    return "no output"


def stream_build(docker_client, plan: Any, log_path: Path, console) -> str:
    """Run the build, showing each step and the newest output line; the whole output goes to the log.
    `plan`: a build.BuildPlan (build.py imports this module, so it is not named here)."""
    from docker.errors import APIError
    from rich.markup import escape

    log_path.parent.mkdir(parents=True, exist_ok=True)
    image_id = None
    last_lines: list[str] = []
    params = {
        "t": plan.tag,
        "buildargs": plan.build_args,
        "labels": plan.labels,
        "networkmode": plan.network_mode,
        "pull": False,  # the base was resolved (and its digest recorded) before the build
        "rm": True,
        "forcerm": True,
    }
    # This build's own log: a link planted at its name is removed, never written through.
    log_path.unlink(missing_ok=True)
    with (
        io.TextIOWrapper(open_append(log_path), encoding="utf-8") as log,
        console.status("starting the build") as status,
    ):
        log.write(plan.command_line(Path("<context sent from memory>")) + "\n")
        log.write(f"# builder: {plan.builder.name} ({plan.builder.why})\n\n")
        started: set[str] = set()
        done: set[str] = set()

        def show(line: str, step: str) -> None:
            nonlocal last_lines
            line = ANSI.sub("", line)  # the legacy builder colours a step's stderr red
            log.write(line + "\n")
            if line.strip():
                last_lines = [*last_lines[-40:], line.rstrip()]
                status.update(f"{step}: {line.strip()[:100]}")

        try:
            if plan.builder.buildkit:
                stream = buildkit.build_stream(docker_client.api, plan.context_tar(), params)
            else:
                stream = docker_client.api.build(
                    fileobj=plan.context_tar(),
                    custom_context=True,
                    tag=plan.tag,
                    buildargs=plan.build_args,
                    labels=plan.labels,
                    network_mode=plan.network_mode,
                    pull=False,
                    rm=True,
                    forcerm=True,
                    decode=True,
                )
            step = "build"
            for chunk in stream:
                if "error" in chunk:
                    log.write(chunk["error"] + "\n")
                    raise ReprokitError(
                        f"building {plan.tag} failed: {failure(last_lines, chunk['error'])} (full log: {log_path})"
                    )
                if chunk.get("id") == "moby.buildkit.trace":
                    trace = buildkit.decode(chunk["aux"])
                    for vertex in trace.steps:
                        # The Dockerfile's steps ([stage-0 4/8] RUN ...) and the export, not BuildKit's own.
                        if not vertex.name.startswith(("[stage", "exporting")):
                            continue
                        if vertex.started is not None and vertex.digest not in started:
                            started.add(vertex.digest)
                            step = vertex.name.split("]")[0].lstrip("[")
                            last_lines = []  # a failure is said from the failing step's output
                            log.write(f"# {vertex.name}\n")
                        if (vertex.completed is not None or vertex.cached) and vertex.digest not in done:
                            done.add(vertex.digest)
                            log.write(f"# {buildkit.shown(vertex)}\n")
                            console.print(f"  {escape(buildkit.shown(vertex))}")
                    for _, data in trace.logs:
                        for line in data.decode(errors="replace").splitlines():
                            show(line, step)
                    continue
                if isinstance(chunk.get("aux"), dict) and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                text = chunk.get("stream") or chunk.get("status") or ""
                for line in text.splitlines():
                    if line.startswith("Step "):
                        step, last_lines = line.split(" : ")[0], []
                        console.print(f"  {escape(line.rstrip()[:160])}")
                    show(line, step)
        except APIError as exc:
            raise ReprokitError(
                f"building {plan.tag} failed: {exc.explanation or exc} (log: {log_path})"
            ) from None
    if image_id is None:
        image_id = docker_client.images.get(plan.tag).id
    return image_id
