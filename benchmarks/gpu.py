"""The GPU suite of `make bench-gpu`: the recipes' published cells on one GPU, for a few dozen steps.

Each cell is the recipe's own (`inv show RECIPE --accelerator cuda --scale published`), run on one
device by the kit's local runtime, with the changes a benchmark needs and nothing else: a fixed
number of steps, random weights and synthetic data of the real shapes (no hub here), no
evaluation. Each row is the kit's own results row (run_row.row, verdicts.judge): the published
figure of the device that ran, under that figure's definition, per device. Shortened runs on
synthetic data are `not comparable` by the kit's own rules; the numbers are shown beside each other.
"""

from __future__ import annotations

import functools
import importlib
import json
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
# recipe -> variants (None: every variant the recipe has for cuda). D5 finetuning reads the
# pretraining run's checkpoint, so it runs after it.
SUITE: dict[str, list[str] | None] = {
    "bridgetower": [
        "workers0",
        "workers1",
        "workers2",
        "workers2-gpu-decode",
        "workers2-gpu-decode-fused",
        "workers2-gpu-decode-fused-compile",
    ],
    # With the two variants beyond the publication where today's kernels should show most.
    "volo": [
        "pretrain-d5",
        "pretrain-d5-gpu-decode",
        "pretrain-d5-dali",
        "finetune-d5-512",
        "pretrain-d5-modern-kernels",
        "finetune-d5-512-sdpa",
    ],
    "vit-speedups": None,
}
# What each recipe's cells need to run offline (its recipe's `node: offline:`), and the steps measured
# after the warm-up (the bare node's slices, reprokit/barenode/slices.yaml, which run the same cells).
OFFLINE_ARGS: dict[str, dict[str, Any]] = {name: slices.offline_args(name) for name in SUITE}
MEASURED_STEPS = slices.load().measured_steps


def planned(steps: int) -> list[cells.Cell]:
    """The suite's cells: the published ones on one cuda device, shortened and offline."""
    planned_cells = []
    for name, variants in SUITE.items():
        for cell in cells.expand(recipes.load(name), name, "cuda", "published", variants, devices=1):
            warmup = int(cell.args.get("throughput_warmup_steps") or 0)
            cell.args.update(OFFLINE_ARGS[name])
            cell.args["max_steps"] = max(steps, warmup + MEASURED_STEPS)
            if name == "bridgetower":  # only as many synthetic samples as the steps consume
                batch = int(cell.args["per_device_train_batch_size"])
                cell.args["synthetic_num_train"] = batch * (cell.args["max_steps"] + 1)
            planned_cells.append(cell)
    return planned_cells


def trainer_module(cell: cells.Cell) -> str:
    """The module whose parse_args a kit trainer uses: reprokit_trainers.volo.run_volo."""
    return f"{cell.trainer_module}.run_{cell.trainer}"


def check_arguments(cell: cells.Cell) -> None:
    """The trainer accepts the cell's arguments (its own parser), so a GPU hour is not lost to a typo."""
    trainer = importlib.import_module(trainer_module(cell))
    trainer.parse_args(["--output_dir", "/tmp/unused", *cell.argv()])


def flops_per_sample(cell: cells.Cell) -> float:
    args = cell.args
    if cell.recipe == "bridgetower":
        return _counted("bridgetower", json.dumps(args["model_config_json"], sort_keys=True))
    if cell.recipe == "volo":
        return _counted("volo", args["model_name_or_path"].rsplit("_", 1)[0], int(args["img_size"]))
    return _counted("vit", args["model_size"], int(args["img_size"]), args["classifier"], args["layout"])


@functools.cache
def _counted(model: str, *key: Any) -> float:
    """One count per distinct model, by the trainer's own function: the ladder's rungs and the
    loader variants share theirs."""
    if model == "bridgetower":
        from reprokit_trainers.bridgetower import offline, record

        (architecture,) = key
        return record.flops_per_sample(offline.build_config(architecture))
    if model == "volo":
        from reprokit_trainers.volo import run_volo

        name, img_size = key
        return run_volo.flops_per_sample(run_volo.ModelArguments(model_name_or_path=name), img_size)
    from reprokit_trainers.vit import run_vit

    size, img_size, classifier, layout = key
    return run_vit.flops_per_sample(
        run_vit.ModelArguments(model_size=size, img_size=img_size, classifier=classifier, layout=layout)
    )


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
        "gflop_per_sample": (found.flops_per_sample or flops_per_sample(cell)) / 1e9,
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
