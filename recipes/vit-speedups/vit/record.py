"""What records a ViT run beside its training: the departures from the publication, the software
read back from what ran, the MFU, and summary.json (run_vit.py's last step). The FLOPs of one sample
are counted by run_vit.flops_per_sample and the attention kernels read by run_vit.attention_in_effect,
beside the model they build.
"""

from __future__ import annotations

import typing
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.steps import StepLogger
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.process.args import DeviceArguments
from reprokit_trainers.common.record import software
from reprokit_trainers.common.record.rundir import QUALITY, THROUGHPUT, RunDir

if typing.TYPE_CHECKING:
    from .run_vit import DataArguments, ModelArguments, Precision, TrainArguments


def departures(
    run_dir: RunDir, data_info: dict[str, Any], optimizer: torch.optim.Optimizer, train_args: TrainArguments
) -> None:
    """What this run does other than the publication: synthetic data, and an AdamW eps the optimizer
    could not keep."""
    if data_info["data"] == "synthetic":
        run_dir.depart("synthetic data", THROUGHPUT)
    eps = optimizer.defaults.get("eps")
    if eps is not None and eps != train_args.adam_epsilon:
        run_dir.depart(
            f"AdamW eps {eps:g} instead of {train_args.adam_epsilon:g} (fp16 arithmetic, not fused)", QUALITY
        )


def software_in_effect(
    attention: str,
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    device: torch.device,
    train_args: TrainArguments,
    seen: dict[str, str],
) -> dict[str, str]:
    """What ran, read back from the dispatcher, the objects and the first step (recipes compare it)."""
    return {
        "attention": attention,
        "optimizer": software.optimizer(optimizer),
        "ddp": software.ddp(model),
        "tf32": software.tf32(device.type),
        "host_sync": software.EVERY_STEP if train_args.host_sync == "every_step" else software.LOGGING_STEPS,
        **seen,
    }


def write_summary(
    logger: StepLogger,
    parsed: tuple[ModelArguments, DataArguments, TrainArguments, DeviceArguments],
    sample_flops: float | None,
    prec: Precision,
    tf32: dict[str, Any],
    ran: dict[str, str],
    size: str,
    parameters: int,
    global_batch: int,
    optimizer: torch.optim.Optimizer,
    loader: torch.utils.data.DataLoader,
    data_info: dict[str, Any],
) -> dict[str, Any] | None:
    """summary.json, last (common/process/lifecycle.finish): the rung that ran, the software read back
    (``ran``), the switches in effect, the data, and the MFU over the peak of the precision the
    matmuls ran in."""
    model_args, data_args, train_args, _ = parsed
    return lifecycle.finish(
        logger,
        parsed,
        sample_flops,
        flops.matmul_precision(ran.get("mixed_precision") or prec.mode, tf32["tf32_matmul"]),
        model=model_args.model_name_or_path,
        model_size=size,
        parameters=parameters,
        img_size=model_args.img_size,
        classifier=model_args.classifier,
        layout=model_args.layout,
        attention=model_args.attention,
        input_pipeline=data_args.input_pipeline,
        software=ran,
        amp=prec.mode,
        optimizer=train_args.optimizer,
        optimizer_impl=train_args.optimizer_impl,
        optimizer_eps=optimizer.defaults.get("eps"),
        sharding=train_args.sharding,
        compile=train_args.compile,
        # The switches the host compares with what the cell asked (reprokit/judge/verdicts.py).
        torch_compile=train_args.compile,
        loader="torch",
        tf32=tf32["tf32_matmul"],
        precision=tf32,
        process_group_backend=dist.get_backend(),
        per_device_train_batch_size=train_args.per_device_train_batch_size,
        global_batch_size=global_batch,
        dataloader_num_workers=data_args.dataloader_num_workers,
        steps_per_epoch=len(loader),
        **data_info,
    )
