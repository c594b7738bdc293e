"""What records a BridgeTower run beside its training: the departures from the publication, the
switches in effect, the attention kernels watched on the first forward, the software read back from
the Trainer, the FLOPs of one sample and the MFU, and summary.json (run_bridgetower.py's last step).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning, Trainer, TrainingArguments

from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.process.distributed import destroy_process_group
from reprokit_trainers.common.record import software, trainer_summary
from reprokit_trainers.common.record.rundir import QUALITY, THROUGHPUT, RunDir

if typing.TYPE_CHECKING:
    from .run_bridgetower import (
        BenchmarkArguments,
        DataTrainingArguments,
        ModelArguments,
        Platform,
        Sources,
    )


@dataclass(frozen=True)
class Built:
    """What the run trains and where each part came from: the hub's, the given cache's, or the
    offline stand-in (offline.py), with why it fell back."""

    model_source: str
    model_fallback: str | None
    tokenizer_source: str
    data_source: str
    data_fallback: str | None
    model_parameters: int
    trained_parameters: int
    image_size: int


def count_parameters(config: BridgeTowerConfig) -> int:
    """Parameters of the model ``config`` builds, without allocating them (meta device)."""
    with torch.device("meta"):
        model = BridgeTowerForContrastiveLearning(config)
    return sum(p.numel() for p in model.parameters())


def flops_per_sample(
    config: BridgeTowerConfig,
    seq_len: int = 128,
    prepare: Callable[[BridgeTowerForContrastiveLearning], None] | None = None,
) -> float:
    """FLOPs of one training sample (forward and backward, contrastive loss) of the model ``config``
    builds, prepared by ``prepare`` as the run prepares it (frozen encoders need no weight gradients).

    Captions are padded to ``max_seq_length`` (``seq_len``), so every sample costs the same.
    """
    size = config.vision_config.image_size

    def build() -> BridgeTowerForContrastiveLearning:
        model = BridgeTowerForContrastiveLearning(config)
        if prepare is not None:
            prepare(model)
        return model

    def step(model: BridgeTowerForContrastiveLearning, batch: int) -> torch.Tensor:
        return model(
            input_ids=torch.zeros(batch, seq_len, dtype=torch.long),
            attention_mask=torch.ones(batch, seq_len, dtype=torch.long),
            pixel_values=torch.zeros(batch, 3, size, size),
            pixel_mask=torch.ones(batch, size, size, dtype=torch.long),
            return_loss=True,
        ).loss

    return flops.count_training_flops(build, step)


def departures(run_dir: RunDir, data_args: DataTrainingArguments, built: Built) -> None:
    """What this run uses other than the publication's checkpoint, tokenizer and data."""
    if built.model_source == "random":
        run_dir.depart("random weights", QUALITY)
        if built.model_fallback != "--random_init":
            run_dir.depart(
                "model fallback: the checkpoint could not be loaded (model_fallback_reason)", QUALITY
            )
    if built.tokenizer_source != "hub":
        # Captions are padded to max_seq_length whatever the vocabulary: the step's shapes are the same.
        run_dir.depart("offline tokenizer", QUALITY)
    if built.data_source == "synthetic":
        run_dir.depart("synthetic data", THROUGHPUT)
        if not data_args.synthetic_data and data_args.dataset_name:
            run_dir.depart(
                f"data fallback: {data_args.dataset_name} could not be loaded (data_fallback_reason)",
                THROUGHPUT,
            )


def distribution_in_effect(bench: BenchmarkArguments, training_args: TrainingArguments) -> str:
    """How gradients were reduced: one process reduces nothing, whatever was asked."""
    if training_args.world_size <= 1:
        return "none (one process)"
    return getattr(training_args, "distribution_strategy", None) or bench.distribution_strategy


def switches(bench: BenchmarkArguments, training_args: TrainingArguments, mediapipe: bool) -> dict[str, Any]:
    """What was in effect, beside what was asked (the host compares the two)."""
    return {
        "mediapipe": mediapipe,
        "loader": "mediapipe" if mediapipe else "torch",
        "image_pipeline": "mediapipe" if mediapipe else bench.image_pipeline,
        # The example's HPU loader starts no torch workers: the flag only sizes a CPU fallback it never takes.
        "dataloader_num_workers": 0 if mediapipe else training_args.dataloader_num_workers,
        "distribution_strategy": distribution_in_effect(bench, training_args),
        "torch_compile": bool(training_args.torch_compile),
    }


@dataclass
class Watched:
    """The attention modules watched on the first training forward, or why none could be."""

    watches: dict[str, software.FirstCallWatch]
    why_unread: str


