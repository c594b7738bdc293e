"""The report's tables of rows: the summary (a line per cell), each recipe's publication table (a line per
variant, the published figures beside the measured), each cell's details (every column, a click
away) and the provenance; report.py puts them on the page."""

from __future__ import annotations

from datetime import timezone

from reprokit.contract import sessions
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.report import formats
from reprokit.report.page_blocks import Block

DETAIL_HEADERS = [
    "cell",
    "status",
    "judged by",
    "measured",
    "per device",
    "after warm-up",
    "whole run",
    "GaudiTrainer formula",
    "published per device",
    "compared",
    "measured / published",
    "verdict",
    "speedup vs baseline (measured vs published)",
    "speedup verdict",
    "nodes",
    "scaling efficiency",
    "MFU",
    "samples/J",
    "step time p50 / p90 / p99",
    "wall time",
    "peak memory",
]

PROVENANCE_HEADERS = [
    "cell",
    "started (UTC)",
    "device",
    "image",
    "kit revision",
    "recipe hash",
    "torch",
    "transformers",
    "timm",
]


def _detail(r: Row) -> list[str]:
    return [
        r.cell_id or "-",
        r.status or "-",
        r.definition or "-",
        formats.measured(r),
        formats.number(r.measured_per_device),
        # Every definition the trainer recorded, beside the one the verdict used.
        formats.number(r.measured_after_warmup),
        formats.number(r.measured_whole_run),
        formats.number(r.measured_gaudi_trainer),
        formats.published(r),
        r.normalization or "-",
        formats.ratio(r.ratio_per_device),
        formats.verdict(r),
        formats.speedup(r),
        formats.speedup_verdict(r),
        str(r.nodes or "-"),
        # Per device over the single-node run of the same cell in this session (1.0: linear).
        formats.number(r.scaling_efficiency),
        # Over the peak of the precision the matmuls ran in.
        formats.percent(r.mfu) + (f" ({r.mfu_precision})" if r.mfu is not None and r.mfu_precision else ""),
        formats.number(r.samples_per_joule, 3),
        formats.step_times(r),
        formats.seconds(r.wall_time_s),
        # The allocator's peak, and what the device saw the process hold where NVML says.
        formats.gib(r.peak_memory_bytes)
        + (
            f" ({formats.gib(r.peak_memory_device_bytes)} on the device)"
            if r.peak_memory_device_bytes
            else ""
        ),
    ]


def _utc(text: str | None) -> str:
    """A recorded time as `2026-11-26 19:05:03` in UTC (it breaks at its space when the table is full)."""
    found = sessions.parse_time(text)
    return found.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if found else text or "-"


def provenance(r: Row) -> list[str]:
    return [
        r.cell_id or "-",
        _utc(r.started_at),
        f"{r.device_name or '-'} x{r.world_size or '-'}",
        (r.image_id or "-")[:19],
        r.kit_revision or "-",
        r.recipe_hash or "-",
        r.torch or "-",
        r.transformers or "-",
        r.timm or "-",
    ]


def publication_table(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """One recipe as a row per variant (a recipe of 16 variants reads down the page, not off its edge):
    the published figure per device on each device the publication names, the measured one beside
    them, their ratio, the speedups, and the verdict in one sentence."""
    figures: dict[str, dict[str | None, str]] = {}
    for r in rows:
        for ref in r.all_references():
            if ref.get("value") is not None:
                label = f"published {ref['device']} (of {verdicts.total_devices(ref)})"
                figures.setdefault(label, {})[r.variant] = formats.number(verdicts.per_device(ref))
    measured_on = sorted({f"{r.device_name or '-'} x{r.world_size}" for r in rows if r.measured})
    headers = [
        "variant",
        *figures,
        f"measured ({', '.join(measured_on) or 'no result'})",
        "measured / published",
    ]
    energy = any(r.samples_per_joule for r in rows)
    step_times = any(r.step_time_p50_s for r in rows)
    beyond = any(r.beyond for r in rows)
    speedups = beyond or any(r.baseline for r in rows)
    if energy:
        headers.append("samples/J")
    if step_times:
        headers.append("step time p50 / p90 / p99")
    if beyond:
        headers.append("software")
    if speedups:
        headers += ["speedup, measured", "speedup, published"]
    headers.append("verdict")
    body = []
    for r in rows:
        line = [r.variant or "-", *(values.get(r.variant, "-") for values in figures.values())]
        line += [formats.number(r.measured_per_device), formats.ratio(r.ratio_per_device)]
        if energy:
            line.append(formats.number(r.samples_per_joule, 3))
        if step_times:
            line.append(formats.step_times(r))
        if beyond:
            line.append(f"beyond, over {r.beyond}" if r.beyond else "published")
        if speedups:
            # A variant beyond the publication: its speedup over the published variant it goes beyond.
            line += [
                formats.ratio(r.measured_speedup),
                "-" if r.beyond else formats.ratio(r.published_speedup),
            ]
        body.append([*line, formats.verdict_sentence(r)])
    return headers, body


SUMMARY_HEADERS = [
    "cell",
    "status",
    "per device",
    "published per device",
    "measured / published",
    "speedup (measured vs published)",
    "verdict",
]


def summary(r: Row) -> list[str]:
    return [
        r.cell_id or "-",
        r.status or "-",
        f"{formats.number(r.measured_per_device)} {r.unit or ''}".strip()
        if r.measured_per_device is not None
        else "-",
        formats.published_per_device(r),
        formats.ratio(r.ratio_per_device),
        formats.speedup(r),
        formats.verdict_sentence(r),
    ]


def cell_details(r: Row) -> Block:
    """Every column of a cell, a click away from its summary line: a column and its value a row."""
    return Block(
        "details",
        f"{r.cell_id or '-'}: {formats.verdict_sentence(r)}",
        headers=["column", "value"],
        rows=[[h, v] for h, v in zip(DETAIL_HEADERS, _detail(r), strict=True)],
    )
