"""Images: everything the kit does with container images lives in this package.

- ``context``: each accelerator's build context (Dockerfile from spec + partials, the hash-pinned
  lock and its framework slice, the trainers) and the image tag, a hash of that context computed in
  memory;
- ``pins``: the lock: the profile's pins resolved against a model of the base, each with the sha256
  of every wheel the base can install;
- ``engine``: the one Docker engine client and what to say when there is none;
- ``buildkit``: which builder an engine gives, BuildKit's build request through the Engine API and
  its progress read back;
- ``build``: builds through the Docker SDK or BuildKit (or the ``docker build`` line a user would
  type), OCI labels, the local wheelhouse served for offline builds;
- ``wheelhouse``: ``pip download`` of an image's lock for offline builds, and its HTTP server;
- ``export``: the built image as a file Slurm nodes run (enroot squashfs, Apptainer .sif).

Nothing here imports a runtime; runtimes and container platforms import this package.
"""

from __future__ import annotations

from reprokit.images.build import BuildResult, build, dry_run, image_info
from reprokit.images.context import (
    context_files,
    context_hash,
    image_repository,
    image_tag,
    write_context,
)
from reprokit.images.engine import client, engine_status
from reprokit.images.export import export, export_path
from reprokit.images.wheelhouse import wheelhouse, wheelhouse_command

__all__ = [
    "BuildResult",
    "build",
    "client",
    "context_files",
    "context_hash",
    "dry_run",
    "engine_status",
    "export",
    "export_path",
    "image_info",
    "image_repository",
    "image_tag",
    "wheelhouse",
    "wheelhouse_command",
    "write_context",
]
