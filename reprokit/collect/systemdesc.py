"""A session's systems as MLPerf describes one: `systems/<id>.json` in the session folder, with every
field mlperf_logging's system_desc checker requires (a results folder's systems then read as a
submission's `systems/` do).

The facts are the ones the trainers read on the node that ran (sysinfo.json's ``hardware``, whose names
are already MLPerf's: common/record/hardware.py), never this machine's: a Slurm session's systems are its
nodes. The kit writes these itself rather than run `mlperf-sysinfo` (which describes the machine it
runs on, the host here, not the node or the container). Every value is text, as in MLPerf's own
files; a fact no reading gives is "N/A", and ``hw_notes`` names those fields. One file per distinct system among the completed cells (its node
count, processor, memory and accelerators).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from reprokit.contract import files
from reprokit.judge.result_row import Row

FOLDER = "systems"
UNKNOWN = "N/A"
# MLPerf's required fields (mlperf_logging/system_desc_checker), and where each comes from: a hardware
# field of the same name (the trainers' hardware.py) unless said otherwise below.
FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect", "host_memory_capacity",
    "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework", "other_software_stack",
    "operating_system", "sw_notes",
)  # fmt: skip
# Part of a system's identity: two cells that differ in one of these ran on different systems.
IDENTITY = ("number_of_nodes", "host_processor_model_name", "host_memory_capacity", "accelerators_per_node",
            "accelerator_model_name", "accelerator_memory_capacity")  # fmt: skip


def describe(row: Row) -> dict[str, Any]:
    """One completed cell's system in MLPerf's fields."""
    found = row.provenance or {}
    hardware = {key.removeprefix("hw_"): value for key, value in found.items() if key.startswith("hw_")}
    accelerated = bool(hardware.get("accelerators_per_node"))
    host = found.get("hostname") or "unknown host"
    described: dict[str, Any] = {
        # Not a submission: the kit's runs are reproductions, open in MLPerf's sense.
        "submitter": "reprokit",
        "division": "open",
        "status": "Research, Development, or Internal (RDI)",
        "system_name": f"{host} ({_devices(row, hardware)})",
        "number_of_nodes": row.nodes or 1,
        "accelerators_per_node": hardware.get("accelerators_per_node") or (0 if not accelerated else UNKNOWN),
        "accelerator_model_name": hardware.get("accelerator_model_name") or (row.device_name if accelerated else "none"),
        "framework": f"PyTorch {row.torch}" if row.torch else UNKNOWN,
        "other_software_stack": _software(row),
    }  # fmt: skip
    for name in FIELDS:
        if name not in described:
            value = hardware.get(name)
            described[name] = value if value not in (None, "") else UNKNOWN
    unread = [name for name in FIELDS if described[name] == UNKNOWN]
    described["hw_notes"] = (
        "Written by reprokit from the node's own readings (sysinfo.json); not read there: "
        + (", ".join(n for n in unread if n != "hw_notes") or "nothing")
    )
    described["sw_notes"] = f"kit revision {row.kit_revision or 'unknown'}; image {row.image_id or 'none'}"
    # MLPerf's descriptions hold every field as text ("8", "1"), and its checker joins them as such.
    return {name: str(described[name]) for name in FIELDS}


def _devices(row: Row, hardware: dict[str, Any]) -> str:
    count = hardware.get("accelerators_per_node")
    name = hardware.get("accelerator_model_name") or row.device_name or "CPU"
    nodes = row.nodes or 1
    return f"{nodes} x {count} x {name}" if count else f"{nodes} x {name}"


def _software(row: Row) -> str:
    found = row.provenance or {}
    parts = [
        f"{label} {value}"
        for label, value in (
            ("CUDA", found.get("cuda")),
            ("driver", found.get("driver")),
            ("transformers", row.transformers),
            ("timm", row.timm),
        )
        if value
    ]
    return ", ".join(parts) or UNKNOWN


def system_id(described: dict[str, Any]) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", described["system_name"]).strip("_")[:120]


def write(session_dir: Path, table: list[Row]) -> list[Path]:
    """systems/<id>.json for each distinct system the session's completed cells ran on."""
    systems: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in table:
        if row.status == "ok" and row.provenance:
            described = describe(row)
            systems.setdefault(tuple(described[key] for key in IDENTITY), described)
    written = []
    for described in systems.values():
        path = files.own_dir(session_dir / FOLDER) / f"{system_id(described)}.json"
        written.append(files.write_text(path, json.dumps(described, indent=2, default=str) + "\n"))
    return written
