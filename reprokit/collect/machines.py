"""Which machine a run ran on: the history's series ("which of my nodes is slow?") and compare's "what
changed" are per machine.

A trainer in a Docker container sees the container's hostname, its id (`8ebf6fa986d9`), new for each
run: grouped by it, every session would be a series of one point. So a run records `machine` in
sysinfo.json: the name the container platform passes (REPROKIT_MACHINE: Docker's, this machine's
hostname) or the hostname where nothing hides it (this machine's Python, a Slurm node, pyxis and
Apptainer, which keep the node's). A run recorded before names no machine: its hostname stands for
it, unless that is a container's id; then the hardware the run recorded describes the machine.
"""

from __future__ import annotations

import re

from reprokit.judge.result_row import Row

# Docker's default hostname: the first 12 hex digits of the container's id.
CONTAINER_HOSTNAME = re.compile(r"[0-9a-f]{12}")


def name(row: Row) -> str | None:
    """The machine a row's run ran on (rank 0's, for a run over several nodes)."""
    provenance = row.provenance
    if provenance.get("machine"):
        return str(provenance["machine"])
    host = provenance.get("hostname")
    if host and not (row.image_id and CONTAINER_HOSTNAME.fullmatch(str(host))):
        return str(host)
    return described(provenance)


def described(provenance: dict) -> str | None:
    """A machine by the hardware its run recorded (`AMD EPYC, 2 CPUs, 23.5 GiB`): what a run in a
    container from before `machine` was recorded can be grouped by."""
    cpus = provenance.get("hw_host_processor_vcpu_count")
    parts = [
        provenance.get("hw_host_processor_model_name"),
        f"{cpus} CPUs" if cpus else None,
        provenance.get("hw_host_memory_capacity"),
    ]
    found = [str(p) for p in parts if p]
    return ", ".join(found) or None
