"""A rung of the ViT ladder, rehearsed: run_vit.py's parser, precision, loader and batch for real
on the CPU, then its model (in the rung's dtype), optimizer and two steps of train()'s forward, loss,
backward and step on the fake device, at the published size; DDP's buckets or FSDP's low-precision
copies counted beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.data import imagenet
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.record import software
from reprokit_trainers.rehearsal import plan
from reprokit_trainers.rehearsal.fakedevice import FakeDevice, estimate, trainable_bytes
from reprokit_trainers.rehearsal.plan import Prepared, economy_note, shrink_image_data
from reprokit_trainers.vit import run_vit as trainer

# Beside the image trainers' own: the input pipeline (what it hands over is in the device step's key,
# see plan.handed_over) and torch.compile (not run here: said for each cell by its prepare).
HOST_ONLY = (*plan.IMAGE_HOST_ONLY, "input_pipeline", "compile")
CPU = torch.device("cpu")


def prepare(argv: list[str], scratch: Path, workers_cap: int) -> Prepared:
    """Steps 1-3 of main() that touch no device: parse, precision, choices, the loader's first batch,
    made ready for the model as train() does (normalized on the device for the uint8 path)."""
    model_args, data_args, train_args, device_args = trainer.parse_args(argv)
    lifecycle.set_tf32(trainer.PROG, device_args.tf32)
    trainer.check_choice("sharding", train_args.sharding, trainer.SHARDINGS)
    prec = trainer.precision(train_args.amp)
    size = trainer.model_size(model_args)
    ran = [f"arguments: {trainer.PROG}'s parser; amp {prec.mode}, sharding {train_args.sharding}"]
    batch = train_args.per_device_train_batch_size
    economy = shrink_image_data(data_args, workers_cap)
    loader, data_info = trainer.build_loader(data_args, model_args.img_size, batch, train_args.seed)
    raw = plan.first_batch(loader)
    pixels = raw["pixel_values"]
    path = trainer.data_path(loader, pixels)
    if pixels.dtype == torch.uint8:
        images = imagenet.DeviceNormalize(CPU, re_prob=0.0)(pixels).to(prec.model_dtype)
    else:
        images = pixels.to(prec.model_dtype)
    ran.append(f"loader: one batch of {batch} by the {path} data path ({data_info['data']} data)")
    skipped = []
    if train_args.compile:
        skipped.append("torch.compile: not run here (inductor needs a compiler); the memory is eager's")
    return Prepared(
        trainer="vit",
        parsed=(model_args, data_args, train_args, device_args),
        data={"images": images, "labels": raw["labels"], "precision": prec, "size": size},
        ran=ran,
        notes=[economy_note(economy)],
        skipped=skipped,
        batch=batch,
        image_size=model_args.img_size,
        precision="fp32" if prec.mode == "no" else prec.mode,
    )


def _wrapper_bytes(model: torch.nn.Module, train_args: Any, prec: Any) -> tuple[dict[str, int], str]:
    """What DDP or FSDP holds beside the model on one rank, and how it is counted."""
    if train_args.sharding == "ddp":
        return {
            "DDP gradient buckets": trainable_bytes(model)
        }, "DDP: its buckets counted as the gradients' size"
    if prec.autocast_dtype is None:
        return {}, "FSDP: one rank (NO_SHARD), full precision: nothing beside the flat parameters"
    low = sum(p.numel() for p in model.parameters()) * torch.finfo(prec.autocast_dtype).bits // 8
    return (
        {"FSDP low-precision parameters": low, "FSDP low-precision gradients": low},
        "FSDP: one rank (NO_SHARD); its mixed-precision copies of the parameters and gradients counted",
    )


def device_step(prepared: Prepared, device: FakeDevice) -> dict[str, Any]:
    model_args, _, train_args, _ = prepared.parsed
    prec = prepared.data["precision"]
    ran, skipped = [], []
    with device.on():
        model = trainer.build_model(model_args).to(dtype=prec.model_dtype)
        parameters = sum(p.numel() for p in model.parameters())
        ran.append(
            f"model: pycls ViT-{prepared.data['size']} at {model_args.img_size}px, {parameters / 1e6:.1f}M "
            f"parameters in {str(prec.model_dtype).removeprefix('torch.')}"
        )
        optimizer = trainer.build_optimizer(model, train_args, prec)
        ran.append(f"optimizer: {software.optimizer(optimizer)}")
        images = device.put(prepared.data["images"])
        labels = device.put(prepared.data["labels"])
        for _ in range(2):  # the second step holds the optimizer's state from the first
            with prec.autocast(CPU):
                logits = model(images)
            loss = trainer.pycls_loss(logits, labels, train_args.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            del logits, loss
    ran.append(f"2 steps: forward in {prepared.precision}, pycls's loss, backward, optimizer step")
    extra, how = _wrapper_bytes(model, train_args, prec)
    skipped.append(f"{how}; the wrapper itself is not run (one rank, no collective)")
    if prec.loss_scaling:
        skipped.append("GradScaler: the loss is not scaled (its inf check reads a value back)")
    return {
        "ran": ran,
        "skipped": skipped,
        "parameters": parameters,
        "memory": estimate(device.live.peak, extra),
    }
