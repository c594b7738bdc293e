"""The run directory read back as typed records: what the host wrote (cell.json), what the trainer
recorded about its machine (sysinfo.json) and what it measured (summary.json).

The file names, schema version and departure kinds are the trainers' contract
(reprokit_trainers/contract.json). A summary of contract version 4 or later is first checked against the
trainers' summary.schema.json (every field declared and typed: trainers.summary_problem); an older one
is read as it was written, fields the host does not know kept; a summary from before schema 2 (the kit's
first version) has no figure to read and is judged by nothing. Every row of results, report and plots is
made from these records (judge/verdicts.py).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from reprokit.contract import bounded, rundirs, sessions, trainers
from reprokit.contract.trainers import contract

CONTRACT = contract()
SCHEMA_VERSION: int = CONTRACT["schema_version"]
FILES = rundirs.FILES
THROUGHPUT, QUALITY = CONTRACT["departure_kinds"]
# summary.json's explaining numbers (explain.py, collect.py) as the trainers write them: a number, or
# nothing; one that is not finite or below 0 is left out of the row, and said.
EXPLAINING = ("train_runtime_s", "peak_memory_bytes", "peak_memory_device_bytes", "flops_per_sample", "mfu",
              "samples_per_joule", "energy_joules", "power_mean_w", "power_peak_w", "utilization_mean")  # fmt: skip
SHARES = ("data_wait", "compute", "communication", "other")
# A row's status where no summary.json says one (summary.json's, the trainers' and the kit's, are the
# contract's `statuses`: ok, failed, timeout, interrupted, skipped). README.md lists every one.
NOT_STARTED = "not started"  # the session never reached it: stopped first, or still to run
INCOMPLETE = "incomplete"  # started and cut off with no summary: the kit killed with -9, a machine lost
UNREADABLE = "unreadable"  # its run directory holds a file the kit will not read
ROW_STATUSES = (NOT_STARTED, INCOMPLETE, UNREADABLE)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _typed(value: Any, kinds: tuple[type, ...], what: str) -> None:
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        raise ValueError(f"{what} is {value!r}, not {'a number' if int in kinds else 'text'}")


def _references(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Published figures as the plan wrote them: a figure above 0, device counts from 1, text for the rest."""
    for ref in value:
        for key in ("value", "ratio"):
            found = ref.get(key)
            if found is not None and not (is_number(found) and math.isfinite(found) and found > 0):
                raise ValueError(f"a published {key} is {found!r}, not a number above 0")
        for key in ("devices", "nodes"):
            found = ref.get(key)
            if found is not None and not (
                is_number(found) and math.isfinite(found) and int(found) == found >= 1
            ):
                raise ValueError(f"a published figure's {key} is {found!r}, not a count")
        if ref.get("value") is not None and not isinstance(ref.get("device"), str):
            raise ValueError("a published figure names no device")
        for key in ("device", "definition", "source", "note", "id", "release", "commit", "date"):
            if ref.get(key) is not None:
                _typed(ref[key], (str,), f"a published figure's {key}")
    return value


class Record(BaseModel):
    model_config = ConfigDict(extra="allow")
    schema_version: int = 1


