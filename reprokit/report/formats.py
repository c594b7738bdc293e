"""A row's numbers and verdicts as the report, the terminal table and the benchmarks write them: `-`
for nothing, thousands separated, ratios as `1.25x`, sizes in GiB; its words within their bounds."""

from __future__ import annotations

import functools
from dataclasses import fields, replace
from typing import Any

from reprokit.contract.textsafe import NAME, TEXT, short
from reprokit.judge import other_devices, releases, verdicts
from reprokit.judge.result_row import LOCAL, Row

# A row's words that are sentences (shown within TEXT); every other word of it is a name (within NAME).
SENTENCES = ("reference_source", "normalization", "verdict_reasons", "quality_departures",
             "speedup_verdict_reasons", "error", "energy", "trace", "data", "title")  # fmt: skip


def _named(value: Any) -> Any:
    return short(value, NAME) if isinstance(value, str) else value


@functools.cache
def _words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Row's text fields (not the run directory's folder: the plots read its curves there), and its
    fields of names by name (provenance, versions, ...), by their annotations (text in result_row.py)."""
    text = tuple(f.name for f in fields(Row) if f.type in ("str | None", "str") and f.name not in LOCAL)
    mappings = tuple(
        f.name for f in fields(Row) if f.type.startswith("dict[str, ") and f.name != "measurements"
    )
    return text, mappings


def shown(r: Row) -> Row:
    """The row as a table, a plot or a page shows it: each name (a device, a cell id, a host, a version)
    within NAME and each sentence within TEXT, a longer one cut and saying how long it was (textsafe.short);
    results.csv, results.jsonl and the --json outputs keep the row whole. (A device named in 500,000
    characters made a report take 98 s and 6.4 GB: drawn into a plot as wide as it, a 10.9 MB page.)"""
    text, mappings = _words()
    changed: dict[str, Any] = {
        name: short(value, TEXT if name in SENTENCES else NAME)
        for name in text
        if isinstance(value := getattr(r, name), str) and len(value) > NAME
    }
    for name in mappings:
        found = getattr(r, name)
        if isinstance(found, dict) and any(
            isinstance(v, str) and len(v) > NAME for v in (*found, *found.values())
        ):
            changed[name] = {_named(k): _named(v) for k, v in found.items()}
    for name in ("assumptions", "log_tail"):
        found = getattr(r, name)
        if found and any(len(str(item)) > TEXT for item in found):
            changed[name] = [short(item) for item in found]
    references = [*r.references, *r.other_references]
    if any(isinstance(ref.get("device"), str) and len(ref["device"]) > NAME for ref in references):
        changed["references"] = [{**ref, "device": _named(ref.get("device"))} for ref in r.references]
        changed["other_references"] = [
            {**ref, "device": _named(ref.get("device"))} for ref in r.other_references
        ]
    return replace(r, **changed) if changed else r


def number(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, int | float) else "-"


def seconds(value: Any) -> str:
    return f"{value:,.1f} s" if isinstance(value, int | float) else "-"


def step_times(r: Row) -> str:
    """A cell's step-time percentiles in milliseconds (its measured steps, end to end)."""
    found = (r.step_time_p50_s, r.step_time_p90_s, r.step_time_p99_s)
    if not all(isinstance(value, int | float) for value in found):
        return "-"
    return " / ".join(f"{value * 1e3:,.1f}" for value in found) + " ms"