def watch_attention(
    model: BridgeTowerForContrastiveLearning, training_args: TrainingArguments, on_gaudi: bool
) -> Watched:
    """Watch the first training forward of the first text layer's attention (transformers' own:
    matmul, softmax, matmul) and of the first vision block's (torch's nn.MultiheadAttention). Dispatch
    is watched in eager PyTorch only: HPU lazy mode and compiled graphs run elsewhere (on a Gaudi only
    the mixed precision they run under is read; compiled, nothing)."""
    why_unread = "torch.compile" if training_args.torch_compile else "HPU lazy mode" if on_gaudi else ""
    if training_args.torch_compile:
        return Watched({}, why_unread)
    towers, dispatch = model.bridgetower, not on_gaudi
    return Watched(
        {
            "text": software.FirstCallWatch(towers.text_model.encoder.layer[0].attention, dispatch),
            "vision": software.FirstCallWatch(
                towers.vision_model.visual.transformer.resblocks[0].attn, dispatch
            ),
        },
        why_unread,
    )


def software_in_effect(trainer: Trainer, watched: Watched, switches: dict[str, Any]) -> dict[str, str | None]:
    """summary.json's software block, read back from what ran (common/record/software.py): the attention
    kernels and the mixed precision of the first forward, the optimizer the Trainer built, how
    gradients were reduced, TF32 as torch has it, and the image path in effect."""
    watches = watched.watches
    attention = mixed = f"not read ({watched.why_unread})"
    if watches:
        mixed = watches["text"].mixed_precision or mixed
        if watches["text"].dispatch:
            attention = ", ".join(f"{tower} {watch.attention}" for tower, watch in watches.items())
    if switches["distribution_strategy"] == "fast_ddp":
        ddp = "fast_ddp"  # no DDP wrapper to read: optimum-habana reduces all gradients in one buffer
    else:
        ddp = software.ddp(trainer.model_wrapped)
    return {
        "attention": attention,
        "optimizer": software.optimizer(trainer.optimizer) if trainer.optimizer is not None else None,
        "ddp": ddp,
        "tf32": software.tf32(trainer.args.device.type),
        "mixed_precision": mixed,
        "data_path": switches["image_pipeline"],
        # The Trainer checks each step's loss for NaN and inf on the host (logging_nan_inf_filter, on by
        # default in 4.31 as now): the wait every step that the GPU runs had.
        "host_sync": software.EVERY_STEP if trainer.args.logging_nan_inf_filter else software.LOGGING_STEPS,
        "zero_grad": getattr(trainer, "zero_grad_left", None),
    }


def mfu_precision(software: dict[str, str | None], training_args: TrainingArguments) -> str:
    """The precision the matmuls ran in, for the MFU's peak: the mixed precision read from the first
    forward, or, where it could not be read (HPU lazy mode, torch.compile), the one asked for."""
    mixed = software["mixed_precision"] or ""
    if mixed.startswith("not read"):
        mixed = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"
    return flops.matmul_precision(mixed, software["tf32"] in ("on", "matmul only"))


def write_summary(
    run_dir: RunDir,
    trainer: Trainer,
    throughput: Any,
    metrics: tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None],
    parsed: tuple[ModelArguments, DataTrainingArguments, BenchmarkArguments, TrainingArguments, Platform],
    built: Built,
    sources: Sources,
    switches: dict[str, Any],
    watched: Watched,
    sample_flops: float | None,
    num_examples: int,
) -> dict[str, Any] | None:
    """summary.json, last: each definition's figure (``throughput``: the meter's callback,
    throughput.throughput_callback), the Trainer's own metrics (``metrics``: train, eval, test), what the
    run was built from, the switches and software in effect, FLOPs and MFU."""
    model_args, data_args, bench, training_args, platform = parsed
    train_metrics, eval_metrics, test_metrics = metrics
    ran = software_in_effect(trainer, watched, switches)
    summary = run_dir.write_summary(
        throughput.meter,
        status="ok",
        **trainer_summary.fields(throughput, parsed, (train_metrics, eval_metrics), built, num_examples),
        test_metrics=test_metrics,
        model_parameters=built.model_parameters,
        trained_parameters=built.trained_parameters,
        tokenizer_source=built.tokenizer_source,
        cache_dir=sources.given_cache,
        cache_read_through=model_args.cache_dir if model_args.cache_dir != sources.given_cache else None,
        max_seq_length=data_args.max_seq_length,
        image_size=built.image_size,
        optim=str(
            training_args.optim.value if hasattr(training_args.optim, "value") else training_args.optim
        ),
        software=ran,
        **switches,
        **flops.summary_fields(
            sample_flops,
            throughput.meter.samples_per_second,
            training_args.world_size,
            bench.device_peak_tflops,
            mfu_precision(ran, training_args),
        ),
    )
    # The ranks leave together, as the other trainers do: one that exits while its peer's gloo is
    # still tearing down aborts that peer (std::terminate) after the summary is written.
    destroy_process_group()
    return summary
