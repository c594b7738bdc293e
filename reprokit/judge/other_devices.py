"""Another device's figure, plainly labelled. A cell with no published figure for the device it ran on
(an H200, an MI300X, a device no recipe names) is shown the publication's figures for the devices it
has, each labelled as another device's: a reader sets the run against the published H100 without
taking that for a verdict. The verdict stays `no reference` (verdicts.judge); nothing here judges.

The report, the terminal table, the preflight and `inv show` all say it in these words."""

from __future__ import annotations

from typing import Any

from reprokit.judge import verdicts

LABEL = "another device, not judged"


def figures(references: list[dict[str, Any]], device: str | None, world: int, nodes: int) -> list[dict]:
    """The publication's figure on each other device (one a device, from the setup most like this
    run's: verdicts.reference_for), for a cell with no figure on `device`; none where it has one."""
    if verdicts.reference_for(references, device, world, nodes) is not None:
        return []
    others = dict.fromkeys(
        r["device"]
        for r in references
        if r.get("value") is not None and r.get("device") not in (None, device)
    )
    return [found for d in others if (found := verdicts.reference_for(references, d, world, nodes))]


def labelled(reference: dict[str, Any], unit: str | None) -> str:
    """`published h100: 42.06 samples/s per device (another device, not judged)`; a figure that names the
    software release it was measured on says it too (`(another device, not judged; SynapseAI 1.20.0, ...)`):
    a vendor's figures differ from release to release, and a reader sets a run against one of them."""
    per_device = verdicts.per_device(reference) or 0.0
    release = f"; {reference['release']}" if reference.get("release") else ""
    return f"published {reference['device']}: {per_device:,.2f} {unit or ''} per device ({LABEL}{release})".replace(
        "  ", " "
    )


def said(
    references: list[dict[str, Any]], device: str | None, world: int, nodes: int, unit: str | None
) -> str:
    """Each other device's figure labelled (`; ` between them), or '' where the cell has its own."""
    return "; ".join(labelled(r, unit) for r in figures(references, device, world, nodes))
