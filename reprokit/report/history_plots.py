"""History's plots: per cell, its figure per device session after session on a real time axis (a
series per device, machine and scale; error bars from a repeated row's spread that compare would trust),
drawn as PNG files for history.html."""

from __future__ import annotations

from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprokit.contract.textsafe import NAME, short
from reprokit.contract.textsafe import line as one_line
from reprokit.report.drawing import DPI, Plot
from reprokit.report.trust import untrusted

if TYPE_CHECKING:
    from reprokit.report.history_entries import Entry

# Series named in a plot's legend; the others are drawn, and counted in the caption.
LEGEND_SERIES = 12


def _series(mine: list[Entry]) -> dict[tuple[str, str, str], list[Entry]]:
    """A cell's entries by (device, machine, scale), each in time order: a smoke run's figure is never
    joined by a line to a published run's."""
    found: dict[tuple[str, str, str], list[Entry]] = {}
    for e in mine:
        found.setdefault((e.row.device_name or "?", e.machine or "?", e.row.scale or "published"), []).append(
            e
        )
    for points in found.values():
        points.sort(key=lambda e: e.session_started)
    return found


# The time axis's labels, each whole on its own (`17:18:10`, not `10` beside a lone `17:18`), from
# years down to seconds (matplotlib's ConciseDateFormatter levels); the date they share is the offset.
TIME_FORMATS = ["%Y", "%b %Y", "%d %b", "%H:%M", "%H:%M", "%H:%M:%S"]
TIME_ZERO_FORMATS = ["", "%Y", "%b %Y", "%d %b", "%H:%M", "%H:%M:%S"]
TIME_OFFSET_FORMATS = ["", "%Y", "%Y", "%b %Y", "%d %b %Y", "%d %b %Y"]
LEGEND_COLUMNS = 2


def figure(cell_id: str, mine: list[Entry]) -> tuple[Any, int]:
    """A cell's figure: per device and machine, its figure per device of each session at the time it
    started (a date axis, so 5,000 sessions read as a line, and sessions on two machines interleave as
    they happened), from zero (a 2% step must not fill the height); returns the figure and how many
    series the legend leaves out."""
    from reprokit.report.drawing import matplotlib_safe

    matplotlib_safe()  # a device or machine named `$\\foo{$` is a name, not math text
    from matplotlib import dates
    from matplotlib.figure import Figure

    from reprokit.report.drawing import FONT, TITLE_FONT, titled, unjudged_scale

    series = sorted(_series(mine).items(), key=lambda kv: -len(kv[1]))
    named = min(len(series), LEGEND_SERIES)
    legend_rows = -(-named // LEGEND_COLUMNS)
    # The legend below the axes, inside the figure (no tight bounding box: it would draw every point
    # twice): fixed margins, the bottom one grown by the legend's rows.
    rows = [e.row for e in mine]
    # Every session at a smoke scale: the title says so (a second line); a mix: the legend does.
    unjudged = unjudged_scale(rows) if all(r.scale not in (None, "published") for r in rows) else None
    # Controls shown, never drawn as boxes; each name within its bound (an image as wide as a label).
    heading = one_line(f"{short(cell_id, NAME)} over sessions")
    title = titled(heading, rows) if unjudged else heading
    height = 3.6 + 0.22 * legend_rows + (0.2 if unjudged else 0.0)
    fig = Figure(figsize=(8, height), dpi=DPI)
    fig.subplots_adjust(left=0.1, right=0.97, top=1 - (0.42 + 0.2 * title.count("\n") + 0.2) / height,
                        bottom=(0.75 + 0.22 * legend_rows) / height)  # fmt: skip
    ax = fig.subplots()
    many = len(mine) > 200
    top = 0.0
    for index, ((device, machine, scale), points) in enumerate(series):
        xs = [e.session_started for e in points]
        ys = [e.row.measured_per_device for e in points]
        unjudged = scale != "published"
        label = one_line(f"{short(device, NAME)} on {short(machine, NAME)}")
        label += f" ({one_line(short(scale, NAME))} scale)" if unjudged else ""
        # Thousands of sessions read as a band of points; a line through them would be a scribble.
        style = (
            {"linestyle": "none", "markersize": 2, "alpha": 0.6}
            if many
            else {"markersize": 5, "linewidth": 1.2, "linestyle": "--" if unjudged else "-"}
        )
        if unjudged:  # hollow: a smoke run's figure shows the machinery works, it measures nothing published
            style["markerfacecolor"] = "none"
        (line,) = ax.plot(xs, ys, marker="o", label=label if index < LEGEND_SERIES else None, **style)
        spread = [(x, y, bar) for x, y, e in zip(xs, ys, points, strict=True) if (bar := error_bar(e))]
        top = max([top, *(y for y in ys if y is not None), *(y + err for _, y, err in spread)])
        if spread:
            sx, sy, se = zip(*spread, strict=True)
            ax.errorbar(sx, sy, yerr=se, fmt="none", ecolor=line.get_color(), capsize=2, linewidth=0.8)
    locator = dates.AutoDateLocator(minticks=3, maxticks=6, tz=timezone.utc)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(
        dates.ConciseDateFormatter(locator, tz=timezone.utc, formats=TIME_FORMATS,
                                   zero_formats=TIME_ZERO_FORMATS, offset_formats=TIME_OFFSET_FORMATS)
    )  # fmt: skip
    ax.set_ylim(0, (top or 1.0) * 1.12)
    ax.set_xlabel("session start (UTC)", fontsize=FONT)
    ax.set_ylabel(one_line(f"{short(mine[0].row.unit or 'samples/s', NAME)} per device"), fontsize=FONT)
    ax.set_title(title, fontsize=TITLE_FONT)
    ax.tick_params(labelsize=FONT)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.01), frameon=False,
                   fontsize=FONT, ncol=LEGEND_COLUMNS)  # fmt: skip
    return fig, max(0, len(series) - LEGEND_SERIES)


def error_bar(e: Entry) -> float | None:
    """Half the spread of an entry's repeated runs around its figure, drawn as its error bar: only from
    repeated runs, and a spread compare would read (a negative one cannot be drawn at all)."""
    r = e.row
    if (r.repeats or 0) > 1 and r.spread and r.measured_per_device is not None and not untrusted(r):
        return r.spread * r.measured_per_device / 2
    return None


def plots(table: list[Entry], folder: Path) -> list[Plot]:
    """Per cell, its per-device figure session after session, as PNG files in `folder`."""
    from reprokit.report.drawing import slug

    drawn = []
    for cell_id in dict.fromkeys(e.row.cell_id for e in table):
        mine = [e for e in table if e.row.cell_id == cell_id and e.row.measured_per_device is not None]
        if not mine:
            continue
        fig, unnamed = figure(cell_id, mine)
        name = f"history-{slug(cell_id)}.png"
        # Said only under a plot that has them: a note of bars nobody can find reads as a broken plot.
        notes = ["Error bars: the spread of repeated runs."] if any(error_bar(e) for e in mine) else []
        if unnamed:
            notes.append(f"{unnamed} more device/machine series are drawn without a legend entry.")
        caption = " ".join(notes)
        fig.savefig(folder / name, format="png")
        drawn.append(Plot(cell_id, name, short(cell_id, NAME), caption, folder / name))
    return drawn
