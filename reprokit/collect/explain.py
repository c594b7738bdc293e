"""Why each number is what it is: the trainers' breakdown of the measured window (data wait, compute,
communication, other), the energy the devices drew in it, and the traces taken on request, read
from summary.json into result columns, and into the report's sentences and links.

The trainers write these (reprokit_trainers/common/measure/breakdown.py, energy.py, profiling.py); this module
only reads and words them. A share a trainer could not time is None and is never shown as 0%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from reprokit.judge import ratios, verdicts
from reprokit.judge.result_row import Row

SHARES = ("data_wait", "compute", "communication", "other")
# How a sentence names the time each share stands for.
DOING = {
    "data_wait": "waiting for data",
    "compute": "computing",
    "communication": "with a gradient all-reduce in flight",
    "other": "elsewhere (logging, synchronizing, the loop's own work)",
}
SHORT = {"data_wait": "data wait", "compute": "compute", "communication": "communication", "other": "other"}
# The summary.json fields that are result columns as they are.
ENERGY_FIELDS = ["samples_per_joule", "energy_joules", "power_mean_w", "power_peak_w", "utilization_mean"]
OPEN_TRACE = (
    "open it in Perfetto (https://ui.perfetto.dev, Open trace file) or chrome://tracing, or in TensorBoard "
    "(pip install torch-tb-profiler; tensorboard --logdir {folder})"
)


class Line(NamedTuple):
    """One paragraph of the report, as pages.Block takes it (kind p, note, h3 or link)."""

    kind: str
    text: str
    href: str = ""
    tail: str = ""


def columns(extra: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """A result row's explaining fields (Row's `<share>_share`, energy and trace columns, and the
    breakdown and profile records the report reads) from a summary.json's fields (``extra``)."""
    breakdown = extra.get("breakdown") if isinstance(extra.get("breakdown"), dict) else None
    energy = extra.get("energy")
    if isinstance(energy, dict):
        energy = f"{energy.get('source')} ({energy.get('method')}): {energy.get('of')}"
    profile = extra.get("profile") if isinstance(extra.get("profile"), dict) else None
    trace = f"runs/{run_dir.name}/{profile['trace']}" if profile and profile.get("trace") else None
    found: dict[str, Any] = {f"{share}_share": (breakdown or {}).get(share) for share in SHARES}
    found.update({name: extra.get(name) for name in ENERGY_FIELDS})
    found.update(energy=energy, trace=trace, breakdown=breakdown, profile=profile)
    return found


def shares(row: Row) -> dict[str, float]:
    """The shares a row's run timed (a share it could not time is left out)."""
    found = {share: getattr(row, f"{share}_share") for share in SHARES}
    return {share: value for share, value in found.items() if isinstance(value, int | float)}


def percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else "<1%"


def _largest(found: dict[str, float]) -> str:
    return max(found, key=lambda share: found[share])


def _baseline(row: Row, rows: list[Row]) -> Row | None:
    found = ratios.baselines(rows).get(ratios.group(row))
    return found if found is not row else None


def cell_sentence(row: Row, rows: list[Row]) -> str | None:
    """One sentence that reads a cell's breakdown: its shares, largest first; beside its group's
    baseline, the share where the two differ most; for a `slower` verdict, its largest share and the
    baseline's share of the same."""
    found = shares(row)
    if not found:
        return None
    name = row.variant or row.cell_id or "-"
    ordered = sorted(found, key=lambda share: -found[share])
    sentence = f"{name} spends " + ", ".join(f"{percent(found[s])} of its measured window {DOING[s]}" if i == 0
                                             else f"{percent(found[s])} {DOING[s]}"
                                             for i, s in enumerate(ordered))  # fmt: skip
    baseline = _baseline(row, rows)
    theirs = shares(baseline) if baseline else {}
    # Compute is what the other shares leave: where a wait or the overhead differs, name that.
    common = [s for s in found if s in theirs and s != "compute"] or [s for s in found if s in theirs]
    if common:
        widest = max(common, key=lambda share: abs(found[share] - theirs[share]))
        # A ladder's baseline is often called "baseline": named once, not "the baseline baseline".
        named = "the baseline" if baseline.variant == "baseline" else f"the baseline {baseline.variant}"
        sentence += f"; {named} {percent(theirs[widest])} {DOING[widest]}"
    sentence += "."
    if row.verdict == verdicts.SLOWER:
        largest = _largest(found)
        sentence += (
            f" Slower than published: its largest share is {SHORT[largest]} ({percent(found[largest])})"
        )
        if baseline and largest in theirs:
            sentence += f", {percent(theirs[largest])} in its group's baseline {baseline.variant}"
        sentence += "."
    return sentence


