"""The results at a glance in the terminal (report.html has everything): per-device figures beside
the published ones, the verdicts, the speedups, and the cells that did not complete with their log."""

from __future__ import annotations

from rich.console import Console, RenderableType
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
# A table's width in a log or a pipe, where no terminal says one.
LOG_WIDTH = 140


def _speedup(r: Row) -> str:
    if r.measured_speedup is None and r.published_speedup is None:
        return "-"
    text = f"{formats.ratio(r.measured_speedup)} ({formats.ratio(r.published_speedup)})"
    # A measured speedup beside a published one reads as a claim unless its verdict says otherwise.
    return f"{text} {r.speedup_verdict}" if r.speedup_verdict else text


def print_table(table: list[Row], console: Console | None = None) -> None:
    """The session's rows as one table, then each cell that did not complete and its last log lines."""
    # A log or a pipe: 140 columns (COLUMNS is a terminal's), wider only where a cell id needs it.
    console = console or (Console() if Console().is_terminal else Console(width=LOG_WIDTH))
    table = [formats.shown(r) for r in table]  # each word within its bound: folded whole, one fills screens
    units = sorted({markup(r.unit) for r in table if r.unit})
    view = Table(title=f"reprokit results ({', '.join(units) or 'samples/s'})", show_lines=False)
    scaling = any(r.scaling_efficiency is not None for r in table)
    for header in [*HEADERS, *(["scaling efficiency"] if scaling else [])]:
        view.add_column(
            header,
            overflow="fold",
            no_wrap=header == "cell" and not console.is_terminal,
            justify="left" if header in ("cell", "status", "verdict") else "right",
        )
    for r in table:
        # Every word from a run's files (a cell id, a departure's reason) is text, never markup or a control.
        verdict = markup(formats.verdict(r))
        style = VERDICT_STYLES.get(r.verdict or "-", "")
        view.add_row(
            markup(r.cell_id or "-"),
            f"[{'green' if r.status == 'ok' else 'red'}]{markup(r.status or '-')}[/]",
            formats.number(r.measured_per_device),
            markup(formats.published_per_device(r)),
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
    print_whole(console, view)
    # One line each, whatever the width (the terminal wraps it): a grep for a cell finds its line whole.
    for r in table:
        if r.kept:  # its figure is the last collect's: its run directory could not be read now
            console.print(f"[yellow]kept[/yellow] {markup(f'{r.cell_id}: {r.kept}')}", soft_wrap=True)
    for r in table:
        if r.status != "ok":
            what = markup(f"{r.cell_id}: {r.error or '-'}")
            console.print(f"[red]{markup(r.status)}[/red] {what}", soft_wrap=True)
            for text in (r.log_tail or [])[-5:]:
                console.print(f"    {line(text)}", style="dim", markup=False, highlight=False, soft_wrap=True)


def print_whole(console: Console, view: RenderableType) -> None:
    """A table on a terminal, folded to its width; in a log or a pipe (`inv reproduce ... | tee log`),
    its cell column (no_wrap there) never folded over two lines nor cut at the console's width, so that
    a grep for a cell finds its row: the console is widened to the least width that holds it whole, the
    other columns folding as they must."""
    if console.is_terminal:
        console.print(view)
        return
    needed = console.measure(view, options=console.options.update(width=2**20)).minimum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(view)
    finally:
        console.width = width
