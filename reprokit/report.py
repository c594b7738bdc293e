"""The report: each measured number beside the published one, as Markdown and in the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import collect


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


HEADERS = [
    "recipe",
    "variant",
    "status",
    "measured",
    "per device",
    "published per device",
    "measured / published",
    "speedup vs baseline",
    "published speedup",
]


def _cells(r: dict[str, Any]) -> list[str]:
    reference = (
        f"{_fmt(r['reference_per_device'])} ({_fmt(r['reference'])} on {r['reference_devices']} {r['device']})"
        if r.get("reference")
        else "-"
    )
    measured = (
        f"{_fmt(r['measured'])} {r.get('unit') or ''}".strip() if r.get("measured") is not None else "-"
    )
    return [
        r["recipe"] or "-",
        r["variant"] or "-",
        r["status"] or "-",
        measured,
        _fmt(r.get("measured_per_device")),
        reference,
        _ratio(r.get("ratio_per_device")),
        _ratio(r.get("measured_speedup")),
        _ratio(r.get("published_speedup")),
    ]


def markdown(session_dir: Path, table: list[dict[str, Any]]) -> str:
    lines = [f"# reprokit report: {session_dir.name}", ""]
    scales = sorted({r.get("scale") or "-" for r in table})
    accelerators = sorted({r.get("accelerator") or "-" for r in table})
    devices = sorted({r.get("device_name") or "-" for r in table})
    lines += [
        f"Scale: {', '.join(scales)}. Accelerator: {', '.join(accelerators)} ({', '.join(devices)}).",
        "",
        "Throughput is global (all ranks), counted after the warm-up steps. Published figures are for "
        "whole nodes, so both sides are compared per device.",
        "",
    ]
    if "smoke" in scales:
        lines += [
            "> Smoke scale: tiny models on synthetic data. The numbers show the machinery works; "
            "they are not comparable with the published figures.",
            "",
        ]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in table]
    failed = [r for r in table if r.get("status") != "ok"]
    if failed:
        lines += ["", "## Cells that did not complete", ""]
        lines += [f"- `{r['cell_id']}`: {r['status']}: {r.get('error') or '-'}" for r in failed]
    return "\n".join(lines) + "\n"


def write(session_dir: Path) -> Path:
    table = collect.collect(session_dir)
    path = session_dir / "report.md"
    path.write_text(markdown(session_dir, table))
    return path


def print_table(table: list[dict[str, Any]], console: Console | None = None) -> None:
    console = console or Console()
    view = Table(title="reprokit results", show_lines=False)
    for header in HEADERS:
        view.add_column(header, overflow="fold")
    for r in table:
        cells = _cells(r)
        style = None if r.get("status") == "ok" else "red"
        view.add_row(*cells, style=style)
    console.print(view)
