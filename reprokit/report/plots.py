"""The report's plots of a session (PNG, matplotlib's Agg backend): throughput beside the published
bars, where each cell's measured window went (data wait, compute, communication, other), samples per
joule, the speedup ladder, and the training curves (curves.py); drawn as drawing.py draws every figure,
and put in place once the report that shows them is written.

matplotlib is imported only when a plot is drawn, so `inv --list` stays instant.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from pathlib import Path

from reprokit.collect import explain
from reprokit.contract.bounded import Malformed
from reprokit.contract.textsafe import line
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.report import drawing
from reprokit.report.curves import curves_plot, unit_of
from reprokit.report.drawing import (
    FONT,
    MEASURED_COLOR,
    NEW,
    PUBLISHED_COLORS,
    SHARE_COLORS,
    UNJUDGED_HATCH,
    WIDTH,
    Plot,
    legend_below,
    pyplot,
    rows_height,
    slug,
    title,
    unjudged_scale,
)
from reprokit.report.formats import shown

# A row's words that the plots draw (labels, ticks, legends).
DRAWN_TEXT = ("variant", "device_name", "device", "unit", "status")
# The report's images, by the plot that makes them.
PREFIXES = ("throughput-", "breakdown-", "energy-", "curves-", "ladder-")


def throughput_plot(session_dir: Path, recipe: str, rows: list[Row]) -> Plot | None:
    """Measured samples/s per device, per variant, beside the published bars of each device: a row
    per variant (16 of them read down the figure, their names level), values at the bars' ends."""
    measured = [r for r in rows if r.measured_per_device is not None]
    if not measured:
        return None
    plt = pyplot()
    variants = [r.variant for r in rows]
    comparable = all(r.scale == "published" for r in rows)
    published: dict[str, dict[str | None, float | None]] = {}  # device -> variant -> per-device figure
    if comparable:
        for r in rows:
            for ref in r.all_references():
                if ref.get("value") is not None:
                    published.setdefault(ref["device"], {})[r.variant] = verdicts.per_device(ref)
    scale = unjudged_scale(rows)
    label = f"measured ({_device_label(measured)})" + (f", {scale} scale" if scale else "")
    series = [(label, {r.variant: r.measured_per_device for r in measured})]
    series += [(f"published {device}", values) for device, values in published.items()]
    height = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(WIDTH, rows_height(len(variants), max(0.45, 0.25 * len(series)))))
    largest = 0.0
    for i, (name, values) in enumerate(series):
        ys = [j + (i - (len(series) - 1) / 2) * height for j, v in enumerate(variants) if v in values]
        xs = [values[v] or 0.0 for v in variants if v in values]
        color = MEASURED_COLOR if i == 0 else PUBLISHED_COLORS[(i - 1) % len(PUBLISHED_COLORS)]
        # The measured bars of repeated cells (--repeat) span their runs' min to max, as history's do.
        spans = _repeat_spans([r for r in rows if r.variant in values]) if i == 0 else None
        largest = max([largest, *(x + (spans[1][k] if spans else 0.0) for k, x in enumerate(xs))])
        bars = ax.barh(ys, xs, height, label=name, color=color, edgecolor="black", linewidth=0.4,
                       hatch=UNJUDGED_HATCH if i == 0 and scale else None, xerr=spans,
                       capsize=3 if spans is not None else 0, error_kw={"linewidth": 0.8})  # fmt: skip
        ax.bar_label(bars, fmt="%.3g", fontsize=FONT, padding=2)
    unit = unit_of(rows)
    ticks = [v if r.status == "ok" else f"{v} ({r.status})" for v, r in zip(variants, rows, strict=True)]
    ax.set_yticks(range(len(variants)), ticks, fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlim(0, (largest or 1.0) * 1.15)  # room for the values at the bars' ends
    ax.set_xlabel(f"{unit} per device")
    title(ax, f"{recipe}: throughput per device" + ("" if comparable else " (published bars omitted)"), rows)
    ax.grid(axis="x", alpha=0.3)
    legend_below(fig, ax)
    name = f"throughput-{slug(recipe)}.png"
    caption = (
        "Measured under each published figure's own definition (after the warm-up steps where there is "
        "none), divided by the number of devices; published figures are whole-node numbers divided by "
        "their device count."
    )
    if any((r.repeats or 1) > 1 for r in measured):
        caption += " A repeated cell's bar is its runs' median; its error bar spans their min to max."
    unjudged = sorted({r.verdict_reasons for r in rows if r.verdict == verdicts.NOT_COMPARABLE} - {None})
    if comparable and unjudged:
        caption += f" Not comparable here: {'; '.join(unjudged)}."
    return Plot(
        recipe, name, f"{recipe}: throughput per device", caption, drawing.save(fig, session_dir, name)
    )


def _repeat_spans(rows: list[Row]) -> list[list[float]] | None:
    """matplotlib's asymmetric error bars, per device: (median - min, max - median) of each repeated
    cell's runs, zero for a cell that ran once; None where no cell repeated."""
    if not any((r.repeats or 1) > 1 and r.measured_min is not None for r in rows):
        return None
    below, above = [], []
    for r in rows:
        low, high, median, per_device = r.measured_min, r.measured_max, r.measured, r.measured_per_device
        if (r.repeats or 1) > 1 and None not in (low, high, median, per_device) and median:
            factor = per_device / median
            below.append(max(median - low, 0.0) * factor)
            above.append(max(high - median, 0.0) * factor)
        else:
            below.append(0.0)
            above.append(0.0)
    return [below, above]


def breakdown_plot(session_dir: Path, recipe: str, rows: list[Row]) -> Plot | None:
    """A stacked bar per cell: the shares of its measured window, in the throughput plot's order, with
    the cell's measured figure per device at its end."""
    timed = [r for r in rows if explain.shares(r)]
    if not timed:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, rows_height(len(timed), 0.42)))
    ys = range(len(timed))
    lefts = [0.0] * len(timed)
    for share in explain.SHARES:
        values = [explain.shares(r).get(share, 0.0) for r in timed]
        if not any(values):
            continue
        bars = ax.barh(ys, values, 0.6, left=lefts, label=explain.SHORT[share], color=SHARE_COLORS[share],
                       edgecolor="black", linewidth=0.4)  # fmt: skip
        # A share too narrow for its label is read in the sentences below the plot.
        ax.bar_label(bars, labels=[f"{v:.0%}" if v >= 0.07 else "" for v in values], label_type="center",
                     fontsize=FONT, color="white" if share != "other" else "black")  # fmt: skip
        lefts = [b + v for b, v in zip(lefts, values, strict=True)]
    unit = unit_of(rows)
    for y, r in zip(ys, timed, strict=True):
        if r.measured_per_device is not None:
            ax.annotate(f"{r.measured_per_device:.3g} {unit}", (1.02, y), va="center", fontsize=FONT)
    ax.set_yticks(list(ys), [r.variant for r in timed], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.3)  # the per-device figures right of the bars
    ax.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_xlabel("share of the measured window")
    title(ax, f"{recipe}: where each cell's time went (its figure per device at the right)", rows)
    legend_below(fig, ax)
    name = f"breakdown-{slug(recipe)}.png"
    caption = (
        "Each cell's measured window (after its warm-up) split by the trainer's meter, rank 0: the wait for "
        "the next batch, the steps' own time, a DDP all-reduce in flight (multi-device runs), and the rest. "
        "A share the trainer could not time is left out, not drawn as zero."
    )
    return Plot(recipe, name, f"{recipe}: where the time went", caption, drawing.save(fig, session_dir, name))


