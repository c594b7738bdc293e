"""The benchmark harness: what `make bench-gpu` would run is checked on any machine, and the FLOP
counts behind its MFU column (the trainers' own) are right."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reprokit_trainers.common.measure import flops  # noqa: E402
from reprokit_trainers.vit import run_vit  # noqa: E402


def test_the_gpu_suite_dry_run_prints_the_published_cells_on_one_device_with_checked_arguments():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--gpu", "--dry-run", "--steps", "30"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    bodies = re.split(r"^#!/usr/bin/env bash$", result.stdout, flags=re.M)[1:]
    scripts = {body.split(":", 1)[0].strip("\n# "): body for body in bodies}
    assert {"bridgetower--workers0", "bridgetower--workers2-gpu-decode", "volo--pretrain-d5"} <= set(scripts)
    assert {f"vit-speedups--{rung}" for rung in ("baseline", "amp", "pooled", "batch-second", "fsdp")} <= set(
        scripts
    )
    bridgetower = scripts["bridgetower--workers2-gpu-decode"]
    # The published settings, on one device, shortened and offline.
    for flag in (
        "--per_device_train_batch_size 48",
        "--bf16",
        "--image_pipeline gpu_decode",
        "--random_init",
    ):
        assert flag in bridgetower
    assert 'LAUNCH=("$PYTHON")' in bridgetower and "--max_steps 30" in bridgetower
    volo = scripts["volo--pretrain-d5"]
    assert "--per_device_train_batch_size 44" in volo and "--lr 0.0001" in volo
    # Finetuning reads the pretraining run's checkpoint, which runs first.
    assert '--finetune "$RUN_DIR/../volo--pretrain-d5/checkpoint"' in scripts["volo--finetune-d5-512"]


def vit_forward_flops(depth: int, width: int, mlp: int, tokens: int, patch_pixels: int, classes: int) -> int:
    """Matmul FLOPs of one ViT forward pass per image, by hand (2 FLOPs per multiply-add)."""
    per_layer = 2 * tokens * (4 * width * width + 2 * width * mlp) + 2 * 2 * tokens * tokens * width
    return depth * per_layer + 2 * (tokens - 1) * patch_pixels * width + 2 * width * classes


def test_the_counted_vit_b16_flops_match_the_closed_form():
    counted = run_vit.flops_per_sample(
        run_vit.ModelArguments(model_size="b16", img_size=224, classifier="token", layout="batch_first")
    )
    by_hand = 3 * vit_forward_flops(12, 768, 3072, 14 * 14 + 1, 3 * 16 * 16, 1000)  # backward = 2x forward
    assert counted == pytest.approx(by_hand, rel=0.01)


def test_mfu_is_achieved_over_peak_flops_of_the_named_device():
    h100 = flops.peak_tflops("NVIDIA H100 80GB HBM3")
    assert flops.mfu(1e12, 98.94, h100) == pytest.approx(0.1)
    assert flops.mfu(1e12, 98.94, h100, devices=2) == pytest.approx(0.05)
    assert flops.peak_tflops("NVIDIA H100 PCIe") == 756.0  # the first match wins: not the SXM's peak
    assert flops.mfu(1e12, 100.0, flops.peak_tflops("Some Unknown GPU")) is None


@pytest.mark.parametrize(
    ("device_name", "published"),
    [("NVIDIA A100-SXM4-80GB", 345.4 / 8), ("NVIDIA H100 80GB HBM3", 602.1 / 8)],
)
def test_a_bench_gpu_row_takes_the_reference_of_the_device_that_ran_under_its_definition(
    tmp_path, device_name, published
):
    import json

    from benchmarks import gpu
    from reprokit.plan import accelerators
    from reprokit.run.runtimes.base import write_run_dir_inputs

    (cell,) = [c for c in gpu.planned(30) if c.cell_id == "bridgetower--workers2"]
    run_dir = tmp_path / cell.cell_id
    run_dir.mkdir()
    write_run_dir_inputs(cell, accelerators.get("cuda"), run_dir)
    (run_dir / "sysinfo.json").write_text(json.dumps({"device_name": device_name, "world_size": 1}))
    figures = {"after_warmup": {"value": 80.0}, "whole_run": {"value": 70.0}}
    summary = {"schema_version": 2, "status": "ok", "world_size": 1, "throughput": figures, "departures": []}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    row = gpu.row(cell, run_dir)
    assert row["published_per_device"] == pytest.approx(published)
    # The GPU figures are the stock Trainer's whole-run samples/s: that one is judged, not the steady state.
    assert row["definition"] == "whole_run" and row["per_device"] == 70.0 and row["after_warmup"] == 80.0
    # A shortened run on synthetic data and random weights is measured, never given a verdict.
    assert row["verdict"].startswith("not comparable (")
    assert "shortened run (max_steps 30)" in row["verdict"]


def test_the_volo_kernel_table_times_the_trainers_own_kernels_under_their_recorded_names():
    from benchmarks import volo_kernels

    rows = volo_kernels.measure(repeats=1, tokens=(16,))
    assert [(r["published"], r["beyond"].split("-")[0]) for r in rows] == [
        ("math", "sdpa"),
        ("adamw-per-tensor", "adamw"),
        ("adamw-per-tensor", "adamw"),
    ]
    assert [r["beyond"] for r in rows[1:]] == ["adamw-foreach", "adamw-fused"]
    assert all(r["published_ms"] > 0 and r["beyond_ms"] > 0 for r in rows)


def test_the_meter_benchmark_times_both_sides_of_each_pair_and_the_meters_own_cost():
    from benchmarks import meter

    off, on = meter.alternating(pairs=1)
    assert len(off) == len(on) == 1 and off[0] > 0 and on[0] > 0
    per_step, per_logged_step = meter.own_cost(steps=200)
    assert 0 < per_step < per_logged_step


@pytest.mark.parametrize(
    "interval, ratio, said",
    [
        ("0.9950-1.0080", 1.0010, "(within 1%; 95% interval 0.9950-1.0080"),
        ("0.9850-1.0050", 0.9990, "(within 1%; this machine's noise leaves the interval below it;"),
        ("0.9600-0.9800", 0.9700, "(OUTSIDE 1%;"),
    ],
)
def test_the_meter_headline_says_whether_its_ratio_is_within_one_percent(interval, ratio, said):
    from benchmarks import meter

    on = {"name": "meter on", "ratio_on_off": ratio, "interval_95": interval, "steps": 40, "load_average": 0.1,
          "own_us_per_step": 2.0, "own_us_per_logged_step": 40.0, "own_share": 0.0001, "step_ms": 30.0}  # fmt: skip
    line = meter.verdict([{"name": "meter off"}, on])
    assert line.startswith(f"meter overhead: on/off {ratio:.4f} in samples per CPU-second {said}")


BURNS = """
import subprocess, sys, time

def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_burns_in_its_own_process():
    _burn(0.3)

def test_burns_in_a_child():
    code = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


@pytest.mark.parametrize("workers", [["-n", "2"], ["-p", "no:xdist"]], ids=["xdist", "one process"])
def test_the_suite_cpu_plugin_counts_each_files_cpu_in_its_process_and_its_children(tmp_path, workers):
    (tmp_path / "test_burns.py").write_text(BURNS)
    out = tmp_path / "cpu.csv"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "benchmarks.suite_cpu",
         "--suite-cpu", str(out), *workers, str(tmp_path / "test_burns.py")],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = list(csv.DictReader(out.open()))
    assert row["file"].endswith("test_burns.py") and row["tests"] == "2"
    assert float(row["own_s"]) >= 0.3 and float(row["children_s"]) >= 0.3
    assert float(row["cpu_s"]) == pytest.approx(float(row["own_s"]) + float(row["children_s"]), abs=0.02)
    assert "CPU by test file" in done.stdout and "the machine was busy" in done.stdout
    assert not list(tmp_path.glob("*.jsonl"))  # the workers' lines are gone once read
