"""reprokit benchmarks: `make bench` (any machine) and `make bench-gpu` (a CUDA device).

Prints a table and writes benchmarks/results/<suite>.csv. The CPU suite measures:

- the BridgeTower data path, JPEG bytes -> model-ready tensors, per core (one thread, no
  workers) and with N loader workers, for the published script's path, transformers'
  BridgeTowerImageProcessor, and the kit's paths, on the trainer's synthetic cartoons (the New
  Yorker cartoons' sizes and bytes, common/data/synthetic.py), each with its largest difference from
  the published output;
- the kit's own overhead: `inv reproduce --dry-run` over all recipes and the import time of
  `reprokit` (which must not import torch);
- the trainers' meter on and off on a real small training loop (meter.py): the ratio of samples
  per second with it and without, which must be within 1%; and the same on a DDP run of two CPU
  processes and 48 gradient buckets, beside a per-bucket Python communication hook's cost.
- `inv history` over 100, 1,000 and 5,000 sessions of a results folder, and over the 1,000 with one
  device named in a million characters (history.py);
- the MLflow export of a 1,000-step run into SQLite (mlflow_export.py), which must take under 3 s.

It also counts the FLOPs of one training sample of each benchmarked model (each trainer's own
flops_per_sample) and the model FLOPs utilization the published figures imply, and times VOLO's
published kernels against those beyond the publication on one core (volo_kernels.py).

The GPU suite (gpu.py) runs the recipes' published cells on one GPU for a few dozen steps through
the kit's local runtime and reads their summary.json: nothing there is estimated.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

IMAGE_SIZE = 294
# Largest mean |difference| from the published path, in normalized units (1/255 of a pixel
# level is ~0.015 after CLIP's std): what "equal to tolerance" means for each kit path.
TOLERANCE = {"kit": 0.01, "kit-draft": 0.10}


def _images(count: int, seed: int = 0) -> list[bytes]:
    """The BridgeTower trainer's synthetic cartoons: its sizes and JPEG quality, from the one place
    that states them."""
    import numpy as np

    from reprokit_trainers.common.data.synthetic import (
        CARTOON_HEIGHTS,
        CARTOON_WIDTHS,
        cartoon_jpeg_bytes,
        sample_sizes,
    )

    rng = np.random.default_rng(seed)
    return [
        cartoon_jpeg_bytes(w, h, rng) for w, h in sample_sizes(count, rng, CARTOON_WIDTHS, CARTOON_HEIGHTS)
    ]


def _hf_processor():
    from transformers import BridgeTowerImageProcessor

    from reprokit_trainers.bridgetower.fastimage import CLIP_MEAN, CLIP_STD

    processor = BridgeTowerImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"shortest_edge": IMAGE_SIZE},  # its center_crop reads this key
        do_center_crop=True,
        do_pad=False,
        size_divisor=1,  # its default (32) would round 294 down to 288
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )

    def transform(data: bytes):
        import io

        import torch
        from PIL import Image

        image = Image.open(io.BytesIO(data)).convert("RGB")
        # transformers 4.49 ignores the processor's own do_center_crop unless it is passed per call.
        pixels = processor(image, do_center_crop=True, return_tensors="np")["pixel_values"][0]
        return torch.from_numpy(pixels)

    return transform


def _paths():
    from reprokit_trainers.bridgetower.fastimage import FastImageTransform, published_transform

    return {
        "published": published_transform(IMAGE_SIZE),
        "hf-processor": _hf_processor(),
        "kit": FastImageTransform(IMAGE_SIZE, draft=False),
        "kit-draft": FastImageTransform(IMAGE_SIZE, draft=True),
    }


class _Bytes:
    """A map-style dataset of JPEG bytes, transformed in the loader's workers as in training."""

    def __init__(self, images, transform):
        self.images, self.transform = images, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.transform(self.images[index])


def _loader_rate(images, transform, workers: int) -> float:
    """Images/s of a DataLoader in steady state: the clock starts at the first batch, after the
    workers have started (forking them costs as much as a few batches here)."""
    import torch

    loader = torch.utils.data.DataLoader(_Bytes(images * 4, transform), batch_size=16, num_workers=workers)
    batches = iter(loader)
    next(batches)
    start = time.perf_counter()
    count = sum(batch.shape[0] for batch in batches)
    return count / (time.perf_counter() - start)


