"""The training curves of a session's cells: samples/s and loss per logging step, read from each run's
throughput.csv (the contract guarantees it; read bounded: rundirs.curves), or where a run has none
from its TensorBoard event files, with TensorBoard's own loader (no torch, no TensorFlow) where the
`tensorboard` package is installed; the caption names a run it could not read. Drawn one line a variant."""

from __future__ import annotations

import os
from pathlib import Path

from reprokit.contract import bounded, rundirs, sessions
from reprokit.contract.bounded import Malformed
from reprokit.judge.result_row import Row
from reprokit.report import drawing
from reprokit.report.drawing import FONT, TITLE_FONT, WIDTH, Plot, legend_below, pyplot, slug, titled


class NoTensorBoard(Exception):
    """A run's curves are only in TensorBoard event files, and the tensorboard package is not here."""


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of every TensorBoard event file under `folder`: tag -> [(step, value)], by step.

    Read with TensorBoard's own loader (its record reader checks each record's CRCs and stops at a
    truncated or corrupt one: a run still going, or killed) and its compat layer, which gives the
    scalars of every writer (simple values, tensors) one form. No torch, no TensorFlow. The
    tensorboard package is not a dependency of the host (the kit's trainers write throughput.csv,
    read first): NoTensorBoard where it is needed and missing.
    """
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise NoTensorBoard from None
    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(folder.rglob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue
                number = tensor_util.make_ndarray(value.tensor)
                if number.size == 1:
                    scalars.setdefault(value.tag, {})[int(event.step)] = float(number.reshape(()))
    return {tag: sorted(points.items()) for tag, points in scalars.items()}


def read_curves(run_dir: Path, root: Path | None = None) -> dict[str, list[tuple[int, float]]]:
    """samples/s and loss per logging step: from throughput.csv (read through rundirs.curves: bounded,
    Malformed for a file the kit will not read, a link out of the results folder `root` not followed),
    else from the event files."""
    curves: dict[str, list[tuple[int, float]]] = {"samples_per_second": [], "loss": []}
    if os.path.lexists(run_dir / rundirs.FILES["throughput"]):
        return rundirs.curves(run_dir, tuple(curves), root)
    events = run_dir / rundirs.FILES["tensorboard"]
    if not events.is_dir() or not any(events.rglob("events.out.tfevents.*")):
        return curves
    bounded.check_inside(events, root)
    scalars = read_scalars(events)
    for key in curves:
        # The kit's own tags first, then what the HF Trainer logs.
        for tag in (f"throughput/{key}", f"train/{key}"):
            if scalars.get(tag):
                curves[key] = scalars[tag]
                break
    return curves


def unit_of(rows: list[Row]) -> str:
    return next((r.unit for r in rows if r.unit), "samples/s")


def curves_plot(
    session_dir: Path, recipe: str, rows: list[Row], skipped: list[Malformed] | None = None
) -> Plot | None:
    """samples/s and loss per logging step, one line per variant (a throughput.csv the kit will not read
    is left out, and added to `skipped`)."""
    curves, unread = {}, []
    for r in rows:
        if not r.run_dir:
            continue
        label = r.variant if r.status == "ok" else f"{r.variant} ({r.status})"
        try:
            curves[label] = read_curves(session_dir / sessions.RUNS / r.run_dir, session_dir.parent)
        except NoTensorBoard:
            unread.append(str(label))
        except Malformed as exc:
            if skipped is not None:
                skipped.append(exc)
    curves = {v: c for v, c in curves.items() if c["samples_per_second"] or c["loss"]}
    if not curves:
        return None
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    for variant, c in curves.items():
        for ax, key in ((left, "samples_per_second"), (right, "loss")):
            if c[key]:
                steps, values = zip(*c[key], strict=True)
                ax.plot(steps, values, marker="o", markersize=2.5, linewidth=1.2, label=variant)
    unit = unit_of(rows)
    left.set_title(f"{unit} per logging interval (all devices)", fontsize=FONT + 1)
    right.set_title("training loss", fontsize=FONT + 1)
    left.set_ylim(bottom=0)  # from zero: a 2% wobble must not look like a halving
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))  # steps are whole
        ax.grid(alpha=0.3)
    fig.suptitle(titled(f"{recipe}: training curves", rows), fontsize=TITLE_FONT)
    legend_below(fig, left if left.lines else right)
    name = f"curves-{slug(recipe)}.png"
    caption = "From each run's throughput.csv (the TensorBoard event files where a run has none)."
    if unread:
        caption += (
            f" Not drawn: {', '.join(unread)} (no throughput.csv, and reading its TensorBoard event files "
            "needs the tensorboard package: pip install tensorboard)."
        )
    return Plot(recipe, name, f"{recipe}: training curves", caption, drawing.save(fig, session_dir, name))
