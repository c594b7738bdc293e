"""VOLO's cell, rehearsed: run_volo.py's parser and checks, its loader and device-side batch
preparation for real on the CPU (RandAugment, token-label RoIAlign, random erasing; nvJPEG's path
through the same decoder on the CPU), then its model, finetune load, optimizer, MixToken forward,
token-label loss, backward and AdamW step on the fake device, at the published size.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.data import imagenet
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.record import software
from reprokit_trainers.rehearsal import plan
from reprokit_trainers.rehearsal.fakedevice import FakeDevice, estimate, trainable_bytes
from reprokit_trainers.rehearsal.plan import Prepared, economy_note, shrink_image_data
from reprokit_trainers.volo import run_volo as trainer
from reprokit_trainers.volo import tokenlabel

# Beside the image trainers' own: the loader (what it hands over is in the device step's key, see
# plan.handed_over) and DDP's schedule (one rank here: said for each cell by its prepare).
HOST_ONLY = (*plan.IMAGE_HOST_ONLY, "save_checkpoint", "loader", "ddp_schedule")
CPU = torch.device("cpu")


def _checks(model_args: Any, data_args: Any, train_args: Any) -> tuple[int, int, list[str]]:
    """setup()'s checks, in its order; a loader that needs CUDA is said, not refused (the rehearsal
    runs its decoder on the CPU)."""
    skipped = []
    _, named_size = trainer.parse_model_name(model_args.model_name_or_path)
    img_size = model_args.img_size or named_size or 224
    label_size = data_args.token_label_size or tokenlabel.token_grid(img_size)
    tokenlabel.check_token_label_size(img_size, label_size)
    if not data_args.token_label:
        raise ValueError("run_volo.py trains with token labeling only, as every published VOLO command does")
    trainer.check_augmentation(data_args)
    if data_args.loader == "gpu_decode" and not torch.cuda.is_available():
        skipped.append("gpu_decode's check for a CUDA device (its decoder runs on the CPU here)")
    else:
        trainer.check_loader(data_args.loader)
    trainer.check_kernels(model_args, data_args, train_args)
    trainer.amp_settings(train_args)
    return img_size, label_size, skipped


def prepare(argv: list[str], scratch: Path, workers_cap: int) -> Prepared:
    """Steps 1 and 3 of main(): parse, check, build the data; one batch prepared as train_loop does
    before the forward (decode on the device for gpu_decode, normalize and erase, token targets)."""
    model_args, data_args, train_args, device_args = trainer.parse_args(argv)
    lifecycle.set_tf32(trainer.PROG, device_args.tf32)
    ran = [f"arguments: {trainer.PROG}'s parser"]
    img_size, label_size, skipped = _checks(model_args, data_args, train_args)
    ran.append(
        f"checks: model name, token grid {label_size} at {img_size}, RandAugment, loader, kernels, amp"
    )
    batch = train_args.per_device_train_batch_size
    economy = shrink_image_data(data_args, workers_cap)
    if data_args.loader == "dali":
        raise ValueError("--loader dali: not rehearsed (the node has no DALI; the slice leaves the cell out)")
    loader, data_info = trainer.build_data(data_args, img_size, label_size, batch, train_args.seed)
    raw = plan.first_batch(loader)
    ran.append(f"loader: one batch of {batch} from the {data_args.loader} loader ({data_info['data']} data)")
    if data_args.loader == "gpu_decode":
        decode = imagenet.GpuDecode(
            img_size, CPU, data_args.policy(), data_args.train_interpolation, seed=train_args.seed
        )
        images = decode(raw["jpeg"], raw["crop_box"], raw["flipped"], raw["source"])
        ran.append("gpu_decode: the device decoder, RandAugment on tensors and the resized crop, on the CPU")
    else:
        images = raw["pixel_values"]
    normalize = imagenet.DeviceNormalize(
        CPU, re_prob=data_args.reprob, re_mode=data_args.remode, re_count=data_args.recount
    )
    images = normalize(images)
    targets = tokenlabel.build_token_targets(
        *tokenlabel.batch_maps(raw),
        model_args.num_classes,
        label_size,
        train_args.smoothing,
        box=data_args.token_label_box,
        smoothing_form=data_args.token_label_smoothing,
    )
    ran.append("batch: normalize and random erasing, token targets by RoIAlign (on the CPU)")
    amp_mode, amp_dtype = trainer.amp_settings(train_args)
    prepared = Prepared(
        trainer="volo",
        parsed=(model_args, data_args, train_args, device_args),
        data={
            "images": images,
            "targets": targets,
            "img_size": img_size,
            "label_size": label_size,
            "amp": (amp_mode, amp_dtype),
            "loader": loader,
            "data_info": data_info,
        },
        ran=ran,
        notes=[economy_note(economy)],
        skipped=[
            *skipped,
            f"--ddp_schedule {train_args.ddp_schedule}: not run here (one rank, no all-reduce)",
        ],
        batch=batch,
        image_size=img_size,
        precision="fp32" if amp_mode == "no" else amp_mode,
    )
    if train_args.save_checkpoint:
        write_checkpoint(prepared, Path(train_args.output_dir))
        prepared.ran.append("checkpoint: save_checkpoint's file, on the meta device (what a finetune loads)")
    return prepared


def write_checkpoint(prepared: Prepared, run_dir: Path) -> Path:
    """What save_checkpoint() writes, on the meta device (shapes, no weights): a finetune cell's
    rehearsal loads it through load_finetune as it would load the real one."""
    model_args, _, train_args, _ = prepared.parsed
    with torch.device("meta"):
        model, architecture = trainer.build_model(model_args, prepared.data["img_size"])
    setup = trainer.Setup(
        model,
        architecture,
        prepared.data["img_size"],
        prepared.data["label_size"],
        *prepared.data["amp"],
        prepared.data["loader"],
        prepared.data["data_info"],
        {},
        None,
    )
    return trainer.save_checkpoint(setup, model_args, replace(train_args, output_dir=str(run_dir)), 0)


def device_step(prepared: Prepared, device: FakeDevice) -> dict[str, Any]:
    """The model (and a finetune's load), DDP's buckets, timm's AdamW and two steps of train_loop's
    forward, loss, backward and step, on the fake device."""
    model_args, data_args, train_args, _ = prepared.parsed
    amp_mode, amp_dtype = prepared.data["amp"]
    ran, skipped = [], []
    with device.on():
        model, _ = trainer.build_model(model_args, prepared.data["img_size"])
        parameters = sum(p.numel() for p in model.parameters())
        ran.append(f"model: timm VOLO {model_args.model_name_or_path}, {parameters / 1e6:.1f}M parameters")
        if model_args.finetune:
            info = trainer.load_finetune(model, model_args.finetune)
            ran.append(f"finetune: load_finetune, pos_embed {info['pos_embed_resized']}")
        forward = tokenlabel.MixTokenForward(model, train_args.mix_token, seed=train_args.seed)
        forward.train()
        optimizer = trainer.build_optimizer(model, train_args, train_args.lr)
        trainer.build_scheduler(optimizer, train_args)
        ran.append(f"optimizer: timm's AdamW ({software.optimizer(optimizer)}) and the cosine schedule")
        loss_fn = tokenlabel.TokenLabelLoss(
            train_args.dense_weight, train_args.cls_weight, train_args.ground_truth
        )
        images = device.put(prepared.data["images"])
        targets = prepared.data["targets"]
        targets = tokenlabel.TokenTargets(*(device.put(t) for t in (targets.gt, targets.cls, targets.dense)))
        autocast = torch.autocast("cpu", dtype=amp_dtype, enabled=amp_dtype is not None)
        for _ in range(2):  # the second step holds AdamW's state from the first
            with autocast:
                cls_logits, dense_logits, box = forward(images)
            loss = loss_fn(cls_logits, dense_logits, box, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if train_args.clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_args.clip_grad)
            optimizer.step()
            del cls_logits, dense_logits, loss
    ran.append(f"2 steps: MixToken forward in {prepared.precision}, token-label loss, backward, AdamW step")
    skipped.append("GradScaler: the loss is not scaled (its inf check reads a value back)")
    extra = {"DDP gradient buckets": trainable_bytes(model)}
    skipped.append("DDP: one rank's all-reduce not run; its buckets counted as the gradients' size")
    return {
        "ran": ran,
        "skipped": skipped,
        "parameters": parameters,
        "memory": estimate(device.live.peak, extra),
    }