def percent(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def measured(r: Row) -> str:
    """The measured figure with its unit, and for repeated runs the median's range."""
    if r.measured is None:
        return "-"
    text = f"{number(r.measured)} {r.unit or ''}".strip()
    if (r.repeats or 0) > 1:
        text += f" (median of {r.repeats}, {number(r.measured_min)} to {number(r.measured_max)})"
    return text


def published(r: Row) -> str:
    """The published figure per device, and the whole-node figure it comes from (and the release it was
    measured on, for a release's figure); for a cell with no figure on its device, the other devices'
    figures labelled as theirs (elsewhere)."""
    if r.reference is None:
        return elsewhere(r) or "-"
    text = f"{number(r.reference_per_device)} ({number(r.reference)} on {r.reference_devices} {r.device})"
    figure = releases.judged(r.references, r.reference, r.device)
    # The release a figure was measured on, where it names one: a release's figure (--reference), or
    # the publication's own where its source says which software it ran.
    return f"{text}; {releases.said(figure)}" if figure and figure.get("release") else text


def published_per_device(r: Row) -> str:
    """The published figure per device, or the other devices' labelled as theirs (elsewhere)."""
    if r.reference_per_device is None:
        return elsewhere(r) or "-"
    return number(r.reference_per_device)


def elsewhere(r: Row) -> str:
    """For a cell with nothing published for its device, judged `no reference` or `not comparable` (a
    smoke cell on a CPU), the publication's figure on each device it has, labelled as another device's
    (and the release it was measured on, where it names one): `published h100: 75.26 samples/s per
    device (another device, not judged)`. '' for any other cell: its verdict or its reasons say it all."""
    if r.verdict not in (verdicts.NO_REFERENCE, verdicts.NOT_COMPARABLE):
        return ""
    return other_devices.said(r.all_references(), r.device, r.world_size or 1, r.nodes or 1, r.unit)


def speedup(r: Row) -> str:
    """`measured vs published` speedup over the baseline; `-` when the row has neither."""
    if r.measured_speedup is None and r.published_speedup is None:
        return "-"
    return f"{ratio(r.measured_speedup)} vs {ratio(r.published_speedup)}"


def verdict(r: Row) -> str:
    """`not comparable (smoke scale)`, `reproduced; quality only: random weights`."""
    return verdicts.worded(r.verdict, r.verdict_reasons, r.quality_departures)


def speedup_verdict(r: Row) -> str:
    return verdicts.worded(r.speedup_verdict, r.speedup_verdict_reasons)


# A software departure reads `<what>: <ran>, published: <published>` (verdicts.software_departures).
_SOFTWARE = ", published: "


def reason_names(*reasons: str | None) -> list[str]:
    """Each reason of one or more verdicts by its name alone, once: the words before its details (`the
    machine was shared while the run measured`, not the load it measured), the publication's software
    that did not run gathered in one name. A cell's own reasons and its baseline's name the same
    departure with other numbers; named once, they read once."""
    names: list[str] = []
    software: list[str] = []
    for text in reasons:
        for part in (text or "").split("; "):
            name = part.split(":")[0].split(" (")[0].strip()
            if not name:
                continue
            if _SOFTWARE in part:
                software.append(name)
            else:
                names.append(name)
    if software:
        names.append(f"software other than the publication's ({', '.join(dict.fromkeys(software))})")
    return list(dict.fromkeys(names))


def verdict_sentence(r: Row) -> str:
    """A cell's verdict and its speedup's in one sentence, each reason named once (the report's cell
    details hold the reasons whole): `not comparable: smoke scale, synthetic data`, `reproduced (0.98x
    the published figure); speedup 1.60x vs 2.00x published: slower`."""
    if r.status != "ok" or r.verdict == verdicts.NO_RESULT:
        return f"{verdicts.NO_RESULT} ({r.status or '-'})"
    speedup_blocked = r.speedup_verdict == verdicts.NOT_COMPARABLE
    if r.verdict == verdicts.BEYOND:
        over = f": {ratio(r.measured_speedup)} over {r.beyond}" if r.measured_speedup is not None else ""
        text = f"{verdicts.BEYOND}{over}"
        if r.scale not in (None, "published"):  # as the report's banner says: nothing at this scale is judged
            text += f" ({r.scale} scale, not judged)"
    elif r.verdict == verdicts.NOT_COMPARABLE:
        both = speedup_blocked
        names = reason_names(r.verdict_reasons, r.speedup_verdict_reasons if both else None)
        text = f"{verdicts.NOT_COMPARABLE}{' (figure and speedup)' if both else ''}: {', '.join(names)}"
    elif r.verdict in (verdicts.REPRODUCED, verdicts.FASTER, verdicts.SLOWER):
        text = f"{r.verdict} ({ratio(r.ratio_per_device)} the published figure)"
    else:
        text = r.verdict or "-"
    if r.speedup_verdict in (verdicts.REPRODUCED, verdicts.FASTER, verdicts.SLOWER):
        text += (
            f"; speedup {ratio(r.measured_speedup)} vs {ratio(r.published_speedup)} published: "
            f"{r.speedup_verdict}"
        )
    elif speedup_blocked and r.verdict != verdicts.NOT_COMPARABLE:
        own = set(reason_names(r.verdict_reasons))
        names = [n for n in reason_names(r.speedup_verdict_reasons) if n not in own]
        text += f"; speedup not comparable: {', '.join(names)}"
    if r.quality_departures:
        text += f"; quality only: {', '.join(reason_names(r.quality_departures))}"
    return text
