"""compare's regression gate (--fail-on-regression): the cells that regressed beyond the limit, those it
cannot judge (which fail it unless passed over), and its one line."""

from __future__ import annotations

from dataclasses import dataclass

from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line as markup_free
from reprokit.report.compare import NOT_COMPARED, REGRESSED, CellComparison


@dataclass
class Gate:
    """--fail-on-regression's answer: the cells that regressed beyond `limit` (a fraction), those it
    cannot judge and that fail it, those passed over (--skip-unjudged), and how many it judged."""

    limit: float
    regressed: list[CellComparison]
    unjudged: list[CellComparison]
    passed_over: list[CellComparison]
    judged: int
    cells: int

    @property
    def passed(self) -> bool:
        # A gate that judged nothing has said nothing: it does not pass.
        return not self.regressed and not self.unjudged and self.judged > 0

    def said(self) -> str:
        """The gate's one line: why it failed, or that it passed; either way how many cells it judged."""
        judged = f"{self.judged} of {self.cells} cell(s) judged"
        over = (
            f"{len(self.passed_over)} passed over (--skip-unjudged): "
            + ", ".join(markup_free(x.cell_id) for x in self.passed_over)
            if self.passed_over
            else ""
        )
        limit = f"{self.limit * 100:g}%"
        if self.passed:
            return f"gate passed: {judged}, none regressed by more than {limit}" + (
                f"; {over}" if over else ""
            )
        failures = []
        if self.regressed:
            names = ", ".join(f"{markup_free(x.cell_id)} ({x.ratio:.2f}x)" for x in self.regressed)
            failures.append(f"{len(self.regressed)} cell(s) regressed by more than {limit}: {names}")
        if self.unjudged:
            failures.append(unjudged_line(self.unjudged))
        if not failures:  # nothing failed it, and nothing was judged
            return f"the gate judged none of {self.cells} cell(s): nothing to pass" + (
                f" ({over})" if over else ""
            )
        return "; and ".join(failures) + f" ({judged})"


def gate(found: list[CellComparison], limit: float, noise: float | None, skip_unjudged: bool = False) -> Gate:
    """--fail-on-regression with `limit` (a fraction). A cell it cannot judge (no figure on a side, a
    number it cannot trust, a disturbed run, a cell in one session only) fails the gate unless the
    user passes over such cells: a broken run must not pass a CI job as `not a regression`; and a gate
    that judged no cell fails. A gate on a cell that ran once on a side needs the noise band (`noise`):
    refused in one line without it."""
    single = [x.cell_id for x in found if x.single]
    if single and noise is None:
        raise ReprokitError(
            f"--fail-on-regression on single runs needs --noise PCT (the run-to-run spread you accept on this "
            f"machine), or sessions run with --repeat 3: {', '.join(single)} ran once on a side"
        )
    worse = [x for x in found if x.verdict == REGRESSED and x.ratio is not None and 1 - x.ratio > limit]
    unjudged = [x for x in found if x.verdict == NOT_COMPARED]
    return Gate(
        limit=limit,
        regressed=worse,
        unjudged=[] if skip_unjudged else unjudged,
        passed_over=unjudged if skip_unjudged else [],
        judged=len(found) - len(unjudged),
        cells=len(found),
    )


def unjudged_line(unjudged: list[CellComparison]) -> str:
    """The gate's one line for the cells it cannot judge."""
    return (
        f"--fail-on-regression cannot judge {len(unjudged)} cell(s): "
        + "; ".join(f"{markup_free(x.cell_id)} ({x.why})" for x in unjudged)
        + " (--skip-unjudged gates on the others)"
    )
