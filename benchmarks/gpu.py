"""The GPU suite of `make bench-gpu`: the recipes' published cells on one GPU, for a few dozen steps.

Each cell is the recipe's own (`inv show RECIPE --accelerator cuda --scale published`), run on one
device by the kit's local runtime, with the changes a benchmark needs and nothing else: a fixed
number of steps, random weights and synthetic data of the real shapes (no hub here), no
evaluation. Each row is the kit's own results row (run_row.row, verdicts.judge): the published
figure of the device that ran, under that figure's definition, per device. Shortened runs on
synthetic data are `not comparable` by the kit's own rules; the numbers are shown beside each other.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

from reprokit.barenode import slices
from reprokit.collect import run_row
from reprokit.plan import accelerators, cells, recipes
from reprokit.report import formats
from reprokit.run import supervise
from reprokit.run.containers.none import NoContainer
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes.base import run_script
from reprokit.run.runtimes.local import LocalRuntime

ROOT = Path(__file__).resolve().parent.parent

RUNS = ROOT / "benchmarks" / "results" / "gpu-session"
# The steps measured after the warm-up (the bare node's slices, reprokit/barenode/slices.yaml, which run
# the same cells).
MEASURED_STEPS = slices.load().measured_steps


def suite() -> dict[str, list[str] | None]:
    """recipe -> the variants the suite runs (None: every one it has for cuda), each recipe folder's
    `node: bench:`: found, never listed here. A recipe with no variant for cuda (Gaudi's alone) is left
    out, and so is one whose `bench` is empty."""
    cuda = accelerators.get("cuda")
    found: dict[str, list[str] | None] = {}
    for name in recipes.available():
        recipe = recipes.load(name)
        if recipe.node.bench == [] or not any(cuda.runs(v.accelerators) for v in recipe.variants):
            continue
        found[name] = recipe.node.bench
    return found


def planned(steps: int) -> list[cells.Cell]:
    """The suite's cells: the published ones on one cuda device, shortened and offline."""
    planned_cells = []
    for name, variants in suite().items():
        # What each recipe's cells need to run offline (its recipe's `node: offline:`).
        offline = slices.offline_args(name)
        for cell in cells.expand(recipes.load(name), name, "cuda", "published", variants, devices=1):
            max_steps = cell.roles.get("max_steps")  # the trainer's name for it
            if not max_steps:
                raise SystemExit(
                    f"{cell.cell_id}: trainer {cell.trainer} names no max_steps argument (roles in its "
                    "arguments.json): the bench cannot shorten its runs"
                )
            cell.args.update(offline)
            cell.args[max_steps] = max(steps, slices.warmup_steps(cell) + MEASURED_STEPS)
            slices.fit_synthetic_rows(cell)
            planned_cells.append(cell)
    return planned_cells


def trainer_module(cell: cells.Cell) -> str:
    """The module whose parse_args a kit trainer uses: reprokit_trainers.volo.run_volo."""
    return f"{cell.trainer_module}.run_{cell.trainer}"


def check_arguments(cell: cells.Cell) -> None:
    """The trainer accepts the cell's arguments (its own parser), so a GPU hour is not lost to a typo."""
    trainer = importlib.import_module(trainer_module(cell))
    trainer.parse_args(["--output_dir", "/tmp/unused", *cell.argv()])


def row(cell: cells.Cell, run_dir: Path) -> dict[str, Any]:
    """The kit's results row of the cell (the device that ran picks its reference), and what a bench
    table shows besides: the steady-state rate and the FLOPs."""
    found = run_row.row(run_dir)
    return {
        "cell": cell.cell_id,
        "status": found.status,
        "device": found.device_name,
        "definition": found.definition,
        "per_device": found.measured_per_device,
        "after_warmup": found.measured_after_warmup,
        "unit": cell.unit,
        "published_per_device": found.reference_per_device,
        "published": found.reference_source or "",
        "verdict": formats.verdict(found),
        # The trainer's own count, from its summary (a cell that failed before writing one has none).
        "gflop_per_sample": found.flops_per_sample / 1e9 if found.flops_per_sample else None,
        "mfu": found.mfu,
        "peak_memory_gib": (found.peak_memory_bytes or 0) / 2**30,
        "error": found.error or "",
    }


def dry_run(steps: int) -> list[str]:
    """Each cell's run.sh, its arguments checked by its trainer's parser."""
    profile = accelerators.get("cuda")
    scripts = []
    for cell in planned(steps):
        check_arguments(cell)
        scripts.append(run_script(cell, profile))
    return scripts


def run(steps: int) -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "make bench-gpu needs a CUDA device; none is visible (torch.cuda.is_available() is False)"
        )
    profile = accelerators.get("cuda")
    runtime = LocalRuntime(NoOptions(), NoContainer(NoOptions()))
    runtime.check(profile)
    shutil.rmtree(RUNS, ignore_errors=True)
    rows = []
    for cell in planned(steps):
        check_arguments(cell)
        run_dir = RUNS / "runs" / cell.cell_id
        print(f"{cell.cell_id} ...", flush=True)
        supervise.run_cell(runtime, cell, run_dir, profile, timeout=1800)
        rows.append(row(cell, run_dir))
        print(f"  {rows[-1]['status']}: {rows[-1]['per_device']} {cell.unit} per device", flush=True)
    return rows
