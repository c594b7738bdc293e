"""The report: each measured number beside the published one, in report.md, a self-contained
report.html (plots embedded as data URIs, so the one file opens anywhere) and the terminal.

The Markdown and the HTML are rendered from the same list of blocks, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from reprokit.invocation import command
from reprokit.plan.definitions import DEFINITIONS
from reprokit.results import collect, explain, pages, stacks, verdicts
from reprokit.results.pages import Block
from reprokit.results.plots import Plot
from reprokit.run import files, session

VERDICT_STYLES = {
    verdicts.REPRODUCED: "green",
    verdicts.FASTER: "cyan",
    verdicts.SLOWER: "yellow",
    verdicts.NOT_COMPARABLE: "magenta",
    verdicts.NO_RESULT: "red",
}


# ---------------------------------------------------------------------------------------------
# Formatting


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _bytes(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return f"{value / 2**30:.2f} GiB"


def _seconds(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:,.1f} s"


def _measured(r: dict[str, Any]) -> str:
    if r.get("measured") is None:
        return "-"
    text = f"{_fmt(r['measured'])} {r.get('unit') or ''}".strip()
    if (r.get("repeats") or 0) > 1:
        text += f" (median of {r['repeats']}, {_fmt(r.get('measured_min'))} to {_fmt(r.get('measured_max'))})"
    return text


def _published(r: dict[str, Any]) -> str:
    if r.get("reference") is None:
        return "-"
    return f"{_fmt(r['reference_per_device'])} ({_fmt(r['reference'])} on {r['reference_devices']} {r['device']})"


def _percent(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.1%}"


def _speedup(r: dict[str, Any]) -> str:
    if r.get("measured_speedup") is None and r.get("published_speedup") is None:
        return "-"
    return f"{_ratio(r.get('measured_speedup'))} vs {_ratio(r.get('published_speedup'))}"


# ---------------------------------------------------------------------------------------------
# Content, as blocks both renderers understand


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
    "wall time",
    "peak memory",
]

PROVENANCE_HEADERS = [
    "cell",
    "started",
    "device",
    "image",
    "kit revision",
    "recipe hash",
    "torch",
    "transformers",
    "timm",
]


def _detail(r: dict[str, Any]) -> list[str]:
    return [
        r.get("cell_id") or "-",
        r.get("status") or "-",
        r.get("definition") or "-",
        _measured(r),
        _fmt(r.get("measured_per_device")),
        # Every definition the trainer recorded, beside the one the verdict used.
        _fmt(r.get("measured_after_warmup")),
        _fmt(r.get("measured_whole_run")),
        _fmt(r.get("measured_gaudi_trainer")),
        _published(r),
        r.get("normalization") or "-",
        _ratio(r.get("ratio_per_device")),
        verdicts.verdict_text(r),
        _speedup(r),
        verdicts.verdict_text(r, "speedup_verdict", "speedup_verdict_reasons"),
        str(r.get("nodes") or "-"),
        # Per device over the single-node run of the same cell in this session (1.0: linear).
        _fmt(r.get("scaling_efficiency")),
        _percent(r.get("mfu")),
        _fmt(r.get("samples_per_joule"), 3),
        _seconds(r.get("wall_time_s")),
        _bytes(r.get("peak_memory_bytes")),
    ]


def _provenance(r: dict[str, Any]) -> list[str]:
    return [
        r.get("cell_id") or "-",
        r.get("started_at") or "-",
        f"{r.get('device_name') or '-'} x{r.get('world_size') or '-'}",
        (r.get("image_id") or "-")[:19],
        r.get("kit_revision") or "-",
        r.get("recipe_hash") or "-",
        r.get("torch") or "-",
        r.get("transformers") or "-",
        r.get("timm") or "-",
    ]


def publication_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One recipe laid out like the publications' tables: a column per variant, a row per device."""
    variants = [r["variant"] or "-" for r in rows]
    published: dict[str, dict[str, str]] = {}
    for r in rows:
        for ref in verdicts.all_references(r):
            if ref.get("value") is not None:
                devices = int(ref.get("devices") or 1) * int(ref.get("nodes") or 1)
                label = f"published {ref['device']}, per device (of {devices})"
                published.setdefault(label, {})[r["variant"]] = _fmt(ref["value"] / devices)
    measured_on = sorted(
        {f"{r.get('device_name') or '-'} x{r.get('world_size')}" for r in rows if r.get("measured")}
    )
    body = [[label, *(values.get(v, "-") for v in variants)] for label, values in published.items()]
    body += [
        [
            f"measured, per device ({', '.join(measured_on) or 'no result'})",
            *(_fmt(r.get("measured_per_device")) for r in rows),
        ],
        ["measured / published", *(_ratio(r.get("ratio_per_device")) for r in rows)],
        ["verdict", *(verdicts.verdict_text(r) for r in rows)],
    ]
    if any(r.get("samples_per_joule") for r in rows):
        body.append(["measured samples/J", *(_fmt(r.get("samples_per_joule"), 3) for r in rows)])

    def of_group(text: Callable[[dict[str, Any]], str]) -> list[str]:
        return ["-" if r.get("beyond") else text(r) for r in rows]

    if any(r.get("baseline") for r in rows):
        body += [
            ["speedup vs baseline, measured", *of_group(lambda r: _ratio(r.get("measured_speedup")))],
            ["speedup vs baseline, published", *of_group(lambda r: _ratio(r.get("published_speedup")))],
            [
                "speedup verdict",
                *of_group(lambda r: verdicts.verdict_text(r, "speedup_verdict", "speedup_verdict_reasons")),
            ],
        ]
    if any(r.get("beyond") for r in rows):
        body += [
            ["software", *(f"beyond the publication (over {r['beyond']})" if r.get("beyond") else "published" for r in rows)],
            [
                "speedup over the published variant",
                *(_ratio(r.get("measured_speedup")) if r.get("beyond") else "-" for r in rows),
            ],
        ]
    return ["", *variants], body


