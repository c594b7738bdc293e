"""reprokit benchmarks: `make bench` (any machine) and `make bench-gpu` (a CUDA device).

Prints a table and writes benchmarks/results/<suite>.csv. The CPU suite measures:

- the BridgeTower data path, JPEG bytes -> model-ready tensors, per core (one thread, no
  workers) and with N loader workers, for the published script's path, transformers'
  BridgeTowerImageProcessor, and the kit's paths, on the same synthetic images, each with its
  largest difference from the published output;
- the kit's own overhead: `inv reproduce --dry-run` over all recipes and the import time of
  `reprokit` (which must not import torch).

The GPU suite trains the real architectures (random weights, synthetic data) for a few dozen
steps through the trainers and reads their summary.json: nothing here is estimated.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
RESULTS = ROOT / "benchmarks" / "results"

# New Yorker cartoon sizes, as the BridgeTower recipe synthesizes them.
WIDTHS, HEIGHTS = (500, 900), (400, 800)
IMAGE_SIZE = 294
# Largest mean |difference| from the published path, in normalized units (1/255 of a pixel
# level is ~0.015 after CLIP's std): what "equal to tolerance" means for each kit path.
TOLERANCE = {"kit": 0.01, "kit-draft": 0.08}


def _images(count: int, seed: int = 0) -> list[bytes]:
    import numpy as np
    from synthetic import jpeg_bytes, sample_sizes

    rng = np.random.default_rng(seed)
    return [jpeg_bytes(w, h, rng) for w, h in sample_sizes(count, rng, WIDTHS, HEIGHTS)]


def _hf_processor():
    from fastimage import CLIP_MEAN, CLIP_STD
    from transformers import BridgeTowerImageProcessor

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
    from fastimage import FastImageTransform, published_transform

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
    import torch

    loader = torch.utils.data.DataLoader(_Bytes(images, transform), batch_size=16, num_workers=workers)
    start = time.perf_counter()
    count = sum(batch.shape[0] for batch in loader)
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
        worst = max(float((o.float() - r).abs().max()) for o, r in zip(outputs, reference, strict=True))
        rows.append(
            {
                "suite": "data-path",
                "name": name,
                "workers": 0,
                "images_per_s": count / min(times),
                "mean_abs_diff": float(diffs.mean()),
                "max_abs_diff": worst,
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
            [sys.executable, "-m", "invoke", "reproduce", "--dry-run", "--accelerator", "cpu"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
        )
        rows.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"inv reproduce --dry-run failed: {result.stderr.strip().splitlines()[-1]}")
    code = (
        "import sys, time; t = time.perf_counter(); import reprokit.session, reprokit.render, reprokit.collect;"
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


def _train(trainer: str, args: list[str], label: str) -> dict:
    """Run a trainer for real on the GPU and return its measured summary."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, str(ROOT / "scripts" / trainer), "--output_dir", out, *args]
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        summary_file = Path(out) / "summary.json"
        if result.returncode != 0 or not summary_file.exists():
            tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
            return {"suite": "gpu", "name": label, "status": "failed", "error": " | ".join(tail)}
        summary = json.loads(summary_file.read_text())
        return {
            "suite": "gpu",
            "name": label,
            "status": summary["status"],
            "per_second": summary.get("samples_per_second"),
            "unit": summary.get("unit"),
            "peak_memory_gib": (summary.get("peak_memory_bytes") or 0) / 2**30,
            "extra": json.dumps({k: summary[k] for k in ("train_samples_per_second", "mfu") if k in summary}),
        }


def gpu(steps: int) -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("make bench-gpu needs a CUDA device; none is visible (torch.cuda.is_available() is False)")
    sys.path.insert(0, str(ROOT))
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes" / "bridgetower.yaml").read_text())
    common = [
        "--random_init", "--synthetic_data", "--model_config_json", json.dumps(recipe["model"]["architecture"]),
        "--per_device_train_batch_size", "48", "--bf16", "--max_steps", str(steps), "--logging_steps", "5",
        "--throughput_warmup_steps", "5", "--remove_unused_columns", "false", "--do_train",
        "--synthetic_num_train", str(48 * (steps + 2)), "--report_to", "none", "--save_strategy", "no",
    ]  # fmt: skip
    rows = []
    for workers in (0, 1, 2):
        rows.append(
            _train("run_bridgetower.py", [*common, "--dataloader_num_workers", str(workers)], f"bridgetower w{workers}")
        )
    rows.append(
        _train(
            "run_bridgetower.py",
            [*common, "--dataloader_num_workers", "2", "--image_pipeline", "gpu_decode"],
            "bridgetower gpu_decode",
        )
    )
    rows.append(
        _train(
            "run_volo.py",
            ["--model_name_or_path", "volo_d5_224", "--img_size", "224", "--per_device_train_batch_size", "44",
             "--amp", "bf16", "--synthetic_data", "--max_steps", str(steps), "--throughput_warmup_steps", "5",
             "--dataloader_num_workers", "8", "--token_label", "--token_label_size", "14"],  # fmt: skip
            "volo_d5 224",
        )
    )
    for rung in ("baseline", "amp", "foreach", "pooled", "batch-second"):
        rows.append(_train("run_vit.py", _vit_rung(rung, steps), f"vit ladder {rung}"))
    return rows


def _vit_rung(rung: str, steps: int) -> list[str]:
    import yaml

    recipe = yaml.safe_load((ROOT / "recipes" / "vit-speedups.yaml").read_text())
    args = {**recipe.get("hyperparameters", {})}
    for variant in recipe["variants"]:
        if variant["name"] == rung:
            args.update(variant.get("args", {}))
    args.update({"synthetic_data": True, "max_steps": steps, "throughput_warmup_steps": 5})
    argv = []
    for key, value in args.items():
        if value is True:
            argv.append(f"--{key}")
        elif value not in (None, False):
            argv += [f"--{key}", str(value)]
    return argv


def _print(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = list(dict.fromkeys(k for r in rows for k in r))
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for r in rows:
        table.add_row(*[f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns])
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
    args = parser.parse_args()
    if args.gpu:
        rows = gpu(args.steps)
        _print(rows, "GPU throughput (real training steps)")
        print(f"wrote {_write(rows, 'gpu')}")
        return
    rows = data_path(args.images, args.repeats, args.workers)
    _print(rows, "BridgeTower data path: JPEG bytes -> tensors (one core unless workers > 0)")
    costs = overhead()
    _print(costs, "kit overhead")
    print(f"wrote {_write(rows, 'data-path')} and {_write(costs, 'overhead')}")
    by_name = {r["name"]: r for r in rows if r["workers"] == 0}
    for name in ("kit", "kit-draft"):
        r = by_name[name]
        within = "within" if r["mean_abs_diff"] <= TOLERANCE[name] else "OUTSIDE"
        print(
            f"data path ({name}): {r['ratio_vs_published']:.1f}x the published CPU path per core, "
            f"mean |diff| {r['mean_abs_diff']:.4f} ({within} tolerance {TOLERANCE[name]})"
        )
    # The headline: the kit's default CPU path (draft decoding) against the published one.
    print(f"data path: {by_name['kit-draft']['ratio_vs_published']:.1f}x")


if __name__ == "__main__":
    main()
