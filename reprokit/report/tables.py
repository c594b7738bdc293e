"""The report's tables of rows: the summary (a line per cell), each recipe's publication table (a line per
variant, the published figures beside the measured), each cell's details (every column, a click
away) and the provenance; report.py puts them on the page."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timezone

from reprokit.contract import sessions
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.report import formats
from reprokit.report.page_blocks import Block

# A table is its columns, each a header and how a row shows under it (one place for both: they cannot
# drift apart).
Column = tuple[str, Callable[[Row], str]]


def _cell(r: Row) -> str:
    return r.cell_id or "-"


def _status(r: Row) -> str:
    return r.status or "-"


def _peak_memory(r: Row) -> str:
    # The allocator's peak, and what the device saw the process hold where NVML says.
    held = f" ({formats.gib(r.peak_memory_device_bytes)} on the device)" if r.peak_memory_device_bytes else ""
    return formats.gib(r.peak_memory_bytes) + held


def _mfu(r: Row) -> str:
    # Over the peak of the precision the matmuls ran in.
    return formats.percent(r.mfu) + (f" ({r.mfu_precision})" if r.mfu is not None and r.mfu_precision else "")


DETAIL: tuple[Column, ...] = (
    ("cell", _cell),
    ("status", _status),
    ("judged by", lambda r: r.definition or "-"),
    ("measured", formats.measured),
    ("per device", lambda r: formats.number(r.measured_per_device)),
    # Every definition the trainer recorded, beside the one the verdict used.
    ("after warm-up", lambda r: formats.number(r.measured_after_warmup)),
    ("whole run", lambda r: formats.number(r.measured_whole_run)),
    ("GaudiTrainer formula", lambda r: formats.number(r.measured_gaudi_trainer)),
    ("published per device", formats.published),
    ("compared", lambda r: r.normalization or "-"),
    ("measured / published", lambda r: formats.ratio(r.ratio_per_device)),
    ("verdict", formats.verdict),
    ("speedup vs baseline (measured vs published)", formats.speedup),
    ("speedup verdict", formats.speedup_verdict),
    ("nodes", lambda r: str(r.nodes or "-")),
    # Per device over the single-node run of the same cell in this session (1.0: linear).
    ("scaling efficiency", lambda r: formats.number(r.scaling_efficiency)),
    ("MFU", _mfu),
    ("samples/J", lambda r: formats.number(r.samples_per_joule, 3)),
    ("step time p50 / p90 / p99", formats.step_times),
    ("wall time", lambda r: formats.seconds(r.wall_time_s)),
    ("peak memory", _peak_memory),
)


def _utc(text: str | None) -> str:
    """A recorded time as `2026-11-26 19:05:03` in UTC (it breaks at its space when the table is full)."""
    found = sessions.parse_time(text)
    return found.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if found else text or "-"


PROVENANCE: tuple[Column, ...] = (
    ("cell", _cell),
    ("started (UTC)", lambda r: _utc(r.started_at)),
    ("device", lambda r: f"{r.device_name or '-'} x{r.world_size or '-'}"),
    ("image", lambda r: (r.image_id or "-")[:19]),
    ("kit revision", lambda r: r.kit_revision or "-"),
    ("recipe hash", lambda r: r.recipe_hash or "-"),
    ("torch", lambda r: r.torch or "-"),
    ("transformers", lambda r: r.transformers or "-"),
    ("timm", lambda r: r.timm or "-"),
)


def headers(columns: tuple[Column, ...]) -> list[str]:
    return [header for header, _ in columns]


def values(columns: tuple[Column, ...], r: Row) -> list[str]:
    """A row as a table of `columns` shows it, a value per header."""
    return [shown(r) for _, shown in columns]


def block(columns: tuple[Column, ...], rows: list[Row]) -> Block:
    """A table of `columns`, a line per row; its first column (the cell) is never broken."""
    return Block("table", headers=headers(columns), rows=[values(columns, r) for r in rows], nowrap=(0,))


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


def _per_device(r: Row) -> str:
    return (
        f"{formats.number(r.measured_per_device)} {r.unit or ''}".strip()
        if r.measured_per_device is not None
        else "-"
    )


SUMMARY: tuple[Column, ...] = (
    ("cell", _cell),
    ("status", _status),
    ("per device", _per_device),
    ("published per device", formats.published_per_device),
    ("measured / published", lambda r: formats.ratio(r.ratio_per_device)),
    ("speedup (measured vs published)", formats.speedup),
    ("verdict", formats.verdict_sentence),
)


def cell_details(r: Row) -> Block:
    """Every column of a cell, a click away from its summary line: a column and its value a row."""
    return Block(
        "details",
        f"{r.cell_id or '-'}: {formats.verdict_sentence(r)}",
        headers=["column", "value"],
        rows=[[h, v] for h, v in zip(headers(DETAIL), values(DETAIL, r), strict=True)],
    )
