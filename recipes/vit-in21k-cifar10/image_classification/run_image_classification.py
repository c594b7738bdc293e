"""Fine-tuning ViT-base-patch16-224-in21k on CIFAR-10, measured as optimum-habana's CI measures it.

The published run is optimum-habana's ``examples/image-classification/run_image_classification.py``
under its tests/test_examples.py (recipes/vit-in21k-cifar10/SOURCES.md §1, §2): the stock
``ViTForImageClassification`` with a ten-class head, torchvision's transforms in the dataset's
on-the-fly transform (so in the loader workers), and the Trainer's loop; its figure is GaudiTrainer's
``train_samples_per_second``. This script keeps that pipeline (data.py) and adds what a rerun needs:

- it runs anywhere: ``GaudiTrainer`` with the Gaudi config on a Gaudi (``--use_habana``),
  transformers' ``Trainer`` otherwise (GPUs and CPUs, ``torchrun`` for several devices);
- it runs offline: the model is built from ``--model_config_json`` with random weights when the
  hub cannot be reached (or with ``--random_init``), and the data is synthesized with CIFAR-10's
  shapes (``--synthetic_data``); each is a departure the summary records (the host then judges the
  run not comparable). What the user gave (``--cache_dir``) is used whole or the run stops;
- it writes the run directory through rundir.py: throughput.csv, tensorboard/, sysinfo.json and,
  last, summary.json with samples/s under each definition (common/measure/hf_trainer.py: the same
  Trainer, the same definitions), the software that ran and the MFU (record.py).

Departures from the published script, none inside the timed steps: the validation split is held out
with the run's seed (the example passes none); the fine-tuned model is not saved (the CI's
``--save_strategy no`` saves no checkpoint, but the example saves the final model after training);
no model card is written.

    python -m reprokit_trainers.image_classification --output_dir out --random_init --synthetic_data \\
        --model_config_json "$(cat arch.json)" --remove_unused_columns false --image_column_name img \\
        --do_train --do_eval --per_device_train_batch_size 128 --throughput_warmup_steps 3
    torchrun --standalone --nproc_per_node 8 -m reprokit_trainers.image_classification ...
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification, ViTImageProcessor

from reprokit_trainers.common.data import hub
from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.hf_trainer import (
    StepSamples,
    point_at_run_dir,
    throughput_callback,
    timed_trainer,
)
from reprokit_trainers.common.process import gaudi, lifecycle
from reprokit_trainers.common.process.accelerate_compat import give_optimizer_train_modes
from reprokit_trainers.common.process.args import (
    MfuArguments,
    arg,
    check_sizes,
    config_error,
    first_line,
    one_line_errors,
    parse_command_line,
    take_bool_flag,
    without_fields_of,
)
from reprokit_trainers.common.record import trainer_summary
from reprokit_trainers.common.record.rundir import RunDir

from . import data, record

logger = logging.getLogger("run_image_classification")
# ViTConfig's sizes: a zero among them ended in the model's code (an IndexError, a division by zero).
ARCHITECTURE_SIZES = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size", "patch_size",
    "num_channels",
)  # fmt: skip

PROG = "run_image_classification.py"
TRAINER_DIR = Path(__file__).resolve().parent
GAUDI_ONLY_FLAGS = (
    "use_habana", "use_lazy_mode", "use_hpu_graphs_for_inference", "gaudi_config_name",
    "pipelining_fwd_bwd", "non_blocking_data_copy", "sdp_on_bf16",
)  # fmt: skip


@dataclass
class ModelArguments:
    model_name_or_path: str = arg(
        "google/vit-base-patch16-224-in21k", "hub id or local path of the checkpoint"
    )
    model_revision: str = arg("main", "branch, tag or commit of the checkpoint")
    model_config_json: str | None = arg(
        None,
        "ViTConfig kwargs as JSON: the architecture built with random weights offline or with --random_init",
    )
    random_init: bool = arg(False, "build the model from --model_config_json without trying the hub")
    cache_dir: str | None = arg(
        None,
        "a Hugging Face cache holding the checkpoint and the dataset: given, both load from it or the run stops",
    )


@dataclass
class DataTrainingArguments:
    dataset_name: str | None = arg(None, "hub dataset id")
    dataset_config_name: str | None = arg(None, "dataset configuration")
    dataset_revision: str = arg("main", "branch, tag or commit of the dataset")
    train_val_split: float = arg(0.15, "share of train held out for validation where the dataset has none")
    max_train_samples: int | None = arg(None, "use only this many train rows")
    max_eval_samples: int | None = arg(None, "use only this many validation rows")
    image_column_name: str = arg("image", "column with the images")
    label_column_name: str = arg("label", "column with the labels")
    synthetic_data: bool = arg(False, "synthesize data of CIFAR-10's shapes (no hub; a departure)")
    synthetic_num_train: int = arg(data.CIFAR10_TRAIN, "synthetic train rows (CIFAR-10's train split)")
    synthetic_num_test: int = arg(data.CIFAR10_TEST, "synthetic test rows (CIFAR-10's test split, unused)")
    synthetic_unique_images: int = arg(512, "distinct synthetic images, repeated over the rows")
    synthetic_seed: int = arg(0, "seed of the synthetic data")


@dataclass
class BenchmarkArguments(MfuArguments):
    """The kit's switches, and GaudiTrainingArguments' as understood on other machines (where
    optimum-habana is installed, it defines them and they are dropped from here)."""

    throughput_warmup_steps: int = arg(
        0, "steps left out of samples/s (time and samples), as GaudiTrainer does"
    )
    use_habana: bool = arg(False, "Gaudi only: run on HPUs")
    use_lazy_mode: bool = arg(False, "Gaudi only: lazy mode")
    use_hpu_graphs_for_inference: bool = arg(False, "Gaudi only: HPU graphs in eval")
    gaudi_config_name: str | None = arg(
        None, "Gaudi only: the Gaudi config (a hub id such as Habana/vit, or a path)"
    )
    pipelining_fwd_bwd: bool = arg(False, "Gaudi only: a mark_step between forward and backward")
    non_blocking_data_copy: bool = arg(False, "Gaudi only: copy batches to the HPU asynchronously")
    sdp_on_bf16: bool = arg(False, "Gaudi only: reduced-precision reductions in bf16 SDPA")


# The argument dataclasses, in parsing order. On a Gaudi, optimum-habana's GaudiTrainingArguments
# takes TrainingArguments' place and owns the Gaudi flags (parse_args).
ARGUMENTS = (ModelArguments, DataTrainingArguments, BenchmarkArguments, TrainingArguments)


@dataclass(frozen=True)
class Platform:
    on_gaudi: bool
    gaudi_config: Any = None  # common.process.gaudi.GaudiConfigFile
    tf32: bool | None = None


def parse_args(argv: Sequence[str]) -> tuple[Any, ...]:
    """Parse the command line; configuration errors end in one line (SystemExit), never a traceback."""
    argv, tf32 = take_bool_flag(argv, "tf32")
    model_class, data_class, bench_class, training_class = ARGUMENTS
    gaudi_config = None
    if gaudi.habana_stack():
        with one_line_errors(PROG, gaudi.SetupError):
            argv, gaudi_config = gaudi.resolve_gaudi_config_arg(argv, TRAINER_DIR)
        from optimum.habana import GaudiTrainingArguments

        training_class = GaudiTrainingArguments
        bench_class = without_fields_of(BenchmarkArguments, training_class)
    model_args, data_args, parsed_bench, training_args = parse_command_line(
        PROG,
        (model_class, data_class, bench_class, training_class),
        argv,
        trainer_dir=TRAINER_DIR,
    )
    with one_line_errors(PROG, ValueError):
        bench = BenchmarkArguments(
            **{
                f.name: getattr(parsed_bench, f.name, getattr(training_args, f.name, None))
                for f in dataclasses.fields(BenchmarkArguments)
            }
        )
    on_gaudi = gaudi.habana_stack() and gaudi.hpu_available()
    if not on_gaudi:
        for name in GAUDI_ONLY_FLAGS:
            if getattr(bench, name):
                raise config_error(PROG, f"--{name} needs a Gaudi, which this machine is not; drop the flag")
    elif bench.use_habana and gaudi_config is None:
        raise config_error(PROG, "--use_habana needs --gaudi_config_name (the published Habana/vit)")
    if not (training_args.do_train or training_args.do_eval):
        raise config_error(PROG, "nothing to do: pass --do_train and/or --do_eval")
    if training_args.max_steps == 0:
        raise config_error(
            PROG, "--max_steps 0 trains nothing: give a step count, or -1 for --num_train_epochs"
        )
    if not data_args.synthetic_data and not data_args.dataset_name:
        raise config_error(PROG, "no data: give --dataset_name (and --cache_dir offline) or --synthetic_data")
    platform = Platform(on_gaudi and bench.use_habana, gaudi_config, tf32)
    return model_args, data_args, bench, training_args, platform


def load_data(
    model_args: ModelArguments, data_args: DataTrainingArguments, seed: int
) -> tuple[Any, str, str | None]:
    """The given dataset whole, or (none given, or the hub does not answer) synthetic rows of CIFAR-10's
    shapes: (dataset, source, why not hub). A --cache_dir that cannot give it stops the run."""
    reason = "--synthetic_data"
    if not data_args.synthetic_data:
        import datasets

        try:
            dataset = datasets.load_dataset(
                data_args.dataset_name,
                data_args.dataset_config_name,
                revision=data_args.dataset_revision,
                cache_dir=model_args.cache_dir,
            )
            return data.hold_out_validation(dataset, data_args.train_val_split, seed), "hub", None
        except (OSError, ValueError, ConnectionError) as error:
            reason = first_line(error)
            if model_args.cache_dir:
                raise config_error(
                    PROG,
                    f"cannot load {data_args.dataset_name}@{data_args.dataset_revision} from --cache_dir "
                    f"{model_args.cache_dir} ({reason}); it was given, so nothing replaces it",
                ) from None
    dataset = data.synthetic_cifar10(
        data_args.synthetic_num_train, data_args.synthetic_num_test, data_args.synthetic_unique_images,
        data_args.synthetic_seed, data_args.image_column_name, data_args.label_column_name,
    )  # fmt: skip
    return data.hold_out_validation(dataset, data_args.train_val_split, seed), "synthetic", reason


def load_model(model_args: ModelArguments, labels: list[str]) -> tuple[Any, Any, str, str | None]:
    """The checkpoint with a head of ``labels`` and its image processor, from the hub (or the given cache)
    when it can be had, else random weights and ViT's processor (the checkpoint's mean/std, 0.5):
    (model, processor, source, why not hub)."""
    names = {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}}
    reason = "--random_init"
    if not model_args.random_init:
        options = {
            "revision": model_args.model_revision,
            "cache_dir": model_args.cache_dir,
            "local_files_only": not hub.answers(),
        }
        try:
            model = ViTForImageClassification.from_pretrained(
                model_args.model_name_or_path,
                num_labels=len(labels),
                ignore_mismatched_sizes=True,
                **names,
                **options,
            )
            processor = ViTImageProcessor.from_pretrained(model_args.model_name_or_path, **options)
            return model, processor, "hub", None
        except OSError as error:
            reason = first_line(error)
            if model_args.cache_dir or Path(model_args.model_name_or_path).is_dir():
                raise config_error(
                    PROG,
                    f"cannot load {model_args.model_name_or_path} ({reason}); it was given, so nothing replaces it",
                ) from None
    if model_args.model_config_json is None:
        raise config_error(PROG, f"no checkpoint ({reason}) and no --model_config_json to build one from")
    try:
        config = ViTConfig(**json.loads(model_args.model_config_json), num_labels=len(labels), **names)
        check_sizes(config, ARCHITECTURE_SIZES)
        model = ViTForImageClassification(config)  # its own ValueError: a width the heads do not divide
    except (ValueError, TypeError) as error:  # JSONDecodeError is a ValueError
        raise config_error(PROG, f"--model_config_json does not build: {first_line(error)}") from None
    side = config.image_size
    processor = ViTImageProcessor(size={"height": side, "width": side})
    return model, processor, "random", reason


def build_trainer(
    run_dir: RunDir, parsed: tuple[Any, ...], model: Any, dataset: Any, collate_fn: Any
) -> tuple[Trainer, Any]:
    """GaudiTrainer (with the Gaudi config) or transformers' Trainer, counting the rows each step
    trains on and timing each step's batch fetch for the meter (common/measure/hf_trainer.py)."""
    _, data_args, bench, training_args, platform = parsed
    base, extra = Trainer, {}
    if platform.on_gaudi:
        from optimum.habana import GaudiTrainer

        with one_line_errors(PROG, gaudi.SetupError):
            base, extra = GaudiTrainer, {"gaudi_config": gaudi.load_gaudi_config(platform.gaudi_config)}
    samples = StepSamples(training_args.world_size)
    throughput = throughput_callback(run_dir, bench.throughput_warmup_steps, samples, bench.profile)

    class CountingTrainer(timed_trainer(base, throughput)):
        def training_step(self, model, inputs, *args, **kwargs):
            samples.add(int(inputs["pixel_values"].shape[0]))  # a shape, read on the host: no sync
            give_optimizer_train_modes(self.optimizer)
            return super().training_step(model, inputs, *args, **kwargs)

    trainer = CountingTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset["train"] if training_args.do_train else None,
        eval_dataset=dataset["validation"] if training_args.do_eval else None,
        compute_metrics=data.accuracy,
        data_collator=collate_fn,
        callbacks=[throughput],
        **extra,
    )
    return trainer, throughput


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    # 1. Parse arguments
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = parse_args(argv)
    model_args, data_args, bench, training_args, platform = parsed
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    tf32 = lifecycle.set_tf32(PROG, platform.tf32)
    lifecycle.require_accelerator(PROG)

    # 2. Open the run directory, where the Trainer's TensorBoard logs go too
    run_dir = RunDir(training_args.output_dir)
    run_dir.write_sysinfo(trainer=PROG, gaudi=platform.on_gaudi, precision=tf32)
    point_at_run_dir(training_args, argv, run_dir)
    transformers.set_seed(training_args.seed)

    # 3. Load the data: the given dataset whole, else synthetic rows of CIFAR-10's shapes
    with training_args.main_process_first(desc="dataset"):
        dataset, data_source, data_fallback = load_data(model_args, data_args, training_args.seed)
    for column in (data_args.image_column_name, data_args.label_column_name):
        if column not in dataset["train"].column_names:
            raise config_error(
                PROG, f"no column {column!r} in the dataset; it has {dataset['train'].column_names}"
            )
    labels = dataset["train"].features[data_args.label_column_name].names

    # 4. Build the model and its image processor: the checkpoint's, else random weights offline
    model, processor, model_source, model_fallback = load_model(model_args, labels)
    sample_flops = flops.count_on_main_process(lambda: record.flops_per_sample(model.config))

    # 5. The example's transforms, in the loader: random crop and flip to train, resize and crop to validate
    size = data.processor_size(processor.size)
    mean, std = processor.image_mean, processor.image_std
    for split, transform, limit in (
        ("train", data.train_transform(size, mean, std), data_args.max_train_samples),
        ("validation", data.val_transform(size, mean, std), data_args.max_eval_samples),
    ):
        if limit is not None:
            dataset[split] = dataset[split].shuffle(seed=training_args.seed).select(range(limit))
        dataset[split].set_transform(data.batch_transform(transform, data_args.image_column_name))
    built = record.Built(
        model_source, model_fallback, data_source, data_fallback,
        sum(p.numel() for p in model.parameters()), model.config.image_size, len(dataset["train"]),
    )  # fmt: skip
    record.departures(run_dir, built)

    # 6. Build the trainer: Gaudi's or transformers', counting the rows it trains on for the meter
    trainer, throughput = build_trainer(
        run_dir, parsed, model, dataset, data.collate(data_args.label_column_name)
    )
    logger.info(
        "%s (%s, %.1fM parameters), data %s (%d train rows), batch %d x %d, %s",
        model_args.model_name_or_path, model_source, built.parameters / 1e6, data_source, built.train_rows,
        training_args.per_device_train_batch_size, training_args.world_size,
        trainer_summary.trainer_name(platform.on_gaudi),
    )  # fmt: skip
    watch = record.watch_attention(model, platform.on_gaudi)

    # 7. Train, then evaluate, as the example does
    train_metrics: dict[str, Any] = {}
    if training_args.do_train:
        train_metrics = dict(trainer.train().metrics)
        trainer.log_metrics("train", train_metrics)
        trainer.save_metrics("train", train_metrics)
    eval_metrics = trainer.evaluate() if training_args.do_eval else None
    if eval_metrics is not None:
        trainer.log_metrics("eval", eval_metrics)
        trainer.save_metrics("eval", eval_metrics)

    # 8. Write the summary, last
    return record.write_summary(
        run_dir, trainer, throughput, (train_metrics, eval_metrics), parsed, built, sample_flops, watch
    )


if __name__ == "__main__":
    main()
