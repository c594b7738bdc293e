"""The software stack a publication ran beside the one its cells ran, for the report.

A recipe's ``published_software.stack`` names what the publication ran (framework and library
versions, GPU generation) and where that was read; each run's sysinfo.json records the versions it
ran with. A reader sees both at once: what a reproduction on today's stack is measured against.
"""

from __future__ import annotations

from reprokit.judge.result_row import Row
from reprokit.report.page_blocks import Block

NOT_RECORDED = "-"


def ran_version(key: str, row: Row) -> str:
    """What a run recorded for a stack entry: ``gpu`` is the device it ran on; a package is its
    version (``not installed``), looked up by its name or, where the publication names a product
    (``dali``), by the package that carries it (``nvidia-dali-cuda120 1.52``)."""
    if key == "gpu":
        return row.device_name or NOT_RECORDED
    versions = row.versions
    if key in versions:
        return versions[key] or "not installed"
    for name, version in versions.items():
        if key in name.split("-"):
            return f"{name} {version}" if version else "not installed"
    return NOT_RECORDED


def stack_table(rows: list[Row]) -> tuple[list[str], list[list[str]]] | None:
    """One row per entry of the publication's stack: what it ran, and what the cells ran (each
    distinct value once). None when the recipe names no stack."""
    published = next((r.published_stack for r in rows if r.published_stack), None)
    if not published:
        return None
    ran = [r for r in rows if r.versions or r.device_name]
    body = []
    for key, value in published.items():
        found = list(dict.fromkeys(ran_version(key, r) for r in ran))
        body.append([key, value, ", ".join(found) or NOT_RECORDED])
    return ["", "the publication ran", "these cells ran"], body


def blocks(rows: list[Row]) -> list[Block]:
    """The report's paragraph and table for one recipe's rows (nothing when it names no stack)."""
    table = stack_table(rows)
    if table is None:
        return []
    source = next((r.published_stack_source for r in rows if r.published_stack_source), None)
    headers, body = table
    return [
        Block(
            "p",
            "The publication's software stack"
            + (f" ({source})" if source else "")
            + f", beside what these cells ran (their sysinfo.json; {NOT_RECORDED}: not recorded by the run):",
        ),
        Block("table", headers=headers, rows=body),
    ]
