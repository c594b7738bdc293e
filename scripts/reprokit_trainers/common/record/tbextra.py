"""What TensorBoard shows of a run beyond samples/s and loss: per logging interval, where its time went
(``breakdown/<share>``, fractions of the interval) and the devices' power and energy (``energy/power_w``,
``energy/joules`` since the measured window began); per run, its hyperparameters for the HParams
dashboard: the cell's arguments (``arg.<name>``), the software that ran (``software.<key>``) and what
the cell is, beside its figures (``hparams/<figure>``)."""

from __future__ import annotations

import json
from typing import Any

# The HParams plugin takes numbers, strings and booleans; a longer value is cut to this.
TEXT_LIMIT = 250
CELL_KEYS = ("cell_id", "recipe", "variant", "scale", "accelerator", "devices", "nodes")
FIGURES = {
    "samples_per_second": ("samples_per_second",),
    "samples_per_joule": ("samples_per_joule",),
    "mfu": ("mfu",),
    "step_time_p50_s": ("step_time_s", "p50"),
    "peak_memory_bytes": ("peak_memory_bytes",),
}


def interval_scalars(writer: Any, step: int, shares: dict[str, float | None], energy: Any) -> None:
    """A logging interval's breakdown shares and the devices' newest power and energy."""
    for name, value in shares.items():
        if value is not None:
            writer.add_scalar(f"breakdown/{name}", value, step)
    if energy is None:
        return
    watts, joules = energy.reading()
    if watts is not None:
        writer.add_scalar("energy/power_w", watts, step)
    if joules is not None:
        writer.add_scalar("energy/joules", joules, step)


def _value(value: Any) -> bool | int | float | str:
    if isinstance(value, bool | int | float | str):
        return value if not isinstance(value, str) else value[:TEXT_LIMIT]
    return json.dumps(value, sort_keys=True, default=str)[:TEXT_LIMIT]


def hparams_of(cell: dict[str, Any], summary: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """The run's hyperparameters as the HParams dashboard takes them (None left out)."""
    found: dict[str, Any] = {key: cell.get(key) for key in CELL_KEYS}
    found.update({f"arg.{key}": value for key, value in (cell.get("args") or {}).items()})
    found.update({f"software.{key}": value for key, value in (summary.get("software") or {}).items()})
    return {key: _value(value) for key, value in found.items() if value is not None}


def figures_of(summary: dict[str, Any]) -> dict[str, float]:
    found = {}
    for name, path in FIGURES.items():
        value: Any = summary
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[f"hparams/{name}"] = float(value)
    return found


def hparams(writer: Any, cell: dict[str, Any], summary: dict[str, Any], step: int) -> None:
    """Write the HParams plugin's three summaries into ``writer``'s own run, and the figures they name
    as scalars there (TensorBoard pairs a run's hyperparameters with the scalars of the same run)."""
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    figures = figures_of(summary)
    experiment, session_start, session_end = hparams_summaries(hparams_of(cell, summary), figures)
    file_writer = writer._get_file_writer()
    for item in (experiment, session_start, session_end):
        file_writer.add_summary(item, step)
    for tag, value in figures.items():
        writer.add_scalar(tag, value, step)
    writer.flush()