class CellRecord(Record, sessions.CellPlan):
    """cell.json: the cell as planned (the keys session.json lists too) and all the host gave its run."""

    title: str | None = None
    trainer: str | None = None
    unit: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    references: list[dict[str, Any]] = Field(default_factory=list)
    other_references: list[dict[str, Any]] = Field(default_factory=list)
    group: str = "main"
    tolerance: float = Field(default=0.10, ge=0, le=1, allow_inf_nan=False)
    assumptions: list[str] = Field(default_factory=list)
    data: dict[str, str] = Field(default_factory=dict)
    kit_revision: str | None = None
    software: dict[str, str] = Field(default_factory=dict)
    beyond: str | None = None
    roles: dict[str, Any] = Field(default_factory=dict)
    published_stack: dict[str, str] = Field(default_factory=dict)
    published_stack_source: str | None = None

    _figures = field_validator("references", "other_references")(_references)

    @model_validator(mode="before")
    @classmethod
    def _series(cls, value: Any) -> Any:
        # The repetitions of a cell share its series id (collect groups rows by it).
        if isinstance(value, dict) and value.get("series_id") is not None:
            _typed(value["series_id"], (str,), "series_id")
        return value

    @field_validator("roles")
    @classmethod
    def _roles(cls, value: dict[str, Any]) -> dict[str, Any]:
        # The trainer's arguments.json roles: which argument is what, and each switch's record.
        for role in ("batch_per_device", "workers", "max_steps"):
            if value.get(role) is not None:
                _typed(value[role], (str,), f"roles.{role}")
        switches = value.get("switches", {})
        if not isinstance(switches, dict) or not all(
            isinstance(s, dict) and isinstance(s.get("recorded"), str) and isinstance(s.get("label"), str)
            for s in switches.values()
        ):
            raise ValueError(
                "roles.switches is not a mapping of switches with their recorded field and label"
            )
        return value


class SysInfo(Record):
    started_at: str | None = None
    device_name: str | None = None
    device_type: str | None = None
    world_size: int | None = Field(default=None, ge=1)
    num_nodes: int | None = Field(default=None, ge=1)
    image_id: str | None = None
    versions: dict[str, str | None] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _provenance(cls, value: Any) -> Any:
        # What collect takes as provenance: text, and the hardware's facts as one level of values.
        if isinstance(value, dict):
            for key in ("hostname", "driver", "cuda"):
                if value.get(key) is not None:
                    _typed(value[key], (str,), key)
            hardware = value.get("hardware")
            if hardware is not None and not isinstance(hardware, dict):
                raise ValueError(f"hardware is {hardware!r}, not a mapping")
        return value


class Departure(BaseModel):
    """What a run did other than its publication, and whether that changes the measured quantity."""

    model_config = ConfigDict(frozen=True)
    reason: str
    kind: str = THROUGHPUT

    @field_validator("kind")
    @classmethod
    def _known(cls, value: str) -> str:
        # A kind the kit does not know would neither block a verdict nor be shown beside it.
        if value not in (THROUGHPUT, QUALITY):
            raise ValueError(f"departure kind {value!r}: {THROUGHPUT} or {QUALITY}")
        return value


