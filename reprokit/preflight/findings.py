"""What a preflight found: one line per finding, whether it stops a cell ("would not"), and which cells
it concerns; and the per-cell answer they add up to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reprokit.plan.cells import Cell

JUDGED = "would be judged"
NOT_JUDGED = "would run, not judged"
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
    """A cell's answer: the verdict, and why."""

    cell: Cell
    verdict: str
    because: str = ""


@dataclass
class Report:
    cells: list[Cell]
    findings: list[Finding] = field(default_factory=list)
    # What planning said (the scale and runtime chosen and why, recipe warnings).
    messages: list[str] = field(default_factory=list)

    def answers(self) -> list[Answer]:
        found = []
        for cell in self.cells:
            blocking = [f for f in self.findings if f.blocks and f.concerns(cell)]
            if blocking:
                found.append(Answer(cell, WOULD_NOT, f"{blocking[0].check}: {blocking[0].message}"))
            elif cell.scale != "published":
                found.append(
                    Answer(cell, NOT_JUDGED, f"{cell.scale} scale (by design: the machinery, not the figure)")
                )
            elif cell.beyond:
                found.append(
                    Answer(cell, JUDGED, f"by its speedup over {cell.beyond}, measured in the same session")
                )
            else:
                found.append(Answer(cell, JUDGED, ""))
        return found

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
                {"cell_id": a.cell.cell_id, "verdict": a.verdict, "because": a.because} for a in answers
            ],
            "refused": sum(1 for a in answers if a.verdict == WOULD_NOT),
            "seconds": round(seconds, 3),
        }

    def refused(self) -> list[Answer]:
        return [a for a in self.answers() if a.verdict == WOULD_NOT]

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
                f"  {answer.cell.cell_id:<{cell_width}}  {answer.verdict:<{verdict_width}}  {answer.because}".rstrip()
            )
        return "\n".join(lines)