def energy_plot(session_dir: Path, recipe: str, rows: list[Row]) -> Plot | None:
    """Samples per joule per cell, where the hardware reported energy."""
    measured = [r for r in rows if r.samples_per_joule]
    if not measured:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, rows_height(len(measured), 0.42)))
    values = [r.samples_per_joule or 0.0 for r in measured]
    bars = ax.barh(range(len(measured)), values, 0.6, color=MEASURED_COLOR, edgecolor="black", linewidth=0.4,
                   hatch=UNJUDGED_HATCH if unjudged_scale(measured) else None)  # fmt: skip
    ax.bar_label(bars, fmt="%.3g", fontsize=FONT, padding=2)
    ax.set_yticks(range(len(measured)), [r.variant for r in measured], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel("samples per joule")
    title(ax, f"{recipe}: samples per joule (measured window)", measured)
    ax.grid(axis="x", alpha=0.3)
    name = f"energy-{slug(recipe)}.png"
    sources = sorted({str(r.energy) for r in measured})
    caption = f"The samples of the measured window over the energy its devices drew: {'; '.join(sources)}."
    return Plot(recipe, name, f"{recipe}: samples per joule", caption, drawing.save(fig, session_dir, name))


def _device_label(rows: list[Row]) -> str:
    names = sorted({str(r.device_name or r.device or "this machine") for r in rows})
    worlds = sorted({int(r.world_size or 1) for r in rows})
    return f"{', '.join(names)}, {'/'.join(map(str, worlds))} device(s)"


def ladder_plot(session_dir: Path, recipe: str, rows: list[Row]) -> Plot | None:
    """Each variant's speedup over the baseline: measured in this session beside the published one."""
    if not any(r.baseline for r in rows):
        return None
    rungs = [r for r in rows if r.measured_speedup is not None or r.published_speedup is not None]
    if len(rungs) < 2:
        return None
    plt = pyplot()
    labels = [r.variant for r in rungs]
    fig, ax = plt.subplots(figsize=(WIDTH, rows_height(len(rungs), 0.6)))
    ys = range(len(rungs))
    # A measured speedup of runs that are not comparable (the smoke scale) is hatched and says so at its
    # end: set beside a published bar, a plain one would read as a reproduction.
    scale = unjudged_scale(rungs)
    for offset, key, label, color in (
        (
            -0.2,
            "measured_speedup",
            "measured (this session" + (f", {scale} scale)" if scale else ")"),
            MEASURED_COLOR,
        ),
        (0.2, "published_speedup", "published", PUBLISHED_COLORS[0]),
    ):
        values = [getattr(r, key) or 0.0 for r in rungs]
        unjudged = key == "measured_speedup" and scale
        bars = ax.barh([y + offset for y in ys], values, 0.4, label=label, color=color, edgecolor="black",
                       linewidth=0.4, hatch=UNJUDGED_HATCH if unjudged else None)  # fmt: skip
        words = f"x {scale}" if unjudged else "x"
        ax.bar_label(bars, labels=[f"{v:.2f}{words}" if v else "" for v in values], fontsize=FONT, padding=2)
    ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    largest = max([v or 0.0 for r in rungs for v in (r.measured_speedup, r.published_speedup)] + [1.0])
    ax.set_xlim(0, largest * 1.25)  # room for the bar labels
    ax.set_yticks(list(ys), labels, fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over the baseline (per device)")
    title(ax, f"{recipe}: speedup ladder", rungs)
    ax.grid(axis="x", alpha=0.3)
    legend_below(fig, ax)
    name = f"ladder-{slug(recipe)}.png"
    devices = sorted({r.speedup_reference_device for r in rungs if r.speedup_reference_device})
    caption = "Ratios measured in one session hold across machines where absolute numbers do not." + (
        f" Published ratios derived from the {', '.join(devices)} figures." if devices else ""
    )
    return Plot(recipe, name, f"{recipe}: speedup ladder", caption, drawing.save(fig, session_dir, name))


def draw(session_dir: Path, table: list[Row], skipped: list[Malformed] | None = None) -> list[Plot]:
    """Every plot of a session, drawn beside its images under names of their own (`install` puts them
    in place once the report that shows them is written); a file left out is added to `skipped`."""
    for stale in session_dir.glob(f".*.png{NEW}"):  # a report killed before (the session's lock is ours)
        stale.unlink(missing_ok=True)
    plots: list[Plot] = []
    # Words from the run files drawn as text: each within its bound (matplotlib draws an image as wide as
    # its longest label), no control character reaches a label (a box, a warning).
    table = [shown(r) for r in table]
    recipes = list(dict.fromkeys(r.recipe for r in table if r.recipe))
    curves = functools.partial(curves_plot, skipped=skipped)
    for recipe in recipes:
        rows = [
            replace(r, **{k: line(getattr(r, k)) for k in DRAWN_TEXT if getattr(r, k) is not None})
            for r in table
            if r.recipe == recipe
        ]
        for maker in (throughput_plot, breakdown_plot, energy_plot, ladder_plot, curves):
            plot = maker(session_dir, recipe, rows)
            if plot is not None:
                plots.append(plot)
    return plots


def install(session_dir: Path, drawn: list[Plot]) -> list[Plot]:
    """The drawn plots put in place of the images of the same name (each replaced whole, never removed
    first); the images no plot replaced stay until `remove_old`."""
    placed = []
    for plot in drawn:
        final = session_dir / plot.name
        os.replace(plot.path, final)
        placed.append(replace(plot, path=final))
    return placed


def remove_old(session_dir: Path, kept: list[Plot]) -> None:
    """The report's images that the report now written does not show."""
    names = {p.name for p in kept}
    for old in session_dir.glob("*.png"):
        if old.name.startswith(PREFIXES) and old.name not in names:
            old.unlink(missing_ok=True)