def data_path(count: int, repeats: int, workers: list[int]) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    images = _images(count)
    paths = _paths()
    reference = [paths["published"](img) for img in images]
    rows = []
    for name, transform in paths.items():
        transform(images[0])
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            outputs = [transform(img) for img in images]
            times.append(time.perf_counter() - start)
        diffs = torch.stack([(o.float() - r).abs().mean() for o, r in zip(outputs, reference, strict=True)])
        rows.append(
            {
                "suite": "data-path",
                "name": name,
                "workers": 0,
                "images_per_s": count / min(times),
                "mean_abs_diff": float(diffs.mean()),
                # The tolerance applies to this: no image's mean difference may exceed it.
                "worst_image_mean_diff": float(diffs.max()),
            }
        )
    for w in workers:
        for name in ("published", "kit", "kit-draft"):
            rows.append(
                {
                    "suite": "data-path",
                    "name": name,
                    "workers": w,
                    "images_per_s": max(_loader_rate(images, paths[name], w) for _ in range(repeats)),
                }
            )
    base = {r["workers"]: r["images_per_s"] for r in rows if r["name"] == "published"}
    for r in rows:
        r["ratio_vs_published"] = r["images_per_s"] / base[r["workers"]]
    return rows


def overhead() -> list[dict]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    rows = []
    for _ in range(3):
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "invoke", "reproduce", "all", "--dry-run", "--accelerator", "cpu"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
        )
        rows.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"inv reproduce --dry-run failed: {result.stderr.strip().splitlines()[-1]}")
    code = (
        "import sys, time; t = time.perf_counter(); import reprokit.run.session, reprokit.render.templates, reprokit.collect.collect;"
        "print(time.perf_counter() - t, 'torch' in sys.modules)"
    )
    imports = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
        seconds, torch_loaded = out.stdout.split()
        if torch_loaded == "True":
            raise SystemExit("importing reprokit imported torch: the host side must stay light")
        imports.append(float(seconds))
    return [
        {"suite": "overhead", "name": "inv reproduce --dry-run (all recipes)", "seconds": min(rows)},
        {"suite": "overhead", "name": "import reprokit (no torch)", "seconds": min(imports)},
    ]


