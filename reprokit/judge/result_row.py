"""A result row: one cell of a session, what it measured beside what was published, as collect writes
it and every reader reads it (the report, the plots, the history, compare, the MLflow export).

The fields are results.csv's columns, in the order the file has them (the fields marked `column()`),
then what results.jsonl keeps besides (provenance, references, departures, software, ...). A row is
never changed in place: what is computed across rows (repetitions, speedups, scaling efficiency) is
returned as values and put into a new row with `dataclasses.replace`.

results.jsonl is read back with `Row.from_json`, which takes what another kit wrote: a key it does not
know is left out, a key it lacks is the field's default.
"""

from __future__ import annotations

import csv
import io
import math
import types
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints

from reprokit.contract.definitions import DEFINITIONS
from reprokit.contract.records import NOT_STARTED, Departure
from reprokit.judge import verdicts

CSV = "csv"
# The folder of the run directory on this machine: the report reads its curves there; results.jsonl,
# read on other machines, leaves it out.
LOCAL = ("run_dir",)


def column(default: Any = None) -> Any:
    """A field that is a results.csv column."""
    return field(default=default, metadata={CSV: True})


@dataclass(frozen=True)
class Row:
    recipe: str | None = column()
    variant: str | None = column()
    group: str | None = column()
    scale: str | None = column()
    accelerator: str | None = column()
    device_name: str | None = column()
    # The accelerator profile's name for the device (h100, a100-80gb, gaudi2): what references name.
    device: str | None = column()
    devices: int | None = column()
    world_size: int | None = column()
    nodes: int | None = column()
    batch_per_device: int | None = column()
    workers: int | None = column()
    max_steps: int | None = column()
    unit: str | None = column()
    # The definition the verdict used (definitions.DEFINITIONS), and the figure under it.
    definition: str | None = column()
    measured: float | None = column()
    measured_per_device: float | None = column()
    # Runs of the cell that measured (--repeat N: measured is their median).
    repeats: int | None = column()
    measured_min: float | None = column()
    measured_max: float | None = column()
    spread: float | None = column()
    # The figure under every definition the trainer recorded (`measured_<definition>`).
    measured_after_warmup: float | None = column()
    measured_whole_run: float | None = column()
    measured_gaudi_trainer: float | None = column()
    reference: float | None = column()
    reference_devices: int | None = column()
    reference_per_device: float | None = column()
    reference_source: str | None = column()
    normalization: str | None = column()
    ratio_per_device: float | None = column()
    tolerance: float | None = column()
    verdict: str | None = column()
    verdict_reasons: str | None = column()
    quality_departures: str | None = column()
    measured_speedup: float | None = column()
    published_speedup: float | None = column()
    speedup_reference_device: str | None = column()
    speedup_verdict: str | None = column()
    speedup_verdict_reasons: str | None = column()
    scaling_efficiency: float | None = column()
    status: str | None = column()
    error: str | None = column()
    # Why this row is the one the last collect stored, not re-read: its run directory is gone or cannot
    # be read now (collect/keep.py). Its figure, verdict and provenance are those it was read with.
    kept: str | None = column()
    steps: int | None = column()
    train_time_s: float | None = column()
    # The measured steps' own times (summary.json's step_time_s): what latency-minded readers read first.
    step_time_p50_s: float | None = column()
    step_time_p90_s: float | None = column()
    step_time_p99_s: float | None = column()
    wall_time_s: float | None = column()
    peak_memory_bytes: int | None = column()
    # What NVML saw the process hold (DALI's and nvJPEG's pools, the CUDA context): beside the allocator's.
    peak_memory_device_bytes: int | None = column()
    flops_per_sample: float | None = column()
    mfu: float | None = column()
    # The precision whose peak the MFU is over: the one the matmuls ran in (bf16, fp16, tf32, fp32).
    mfu_precision: str | None = column()
    # Where the measured window went, the energy per sample, the trace (explain.py).
    data_wait_share: float | None = column()
    compute_share: float | None = column()
    communication_share: float | None = column()
    other_share: float | None = column()
    samples_per_joule: float | None = column()
    energy_joules: float | None = column()
    power_mean_w: float | None = column()
    power_peak_w: float | None = column()
    utilization_mean: float | None = column()
    energy: str | None = column()
    trace: str | None = column()
    data: str | None = column()
    image_id: str | None = column()
    kit_revision: str | None = column()
    recipe_hash: str | None = column()
    torch: str | None = column()
    transformers: str | None = column()
    timm: str | None = column()
    started_at: str | None = column()
    finished_at: str | None = column()
    cell_id: str | None = column()
    session: str | None = column()

    # Not CSV columns: results.jsonl keeps them, the report and the readers of sessions use them.
    series_id: str | None = None
    # A series of runs (--repeat N): each run's cell id, status, figures and error.
    repetitions: list[dict[str, Any]] = field(default_factory=list)
    speedup_definition: str | None = None
    # Where, on what, with what (run_row.provenance): one level of values, for a table and a diff.
    provenance: dict[str, str | int | float | bool | None] = field(default_factory=dict)
    baseline: bool = False
    title: str | None = None
    references: list[dict[str, Any]] = field(default_factory=list)
    other_references: list[dict[str, Any]] = field(default_factory=list)
    measurements: dict[str, float | None] = field(default_factory=dict)
    departures: list[Departure] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    beyond: str | None = None
    software: dict[str, Any] = field(default_factory=dict)
    software_published: dict[str, str] = field(default_factory=dict)
    published_stack: dict[str, str] = field(default_factory=dict)
    published_stack_source: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    breakdown: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None
    log_tail: list[str] | None = None
    run_dir: str | None = None

    @classmethod
    def planned(cls, item: dict[str, Any]) -> Row:
        """A cell the session planned (its session.json entry) that never started: no run directory."""
        return cls(
            recipe=item.get("recipe"),
            variant=item.get("variant"),
            scale=item.get("scale"),
            accelerator=item.get("accelerator"),
            status=NOT_STARTED,
            verdict=verdicts.NO_RESULT,
            recipe_hash=item.get("recipe_hash"),
            cell_id=item["cell_id"],
            baseline=bool(item.get("baseline")),
        )

    def all_references(self) -> list[dict[str, Any]]:
        """This accelerator's published figures first, then the other accelerators' (for ratios only)."""
        return [*self.references, *self.other_references]

    def to_json(self) -> dict[str, Any]:
        """The row as results.jsonl holds it."""
        found = {name: getattr(self, name) for name in JSONL}
        found["departures"] = [d.model_dump() for d in self.departures]
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Row:
        """A row of a results.jsonl any kit wrote: keys this kit does not know are left out, keys it
        lacks take their defaults, and a null list or mapping is empty. A value of another type than
        its field's (text where a number goes, a number that is not finite) is a ValueError naming it."""
        # Keyed by the fields' own name objects: keyword arguments match them by identity (a JSON key is
        # a new string, matched by comparing text with each field name in turn: 3x slower).
        known = {_NAMES[k]: v for k, v in data.items() if k in _NAMES and not (v is None and k in CONTAINERS)}
        for key, value in known.items():
            fits, what = _CHECKS[key]
            if not fits(value):
                raise ValueError(f"{key} is {_short(value)}, not {what}")
        if "departures" in known:
            known["departures"] = [_departure(d) for d in known["departures"] or []]
        return cls(**known)


