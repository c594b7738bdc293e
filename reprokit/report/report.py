"""The report: each measured number beside the published one, in report.md and a self-contained
report.html (plots embedded as data URIs, so the one file opens anywhere); terminal.py prints the
same rows at a glance.

The Markdown and the HTML are rendered from the same list of blocks, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reprokit.collect import collect, explain
from reprokit.contract import files, sessions, writelock
from reprokit.contract.bounded import Malformed
from reprokit.contract.definitions import DEFINITIONS
from reprokit.contract.invocation import command
from reprokit.contract.textsafe import NAME, short
from reprokit.judge.result_row import Row
from reprokit.report import formats, page_blocks, software_stacks, tables
from reprokit.report.drawing import Plot
from reprokit.report.page_blocks import Block

# ---------------------------------------------------------------------------------------------
# Content, as blocks both renderers understand


def container_phrase(container: str | None) -> str:
    """Where the cells ran beside how they were launched (sessions from before the axis have none)."""
    if container == "none":
        return ", in this machine's Python"
    return f", in {container} containers" if container else ""


def blocks(session_dir: Path, table: list[Row], plots: list[Plot]) -> list[Block]:
    try:
        plan = sessions.stored(session_dir, session_dir.parent)
    except Malformed:  # said by collect: the report goes on without the plan's words
        plan = {}
    plan = {key: short(plan.get(key), NAME) for key in ("runtime", "container") if plan.get(key)}
    # Each word as the page shows it, within its bound (results.jsonl keeps it whole); the plots were
    # drawn from the same (plots.draw), so a plot's recipe is the recipe it is shown under.
    table = [formats.shown(r) for r in table]
    scales = sorted({r.scale or "-" for r in table}) or ["-"]
    accelerators = sorted({r.accelerator or "-" for r in table}) or ["-"]
    devices = sorted({r.device_name for r in table if r.device_name})
    ok = sum(1 for r in table if r.status == "ok")
    tolerances = sorted({r.tolerance for r in table if r.tolerance is not None})
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
            "device (each cell's details say when device counts differ). Verdict: reproduced within "
            f"the recipe's tolerance ({', '.join(f'±{t:.0%}' for t in tolerances) or '-'}), else faster "
            "or slower; not comparable, with the reasons, when the run did not do what the publication "
            "did (smoke scale, synthetic data, a switch not in effect, software other than the "
            "publication's, a shortened run for a whole-run figure). Speedups are over the baseline "
            "variant of the same group measured in this session, against the published ratio; a variant "
            "beyond the publication (today's faster software) is read as its speedup over the published "
            "variant it goes beyond.",
        ),
        Block(
            "table", headers=["definition", "what it counts"], rows=[[k, v] for k, v in DEFINITIONS.items()]
        ),
    ]
    repeated = sorted({r.repeats for r in table if r.repeats and r.repeats > 1})
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
    out += [
        Block("h2", "All cells"),
        tables.block(tables.SUMMARY, table),
        Block("p", "Every column of each cell, its reasons whole, is under Details below."),
    ]
    for recipe in dict.fromkeys(r.recipe for r in table if r.recipe):
        rows = [r for r in table if r.recipe == recipe]
        title = next((r.title for r in rows if r.title), None)
        out.append(Block("h2", f"{recipe}" + (f": {title}" if title else "")))
        headers, body = tables.publication_table(rows)
        out.append(Block("table", headers=headers, rows=body, nowrap=(0,)))
        assumptions = next((r.assumptions for r in rows if r.assumptions), [])
        if assumptions:
            out.append(Block("p", "The verdicts rest on these readings of the publication:"))
            out += [Block("note", text) for text in assumptions]
        out += software_stacks.blocks(rows)
        read = False
        for plot in plots:
            if plot.recipe == recipe:
                out += [Block("h3", plot.title), Block("plot", plot=plot), Block("p", plot.caption)]
                if plot.name.startswith("breakdown-"):
                    out += [Block(**line._asdict()) for line in explain.reading(rows)]
                    read = True
        if not read:  # no breakdown plot (a disk that filled while drawing): the sentences still say it
            out += [Block(**line._asdict()) for line in explain.reading(rows)]
        out += [Block(**line._asdict()) for line in explain.energy_and_traces(rows)]
    out += [Block("h2", "Details"), *(tables.cell_details(r) for r in table)]
    failed = [r for r in table if r.status != "ok"]
    if failed:
        out.append(Block("h2", "Cells that did not complete"))
        for r in failed:
            out.append(Block("p", f"{r.cell_id}: {r.status}: {r.error or '-'}"))
            tail = r.log_tail or []
            if tail:
                out.append(Block("pre", "\n".join(tail[-15:])))
        out.append(
            Block("p", f"Rerun them (complete cells are kept) with `{command()} resume {session_dir}`.")
        )
    kept = [r for r in table if r.kept]
    if kept:
        out.append(Block("h2", "Rows kept from the last collect"))
        out.append(
            Block(
                "p",
                "These rows are as the last collect stored them (their figures, verdicts and provenance): "
                "their run directories could not be read this time. Put the run directories back and "
                "collect again to read them afresh.",
            )
        )
        out += [Block("p", f"{r.cell_id}: {r.kept}") for r in kept]
    out += [
        Block("h2", "Provenance"),
        tables.block(tables.PROVENANCE, table),
        Block(
            "p",
            "Every row is rebuilt from the run directories (runs/<cell>/) by `inv collect`"
            f"{' (but those kept from the last collect, above)' if kept else ''}; "
            f"results.csv and results.jsonl hold all columns. TensorBoard: tensorboard --logdir "
            f"{session_dir / 'tensorboard'}",
        ),
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Renderers


def markdown(session_dir: Path, table: list[Row], plots: list[Plot] | None = None) -> str:
    return page_blocks.markdown(blocks(session_dir, table, plots or []))


def to_html(session_dir: Path, table: list[Row], plots: list[Plot] | None = None) -> str:
    return page_blocks.html(f"reprokit report: {session_dir.name}", blocks(session_dir, table, plots or []))


@dataclass
class Written:
    markdown: Path
    html: Path
    plots: list[Plot]
    table: list[Row]
    # What was left out (a file the kit will not read, and why): `skipped: <path>: <reason>` each.
    skipped: list[Malformed] = field(default_factory=list)


def write(session_dir: Path) -> Written:
    """Collect the session, draw its plots, and write report.md and report.html next to them, holding
    the session's writers' lock (a report or collect started beside it waits). The report in place
    keeps its images until the new one is written: the new plots are drawn under names of their own,
    put in place of the old ones, then the report is written, and only then are images it no longer
    shows removed; a report killed at any moment leaves a report whose images are all there."""
    from reprokit.report import plots as plotting

    with writelock.session(session_dir, "a report"):
        collect.refuse_folders(session_dir, (sessions.REPORT_MD, sessions.REPORT_HTML))
        found = collect.collect(session_dir)
        table = found.rows
        try:
            drawn = plotting.draw(session_dir, table, found.skipped)
        except OSError as exc:
            # A disk that fills while drawing: the report without its plots rather than none.
            if not files.is_storage_failure(exc):
                raise
            drawn = []
        md_path, html_path = session_dir / sessions.REPORT_MD, session_dir / sessions.REPORT_HTML
        md_text, html_text = markdown(session_dir, table, drawn), to_html(session_dir, table, drawn)
        drawn = plotting.install(session_dir, drawn)
        files.write_text(md_path, md_text)
        files.write_text(html_path, html_text)
        plotting.remove_old(session_dir, drawn)
    return Written(md_path, html_path, drawn, table, found.skipped)
