"""What records an image-classification run beside its training: where the run points the Trainer's
logs, the departures from the publication, the FLOPs of one sample, the software read back from the
Trainer, and summary.json (run_image_classification.py's last step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import Trainer, ViTConfig, ViTForImageClassification

from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.process.distributed import destroy_process_group
from reprokit_trainers.common.record import software, trainer_summary
from reprokit_trainers.common.record.rundir import QUALITY, THROUGHPUT, RunDir


@dataclass(frozen=True)
class Built:
    """What the run trains on and where each part came from, with why it fell back."""

    model_source: str
    model_fallback: str | None
    data_source: str
    data_fallback: str | None
    parameters: int
    image_size: int
    train_rows: int


def departures(run_dir: RunDir, built: Built) -> None:
    """What this run uses other than the publication's checkpoint and data."""
    if built.model_source == "random":
        run_dir.depart("random weights", QUALITY)
        if built.model_fallback != "--random_init":
            run_dir.depart(
                "model fallback: the checkpoint could not be loaded (model_fallback_reason)", QUALITY
            )
    if built.data_source == "synthetic":
        run_dir.depart("synthetic data", THROUGHPUT)
        if built.data_fallback != "--synthetic_data":
            run_dir.depart(
                "data fallback: the dataset could not be loaded (data_fallback_reason)", THROUGHPUT
            )


def flops_per_sample(config: ViTConfig) -> float:
    """FLOPs of one training sample (forward, backward, cross-entropy) of the model ``config`` builds."""
    side = config.image_size

    def step(model: ViTForImageClassification, batch: int) -> torch.Tensor:
        pixels = torch.zeros(batch, config.num_channels, side, side)
        return model(pixel_values=pixels, labels=torch.zeros(batch, dtype=torch.long)).loss

    return flops.count_training_flops(lambda: ViTForImageClassification(config), step)


def watch_attention(model: ViTForImageClassification, on_gaudi: bool) -> software.FirstCallWatch:
    """Watch the first forward of the first encoder layer's attention (transformers' ViT picks its
    implementation by config: 4.49's SDPA where torch has it). HPU lazy mode dispatches elsewhere:
    there only the mixed precision is read."""
    return software.FirstCallWatch(model.vit.encoder.layer[0].attention, dispatch=not on_gaudi)


def software_in_effect(
    trainer: Trainer, watch: software.FirstCallWatch, on_gaudi: bool
) -> dict[str, str | None]:
    """summary.json's software block, read back from what ran (common/record/software.py)."""
    args = trainer.args
    autocast = bool(getattr(trainer, "gaudi_config", None) and trainer.gaudi_config.use_torch_autocast)
    asked = "amp-bf16" if (args.bf16 or autocast) else "fp32"
    return {
        "attention": watch.attention or ("not read (HPU lazy mode)" if on_gaudi else None),
        "optimizer": software.optimizer(trainer.optimizer) if trainer.optimizer is not None else None,
        "ddp": software.ddp(trainer.model_wrapped),
        "tf32": software.tf32(args.device.type),
        "mixed_precision": asked if on_gaudi else (watch.mixed_precision or asked),
        "data_path": "published",
        "host_sync": software.EVERY_STEP if args.logging_nan_inf_filter else software.LOGGING_STEPS,
        "zero_grad": None,
    }


def write_summary(
    run_dir: RunDir,
    trainer: Trainer,
    throughput: Any,
    metrics: tuple[dict[str, Any], dict[str, Any] | None],
    parsed: tuple[Any, ...],
    built: Built,
    sample_flops: float | None,
    watch: software.FirstCallWatch,
) -> dict[str, Any] | None:
    """summary.json, last: each definition's figure (common/measure/hf_trainer.py's), the
    Trainer's own metrics, what the run was built from, the software in effect, FLOPs and MFU."""
    model_args, data_args, bench, training_args, platform = parsed
    train_metrics, eval_metrics = metrics
    ran = software_in_effect(trainer, watch, platform.on_gaudi)
    precision = "bf16" if ran["mixed_precision"] == "amp-bf16" else "fp32"
    summary = run_dir.write_summary(
        throughput.meter,
        status="ok",
        **trainer_summary.fields(throughput, parsed, metrics, built, built.train_rows),
        model_parameters=built.parameters,
        cache_dir=model_args.cache_dir,
        image_size=built.image_size,
        dataloader_num_workers=training_args.dataloader_num_workers,
        loader="torch",
        software=ran,
        **flops.summary_fields(
            sample_flops,
            throughput.meter.samples_per_second,
            training_args.world_size,
            bench.device_peak_tflops,
            flops.matmul_precision(precision, ran["tf32"] in ("on", "matmul only")),
        ),
    )
    destroy_process_group()
    return summary