def model_flops() -> list[dict]:
    """FLOPs per training sample, counted by the trainers, and the MFU the published figures imply."""
    import json

    import yaml

    from reprokit_trainers.bridgetower import offline, record
    from reprokit_trainers.common.measure import flops
    from reprokit_trainers.vit import run_vit
    from reprokit_trainers.volo import run_volo

    # The recipe's large architecture, captions padded to 128 tokens as the trainer does.
    recipe = yaml.safe_load((ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text())
    bridgetower = offline.build_config(json.dumps(recipe["model"]["architecture"]))
    published = [
        (
            "BridgeTower-large, 294 px + 128 tokens",
            record.flops_per_sample(bridgetower, 128),
            "H100",
            602.1,
            8,
        ),
        (
            "VOLO-D5 at 224 (token labeling)",
            run_volo.flops_per_sample(run_volo.ModelArguments(model_name_or_path="volo_d5"), 224),
            "A100",
            500.0,
            8,
        ),
        (
            "ViT-B/16 at 224 (pycls, class token)",
            run_vit.flops_per_sample(run_vit.ModelArguments(model_size="b16", img_size=224)),
            None,
            None,
            None,
        ),
    ]
    rows = []
    for name, count, device, value, devices in published:
        implied = flops.mfu(count, value, flops.peak_tflops(device), devices) if device else None
        rows.append(
            {
                "suite": "flops",
                "name": name,
                "gflop_per_sample": count / 1e9,
                "published": f"{value} on {devices} {device}" if device else "",
                "implied_mfu": implied,
            }
        )
    return rows


def _print(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = list(dict.fromkeys(k for r in rows for k in r))
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for r in rows:
        table.add_row(
            *[
                f"{r[c]:.3f}" if isinstance(r.get(c), float) else str("" if r.get(c) is None else r[c])
                for c in columns
            ]
        )
    Console(width=max(120, Console().width)).print(table)


def _write(rows: list[dict], suite: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{suite}.csv"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true", help="run the GPU suite instead (needs CUDA)")
    parser.add_argument("--images", type=int, default=64, help="synthetic images per data-path measurement")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per measurement; the best is kept")
    parser.add_argument("--workers", type=int, nargs="*", default=[2], help="loader worker counts to measure")
    parser.add_argument("--steps", type=int, default=40, help="training steps per GPU measurement")
    parser.add_argument(
        "--only",
        choices=["history", "meter", "mlflow"],
        help="run one section of the CPU suite (make bench ARGS='--only history')",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --gpu: print each cell's run.sh (arguments checked) and run nothing",
    )
    args = parser.parse_args()
    if args.gpu:
        from benchmarks import gpu

        if args.dry_run:
            print("\n".join(gpu.dry_run(args.steps)))
            return
        rows = gpu.run(args.steps)
        _print(
            rows, "GPU throughput (real training steps, one device) beside the published per-device figure"
        )
        print(f"wrote {_write(rows, 'gpu')} (run directories in {gpu.RUNS})")
        return
    from benchmarks import meter

    if args.only == "meter":
        measured = meter.measure()
        _print(measured, "the meter on and off: a small CPU training loop, on and off steps in turn")
        ddp = meter.ddp_measure()
        _print(ddp, "the meter on and off on DDP: two CPU processes (gloo), 48 buckets, kinds in turn")
        print(f"wrote {_write(measured, 'meter')} and {_write(ddp, 'meter-ddp')}")
        print(f"{meter.verdict(measured)}\n{meter.ddp_verdict(ddp)}")
        return
    if args.only == "history":
        _history()
        return
    if args.only == "mlflow":
        _mlflow()
        return
    rows = data_path(args.images, args.repeats, args.workers)
    _print(rows, "BridgeTower data path: JPEG bytes -> tensors (one core unless workers > 0)")
    costs = overhead()
    _print(costs, "kit overhead")
    counted = model_flops()
    _print(
        counted,
        "FLOPs per training sample (counted on the meta device) and the MFU the published figures imply",
    )
    from benchmarks import volo_kernels

    kernels = volo_kernels.measure()
    _print(kernels, "VOLO: the publication's kernels and those beyond it (ms, one core)")
    measured = meter.measure()
    _print(measured, "the meter on and off: a small CPU training loop, on and off steps in turn")
    ddp = meter.ddp_measure()
    _print(ddp, "the meter on and off on DDP: two CPU processes (gloo), 48 buckets, kinds in turn")
    print(
        f"wrote {_write(rows, 'data-path')}, {_write(costs, 'overhead')}, {_write(counted, 'flops')}, "
        f"{_write(kernels, 'volo-kernels')}, {_write(measured, 'meter')} and {_write(ddp, 'meter-ddp')}"
    )
    by_name = {r["name"]: r for r in rows if r["workers"] == 0}
    for name in ("kit", "kit-draft"):
        r = by_name[name]
        within = "within" if r["worst_image_mean_diff"] <= TOLERANCE[name] else "OUTSIDE"
        print(
            f"data path ({name}): {r['ratio_vs_published']:.1f}x the published CPU path per core, "
            f"mean |diff| {r['mean_abs_diff']:.4f}, worst image {r['worst_image_mean_diff']:.4f} "
            f"({within} tolerance {TOLERANCE[name]})"
        )
    # The headline: the kit's fastest CPU path (fast IDCT, then the published resample) against the published one.
    print(f"data path: {by_name['kit-draft']['ratio_vs_published']:.1f}x")
    print(meter.verdict(measured))
    print(meter.ddp_verdict(ddp))
    _history()
    _mlflow()


def _mlflow() -> None:
    from benchmarks import mlflow_export

    rows = mlflow_export.run()
    _print(rows, "inv export-results --to mlflow: a 1,000-step run into SQLite (best of 3)")
    print(f"wrote {_write(rows, 'mlflow')}")
    for r in rows:
        print(f"mlflow: {r['steps']:,} steps exported in {r['export_s_best']:.2f} s "
              f"(target {r['target_s']:.0f} s: {r['within']})")  # fmt: skip


def _history() -> None:
    from benchmarks import history

    rows = history.run()
    _print(rows, "inv history over a results folder of N sessions (wall time as a user runs it, best of 3)")
    print(f"wrote {_write(rows, 'history')}")
    for r in rows:
        limit = f" (table limit {r['limit_s']:.0f} s: {r['within']})" if r["limit_s"] != "" else ""
        print(
            f"{r['name']}: table in {r['table_s']:.2f} s, with history.html and its plots "
            f"{r['with_plots_s']:.2f} s, peak {r['peak_rss_mib']:.0f} MiB{limit}"
        )


if __name__ == "__main__":
    main()
