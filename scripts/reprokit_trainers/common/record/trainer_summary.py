"""summary.json's fields for a run of transformers' Trainer (or optimum-habana's GaudiTrainer), whatever
model it trains: the figure by each throughput definition with the Trainer's own metrics and batch, and
where the model and the data came from. Each publication's record.py writes its own beside these."""

from __future__ import annotations

from typing import Any

from reprokit_trainers.common.measure.hf_trainer import definitions


def trainer_name(on_gaudi: bool) -> str:
    return "GaudiTrainer" if on_gaudi else "Trainer"


def global_batch(training_args: Any) -> int:
    """Samples per optimizer step, all devices."""
    return (
        training_args.per_device_train_batch_size
        * training_args.world_size
        * training_args.gradient_accumulation_steps
    )


def fields(
    throughput: Any,
    parsed: tuple[Any, ...],
    metrics: tuple[dict[str, Any], dict[str, Any] | None],
    built: Any,
    num_examples: int,
) -> dict[str, Any]:
    """What every Trainer run's summary holds. ``throughput``: the meter's Trainer callback (its meter and
    the last logs); ``parsed``: the trainer's (model, data, benchmark, training arguments, platform);
    ``metrics``: the Trainer's train and eval metrics; ``built``: where the model and the data came from
    (its model_source, model_fallback, data_source and data_fallback).

    Each throughput definition's figure (common/measure/hf_trainer.py's) and the Trainer's own figure as
    it reported it (the whole run on transformers, after its warm-up steps on Gaudi: the definitions say
    which), the batch it stepped with, the checkpoint and the dataset asked for and where each came from
    (a revision only where the hub gave it)."""
    model_args, data_args, _, training_args, platform = parsed
    train_metrics, eval_metrics = metrics
    name = trainer_name(platform.on_gaudi)
    batch = global_batch(training_args)
    return {
        "throughput": definitions(
            throughput.meter,
            name,
            train_metrics,
            num_examples=num_examples,
            num_train_epochs=training_args.num_train_epochs,
            max_steps=training_args.max_steps,
            global_batch=batch,
        ),
        "train_samples_per_second": train_metrics.get("train_samples_per_second"),
        "trainer_metrics": train_metrics,
        "eval_metrics": eval_metrics,
        "final_loss": throughput.last_logs.get("loss"),
        "model": model_args.model_name_or_path,
        "model_revision": model_args.model_revision if built.model_source == "hub" else None,
        "model_source": built.model_source,
        "model_fallback_reason": built.model_fallback,
        "data_source": built.data_source,
        "data_fallback_reason": built.data_fallback,
        "dataset": data_args.dataset_name,
        "dataset_revision": data_args.dataset_revision if built.data_source == "hub" else None,
        "trainer": name,
        "gaudi_config": platform.gaudi_config.summary() if platform.gaudi_config else None,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        "global_batch_size": batch,
        "bf16": training_args.bf16,
    }