def comparison_sentence(rows: list[Row], share: str = "data_wait") -> str | None:
    """One share across a recipe's cells, as the publications tell their stories ("workers0 spends 41%
    of its window waiting for data; workers2 3%")."""
    timed = [(r.variant or r.cell_id, shares(r)[share]) for r in rows if share in shares(r)]
    if len(timed) < 2:
        return None
    (first, value), rest = timed[0], timed[1:]
    return f"{first} spends {percent(value)} of its window {DOING[share]}; " + "; ".join(
        f"{name} {percent(v)}" for name, v in rest
    ) + "."  # fmt: skip


def trace_text(row: Row) -> tuple[str, str, str] | None:
    """(the link's text, its target, what follows it) for a cell with a trace."""
    trace = row.trace
    if not trace:
        return None
    steps = (row.profile or {}).get("steps") or []
    which = f" of steps {steps[0]}-{steps[1]}" if len(steps) == 2 else ""
    folder = str(Path(trace).parent)
    return (
        f"{row.variant or row.cell_id}: trace{which}",
        trace,
        f" (Kineto Chrome-trace JSON, gzipped): {OPEN_TRACE.format(folder=folder)}.",
    )


def reading(rows: list[Row]) -> list[Line]:
    """What a recipe's breakdown says (under its plot): the data-wait story across cells, then a
    sentence per cell."""
    out: list[Line] = []
    sentences = [s for s in (cell_sentence(r, rows) for r in rows) if s]
    if sentences:
        story = comparison_sentence(rows)
        if story:
            out.append(Line("p", story))
        out += [Line("p", s) for s in sentences]
        basis = sorted({(r.breakdown or {}).get("basis") for r in rows} - {None})
        out.append(
            Line(
                "note",
                "Shares of each cell's measured window (after its warm-up), rank 0's, timed by "
                f"{' and '.join(basis) or 'the meter'}: data wait is the time the loop blocked on its next "
                "batch (on a GPU, the part the device sat idle); compute the steps themselves; communication "
                "the time a DDP all-reduce was in flight, as DDP's reducer times it (it overlaps the backward "
                "pass); other the rest.",
            )
        )
    return out


def energy_and_traces(rows: list[Row]) -> list[Line]:
    """A recipe's energy per sample where measured (or why not), and links to its traces."""
    out: list[Line] = []
    unmeasured = sorted({r.energy for r in rows if r.energy and r.energy.startswith("unavailable")})
    if any(r.samples_per_joule for r in rows):
        out.append(Line("h3", "Energy"))
        out += [
            Line(
                "p",
                f"{r.variant}: {r.samples_per_joule:.3g} samples/J ({r.energy_joules or 0:.4g} J, "
                f"mean {r.power_mean_w or 0:.4g} W) from {r.energy}.",
            )
            for r in rows
            if r.samples_per_joule
        ]
    elif unmeasured:
        out.append(Line("p", f"Energy: {'; '.join(unmeasured)}."))
    traces = [t for t in (trace_text(r) for r in rows) if t]
    if traces:
        out.append(Line("h3", "Traces"))
        out += [Line("link", text, href, tail) for text, href, tail in traces]
    return out
