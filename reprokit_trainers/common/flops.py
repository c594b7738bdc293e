"""FLOPs of one training sample of each benchmarked model, counted, not estimated from a formula.

The model is built on the meta device (no memory, no weights), one forward and backward pass of a
batch runs under torch's FlopCounterMode, which counts the matmuls and convolutions the step
dispatches. Model FLOPs utilization (MFU) is then samples/s x FLOPs per sample over the device's
dense bf16/fp16 peak; it needs no GPU to count, only to measure the samples/s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parent.parent

# Dense (no sparsity) bf16/fp16 tensor-core peaks from the vendors' datasheets, in TFLOP/s, by a
# substring of torch.cuda.get_device_name(). Order matters: the first match wins.
PEAK_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5 (HBM3)
    ("H200", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
)
# BridgeTower captions are padded to max_seq_length (run_bridgetower.py), so a sample's cost is fixed.
BRIDGETOWER_SEQ_LEN = 128


def peak_tflops(device_name: str) -> float | None:
    for key, peak in PEAK_TFLOPS:
        if key in device_name:
            return peak
    return None


def mfu(flops_per_sample: float, per_second: float, device_name: str, devices: int = 1) -> float | None:
    """Model FLOPs utilization of `devices` devices together at `per_second` samples/s."""
    peak = peak_tflops(device_name)
    if peak is None or not per_second:
        return None
    return flops_per_sample * per_second / (peak * 1e12 * devices)


def _count(
    build: Callable[[], torch.nn.Module], step: Callable[[torch.nn.Module, int], torch.Tensor]
) -> float:
    batch = 2
    with torch.device("meta"):
        model = build()
        model.train()
        with FlopCounterMode(display=False) as counter:
            step(model, batch).backward()
    return counter.get_total_flops() / batch


def _recipe(name: str) -> dict:
    return yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text())


def bridgetower(architecture: dict | None = None, seq_len: int = BRIDGETOWER_SEQ_LEN) -> float:
    """BridgeTowerForContrastiveLearning with its contrastive loss (the recipe's large one by default)."""
    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning

    config = BridgeTowerConfig(**(architecture or _recipe("bridgetower")["model"]["architecture"]))
    size = config.vision_config.image_size

    def step(model, batch):
        return model(
            input_ids=torch.zeros(batch, seq_len, dtype=torch.long),
            attention_mask=torch.ones(batch, seq_len, dtype=torch.long),
            pixel_values=torch.zeros(batch, 3, size, size),
            pixel_mask=torch.ones(batch, size, size, dtype=torch.long),
            return_loss=True,
        ).loss

    return _count(lambda: BridgeTowerForContrastiveLearning(config), step)


def volo(model_name: str = "volo_d5", img_size: int = 224, kwargs: dict | None = None) -> float:
    """timm's VOLO as run_volo.py builds it, class and token-label (aux) heads both trained."""
    from reprokit_trainers.volo import run_volo

    args = run_volo.ModelArguments(
        model_name_or_path=model_name, model_kwargs_json=json.dumps(kwargs) if kwargs else None
    )

    def step(model, batch):
        outputs = model(torch.zeros(batch, 3, img_size, img_size))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return sum(o.float().sum() for o in outputs if isinstance(o, torch.Tensor))

    return _count(lambda: run_volo.build_model(args, img_size)[0], step)


def vit(size: str = "b16", img_size: int = 224, **switches) -> float:
    """The pycls ViT of run_vit.py (classifier and layout switches change the count slightly)."""
    from reprokit_trainers.vit.model import build_vit

    def step(model, batch):
        return model(torch.zeros(batch, 3, img_size, img_size)).sum()

    return _count(lambda: build_vit(size, {"image_size": img_size}, **switches), step)