class Summary(Record):
    status: str | None = None
    samples_per_second: float | None = None
    # definition -> {"value": ..., and how it was counted} (definitions.DEFINITIONS)
    throughput: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # What the run did other than the publication (synthetic data, random weights, a switch not in effect).
    departures: list[Departure] = Field(default_factory=list)
    world_size: int | None = Field(default=None, ge=1)
    num_nodes: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=0)
    # The software that ran, read back by the trainer (recipes.SOFTWARE_KEYS -> what it was).
    software: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    finished_at: str | None = None

    @field_validator("departures", mode="before")
    @classmethod
    def _kinded(cls, value: Any) -> Any:
        # Before schema 3 a departure was its reason alone, and every one blocked the verdict.
        if not isinstance(value, list | None):
            raise ValueError(f"departures is {value!r}, not a list")
        return [{"reason": d} if isinstance(d, str) else d for d in value or []]

    @field_validator("throughput")
    @classmethod
    def _figures(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        # A figure is a number (finite or not: verdicts.py judges that) or nothing.
        for name, figure in value.items():
            if figure.get("value") is not None:
                _typed(figure["value"], (int, float), f"throughput.{name}.value")
        return value

    @model_validator(mode="before")
    @classmethod
    def _explaining(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in EXPLAINING:
                if value.get(key) is not None:
                    _typed(value[key], (int, float), key)
            for key in ("mfu_precision", "started_at"):
                if value.get(key) is not None:
                    _typed(value[key], (str,), key)
            tail = value.get("log_tail")
            if tail is not None and not (isinstance(tail, list) and all(isinstance(t, str) for t in tail)):
                raise ValueError("log_tail is not a list of lines")
            for key in ("breakdown", "profile"):
                if value.get(key) is not None and not isinstance(value[key], dict):
                    raise ValueError(f"{key} is {value[key]!r}, not a mapping")
            breakdown = value.get("breakdown") or {}
            for share in SHARES:
                if breakdown.get(share) is not None:
                    _typed(breakdown[share], (int, float), f"breakdown.{share}")
            step_times = value.get("step_time_s")
            if step_times is not None and not isinstance(step_times, dict):
                raise ValueError(f"step_time_s is {step_times!r}, not a mapping")
            for q in ("p50", "p90", "p99"):
                if (step_times or {}).get(q) is not None:
                    _typed(step_times[q], (int, float), f"step_time_s.{q}")
            trace = (value.get("profile") or {}).get("trace")
            if trace is not None:
                _typed(trace, (str,), "profile.trace")
            if not isinstance(value.get("energy"), str | dict | None):
                raise ValueError(f"energy is {value['energy']!r}, not text")
        return value

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
    # Explaining numbers left out of the row (not finite, below 0), each with its file and why.
    left_out: list[tuple[Path, str]] = Field(default_factory=list)


def _read(model: type[Record], path: Path, root: Path | None) -> Any:
    """A run directory's JSON file as its model; None when it is not there; Malformed (the file and why)
    when it is not one of the kit's: too large or deep, not JSON, a field of the wrong type, a link out,
    or (a summary) a field the trainers' schema does not declare, lacks or types otherwise."""
    raw = bounded.json_object(path, root)
    if raw is None:
        return None
    wrong = trainers.summary_problem(raw) if model is Summary else None
    if wrong:
        raise bounded.Malformed(path, wrong)
    return bounded.checked(model, raw, path)


def _status(run_dir: Path, summary: Summary | None) -> str:
    if summary is not None:
        return str(summary.status or "unknown")
    # No summary.json: the host died with the cell (kill -9, a power cut) or never launched it.
    return INCOMPLETE if (run_dir / FILES["stdout"]).exists() else NOT_STARTED


def _finite(summary: Summary, path: Path) -> list[tuple[Path, str]]:
    """The explaining numbers that are not finite or below 0: left out of the row (set to None), named."""
    extra = summary.model_extra or {}
    places = [(extra, key, key) for key in EXPLAINING]
    if isinstance(extra.get("breakdown"), dict):
        places += [(extra["breakdown"], share, f"breakdown.{share}") for share in SHARES]
    if isinstance(extra.get("step_time_s"), dict):
        places += [(extra["step_time_s"], q, f"step_time_s.{q}") for q in ("p50", "p90", "p99")]
    found = []
    for holder, key, name in places:
        value = holder.get(key)
        if value is not None and not (math.isfinite(value) and value >= 0):
            holder[key] = None
            found.append((path, f"{name} is {value!r}, not a finite number from 0: left out"))
    return found


def read(run_dir: Path, root: Path | None = None) -> RunRecord:
    """A run directory's records; Malformed (a file and why) when one of its files is not the kit's.
    `root`: the results folder, which a file (or a link to one) may not leave."""
    cell = _read(CellRecord, run_dir / FILES["cell"], root) or CellRecord()
    sysinfo = _read(SysInfo, run_dir / FILES["sysinfo"], root) or SysInfo()
    summary = _read(Summary, run_dir / FILES["summary"], root)
    bounded.time_of(sysinfo.started_at, run_dir / FILES["sysinfo"], "started_at")
    if summary is not None:
        for key in ("finished_at", "started_at"):
            bounded.time_of(getattr(summary, key, None), run_dir / FILES["summary"], key)
    # When the trainer started, by its own clock (sysinfo.json, written first thing; else its summary):
    # never a file's mtime, which a copy, an unpack or a touch sets (a session is placed in time by it).
    started = sysinfo.started_at or (getattr(summary, "started_at", None) if summary else None)
    status = _status(run_dir, summary)
    left_out = _finite(summary, run_dir / FILES["summary"]) if summary is not None else []
    return RunRecord(
        run_dir=run_dir, cell=cell, sysinfo=sysinfo, summary=summary, status=status, started_at=started,
        left_out=left_out,
    )  # fmt: skip
