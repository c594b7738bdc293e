"""What a preflight found: one line per finding, whether it stops a cell ("would not"), and which cells
it concerns; and the per-cell answer they add up to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reprokit.judge import other_devices
from reprokit.plan.cells import Cell

JUDGED = "would be judged"
NOT_JUDGED = "would run, not judged"
NO_REFERENCE = "would run, no reference"
WOULD_NOT = "would not"


@dataclass(frozen=True)
class Finding:
    """One fact a check established: `blocks` makes it a "would not" for its cells (all, when
    `cells` is empty)."""

    check: str
    message: str
    blocks: bool = False
    cells: tuple[str, ...] = ()

    def concerns(self, cell: Cell) -> bool:
        return not self.cells or cell.cell_id in self.cells


@dataclass
class Answer:
    """A cell's answer: the verdict, and why; for a cell stopped only by what stops every cell (the
    machine, its image), what it would be once that is fixed."""

    cell: Cell
    verdict: str
    because: str = ""
    otherwise: tuple[str, str] | None = None

    @property
    def shown(self) -> str:
        """The table's `because`: a refusal of every cell is said once above it, not in each row."""
        if self.otherwise is None:
            return self.because
        check = self.because.split(":", 1)[0]
        verdict, because = self.otherwise
        return f"{check} (above); then {verdict}" + (f": {because}" if because else "")