def _departure(found: Any) -> Departure:
    # A kit before departure kinds wrote the reason alone: every such departure blocked the verdict.
    return Departure(reason=found) if isinstance(found, str) else Departure(**found)


def measured_columns(measurements: dict[str, float | None]) -> dict[str, float | None]:
    """The `measured_<definition>` columns of a row's figures."""
    return {f"measured_{name}": measurements.get(name) for name in DEFINITIONS}


_TYPES = get_type_hints(Row)


_SCALARS = (str, int, float, bool, type(None))


def _check(hint: Any) -> tuple[Callable[[Any], bool], str]:
    """(does a JSON value fit `hint`, what fits in words): results.jsonl's schema, from Row's fields.
    A JSON value is of its exact type (json.loads makes no subclasses): `type(v) is` is the test, and
    it is fast (history reads every row of every session)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any or hint is Departure:  # departures: validated as they are made (a reason, or a record)
        return (lambda v: True), "anything"
    if origin in (Union, types.UnionType):
        kinds = tuple(a for a in args if a is not type(None))
        nullable = type(None) in args
        if all(k in _SCALARS for k in kinds):  # a value, or null: one test of its type
            allowed = {*kinds, *((type(None),) if nullable else ()), *((int,) if float in kinds else ())}
            what = " or ".join(_check(k)[1] for k in kinds)
            return (lambda v: type(v) in allowed and (type(v) is not float or math.isfinite(v))), what + (
                " or null" if nullable else ""
            )
        parts = [_check(a) for a in kinds]
        tests = [t for t, _ in parts]
        return (lambda v: (nullable and v is None) or any(t(v) for t in tests)), " or ".join(
            w for _, w in parts
        )
    if hint is bool:
        return (lambda v: type(v) is bool), "true or false"
    if hint is int:
        return (lambda v: type(v) is int), "a whole number"
    if hint is float:
        return (lambda v: type(v) is int or (type(v) is float and math.isfinite(v))), "a finite number"
    if hint is str:
        return (lambda v: type(v) is str), "text"
    if origin is list:
        item, what = _check(args[0])
        if get_origin(args[0]) is dict and get_args(args[0])[1] is Any:
            return (lambda v: type(v) is list and all(type(x) is dict for x in v)), "a list of mappings"
        return (lambda v: type(v) is list and all(item(x) for x in v)), f"a list of {what}"
    if origin is dict:
        value, what = _check(args[1])
        if args[1] is Any:  # a JSON object's keys are text: its type says it all
            return (lambda v: type(v) is dict), "a mapping"
        return (lambda v: type(v) is dict and all(value(x) for x in v.values())), f"a mapping of {what}"
    raise TypeError(f"no JSON check for {hint}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


_CHECKS = {name: _check(hint) for name, hint in _TYPES.items()}
COLUMNS: list[str] = [f.name for f in fields(Row) if f.metadata.get(CSV)]
# The columns that hold a number (or nothing): a results.jsonl with text there is not a kit's.
NUMBERS = frozenset(c for c in COLUMNS if _TYPES[c] in (int | None, float | None))
JSONL: tuple[str, ...] = tuple(f.name for f in fields(Row) if f.name not in LOCAL)
_NAMES = {name: name for name in JSONL}
# Fields holding a list or a mapping: an old row's null there reads as empty.
CONTAINERS = frozenset(f.name for f in fields(Row) if f.default_factory is not MISSING)


def csv_text(table: list[Row]) -> str:
    """results.csv: a header of COLUMNS, a line per row, nothing for a value that is None."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in table:
        writer.writerow(["" if value is None else value for value in (getattr(r, c) for c in COLUMNS)])
    return buffer.getvalue()
