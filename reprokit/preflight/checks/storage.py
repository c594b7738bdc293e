"""Storage: the results folder and the caches the trainers write are writable, with room for the session
(run directories, the checkpoints one cell hands another, the session's tables, report and plots, the
datasets cache)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from reprokit.plan.cells import Cell
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

MIB = 2**20
GIB = 2**30
KIB = 2**10
# A run directory of a scale whose recipe does not say what it writes (scales.<scale>.run_dir_bytes).
RUN_DIRECTORY_BYTES = 64 * MIB
# What the recipes say is measured (a smoke run here) or reckoned from the model: twice that is asked.
MARGIN = 2
# The session's own files beside its run directories, measured (the largest of each, in bytes) on the
# smoke sessions of `inv reproduce all --accelerator cpu --scale smoke --container none` (16 cells) and
# of one cell (`--variant pretrain-d1`), 2026-11; what a session writes of them is asked for as is.
#   once: the pages' skeleton (report.html's 7 KB of style, report.md's head), the machine's systems/
#   file (1.7 KB), session.json's and results.csv's heads: 15 KB in the one-cell session.
SESSION_BYTES = 16 * KIB
#   a cell: its rows (results.jsonl 7.5 KB, results.csv 1.3 KB), its lines in report.md (3 KB),
#   report.html (4.3 KB) and session.json (0.4 KB), its TensorBoard copy (tensorboard/<cell>: 11 KB at
#   the smoke scale; more steps write more, far inside a published run directory's margin).
CELL_BYTES = 32 * KIB
#   a recipe's plots (report/plots.py draw: throughput, breakdown, energy, ladder, curves), each a PNG
#   and again in report.html (base64, a third larger): a plot grows with its rows. Measured: curves
#   40,789 bytes for one cell, 44,197 for 3, 83,839 for 10 (the largest plot), the others smaller.
PLOTS_PER_RECIPE = 5
PLOT_BYTES = 40 * KIB
PLOT_BYTES_PER_CELL = 6 * KIB
PNG_AND_PAGE = 1 + 4 / 3
# A torch.profiler trace (--profile) of a few steps, per rank: tens of MB on a GPU.
TRACE_BYTES_PER_RANK = 64 * MIB
# The datasets cache of a hub dataset (BridgeTower's New Yorker set: ~56 KB a row, 10.9k rows, and the
# tokenized splits beside them).
DATASETS_CACHE_BYTES = 1 * GIB


def session_files(cells: list[Cell]) -> int:
    """What a session of `cells` writes beside its run directories: tables, report, plots, TensorBoard."""
    per_recipe = Counter(c.recipe for c in cells)
    plots = sum(PLOTS_PER_RECIPE * (PLOT_BYTES + PLOT_BYTES_PER_CELL * n) for n in per_recipe.values())
    return SESSION_BYTES + CELL_BYTES * len(cells) + round(PNG_AND_PAGE * plots)


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
    if size < MIB:
        # A small disk is told in KiB: "0.3 MiB free, needs about 0.7 MiB" hides what is missing.
        return f"{size / KIB:.0f} KiB"
    return f"{size / MIB:.0f} MiB" if size >= 10 * MIB else f"{size / MIB:.1f} MiB"


class Storage(Check):
    name = "storage"

    def needed(self, context: Context) -> int:
        """What the session writes under its results folder: each cell's run directory as its recipe's
        scale says (measured for the smoke scale: what a run here wrote), with a margin, its traces
        when it is profiled, and the session's own files (measured: session_files)."""
        total = session_files(context.cells)
        for cell in context.cells:
            written = context.recipe(cell).scales[cell.scale].run_dir_bytes
            total += MARGIN * (RUN_DIRECTORY_BYTES if written is None else written)
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
                    f"{out}: {gib(free)} free, the session needs about {gib(need)} (run directories and checkpoints, "
                    "tables, report and plots); "
                    "free some, or --results a larger disk",
                    True,
                )
            ]
        found = [self.finding(f"{out}: writable, {gib(free)} free (the session needs about {gib(need)})")]
        if context.container == "none" and context.hub_datasets:
            # Without a container the trainers write the datasets cache of this machine's user; only a
            # download writes it (synthetic data and a given --data cache do not).
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
