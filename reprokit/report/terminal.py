"""The results at a glance in the terminal (report.html has everything): per-device figures beside
the published ones, the verdicts, the speedups, and the cells that did not complete with their log."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from reprokit.contract.textsafe import line, markup
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.report import formats

VERDICT_STYLES = {
    verdicts.REPRODUCED: "green",
    verdicts.FASTER: "cyan",
    verdicts.SLOWER: "yellow",
    verdicts.NOT_COMPARABLE: "magenta",
    verdicts.NO_RESULT: "red",
}
HEADERS = ["cell", "status", "per device", "published", "ratio", "verdict", "speedup (published)"]


def _speedup(r: Row) -> str:
    if r.measured_speedup is None and r.published_speedup is None:
        return "-"
    text = f"{formats.ratio(r.measured_speedup)} ({formats.ratio(r.published_speedup)})"
    # A measured speedup beside a published one reads as a claim unless its verdict says otherwise.
    return f"{text} {r.speedup_verdict}" if r.speedup_verdict else text


def print_table(table: list[Row], console: Console | None = None) -> None:
    """The session's rows as one table, then each cell that did not complete and its last log lines."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file or a pipe: wide enough that cell ids stay whole
            console = Console(width=140)
    table = [formats.shown(r) for r in table]  # each word within its bound: folded whole, one fills screens
    units = sorted({markup(r.unit) for r in table if r.unit})
    view = Table(title=f"reprokit results ({', '.join(units) or 'samples/s'})", show_lines=False)
    scaling = any(r.scaling_efficiency is not None for r in table)
    for header in [*HEADERS, *(["scaling efficiency"] if scaling else [])]:
        view.add_column(
            header, overflow="fold", justify="left" if header in ("cell", "status", "verdict") else "right"
        )
    for r in table:
        # Every word from a run's files (a cell id, a departure's reason) is text, never markup or a control.
        verdict = markup(formats.verdict(r))
        style = VERDICT_STYLES.get(r.verdict or "-", "")
        view.add_row(
            markup(r.cell_id or "-"),
            f"[{'green' if r.status == 'ok' else 'red'}]{markup(r.status or '-')}[/]",
            formats.number(r.measured_per_device),
            formats.number(r.reference_per_device),
            formats.ratio(r.ratio_per_device),
            f"[{style}]{verdict}[/]" if style else verdict,
            markup(_speedup(r)),
            *([formats.number(r.scaling_efficiency)] if scaling else []),
        )
    notes = sorted(
        {r.normalization for r in table if r.normalization and r.normalization.startswith("per device")}
    )
    if notes:
        view.caption = markup("compared " + "; ".join(notes))  # says when device counts differ
    console.print(view)
    for r in table:
        if r.kept:  # its figure is the last collect's: its run directory could not be read now
            console.print(f"[yellow]kept[/yellow] {markup(f'{r.cell_id}: {r.kept}')}")
    for r in table:
        if r.status != "ok":
            what = markup(f"{r.cell_id}: {r.error or '-'}")
            console.print(f"[red]{markup(r.status)}[/red] {what}")
            for text in (r.log_tail or [])[-5:]:
                console.print(f"    {line(text)}", style="dim", markup=False, highlight=False)
