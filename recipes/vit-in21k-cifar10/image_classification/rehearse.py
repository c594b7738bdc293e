"""The single-card cell of optimum-habana's image classification, rehearsed: run_image_classification.py's
own parser, data, transforms, model, Trainer, optimizer and training step, at the published
architecture (ViT-B/16 at 224 px), batch and precision.

The data path runs for real on the CPU (synthetic CIFAR-10 rows, the example's train transform in the
Trainer's own loader, one batch); the model, the Trainer's optimizer and two training steps
(accelerate's autocast, backward, the optimizer's step) run on the fake device.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.process import lifecycle
from reprokit_trainers.common.record import software
from reprokit_trainers.common.record.rundir import RunDir
from reprokit_trainers.image_classification import data
from reprokit_trainers.image_classification import run_image_classification as trainer
from reprokit_trainers.rehearsal import plan, trainer_steps
from reprokit_trainers.rehearsal.fakedevice import FakeDevice
from reprokit_trainers.rehearsal.plan import Prepared, economy_note

# Beside the trainers' own: the test rows, the images' variety, the held-out share (rows, not a step).
HOST_ONLY = (*plan.HOST_ONLY, "synthetic_num_test", "synthetic_unique_images", "train_val_split")


def prepare(argv: list[str], scratch: Path, workers_cap: int) -> Prepared:
    """Parse, build the data and set its transforms, as main() steps 1, 3 and 5 do."""
    parsed = trainer.parse_args(argv)
    model_args, data_args, _, training_args, platform = parsed
    lifecycle.set_tf32(trainer.PROG, platform.tf32)
    ran = [f"arguments: {trainer.PROG}'s parser (TrainingArguments included)"]
    # The rows a rehearsal needs: one batch after the held-out share; at most `workers_cap` workers.
    batch = training_args.per_device_train_batch_size
    rows = int(batch / (1 - data_args.train_val_split)) + 1
    economy = {
        "synthetic_num_train": (data_args.synthetic_num_train, min(data_args.synthetic_num_train, rows)),
        "synthetic_num_test": (data_args.synthetic_num_test, 2),
        "synthetic_unique_images": (data_args.synthetic_unique_images, min(8, batch)),
        "dataloader_num_workers": (
            training_args.dataloader_num_workers,
            min(training_args.dataloader_num_workers, workers_cap),
        ),
    }
    data_args.synthetic_num_train = economy["synthetic_num_train"][1]
    data_args.synthetic_num_test = economy["synthetic_num_test"][1]
    data_args.synthetic_unique_images = economy["synthetic_unique_images"][1]
    training_args.dataloader_num_workers = economy["dataloader_num_workers"][1]
    if training_args.dataloader_num_workers > 0:  # one batch taken: one drawn ahead (plan.first_batch)
        economy["dataloader_prefetch_factor"] = (training_args.dataloader_prefetch_factor, 1)
        training_args.dataloader_prefetch_factor = 1
    os.environ["HF_DATASETS_CACHE"] = str(scratch / "datasets")
    dataset, source, _ = trainer.load_data(model_args, data_args, training_args.seed)
    labels = dataset["train"].features[data_args.label_column_name].names
    # The image processor as step 4 makes it (the model it builds beside it is the device step's).
    with torch.device("meta"):
        _, processor, _, _ = trainer.load_model(model_args, labels)
    size = data.processor_size(processor.size)
    transform = data.train_transform(size, processor.image_mean, processor.image_std)
    dataset["train"].set_transform(data.batch_transform(transform, data_args.image_column_name))
    ran.append(f"data: {source} rows of CIFAR-10's shapes, the example's train transform to {size} px")
    image_size = size if isinstance(size, int) else max(size)
    return Prepared(
        trainer="image_classification",
        parsed=parsed,
        data={"dataset": dataset, "labels": labels},
        ran=ran,
        notes=[economy_note(economy)],
        batch=batch,
        image_size=image_size,
        precision="bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32",
    )


def device_step(prepared: Prepared, device: FakeDevice) -> dict[str, Any]:
    """The model, the Trainer (main()'s, counting rows for the meter), its optimizer and two training
    steps on the fake device; the loader's batch drawn for real between them."""
    model_args, data_args, _, training_args, _ = prepared.parsed
    ran, skipped = [], []
    with device.on():
        model, _, source, _ = trainer.load_model(model_args, prepared.data["labels"])
        parameters = sum(p.numel() for p in model.parameters())
        ran.append(f"model: ViTForImageClassification ({source} weights), {parameters / 1e6:.1f}M parameters")
        run_dir = RunDir(training_args.output_dir)
        built, _ = trainer.build_trainer(
            run_dir,
            prepared.parsed,
            model,
            prepared.data["dataset"],
            data.collate(data_args.label_column_name),
        )
        built.create_optimizer()
        ran.append(f"optimizer: the Trainer's ({software.optimizer(built.optimizer)})")
        wrapped = built.accelerator.prepare_model(built.model)
    batch = built._prepare_inputs(plan.first_batch(built.get_train_dataloader()))
    ran.append(f"loader: one batch of {len(batch['labels'])} through the Trainer's DataLoader")
    return trainer_steps.two_steps(
        built, wrapped, batch, device, prepared.precision, (ran, skipped, parameters)
    )