def container_phrase(container: str | None) -> str:
    """Where the cells ran beside how they were launched (sessions from before the axis have none)."""
    if container == "none":
        return ", in this machine's Python"
    return f", in {container} containers" if container else ""


def blocks(session_dir: Path, table: list[dict[str, Any]], plots: list[Plot]) -> list[Block]:
    plan = session.stored(session_dir)
    scales = sorted({r.get("scale") or "-" for r in table}) or ["-"]
    accelerators = sorted({r.get("accelerator") or "-" for r in table}) or ["-"]
    devices = sorted({r.get("device_name") for r in table if r.get("device_name")})
    ok = sum(1 for r in table if r.get("status") == "ok")
    tolerances = sorted({r["tolerance"] for r in table if r.get("tolerance") is not None})
    out = [
        Block("h1", f"reprokit report: {session_dir.name}"),
        Block(
            "p",
            f"Scale {', '.join(scales)}; accelerator {', '.join(accelerators)} "
            f"({', '.join(devices) or 'no device reported'}); runtime {plan.get('runtime') or '-'}"
            f"{container_phrase(plan.get('container'))}. "
            f"{ok} of {len(table)} cells completed.",
        ),
        Block(
            "p",
            "Throughput is global (all ranks). Each published figure is compared with the run's figure "
            "under the same definition ('judged by'); the trainers record every definition they can, "
            "shown beside it. Published figures are for whole nodes, so both sides are compared per "
            "device (the 'compared' column says when device counts differ). Verdict: reproduced within "
            f"the recipe's tolerance ({', '.join(f'±{t:.0%}' for t in tolerances) or '-'}), else faster "
            "or slower; not comparable, with the reasons, when the run did not do what the publication "
            "did (smoke scale, synthetic data, a switch not in effect, a shortened run for a whole-run "
            "figure). Speedups are over the baseline variant of the same group measured in this "
            "session, against the published ratio.",
        ),
        Block(
            "table", headers=["definition", "what it counts"], rows=[[k, v] for k, v in DEFINITIONS.items()]
        ),
    ]
    repeated = sorted({r["repeats"] for r in table if (r.get("repeats") or 0) > 1})
    if repeated:
        out.append(
            Block(
                "note",
                f"Each cell ran {', '.join(map(str, repeated))} times: its figure is the median of the runs, "
                "shown with their range; the verdicts use the median.",
            )
        )
    if "smoke" in scales:
        out.append(
            Block(
                "note",
                "Smoke scale: tiny models on synthetic data. The numbers show the machinery works; "
                "they are not comparable with the published figures, so no verdict is given.",
            )
        )
    for recipe in dict.fromkeys(r["recipe"] for r in table if r.get("recipe")):
        rows = [r for r in table if r.get("recipe") == recipe]
        title = next((r.get("title") for r in rows if r.get("title")), None)
        out.append(Block("h2", f"{recipe}" + (f": {title}" if title else "")))
        headers, body = publication_table(rows)
        out.append(Block("table", headers=headers, rows=body))
        assumptions = next((r.get("assumptions") for r in rows if r.get("assumptions")), [])
        if assumptions:
            out.append(Block("p", "The verdicts rest on these readings of the publication:"))
            out += [Block("note", text) for text in assumptions]
        out += stacks.blocks(rows)
        for plot in plots:
            if plot.recipe == recipe:
                out += [Block("h3", plot.title), Block("plot", plot=plot), Block("p", plot.caption)]
                if plot.name.startswith("breakdown-"):
                    out += [Block(**line._asdict()) for line in explain.reading(rows)]
        out += [Block(**line._asdict()) for line in explain.energy_and_traces(rows)]
    out += [
        Block("h2", "All cells"),
        Block("table", headers=DETAIL_HEADERS, rows=[_detail(r) for r in table]),
    ]
    failed = [r for r in table if r.get("status") != "ok"]
    if failed:
        out.append(Block("h2", "Cells that did not complete"))
        for r in failed:
            out.append(Block("p", f"{r['cell_id']}: {r.get('status')}: {r.get('error') or '-'}"))
            tail = r.get("log_tail") or []
            if tail:
                out.append(Block("pre", "\n".join(tail[-15:])))
        out.append(
            Block("p", f"Rerun them (complete cells are kept) with `{command()} resume {session_dir}`.")
        )
    out += [
        Block("h2", "Provenance"),
        Block("table", headers=PROVENANCE_HEADERS, rows=[_provenance(r) for r in table]),
        Block(
            "p",
            "Every row is rebuilt from the run directories (runs/<cell>/) by `inv collect`; "
            f"results.csv and results.jsonl hold all columns. TensorBoard: tensorboard --logdir "
            f"{session_dir / 'tensorboard'}",
        ),
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Renderers


def markdown(session_dir: Path, table: list[dict[str, Any]], plots: list[Plot] | None = None) -> str:
    return pages.markdown(blocks(session_dir, table, plots or []))


def to_html(session_dir: Path, table: list[dict[str, Any]], plots: list[Plot] | None = None) -> str:
    return pages.html(f"reprokit report: {session_dir.name}", blocks(session_dir, table, plots or []))


@dataclass
class Written:
    markdown: Path
    html: Path
    plots: list[Plot]
    table: list[dict[str, Any]]


def write(session_dir: Path) -> Written:
    """Collect the session, draw its plots, and write report.md and report.html next to them."""
    from reprokit.results import plots as plotting

    table = collect.collect(session_dir)
    try:
        drawn = plotting.draw(session_dir, table)
    except OSError as exc:
        # A disk that fills while drawing: the report without its plots rather than none.
        if not files.is_storage_failure(exc):
            raise
        drawn = []
    md_path, html_path = session_dir / "report.md", session_dir / "report.html"
    collect.write_atomic(md_path, markdown(session_dir, table, drawn))
    collect.write_atomic(html_path, to_html(session_dir, table, drawn))
    return Written(md_path, html_path, drawn, table)


# ---------------------------------------------------------------------------------------------
# Terminal

TERMINAL_HEADERS = ["cell", "status", "per device", "published", "ratio", "verdict", "speedup (published)"]


def print_table(table: list[dict[str, Any]], console: Console | None = None) -> None:
    """The results at a glance (report.html has everything): per-device figures, the verdicts."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file or a pipe: wide enough that cell ids stay whole
            console = Console(width=140)
    units = sorted({r["unit"] for r in table if r.get("unit")})
    view = Table(title=f"reprokit results ({', '.join(units) or 'samples/s'})", show_lines=False)
    scaling = any(r.get("scaling_efficiency") is not None for r in table)
    for header in [*TERMINAL_HEADERS, *(["scaling efficiency"] if scaling else [])]:
        view.add_column(
            header, overflow="fold", justify="left" if header in ("cell", "status", "verdict") else "right"
        )
    for r in table:
        verdict = verdicts.verdict_text(r)
        style = VERDICT_STYLES.get(r.get("verdict") or "-", "")
        speedup = "-"
        if r.get("measured_speedup") is not None or r.get("published_speedup") is not None:
            speedup = f"{_ratio(r.get('measured_speedup'))} ({_ratio(r.get('published_speedup'))})"
            # A measured speedup beside a published one reads as a claim unless its verdict says otherwise.
            if r.get("speedup_verdict"):
                speedup += f" {r['speedup_verdict']}"
        view.add_row(
            escape(r.get("cell_id") or "-"),
            f"[{'green' if r.get('status') == 'ok' else 'red'}]{r.get('status') or '-'}[/]",
            _fmt(r.get("measured_per_device")),
            _fmt(r.get("reference_per_device")),
            _ratio(r.get("ratio_per_device")),
            f"[{style}]{verdict}[/]" if style else verdict,
            speedup,
            *([_fmt(r.get("scaling_efficiency"))] if scaling else []),
        )
    notes = sorted(
        {r["normalization"] for r in table if (r.get("normalization") or "").startswith("per device")}
    )
    if notes:
        view.caption = "compared " + "; ".join(notes)  # says when device counts differ
    console.print(view)
    for r in table:
        if r.get("status") != "ok":
            what = escape(f"{r.get('cell_id')}: {r.get('error') or '-'}")
            console.print(f"[red]{r.get('status')}[/red] {what}")
            for line in (r.get("log_tail") or [])[-5:]:
                console.print(f"    {line}", style="dim", markup=False, highlight=False)
