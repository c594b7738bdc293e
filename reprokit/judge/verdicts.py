"""Comparison: each measured number beside its published one, like for like, with a verdict and why.

One place decides, for every output (results.csv and .jsonl, the report, the plots, the terminal
table, `make bench-gpu`):

- which published figure a run is compared with: the one on the device it ran on, from the most
  similar setup (node and device count);
- under which definition (definitions.DEFINITIONS): the reference's own; the run's figure under that
  definition is the one judged, the others are shown beside it;
- per device: published figures are whole-node numbers, divided by their device count here, once;
- whether the run may be judged at all: only a run that did what the publication did (published
  scale, real data, every switch of its variant in effect, a run of the published length for a
  whole-run figure) gets reproduced / faster / slower; any other gets `not comparable` and the reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from reprokit.contract.definitions import DEFINITIONS, LENGTH_DEPENDENT
from reprokit.contract.records import QUALITY, THROUGHPUT, Departure, RunRecord

# Verdicts, in the words every output uses.
REPRODUCED, FASTER, SLOWER = "reproduced", "faster", "slower"
NO_REFERENCE, NOT_COMPARABLE, NO_RESULT = "no reference", "not comparable", "no result"
# A variant beyond the publication (today's faster software) has no published figure of its own: its
# number is read as a speedup over the published variant it goes beyond.
BEYOND = "beyond the publication"
STEADY = "after_warmup"


# The most samples (or tokens) a second one device can be credited with. No training step comes near
# it: the fastest published figures are below 10^5 images and 10^6 tokens a second per accelerator,
# and a step of even one sample takes a kernel launch, microseconds. A figure beyond it is a broken
# meter or an edited file; taken as a rate, 1e308 would call any session `improved` and any range
# that reaches it `same`.
MAX_RATE_PER_DEVICE = 1e9
IMPLAUSIBLE = f"above {MAX_RATE_PER_DEVICE:.0e} per device"
# Departures that say what happened to one run, not what its cell is: the machine shared with other
# work (the trainers' common/measure/machineload.py) and a stall (common/measure/stalls.py). Two
# sessions of one cell share its setup's departures (a smoke scale, synthetic data), so setting them
# side by side is like for like; a disturbed run measured its disturbance.
DISTURBANCES = ("the machine was shared while the run measured", "the run stalled")


def not_a_rate(value: Any, devices: int = 1) -> str | None:
    """Why a measured rate cannot be judged (`not finite`: NaN or infinite, `not positive`: 0 or
    below, IMPLAUSIBLE: more than MAX_RATE_PER_DEVICE for each of `devices`); None for a rate. A
    broken meter's number is never a verdict."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "not a number"
    if not math.isfinite(value):
        return "not finite"
    if not value > 0:
        return "not positive"
    return IMPLAUSIBLE if value > MAX_RATE_PER_DEVICE * max(devices, 1) else None


def disturbances(reasons: list[str]) -> list[str]:
    """The reasons among `reasons` that are a run's disturbances (DISTURBANCES), each once: a reason
    that begins another (the first part of a joined one) is the same disturbance."""
    found = [r for r in dict.fromkeys(reasons) if r.startswith(DISTURBANCES)]
    return [r for r in found if not any(o != r and o.startswith(r) for o in found)]


def total_devices(reference: dict[str, Any]) -> int:
    return int(reference.get("devices") or 1) * int(reference.get("nodes") or 1)


def per_device(reference: dict[str, Any] | None) -> float | None:
    """A published absolute figure per device: the whole-node number over its device count."""
    if not reference or reference.get("value") is None:
        return None
    return float(reference["value"]) / total_devices(reference)


def reference_for(
    references: list[dict[str, Any]], device: str | None, world: int, nodes: int
) -> dict | None:
    """The published figure on this device; among several, the one run on the most similar setup."""
    matching = [r for r in references if r.get("value") is not None and r.get("device") == device]
    if not matching:
        return None
    return sorted(matching, key=lambda r: (int(r.get("nodes") or 1) != nodes, total_devices(r) != world))[0]


def verdict(ratio: float | None, tolerance: float, reasons: list[str]) -> str:
    """Measured over published, within the recipe's relative tolerance or not. A run that did other than
    the publication (a smoke scale, synthetic data) is not comparable whether or not a figure exists for
    its device: `no reference` would read as if only the figure were missing."""
    if reasons:
        return NOT_COMPARABLE
    if ratio is None:
        return NO_REFERENCE
    if abs(ratio - 1.0) <= tolerance:
        return REPRODUCED
    return FASTER if ratio > 1.0 else SLOWER


def departures(record: RunRecord) -> list[Departure]:
    """What the run did other than its publication: the trainer's record, the scale it ran at, and
    each switch its variant asked for that was not in effect (a summary before schema 2 holds no
    figure to judge, and says so)."""
    found: list[Departure] = []

    def add(reason: str, kind: str = THROUGHPUT) -> None:
        if reason not in (d.reason for d in found):
            found.append(Departure(reason=reason, kind=kind))

    if record.cell.scale not in (None, "published"):
        add(f"{record.cell.scale} scale")
    summary = record.summary
    if summary is None:
        return found
    for departure in summary.departures:
        add(departure.reason, departure.kind)
    extra = summary.model_extra or {}
    if summary.schema_version < 2:
        add("written by a kit before summary schema 2: it holds no figure to judge; rerun the cell")
    args = record.cell.args
    # The trainer's schema names its switches and the summary field that says what was in effect.
    for arg, switch in record.cell.roles.get("switches", {}).items():
        recorded, label = switch["recorded"], switch["label"]
        asked = args.get(arg)
        if asked in (None, False) or recorded not in extra:
            continue
        ran = extra[recorded]
        if (asked is True and ran is not True) or (asked is not True and str(ran) != str(asked)):
            add(f"{label} not in effect (asked {asked}, ran {ran})")
    for reason in software_departures(record.cell.software, summary.software):
        add(reason)
    return found


