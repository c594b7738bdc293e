"""What records a VOLO run beside its training: the departures from the publication, the software
read back from what ran, the MFU, and summary.json (run_volo.py's last step). The FLOPs of one sample
are counted by run_volo.flops_per_sample, beside the model it builds.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.steps import StepLogger
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.process.args import DeviceArguments
from reprokit_trainers.common.record import software
from reprokit_trainers.common.record.rundir import QUALITY, THROUGHPUT, RunDir

from .attention import attention_ran

if typing.TYPE_CHECKING:
    from reprokit_trainers.common.data.prefetch import Prefetcher

    from .run_volo import DataArguments, ModelArguments, Setup, TrainArguments, Trained


def pretraining_departure(info: dict[str, Any] | None) -> str | None:
    """The departure of finetuning from the kit's own short pretraining run, where the publication
    finetuned its fully pretrained weights; None for full pretraining (or weights from elsewhere)."""
    if not info or (info["schedule_completed"] and info["data"] != "synthetic"):
        return None
    how = "" if info["schedule_completed"] else f" for {info['steps']} steps"
    data = " on synthetic data" if info["data"] == "synthetic" else ""
    return f"finetuned from weights pretrained{how}{data}, not the published pretrained weights"


def departures(run_dir: RunDir, run: Setup, data_args: DataArguments) -> None:
    """What this run does other than the publication: the host's verdict is then not comparable."""
    if run.data_info["data"] == "synthetic":
        run_dir.depart("synthetic data", THROUGHPUT)
    if not data_args.token_label_data:
        # Made in memory instead of read and decoded from the label files: less work per sample.
        run_dir.depart("synthetic token labels (no NFNet-F6 label maps given)", THROUGHPUT)
    finetuned_from = pretraining_departure(run.finetuned.get("pretraining"))
    if finetuned_from:
        # The weights a finetune starts from change what it learns, not how fast a step runs.
        run_dir.depart(finetuned_from, QUALITY)
    for reason in getattr(run.loader, "departures", ()):  # what the DALI loader does unlike timm
        run_dir.depart(reason, THROUGHPUT)
    # The toolbox's choices change the targets the model learns from, not the cost of a step.
    if data_args.token_label_box != "toolbox":
        run_dir.depart(
            "token-label crop box corrected, where the published runs used the toolbox's (x and y swapped)",
            QUALITY,
        )
    if data_args.token_label_smoothing != "toolbox":
        run_dir.depart(
            "token targets smoothed as a convex mix, where the toolbox smooths p(1-s+s/C)+s/C", QUALITY
        )


def data_path(run: Setup) -> str:
    """The loader that ran, from what was built: Pillow in DataLoader workers (main.py's), nvJPEG on
    the device, or a DALI pipeline."""
    if run.gpu_decode is not None:
        return "gpu-decode"
    if "dali_device" in run.data_info:
        return "dali"
    return "pil-workers"


def software_in_effect(
    run: Setup,
    model: torch.nn.Module,
    forward: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    every_step: bool,
    zeroed: str | None,
    prefetcher: Prefetcher | None,
) -> dict[str, str | None]:
    """summary.json's software block, read back from what the loop ran (common/record/software.py):
    the attention kernels the blocks dispatched, the optimizer's kernel, how DDP reduced, TF32, the
    mixed precision, the loader, where the loop waited, what zero_grad left, where batches were made
    ready."""
    return {
        "attention": attention_ran(model),
        "optimizer": software.optimizer(optimizer),
        "ddp": software.ddp(forward),
        "tf32": software.tf32(device.type),
        "mixed_precision": software.mixed_precision(run.amp_dtype),
        "data_path": data_path(run),
        "host_sync": software.EVERY_STEP if every_step else software.LOGGING_STEPS,
        "zero_grad": zeroed,
        # DALI pipelines its batches itself; the GPU decoder runs on a stream of its own.
        "input_stream": prefetcher.ran if prefetcher is not None else data_path(run),
    }


def write_summary(
    logger: StepLogger,
    parsed: tuple[ModelArguments, DataArguments, TrainArguments, DeviceArguments],
    run: Setup,
    trained: Trained,
    sample_flops: float | None,
    lr: float,
    global_batch: int,
    tf32: dict[str, Any],
    checkpoint: Path | None,
    switches: dict[str, Any],
) -> dict[str, Any] | None:
    """summary.json, last (common/process/lifecycle.finish): what was trained and how, the software
    that ran, the switches in effect, the data and finetune provenance, and the MFU over the peak of
    the precision the matmuls ran in."""
    model_args, data_args, train_args, _ = parsed
    return lifecycle.finish(
        logger,
        parsed,
        sample_flops,
        flops.matmul_precision(run.amp_mode, tf32["tf32_matmul"]),
        model=model_args.model_name_or_path,
        img_size=run.img_size,
        token_label_size=run.label_size,
        parameters=sum(p.numel() for p in run.model.parameters()),
        per_device_train_batch_size=train_args.per_device_train_batch_size,
        global_batch_size=global_batch,
        learning_rate=lr,
        lr_base=lr * 1024 / global_batch,
        amp=run.amp_mode,
        precision=tf32,
        auto_augment=data_args.policy(),
        train_interpolation=data_args.train_interpolation,
        dataloader_num_workers=data_args.dataloader_num_workers,
        steps_per_epoch=len(run.loader),
        epochs_scheduled=trained.epochs,
        checkpoint=str(checkpoint) if checkpoint else None,
        # The kernels that ran (the host holds a published cell to its publication's), read back.
        **software.summary_fields(**trained.software),
        ddp_buckets=trained.ddp_buckets,
        token_label_box=data_args.token_label_box,
        token_label_smoothing=data_args.token_label_smoothing,
        **switches,
        **run.data_info,
        **run.finetuned,
    )