@dataclass
class Report:
    cells: list[Cell]
    findings: list[Finding] = field(default_factory=list)
    # What planning said (the scale and runtime chosen and why, recipe warnings).
    messages: list[str] = field(default_factory=list)
    # The recipes' key of the devices the cells would run on (h100, gaudi2, ...; profile.yaml
    # device_names), None where it names none; `device_name` as the driver printed it, None where
    # the devices are not this machine's (Slurm nodes) or could not be listed.
    device: str | None = None
    device_name: str | None = None

    def answers(self) -> list[Answer]:
        """Each cell's answer; a cell stopped only by what stops every cell keeps, beside it, the
        answer it would have on a machine without that."""
        own = self._answers([f for f in self.findings if f.cells])
        found = []
        for cell, mine in zip(self.cells, self._answers(self.findings), strict=True):
            everywhere = [f for f in self.findings if f.blocks and not f.cells]
            theirs = next(a for a in own if a.cell is cell)
            if everywhere and mine.verdict == WOULD_NOT and theirs.verdict != WOULD_NOT:
                mine.otherwise = (theirs.verdict, theirs.because)
            found.append(mine)
        return found

    def _answers(self, findings: list[Finding]) -> list[Answer]:
        found = []
        for cell in self.cells:
            # A cell's own refusal first: one of every cell is said above the table.
            blocking = sorted(
                (f for f in findings if f.blocks and f.concerns(cell)), key=lambda f: not f.cells
            )
            if blocking:
                found.append(Answer(cell, WOULD_NOT, f"{blocking[0].check}: {blocking[0].message}"))
            elif cell.scale != "published":
                found.append(
                    Answer(cell, NOT_JUDGED, f"{cell.scale} scale (by design: the machinery, not the figure)")
                )
            else:
                found.append(Answer(cell, *self._judged_by(cell)))
        return self._with_their_other_side(found)

    def _with_their_other_side(self, answers: list[Answer]) -> list[Answer]:
        """A speedup is a verdict of two runs: a cell judged by its speedup over another (a variant
        beyond the publication, a rung of a ladder) is not judged where that other run would not be."""
        by_variant = {(a.cell.recipe, a.cell.variant, a.cell.id_suffix): a for a in answers}
        baselines = {(a.cell.recipe, a.cell.group, a.cell.id_suffix): a for a in answers if a.cell.baseline}
        for answer in answers:
            cell = answer.cell
            if answer.verdict != JUDGED or cell.scale != "published":
                continue
            if cell.beyond:
                other = by_variant.get((cell.recipe, cell.beyond, cell.id_suffix))
            elif any(r.get("ratio") is not None for r in cell.references):
                other = baselines.get((cell.recipe, cell.group, cell.id_suffix))
            else:
                continue
            if other is not None and other.verdict == WOULD_NOT:
                answer.verdict = WOULD_NOT
                answer.because = f"its speedup's other side, {other.cell.variant}, would not: {other.because}"
        return answers

    def _judged_by(self, cell: Cell) -> tuple[str, str]:
        """A published cell that would run: what its number would be judged by, or why by nothing (a
        figure for another device only, or none at all: it runs and is reported, never refused)."""
        if cell.beyond:
            return JUDGED, f"by its speedup over {cell.beyond}, measured in the same session"
        ratio = next((r for r in cell.references if r.get("ratio") is not None), None)
        if ratio is not None:
            return JUDGED, f"by its speedup over its baseline (published {ratio['ratio']}x)"
        figures = [r for r in cell.references if r.get("value") is not None]
        if self.device_name is None and figures:
            keys = ", ".join(dict.fromkeys(r["device"] for r in figures))
            return JUDGED, f"where the devices it runs on are one it has a figure for ({keys})"
        mine = [r for r in figures if r.get("device") == self.device]
        if mine:
            shown = "; ".join(figure(r, cell.unit) for r in mine)
            return JUDGED, f"against {shown}"
        ratios = [c for c in self.cells if c.recipe == cell.recipe and c.group == cell.group]
        if cell.baseline and any(r.get("ratio") is not None for c in ratios for r in c.references):
            return JUDGED, "as the baseline its group's published speedups are measured over"
        here = (
            f"{self.device_name} ({self.device or 'a device no recipe names'})"
            if self.device_name
            else "the nodes' devices"
        )
        # The publication's figures for other devices, labelled as theirs: read beside, never a verdict.
        others = other_devices.said(
            [*cell.references, *cell.other_references],
            self.device,
            cell.devices * cell.nodes,
            cell.nodes,
            cell.unit,
        )
        if others:
            return NO_REFERENCE, f"no published figure for {here}; {others}"
        return NO_REFERENCE, "nothing was published for this variant alone"

    def to_json(self, seconds: float) -> dict[str, Any]:
        """`preflight --json` (reprokit/schemas/preflight.schema.json)."""
        first = self.cells[0] if self.cells else None
        answers = self.answers()
        return {
            "accelerator": first.accelerator if first else "",
            "scale": first.scale if first else "",
            "messages": [str(m) for m in self.messages],
            "findings": [
                {"check": f.check, "message": f.message, "blocks": f.blocks, "cells": list(f.cells)}
                for f in self.findings
            ],
            "cells": [
                {
                    "cell_id": a.cell.cell_id,
                    "verdict": a.verdict,
                    "because": a.because,
                    "otherwise": {"verdict": a.otherwise[0], "because": a.otherwise[1]}
                    if a.otherwise
                    else None,
                }
                for a in answers
            ],
            "refused": sum(1 for a in answers if a.verdict == WOULD_NOT),
            "seconds": round(seconds, 3),
        }

    def refused(self) -> list[Answer]:
        return [a for a in self.answers() if a.verdict == WOULD_NOT]

    def refusal(self) -> str | None:
        """The one line a refused preflight ends with: how many cells would not, and the first thing to
        fix: what stops every cell (the machine, its image) before a cell's own reason."""
        refused = self.refused()
        if not refused:
            return None
        everywhere = next((f for f in self.findings if f.blocks and not f.cells), None)
        first = (
            f"{everywhere.check}: {everywhere.message}"
            if everywhere
            else f"{refused[0].cell.cell_id}: {refused[0].because}"
        )
        return f"{len(refused)} of {len(self.cells)} cell(s) would not run or be judged; {first}"

    def table(self) -> str:
        """The findings by check, then one line per cell."""
        lines = []
        width = max((len(f.check) for f in self.findings), default=5)
        for finding in self.findings:
            mark = "x" if finding.blocks else "-"
            scope = f" [{', '.join(finding.cells)}]" if finding.cells and finding.blocks else ""
            lines.append(f"  {mark} {finding.check:<{width}}  {finding.message}{scope}")
        answers = self.answers()
        cell_width = max((len(a.cell.cell_id) for a in answers), default=4)
        verdict_width = max((len(a.verdict) for a in answers), default=7)
        lines += ["", f"  {'cell':<{cell_width}}  {'verdict':<{verdict_width}}  because"]
        for answer in answers:
            lines.append(
                f"  {answer.cell.cell_id:<{cell_width}}  {answer.verdict:<{verdict_width}}  {answer.shown}".rstrip()
            )
        return "\n".join(lines)


def figure(reference: dict, unit: str) -> str:
    """A published figure as the table says it: '500 img/s on 8 a100-80gb'."""
    nodes = f" x {reference['nodes']} nodes" if int(reference.get("nodes") or 1) > 1 else ""
    return f"{reference['value']:g} {unit} on {reference.get('devices', 1)}{nodes} {reference['device']}"
