"""Session folders as `inv reproduce` leaves them, written directly from the pinned fixture's run
directories (tests/fixtures/results_session): no trainer runs, so a test of the store can make two
good sessions, or hundreds of bad ones, in milliseconds each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "results_session" / "20250102-030405"
# Two cells of the fixture: one judged `reproduced` (H100), one `not comparable` (synthetic data).
CELLS = ("bridgetower--workers0", "bridgetower--workers2")


def write_session(
    folder: Path, created_at: str, rate: float = 1.0, cells: tuple[str, ...] = CELLS, collect: bool = True
) -> Path:
    """A session folder: session.json planning `cells`, their run directories from the fixture with
    every throughput figure times `rate`, and (`collect`) results.csv and results.jsonl made by the kit."""
    folder.mkdir(parents=True)
    stored = json.loads((FIXTURE / "session.json").read_text())
    stored.update(
        session=folder.name,
        created_at=created_at,
        cells=[c for c in stored["cells"] if c["cell_id"] in cells],
    )
    (folder / "session.json").write_text(json.dumps(stored, indent=2))
    for cell in cells:
        run_dir = folder / "runs" / cell
        shutil.copytree(FIXTURE / "runs" / cell, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        for figure in summary.get("throughput", {}).values():
            figure["value"] *= rate
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    if collect:
        from reprokit.collect import collect as collecting

        collecting.collect(folder)
    return folder


def edit_json(path: Path, changes: dict) -> Path:
    """Set keys of a JSON object file (a dotted key reaches into nested objects)."""
    found = json.loads(path.read_text())
    for key, value in changes.items():
        holder = found
        *parents, last = key.split(".")
        for part in parents:
            holder = holder[part]
        holder[last] = value
    path.write_text(json.dumps(found))
    return path