def software_departures(expected: dict[str, str], ran: dict[str, Any]) -> list[str]:
    """Where a published cell ran other software than its publication (`attention: sdpa, published:
    math`): a different kernel is a different measured quantity. A key the trainer did not record
    cannot be shown to match."""
    found = []
    for key, published in expected.items():
        value = ran.get(key)
        if value is None:
            found.append(f"{key}: not recorded, published: {published}")
        elif str(value) != str(published):
            found.append(f"{key}: {value}, published: {published}")
    return found


def blocking(found: list[Departure]) -> list[str]:
    """The reasons that stop a verdict: departures that change the measured quantity."""
    return [d.reason for d in found if d.kind == THROUGHPUT]


def beside(found: list[Departure]) -> list[str]:
    """The departures shown beside a verdict: they change what the model learns, not the speed."""
    return [d.reason for d in found if d.kind == QUALITY]


def length_reasons(steps: Any, definition: str | None) -> list[str]:
    """A whole-run figure counts warm-up and compilation: it compares only over a run as long as the
    published one (`steps`: the run's step cap, None for a run of the recipe's own length)."""
    if definition in LENGTH_DEPENDENT and isinstance(steps, int) and steps > 0:
        return [f"shortened run (max_steps {steps}): the {definition} figure depends on the run's length"]
    return []


@dataclass
class Judgement:
    definition: str | None
    measured: float | None
    measured_per_device: float | None
    reference: dict[str, Any] | None
    reference_per_device: float | None
    normalization: str | None
    ratio: float | None
    verdict: str
    reasons: list[str] = field(default_factory=list)
    measurements: dict[str, float | None] = field(default_factory=dict)
    departures: list[Departure] = field(default_factory=list)


def normalization(world: int, reference: dict[str, Any] | None) -> str | None:
    if reference is None:
        return None
    devices = total_devices(reference)
    if world == devices:
        return f"same device count ({world})"
    return f"per device ({world} vs {devices} published)"


def judge(record: RunRecord, device: str | None, world: int, nodes: int) -> Judgement:
    """The row's comparison: measured and published under one definition, and the verdict."""
    summary = record.summary
    ok = record.status == "ok" and summary is not None
    measurements = {d: (summary.measured(d) if ok else None) for d in DEFINITIONS}
    # A figure that is not a rate (NaN, infinite, 0, below 0) is not shown as measured, and no verdict
    # rests on it: the run's meter failed, and the cell says so.
    broken = {d: v for d, v in measurements.items() if not_a_rate(v, world)}
    measurements.update(dict.fromkeys(broken))
    reference = reference_for(record.cell.references, device, world, nodes)
    definition = (reference or {}).get("definition") or (STEADY if reference is None else None)
    if reference is not None and definition is None:  # a version-1 cell.json: its references had none
        definition = STEADY
    measured = measurements.get(definition) if definition else None
    found = departures(record) + [
        Departure(reason=f"throughput {not_a_rate(v, world)} ({d}: {v})", kind=THROUGHPUT)
        for d, v in broken.items()
    ]
    steps = record.cell.args.get(record.cell.roles.get("max_steps", ""))
    reasons = blocking(found) + length_reasons(steps, definition)
    if ok and reference is not None and measured is None:
        if definition not in broken:
            reasons.append(f"the run recorded no {definition} figure")
        measured = measurements.get(STEADY)
    ref_per_device = per_device(reference)
    mine = measured / world if measured is not None else None
    tolerance = float(record.cell.tolerance or 0.10)
    ratio, outcome, why = judge_value(mine, ref_per_device, tolerance, reasons, record.cell.beyond)
    if broken:
        ratio, outcome, why = None, NOT_COMPARABLE, reasons
    return Judgement(
        definition=definition,
        measured=measured,
        measured_per_device=mine,
        reference=reference,
        reference_per_device=ref_per_device,
        normalization=normalization(world, reference),
        ratio=ratio,
        verdict=outcome if ok else NO_RESULT,
        reasons=why if ok else [],
        measurements=measurements,
        departures=found,
    )


def judge_value(
    measured_per_device: float | None,
    reference_per_device: float | None,
    tolerance: float,
    reasons: list[str],
    beyond: str | None = None,
) -> tuple[float | None, str, list[str]]:
    """(ratio, verdict, reasons) of one per-device figure against its published one. A number judged
    not comparable keeps its ratio out of sight: it would read as a verdict. A variant beyond the
    publication has no figure of its own to be judged by (its speedup is its verdict)."""
    if beyond:
        return None, BEYOND, []
    ratio = (
        measured_per_device / reference_per_device
        if measured_per_device is not None and reference_per_device
        else None
    )
    outcome = verdict(ratio, tolerance, reasons)
    if outcome == NOT_COMPARABLE:
        return None, outcome, reasons
    return ratio, outcome, []


def worded(outcome: str | None, reasons: str | None, quality: str | None = None) -> str:
    """A verdict as people read it: `not comparable (smoke scale; synthetic data)`, and what the run
    did that changes only what the model learns: `reproduced; quality only: random weights`."""
    text = outcome or "-"
    if reasons and text == NOT_COMPARABLE:
        text = f"{text} ({reasons})"
    return f"{text}; quality only: {quality}" if quality and outcome else text
