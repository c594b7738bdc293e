"""Storage: the results folder and the caches the trainers write are writable, with room for the session
(run directories, the checkpoints one cell hands another, the datasets cache)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

MIB = 2**20
GIB = 2**30
# A run directory of a scale whose recipe does not say what it writes (scales.<scale>.run_dir_bytes).
RUN_DIRECTORY_BYTES = 64 * MIB
# What the recipes say is measured (a smoke run here) or reckoned from the model: twice that is asked.
MARGIN = 2
# The session's own files per cell: results.csv/.jsonl, report.md/.html, the plots, the TensorBoard copy
# (measured: 1.33 MB for the 16 smoke cells of make reproduce on the CPU machine, 2026-11, 83 KB a cell).
SESSION_BYTES_PER_CELL = 128 * 1024
# A torch.profiler trace (--profile) of a few steps, per rank: tens of MB on a GPU.
TRACE_BYTES_PER_RANK = 64 * MIB
# The datasets cache of a hub dataset (BridgeTower's New Yorker set: ~56 KB a row, 10.9k rows, and the
# tokenized splits beside them).
DATASETS_CACHE_BYTES = 1 * GIB


def free_bytes(path: Path) -> int:
    """Free bytes where `path` is (or would be made), as the filesystem reports them."""
    for folder in [path, *path.parents]:
        if folder.exists():
            return shutil.disk_usage(folder).free
    return shutil.disk_usage("/").free


def writable(path: Path) -> bool:
    """Whether files can be made where `path` is (or would be made): tried, not read from modes."""
    folder = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
    try:
        # Deleted on close: nothing is left behind in a folder that can be written.
        with tempfile.TemporaryFile(prefix=".reprokit-preflight-", dir=folder):
            return True
    except OSError:
        return False


def gib(size: float) -> str:
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / MIB:.0f} MiB" if size >= 10 * MIB else f"{size / MIB:.1f} MiB"


class Storage(Check):
    name = "storage"

    def needed(self, context: Context) -> int:
        """What the session writes under its results folder: each cell's run directory as its recipe's
        scale says (measured for the smoke scale: what a run here wrote), with a margin, its traces
        when it is profiled, and the session's own tables and report."""
        total = 0
        for cell in context.cells:
            written = context.recipe(cell).scales[cell.scale].run_dir_bytes
            total += MARGIN * (RUN_DIRECTORY_BYTES if written is None else written) + SESSION_BYTES_PER_CELL
            if cell.profile:
                total += TRACE_BYTES_PER_RANK * cell.devices * cell.nodes
        return total

    def run(self, context: Context) -> list[Finding]:
        out = context.out.resolve()
        if not writable(out):
            return [
                self.finding(
                    f"the results folder {out} is not writable; give --results a folder you may write", True
                )
            ]
        need, free = self.needed(context), free_bytes(out)
        if free < need:
            return [
                self.finding(
                    f"{out}: {gib(free)} free, the session needs about {gib(need)} (run directories and checkpoints); "
                    "free some, or --results a larger disk",
                    True,
                )
            ]
        found = [self.finding(f"{out}: writable, {gib(free)} free (the session needs about {gib(need)})")]
        if context.container == "none" and any("/" in context.recipe(c).dataset.id for c in context.cells):
            # Without a container the trainers write the datasets cache of this machine's user.
            cache = Path(
                os.environ.get("HF_DATASETS_CACHE")
                or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "datasets"
            )
            if not writable(cache):
                found.append(
                    self.finding(
                        f"the datasets cache {cache} is not writable; set HF_DATASETS_CACHE to a folder you may write",
                        True,
                    )
                )
            elif free_bytes(cache) < DATASETS_CACHE_BYTES:
                found.append(
                    self.finding(
                        f"the datasets cache {cache}: {gib(free_bytes(cache))} free, about {gib(DATASETS_CACHE_BYTES)} needed",
                        True,
                    )
                )
            else:
                found.append(
                    self.finding(f"the datasets cache {cache}: writable, {gib(free_bytes(cache))} free")
                )
        return found
