"""The run directory read back as typed records: what the host wrote (cell.json), what the trainer
recorded about its machine (sysinfo.json) and what it measured (summary.json).

The file names, schema version and departure kinds are the trainers' contract
(reprokit_trainers/contract.json). Fields the host does not know are kept (trainers add their own),
so an old kit can read a new run and the reverse; a summary from before schema 2 (the kit's first
version) has no figure to read and is judged by nothing. Every row of results, report and plots is
made from these records (results/verdicts.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from reprokit.run import rundirs
from reprokit.trainers import contract

CONTRACT = contract()
SCHEMA_VERSION: int = CONTRACT["schema_version"]
FILES = rundirs.FILES
THROUGHPUT, QUALITY = CONTRACT["departure_kinds"]


class Record(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = 1


class CellRecord(Record):
    cell_id: str | None = None
    recipe: str | None = None
    title: str | None = None
    variant: str | None = None
    scale: str | None = None
    accelerator: str | None = None
    devices: int | None = None
    nodes: int | None = None
    trainer: str | None = None
    unit: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    references: list[dict[str, Any]] = Field(default_factory=list)
    other_references: list[dict[str, Any]] = Field(default_factory=list)
    baseline: bool = False
    group: str = "main"
    tolerance: float = 0.10
    assumptions: list[str] = Field(default_factory=list)
    data: dict[str, str] = Field(default_factory=dict)
    recipe_hash: str | None = None
    kit_revision: str | None = None
    software: dict[str, str] = Field(default_factory=dict)
    beyond: str | None = None
    roles: dict[str, Any] = Field(default_factory=dict)
    published_stack: dict[str, str] = Field(default_factory=dict)
    published_stack_source: str | None = None


class SysInfo(Record):
    started_at: str | None = None
    device_name: str | None = None
    device_type: str | None = None
    world_size: int | None = None
    num_nodes: int | None = None
    image_id: str | None = None
    versions: dict[str, Any] = Field(default_factory=dict)


class Departure(BaseModel):
    """What a run did other than its publication, and whether that changes the measured quantity."""

    model_config = ConfigDict(frozen=True)
    reason: str
    kind: str = THROUGHPUT


class Summary(Record):
    status: str | None = None
    samples_per_second: float | None = None
    # definition -> {"value": ..., and how it was counted} (definitions.DEFINITIONS)
    throughput: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # What the run did other than the publication (synthetic data, random weights, a switch not in effect).
    departures: list[Departure] = Field(default_factory=list)
    world_size: int | None = None
    num_nodes: int | None = None
    steps: int | None = None
    # The software that ran, read back by the trainer (recipes.SOFTWARE_KEYS -> what it was).
    software: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    finished_at: str | None = None

    @field_validator("departures", mode="before")
    @classmethod
    def _kinded(cls, value: Any) -> Any:
        # Before schema 3 a departure was its reason alone, and every one blocked the verdict.
        return [{"reason": d} if isinstance(d, str) else d for d in value or []]

    def measured(self, definition: str) -> float | None:
        """The global rate under `definition`, as the trainer recorded it."""
        found = self.throughput.get(definition, {}).get("value")
        return float(found) if found is not None else None


class RunRecord(BaseModel):
    run_dir: Path
    cell: CellRecord
    sysinfo: SysInfo
    summary: Summary | None
    status: str
    started_at: str | None


def _read(model: type[Record], path: Path) -> Record | None:
    raw = rundirs.read_json(path)
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        # A file another kit wrote with a field of an unexpected type: keep what reads.
        return model.model_validate({k: v for k, v in raw.items() if k in ("status", "schema_version")})


def _mtime(path: Path) -> str | None:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc).astimezone().isoformat(timespec="milliseconds")


def _status(run_dir: Path, summary: Summary | None) -> str:
    if summary is not None:
        return str(summary.status or "unknown")
    # No summary.json: the host died with the cell (kill -9, a power cut) or never launched it.
    return "incomplete" if (run_dir / FILES["stdout"]).exists() else "not started"


def read(run_dir: Path) -> RunRecord:
    cell = _read(CellRecord, run_dir / FILES["cell"]) or CellRecord()
    sysinfo = _read(SysInfo, run_dir / FILES["sysinfo"]) or SysInfo()
    summary = _read(Summary, run_dir / FILES["summary"])
    # When the trainer started: its own clock (sysinfo.json, written first thing), else the file's
    # mtime (runs from before the field existed), else when the host launched the cell.
    started = (
        sysinfo.started_at
        or (getattr(summary, "started_at", None) if summary else None)
        or _mtime(run_dir / FILES["sysinfo"])
        or _mtime(run_dir / FILES["cell"])
    )
    status = _status(run_dir, summary)
    return RunRecord(
        run_dir=run_dir, cell=cell, sysinfo=sysinfo, summary=summary, status=status, started_at=started
    )
