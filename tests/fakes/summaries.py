"""summary.json as a trainer of the current contract writes it, for tests that hand-make one: every field
the trainers' schema requires of a complete run, at values that claim nothing measured (no figure, no
departure, no step), and the few fields a test is about on top."""

from __future__ import annotations

from typing import Any

from reprokit.contract import trainers


def complete(**fields: Any) -> dict[str, Any]:
    """A typed summary with status ok: the schema's required fields, then ``fields``."""
    nothing = {
        "schema_version": trainers.contract()["schema_version"],
        "status": "ok",
        "unit": "samples/s",
        "samples_per_second": None,
        "throughput": {},
        "departures": [],
        "warmup_steps": 0,
        "steps": 0,
        "samples": 0,
        "measured_samples": 0,
        "train_runtime_s": 0.0,
        "world_size": 1,
        "num_nodes": 1,
        "peak_memory_bytes": None,
        "peak_memory_of": "unknown",
        "machine_load": None,
        "stalls": {"median_step_s": None, "found": [], "rule": "a test's summary: none looked for"},
        "peak_memory_device_bytes": None,
        "peak_memory_device_of": None,
        "breakdown": None,
        "step_time_s": None,
        "finished_at": "2025-01-02T03:04:05+00:00",
    }
    return {**nothing, **fields}
