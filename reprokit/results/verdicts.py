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

from dataclasses import dataclass, field
from typing import Any

from reprokit.plan.definitions import DEFINITIONS, LENGTH_DEPENDENT
from reprokit.results.records import QUALITY, THROUGHPUT, Departure, RunRecord

# Verdicts, in the words every output uses.
REPRODUCED, FASTER, SLOWER = "reproduced", "faster", "slower"
NO_REFERENCE, NOT_COMPARABLE, NO_RESULT = "no reference", "not comparable", "no result"
# A variant beyond the publication (today's faster software) has no published figure of its own: its
# number is read as a speedup over the published variant it goes beyond.
BEYOND = "beyond the publication"
STEADY = "after_warmup"
# Switches a variant asks for, and the summary field that says whether the trainer had them in effect.
SWITCHES = {
    "mediapipe_dataloader": ("mediapipe", "mediapipe"),
    "distribution_strategy": ("distribution_strategy", "distribution strategy"),
    "image_pipeline": ("image_pipeline", "image pipeline"),
    "torch_compile": ("torch_compile", "torch.compile"),
    "compile": ("torch_compile", "torch.compile"),  # the ViT ladder's own name for it (pycls)
    "loader": ("loader", "loader"),
}


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
    """Measured over published, within the recipe's relative tolerance or not."""
    if ratio is None:
        return NO_REFERENCE
    if reasons:
        return NOT_COMPARABLE
    if abs(ratio - 1.0) <= tolerance:
        return REPRODUCED
    return FASTER if ratio > 1.0 else SLOWER


def departures(record: RunRecord) -> list[Departure]:
    """What the run did other than its publication: the trainer's record, the scale it ran at, and
    each switch its variant asked for that was not in effect (and, for runs of a version-1 trainer,
    what its summary's own fields show)."""
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
        if extra.get("data_source") == "synthetic" or extra.get("data") == "synthetic":
            add("synthetic data")
        if extra.get("model_source") == "random":
            add("random weights", QUALITY)
    args = record.cell.args
    for arg, (recorded, label) in SWITCHES.items():
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


def blocking(found: list[Departure] | list[dict[str, Any]]) -> list[str]:
    """The reasons that stop a verdict: departures that change the measured quantity."""
    return [_reason(d) for d in found if _kind(d) == THROUGHPUT]


def beside(found: list[Departure] | list[dict[str, Any]]) -> list[str]:
    """The departures shown beside a verdict: they change what the model learns, not the speed."""
    return [_reason(d) for d in found if _kind(d) == QUALITY]


def _reason(d: Departure | dict[str, Any]) -> str:
    return d.reason if isinstance(d, Departure) else d["reason"]


def _kind(d: Departure | dict[str, Any]) -> str:
    return d.kind if isinstance(d, Departure) else d.get("kind", THROUGHPUT)


def length_reasons(record: RunRecord, definition: str | None) -> list[str]:
    """A whole-run figure counts warm-up and compilation: it compares only over a run as long as the
    published one."""
    steps = record.cell.args.get("max_steps")
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
    reference = reference_for(record.cell.references, device, world, nodes)
    definition = (reference or {}).get("definition") or (STEADY if reference is None else None)
    if reference is not None and definition is None:  # a version-1 cell.json: its references had none
        definition = STEADY
    measured = measurements.get(definition) if definition else None
    found = departures(record)
    reasons = blocking(found) + length_reasons(record, definition)
    if ok and reference is not None and measured is None:
        reasons.append(f"the run recorded no {definition} figure")
        measured = measurements.get(STEADY)
    ref_per_device = per_device(reference)
    mine = measured / world if measured is not None else None
    ratio, outcome, why = judge_value(mine, ref_per_device, float(record.cell.tolerance or 0.10), reasons)
    if record.cell.beyond:
        ratio, outcome, why = None, BEYOND, []
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
) -> tuple[float | None, str, list[str]]:
    """(ratio, verdict, reasons) of one per-device figure against its published one. A number judged
    not comparable keeps its ratio out of sight: it would read as a verdict."""
    ratio = (
        measured_per_device / reference_per_device
        if measured_per_device is not None and reference_per_device
        else None
    )
    outcome = verdict(ratio, tolerance, reasons)
    if outcome == NOT_COMPARABLE:
        return None, outcome, reasons
    return ratio, outcome, []


def verdict_text(row: dict[str, Any], key: str = "verdict", reasons_key: str = "verdict_reasons") -> str:
    """A verdict as people read it: `not comparable (smoke scale; synthetic data)`, and what the run
    did that changes only what the model learns: `reproduced; quality only: random weights`."""
    text = row.get(key) or "-"
    why = row.get(reasons_key)
    if why and text == NOT_COMPARABLE:
        text = f"{text} ({why})"
    quality = row.get("quality_departures") if key == "verdict" else None
    return f"{text}; quality only: {quality}" if quality and row.get(key) else text


# ---------------------------------------------------------------------------------------------
# Across rows: speedups over each group's baseline, and scaling efficiency


