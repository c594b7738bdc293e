"""The GPU suite of `make bench-gpu`: the recipes' published cells on one GPU, for a few dozen steps.

Each cell is the recipe's own (`inv show RECIPE --accelerator cuda --scale published`), run on one
device by the kit's local runtime, with the changes a benchmark needs and nothing else: a fixed
number of steps, random weights and synthetic data of the real shapes (no hub here), no
evaluation. The samples/s and the MFU are the trainers' own (summary.json: samples/s after the
warm-up steps, MFU from the FLOPs per sample each trainer counts); a run without them gets the
FLOPs from the trainer's own count. Published figures are whole-node numbers, compared per device.
"""

from __future__ import annotations

import functools
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprokit import accelerators, cells, recipes, render  # noqa: E402
from reprokit.runtimes.local import LocalRuntime  # noqa: E402

RUNS = ROOT / "benchmarks" / "results" / "gpu-runs"
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
    "volo": ["pretrain-d5", "pretrain-d5-gpu-decode", "finetune-d5-512"],
    "vit-speedups": None,
}
# What each recipe's cells need to run offline and briefly.
OFFLINE_ARGS: dict[str, dict[str, Any]] = {
    "bridgetower": {"random_init": True, "synthetic_data": True, "do_eval": False, "do_predict": False},
    "volo": {"synthetic_data": True},
    "vit-speedups": {"synthetic_data": True},
}
MEASURED_STEPS = 20  # at least this many steps after the warm-up


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


def trainer_module(script: str) -> str:
    """The module of a recipe's trainer: run_volo.py is reprokit_trainers.volo.run_volo."""
    stem = Path(script).stem
    return f"reprokit_trainers.{stem.removeprefix('run_')}.{stem}"


def check_arguments(cell: cells.Cell) -> None:
    """The trainer accepts the cell's arguments (its own parser), so a GPU hour is not lost to a typo."""
    trainer = importlib.import_module(trainer_module(cell.trainer))
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
        from reprokit_trainers.bridgetower import run_bridgetower

        (architecture,) = key
        return run_bridgetower.flops_per_sample(run_bridgetower.build_config(architecture))
    if model == "volo":
        from reprokit_trainers.volo import run_volo

        name, img_size = key
        return run_volo.flops_per_sample(run_volo.ModelArguments(model_name_or_path=name), img_size)
    from reprokit_trainers.vit import run_vit

    size, img_size, classifier, layout = key
    return run_vit.flops_per_sample(
        run_vit.ModelArguments(model_size=size, img_size=img_size, classifier=classifier, layout=layout)
    )


def published_per_device(cell: cells.Cell) -> tuple[float | None, str]:
    """The published figure per device for the device this cell's references name first."""
    for ref in cell.references + cell.other_references:
        if "value" in ref and ref.get("nodes", 1) == 1:
            return ref["value"] / ref["devices"], f"{ref['device']} {ref['value']}/{ref['devices']}"
    return None, ""


def row(cell: cells.Cell, summary: dict[str, Any] | None, device_name: str) -> dict[str, Any]:
    from reprokit_trainers.common import flops

    summary = summary or {}
    count = summary.get("flops_per_sample") or flops_per_sample(cell)
    measured = summary.get("samples_per_second") if summary.get("status") == "ok" else None
    if "mfu" in summary:  # the trainer's own, from its device's peak (or --device_peak_tflops)
        utilization = summary["mfu"] if measured else None
    else:
        utilization = flops.mfu(count, measured, flops.peak_tflops(device_name))
    published, source = published_per_device(cell)
    return {
        "cell": cell.cell_id,
        "status": summary.get("status", "not run"),
        "per_second": measured,
        "unit": cell.unit,
        "published_per_device": published,
        "published": source,
        "ratio": measured / published if measured and published else None,
        "gflop_per_sample": count / 1e9,
        "mfu": utilization,
        "peak_memory_gib": (summary.get("peak_memory_bytes") or 0) / 2**30,
        "error": summary.get("error", ""),
    }


def dry_run(steps: int) -> list[str]:
    """Each cell's run.sh, its arguments checked by its trainer's parser."""
    profile = accelerators.get("cuda")
    scripts = []
    for cell in planned(steps):
        check_arguments(cell)
        scripts.append(render.run_script(cell, profile))
    return scripts


def run(steps: int) -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "make bench-gpu needs a CUDA device; none is visible (torch.cuda.is_available() is False)"
        )
    device_name = torch.cuda.get_device_name(0)
    profile = accelerators.get("cuda")
    shutil.rmtree(RUNS, ignore_errors=True)
    rows = []
    for cell in planned(steps):
        check_arguments(cell)
        run_dir = RUNS / cell.cell_id
        run_dir.mkdir(parents=True)
        print(f"{cell.cell_id} ...", flush=True)
        summary = LocalRuntime().run(cell, run_dir, profile)
        rows.append(row(cell, summary, device_name))
        print(f"  {rows[-1]['status']}: {rows[-1]['per_second']} {cell.unit}", flush=True)
    return rows
