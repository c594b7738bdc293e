"""The CPU rehearsal of the bare node's slices: every cell of every slice through its trainer's own
code at the published architecture, resolution and per-device batch (the device half on fake tensors
that count its memory), each with a peak-memory estimate held against an 80 GB device. This is what
finds a shape, argument or import error here rather than on the node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.barenode import slices

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def rehearse(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    done = subprocess.run(
        [sys.executable, "-m", "reprokit.barenode", "rehearse", *args, "--keep", str(tmp_path / "kept")],
        capture_output=True, text=True, cwd=ROOT, timeout=1500,
    )  # fmt: skip
    out = tmp_path / "kept" / "rehearsal.jsonl"
    return done, [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def test_every_cell_of_every_slice_rehearses_and_fits_an_80_gb_device(tmp_path):
    done, results = rehearse(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = [
        f"{n}/{p.cell.cell_id}" for n in slices.load().slices for p in slices.plan(n) if not p.left_out
    ]
    assert [r["cell_id"] for r in results] == planned
    for result in results:
        assert result["status"] == "ok" and result["memory"]["fits"], result
        # Through the trainer's own code: its parser, its loader's batch, its model, two steps.
        assert result["ran"][0].startswith("arguments: run_"), result["ran"]
        assert any(step.startswith("2 ") for step in result["ran"]), result["ran"]
        # A peak-memory estimate per cell, printed and held against the device.
        assert f"ok {result['cell_id']}: " in done.stdout and "GiB of 79.6, fits" in done.stdout
    by_id = {r["cell_id"]: r for r in results}
    # The published sizes, not smoke ones: BridgeTower-large's 866M at batch 48, VOLO-D5, ViT-B/16.
    bridgetower = by_id["b/bridgetower--workers0"]
    assert round(bridgetower["parameters"] / 1e6) == 866 and bridgetower["batch"] == 48
    assert bridgetower["precision"] == "bf16" and bridgetower["image_size"] == 294
    finetune = by_id["c/volo--finetune-d5-512"]
    assert finetune["batch"] == 4 and finetune["image_size"] == 512
    assert any(step.startswith("finetune: load_finetune") for step in finetune["ran"])
    # A cell whose device step is another's (it differs in what the fake device does not see: its
    # loader, TF32, DDP's schedule, a compile not run here) still ran its own arguments, checks and
    # batch, says whose step it took, and keeps its own notes of what was not run.
    decode = by_id["c/volo--pretrain-d5-gpu-decode"]
    assert decode["same_device_step_as"] == "a/volo--pretrain-d5"
    assert decode["memory"] == by_id["a/volo--pretrain-d5"]["memory"]
    assert any(step.startswith("gpu_decode: the device decoder") for step in decode["ran"])
    assert any("gpu_decode's check for a CUDA device" in note for note in decode["skipped"])
    assert "(device step of a/volo--pretrain-d5)" in done.stdout
    compiled = by_id["d/vit-speedups--compile"]
    assert compiled["same_device_step_as"] == "d/vit-speedups--sdpa"
    assert any(note.startswith("torch.compile: not run here") for note in compiled["skipped"])
    assert not any(note.startswith("torch.compile") for note in by_id["d/vit-speedups--sdpa"]["skipped"])
    compiled = by_id["b/bridgetower--workers2-gpu-decode-fused-compile"]
    assert compiled["same_device_step_as"] == "b/bridgetower--workers2-gpu-decode-fused"
    assert any(note.startswith("torch.compile: not run here") for note in compiled["skipped"])
    assert by_id["c/volo--pretrain-d5-overlap-ddp"]["same_device_step_as"] == "a/volo--pretrain-d5"
    assert by_id["d/vit-speedups--baseline-fp32"]["same_device_step_as"] == "a/vit-speedups--baseline"
    # A different optimizer is a step of its own.
    assert by_id["c/volo--pretrain-d5-foreach-adamw"]["same_device_step_as"] is None
    assert by_id["d/vit-speedups--fsdp-b384-img256"]["batch"] == 384
    assert by_id["d/vit-speedups--baseline-fp32"]["precision"] == "fp32"
    # More activations at full precision than with fp16 autocast, as on the device.
    assert (
        by_id["d/vit-speedups--baseline"]["memory"]["peak_counted_bytes"]
        > by_id["d/vit-speedups--amp"]["memory"]["peak_counted_bytes"]
    )
    assert "Rehearsal: each cell at its published size" in done.stderr
    # With the bundle's packages (the node's torch differs and is said).
    assert "Rehearsed with transformers 4.49.0, timm 1.0.15, accelerate 1.4.0" in done.stderr


def test_a_shape_error_and_a_cell_too_large_for_the_device_are_found_before_the_node(tmp_path):
    spec = tmp_path / "slices.yaml"
    spec.write_text(
        """
measured_steps: 2
slices:
  x:
    title: what must not reach the node
    cells:
      # A width the 16 heads do not divide: the attention's reshape fails at the first forward.
      - {recipe: volo, variant: pretrain-d5, as: odd-width, args: {model_kwargs_json: {embed_dims: [384, 776, 776, 776]}}, seconds: 60}
      - {recipe: vit-speedups, variant: baseline, as: l16-batch-256, args: {model_size: l16, per_device_train_batch_size: 256}, seconds: 60}
"""
    )
    # One rehearsal for both trainers: one Python importing torch, not two.
    done, results = rehearse(tmp_path, "x", "--slices-file", str(spec), "--jobs", "1")
    assert done.returncode == 1
    shape, large = results
    assert shape["status"] == "failed" and "\n" not in shape["error"]
    assert f"FAILED x/volo--odd-width: {shape['error']}" in done.stdout
    assert large["status"] == "ok" and not large["memory"]["fits"]
    assert "ok x/vit-speedups--l16-batch-256: " in done.stdout and "DOES NOT FIT" in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("error: 2 of 2 cells would fail on the node")
