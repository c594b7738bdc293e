"""How the kit draws a figure (the report's plots, history's): matplotlib without a display and with
its math text off, one style (colors a reader tells apart in grey too, fonts the pages show unscaled),
titles that say when rows are not comparable, legends below, file names within bounds, and each image
saved whole beside the session's under a name of its own until the report that shows it is written."""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.contract import files
from reprokit.contract.textsafe import NAME, line
from reprokit.judge.result_row import Row

# Colors a reader can tell apart in grey too: measured dark, published light.
MEASURED_COLOR = "#1f4e79"
PUBLISHED_COLORS = ["#9dc3e6", "#f4b183", "#a9d18e", "#d9d9d9", "#ffd966"]
# One color per share of a step's time, the same in every recipe's breakdown.
SHARE_COLORS = {"data_wait": "#c55a11", "compute": "#1f4e79", "communication": "#7f6000", "other": "#bfbfbf"}
DPI = 100
# Every text of a plot, in points: at DPI 100 a 9 pt label is 12.5 px, and a plot is drawn no wider than
# the pages (pages.STYLE: 1,150 px), so a browser shows it at that size, never scaled down.
FONT = 9
TITLE_FONT = 11
WIDTH = 9.0  # inches: 900 px, with the labels outside the axes still within the page
# A measured bar of a run that is not comparable (the smoke scale): hatched, and said in its label.
UNJUDGED_HATCH = "//"


@dataclass
class Plot:
    recipe: str
    name: str  # file name in the session folder
    title: str
    caption: str
    path: Path


def matplotlib_safe() -> None:
    """matplotlib without a display, and with its math text off: a label is the text it holds (a device
    named `$\\foo{$` is that name, not a formula that fails to parse and ends the report)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False


def pyplot():
    matplotlib_safe()
    import matplotlib.pyplot as plt

    return plt


def slug(text: str) -> str:
    """A part of a file name from a recipe's or a cell's name: within NAME characters (a file name is at
    most 255 bytes), a longer one cut and told apart from others cut alike by its digest."""
    found = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
    if len(found) <= NAME:
        return found
    digest = hashlib.sha256(text.encode(errors="surrogateescape")).hexdigest()[:12]
    return f"{found[: NAME - len(digest) - 1]}-{digest}"


# A plot drawn for a report being written: beside the session's images under a name of its own until
# the report is written (install), so the report in place keeps every image it shows.
NEW = ".new"


def save(fig: Any, session_dir: Path, name: str) -> Path:
    path = session_dir / f".{name}{NEW}"
    fig.tight_layout()
    # bbox "tight" keeps legends placed outside the axes inside the image. Drawn in memory and written
    # whole: a disk that fills mid-write leaves no broken PNG behind.
    image = io.BytesIO()
    fig.savefig(image, dpi=DPI, format="png", bbox_inches="tight")
    pyplot().close(fig)
    return files.write_bytes(path, image.getvalue())


def unjudged_scale(rows: list[Row]) -> str | None:
    """The scale of rows that ran at one other than the publication's (`smoke`): every plot of them
    says so, as the report's banner does."""
    scales = sorted({r.scale for r in rows if r.scale not in (None, "published")})
    return ", ".join(scales) or None


def titled(text: str, rows: list[Row]) -> str:
    """A plot's title, saying when its rows are not comparable with the publication (the smoke scale);
    a control character in it (a recipe's name from a run file) shown escaped, never drawn as a box."""
    scale = unjudged_scale(rows)
    return line(text) + (
        f"\n({line(scale, NAME)} scale: not comparable with the publication)" if scale else ""
    )


def title(ax: Any, text: str, rows: list[Row]) -> None:
    ax.set_title(titled(text, rows), fontsize=TITLE_FONT)


def legend_below(fig: Any, ax: Any, columns: int = 4) -> None:
    """The legend under the figure, where it covers no bar or line (save's tight bounding box keeps it)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False,
                   fontsize=FONT, ncol=min(columns, len(handles)))  # fmt: skip


def rows_height(count: int, per_row: float) -> float:
    """A horizontal bar chart's height in inches: `per_row` inches a variant, room for its decorations."""
    return per_row * count + 1.5
