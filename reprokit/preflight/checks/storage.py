"""Storage: the results folder and the caches the trainers write are writable, with room for the session
(run directories, the checkpoints one cell hands another, the datasets cache)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

MIB = 2**20
GIB = 2**30
# A run directory: logs, TensorBoard events, throughput.csv, sysinfo, the tokenized splits' cache.
RUN_DIRECTORY_BYTES = 64 * MIB
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


def parameters(text: str | None) -> int:
    """'866M' -> 866e6; '1.2B' -> 1.2e9; 0 when not said."""
    found = re.fullmatch(r"\s*([\d.]+)\s*([KMB]?)\s*", text or "")
    if not found:
        return 0
    return int(float(found.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "B": 1e9}[found.group(2)])


def gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / MIB:.0f} MiB"


class Storage(Check):
    name = "storage"

    def needed(self, context: Context) -> int:
        """About what the session writes under its results folder."""
        total = RUN_DIRECTORY_BYTES * len(context.cells)
        producers = {cell_id for cell in context.cells for cell_id in cell.needed_cells().values()}
        for cell in context.cells:
            if cell.cell_id in producers and cell.scale == "published":
                # Weights in fp32 and the optimizer's two moments: what a finetune starts from.
                total += 12 * parameters(context.recipe(cell).model.parameters)
        return total

    def run(self, context: Context) -> list[Finding]:
        out = context.out.resolve()
        if not writable(out):
            return [
                self.finding(
                    f"the results folder {out} is not writable; give --out a folder you may write", True
                )
            ]
        need, free = self.needed(context), free_bytes(out)
        if free < need:
            return [
                self.finding(
                    f"{out}: {gib(free)} free, the session needs about {gib(need)} (run directories and checkpoints); "
                    "free some, or --out a larger disk",
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
