"""BridgeTower's cell, rehearsed: run_bridgetower.py's own parser, model, tokenizer, data, Trainer,
optimizer and training step, at the published architecture, batch and resolution.

The data path runs for real on the CPU (synthetic rows, tokenized, one batch through the Trainer's own
loader and, for gpu_decode, the device decode on the CPU); the model, the Trainer's optimizer and two
training steps (accelerate's autocast, backward, the optimizer's step) run on the fake device.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from reprokit_trainers.bridgetower import offline
from reprokit_trainers.bridgetower import run_bridgetower as trainer
from reprokit_trainers.common.measure.hf_trainer import StepSamples
from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.record import software
from reprokit_trainers.rehearsal import plan, trainer_steps
from reprokit_trainers.rehearsal.fakedevice import FakeDevice
from reprokit_trainers.rehearsal.plan import Prepared, economy_note

# Beside the trainers' own: the eval and test rows, the images' variety, and torch.compile (not run
# here: said for each cell by its prepare; the memory is eager's).
HOST_ONLY = (*plan.HOST_ONLY, "synthetic_num_eval", "synthetic_num_test", "synthetic_unique_images",
             "torch_compile", "torch_compile_backend", "torch_compile_mode")  # fmt: skip


def prepare(argv: list[str], scratch: Path, workers_cap: int) -> Prepared:
    """Parse, build the data and draw one batch, as main() steps 1 and 5 do."""
    model_args, data_args, bench, training_args, platform = trainer.parse_args(argv)
    trainer.setup_logging(training_args)
    trainer.logger.setLevel(
        logging.ERROR
    )  # its offline fallbacks, said once per cell, are the rehearsal's plan
    lifecycle.set_tf32(trainer.PROG, platform.tf32)
    ran = [f"arguments: {trainer.PROG}'s parser (TrainingArguments included)"]
    notes = []
    # The rows a rehearsal needs: one batch; the Trainer's loader with at most `workers_cap` workers.
    batch = training_args.per_device_train_batch_size
    economy = {
        "synthetic_num_train": (data_args.synthetic_num_train, batch),
        "synthetic_unique_images": (data_args.synthetic_unique_images, min(8, batch)),
        "dataloader_num_workers": (
            training_args.dataloader_num_workers,
            min(training_args.dataloader_num_workers, workers_cap),
        ),
    }
    data_args.synthetic_num_train = economy["synthetic_num_train"][1]
    data_args.synthetic_num_eval = data_args.synthetic_num_test = 2
    data_args.synthetic_unique_images = economy["synthetic_unique_images"][1]
    training_args.dataloader_num_workers = economy["dataloader_num_workers"][1]
    if training_args.dataloader_num_workers > 0:  # one batch taken: one drawn ahead (plan.first_batch)
        economy["dataloader_prefetch_factor"] = (training_args.dataloader_prefetch_factor, 1)
        training_args.dataloader_prefetch_factor = 1
    notes.append(economy_note(economy))
    os.environ["HF_DATASETS_CACHE"] = str(scratch / "datasets")
    tokenizer, _ = trainer.load_tokenizer(model_args, trainer.Sources(cache_only=True))
    config = offline.build_config(model_args.model_config_json or "{}")
    image_size = config.vision_config.image_size
    splits, source, _ = trainer.load_splits(
        model_args,
        data_args,
        bench,
        training_args,
        tokenizer,
        image_size,
        data_args.mediapipe_dataloader,
        trainer.Sources(cache_only=True),
    )
    ran.append(
        f"data: {source} rows tokenized to {data_args.max_seq_length}, image path {bench.image_pipeline}"
    )
    skipped = []
    if training_args.torch_compile:
        skipped.append("torch.compile: not run here (inductor needs a compiler); the memory is eager's")
    return Prepared(
        trainer="bridgetower",
        parsed=(model_args, data_args, bench, training_args, platform),
        data={"splits": splits, "image_size": image_size, "config": config},
        ran=ran,
        notes=notes,
        skipped=skipped,
        batch=batch,
        image_size=image_size,
        precision="bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32",
    )


def _trainer_class(bench: Any, image_size: int) -> type:
    """The trainer class main() builds (counting rows, decoding on the device for gpu_decode), less
    its move of the model to the device: the model is built on the fake device already."""

    class OnFakeDevice(trainer.Trainer):
        def _move_model_to_device(self, model: Any, device: Any) -> None:
            return None

    return trainer.trainer_class(
        OnFakeDevice, StepSamples(1), bench.image_pipeline == "gpu_decode", image_size
    )


def device_step(prepared: Prepared, device: FakeDevice) -> dict[str, Any]:
    """The model, the Trainer's optimizer and two training steps on the fake device."""
    model_args, data_args, bench, training_args, _ = prepared.parsed
    splits, image_size = prepared.data["splits"], prepared.data["image_size"]
    ran, skipped = [], []
    with device.on():
        model, source, _ = trainer.load_model(model_args, trainer.Sources(cache_only=True))
        trainer.prepare_model(model, model_args)
        parameters = sum(p.numel() for p in model.parameters())
        ran.append(
            f"model: BridgeTowerForContrastiveLearning ({source} weights), {parameters / 1e6:.1f}M parameters"
        )
        built = _trainer_class(bench, image_size)(
            model=model,
            args=training_args,
            train_dataset=splits.get("train"),
            data_collator=trainer.collate_fn,
        )
        built.create_optimizer()
        ran.append(f"optimizer: the Trainer's ({software.optimizer(built.optimizer)})")
        wrapped = built.accelerator.prepare_model(built.model)
    # The loader and the device decode run for real (a fake tensor has no bytes to decode).
    batch = next(iter(built.get_train_dataloader()))
    batch = built._prepare_inputs(batch)
    ran.append(
        f"loader: one batch of {len(batch['input_ids'])} through the Trainer's DataLoader"
        + (" and the device decode (on the CPU)" if bench.image_pipeline == "gpu_decode" else "")
    )
    return trainer_steps.two_steps(
        built, wrapped, batch, device, prepared.precision, (ran, skipped, parameters)
    )