def all_references(row: dict[str, Any]) -> list[dict[str, Any]]:
    """This accelerator's references first, then the other accelerators' (for ratios only)."""
    return list(row.get("references") or []) + list(row.get("other_references") or [])


def _absolute(references: list[dict[str, Any]], device: str) -> dict[str, Any] | None:
    for ref in references:
        if ref.get("value") is not None and ref.get("device") == device:
            return ref
    return None


def speedups(rows: list[dict[str, Any]]) -> None:
    """Each row's throughput over its group's baseline measured in the same session, and the
    published speedup: an explicit ratio, else the ratio of the two published figures on the device
    it ran on (or, where the publication has none for it, on the publication's first device); both
    under the published figures' definition."""
    baselines = {(r["recipe"], r.get("group") or "main"): r for r in rows if r.get("baseline")}
    for r in rows:
        base = baselines.get((r["recipe"], r.get("group") or "main"))
        if base is None or r is base:
            continue
        definition = STEADY
        explicit = next((x for x in r.get("references") or [] if x.get("ratio") is not None), None)
        if explicit is not None:
            r["published_speedup"] = explicit["ratio"]
            definition = explicit.get("definition") or STEADY
        else:
            devices = [x["device"] for x in all_references(base) if x.get("value") is not None]
            for device in ([r["device"]] if r.get("device") in devices else []) + devices:
                mine, theirs = _absolute(all_references(r), device), _absolute(all_references(base), device)
                if mine and theirs:
                    r["published_speedup"] = per_device(mine) / per_device(theirs)
                    r["speedup_reference_device"] = device
                    definition = mine.get("definition") or STEADY
                    break
        numerator = (r.get("measurements") or {}).get(definition)
        denominator = (base.get("measurements") or {}).get(definition)
        if numerator is not None and denominator and r.get("world_size") and base.get("world_size"):
            r["measured_speedup"] = (numerator / r["world_size"]) / (denominator / base["world_size"])
        r["speedup_definition"] = definition
        if r.get("measured_speedup") is not None and r.get("published_speedup") is not None:
            # Both runs must have done what the publication did for their ratio to be judged.
            reasons = list(dict.fromkeys(blocking(r.get("departures", [])) + blocking(base.get("departures", []))))
            reasons += length_reasons_of(r, definition) + length_reasons_of(base, definition)
            ratio = r["measured_speedup"] / r["published_speedup"]
            r["speedup_verdict"] = verdict(ratio, r["tolerance"], reasons)
            r["speedup_verdict_reasons"] = (
                "; ".join(reasons) if r["speedup_verdict"] == NOT_COMPARABLE else None
            )
    for base in baselines.values():
        if base.get("measured_per_device") is not None:
            base["measured_speedup"] = base["published_speedup"] = 1.0
    beyond_speedups(rows)


def beyond_speedups(rows: list[dict[str, Any]]) -> None:
    """A variant beyond the publication over the published variant it goes beyond, both measured in
    this session at the same scale and node count, under the published variant's definition: what
    today's software buys on the old recipe. The published variant's own verdict says whether it ran
    the publication's software."""
    published = {
        (r["recipe"], r["variant"], r.get("scale"), r.get("nodes")): r for r in rows if not r.get("beyond")
    }
    for r in rows:
        if not r.get("beyond"):
            continue
        base = published.get((r["recipe"], r["beyond"], r.get("scale"), r.get("nodes")))
        definition = (base or {}).get("definition") or STEADY
        mine = (r.get("measurements") or {}).get(definition)
        theirs = ((base or {}).get("measurements") or {}).get(definition)
        if mine is not None and theirs and r.get("world_size") and base.get("world_size"):
            r["measured_speedup"] = (mine / r["world_size"]) / (theirs / base["world_size"])
        else:
            r["measured_speedup"] = None
        r["speedup_definition"] = definition
        r["published_speedup"] = None
        r["speedup_verdict"] = BEYOND if r["measured_speedup"] is not None else None
        r["speedup_verdict_reasons"] = None


def length_reasons_of(row: dict[str, Any], definition: str) -> list[str]:
    steps = (row.get("args") or {}).get("max_steps")
    if definition in LENGTH_DEPENDENT and isinstance(steps, int) and steps > 0:
        return [f"shortened run (max_steps {steps})"]
    return []


def scaling_efficiency(rows: list[dict[str, Any]]) -> None:
    """Each multi-node row's per-device throughput over the single-node row of the same recipe,
    variant, scale and accelerator: 1.0 is perfect scaling (N nodes, N times the samples/s; per
    device, since the per-device batch is the same). The VOLO post's 2100 img/s on five DGX A100
    against 500 on one is 0.84."""
    single = {
        (r["recipe"], r["variant"], r["scale"], r["accelerator"]): r
        for r in rows
        if r.get("nodes") == 1 and r.get("measured_per_device")
    }
    for r in rows:
        base = single.get((r["recipe"], r["variant"], r["scale"], r["accelerator"]))
        if base is not None and (r.get("nodes") or 1) > 1 and r.get("measured_per_device") is not None:
            r["scaling_efficiency"] = r["measured_per_device"] / base["measured_per_device"]
