"""Contrastive fine-tuning of BridgeTower on New Yorker cartoons, measured as the 2023 benchmark was.

The published run is optimum-habana's ``examples/contrastive-image-text/run_bridgetower.py``
(recipes/bridgetower/SOURCES.md §1, §2): the stock ``BridgeTowerForContrastiveLearning``, captions tokenized to 128
tokens, images decoded and resized in the dataset's on-the-fly transform (so in the loader
workers), and the Trainer's loop. This script keeps that pipeline and adds what a rerun needs:

- it runs anywhere: ``GaudiTrainer`` on a Gaudi (Habana's PyTorch bridge and an HPU) with
  ``--use_habana``, transformers' ``Trainer`` otherwise (GPUs and CPUs, ``torchrun`` for several
  devices); ``--mediapipe_dataloader`` runs the example's own HPU loader, or stops in one line;
- it runs offline: the model is built from ``--model_config_json`` with random weights when the
  hub cannot be reached (or with ``--random_init``), and the data is synthesized with the real
  data's shapes (``--synthetic_data``): JPEG bytes of the cartoons' sizes and captions of the
  descriptions' lengths, stored and preprocessed exactly as the real rows are (offline.py); each of
  these is a departure the summary records (the host then judges the run not comparable);
- it writes the run directory through rundir.py: throughput.csv, tensorboard/, sysinfo.json and,
  last, summary.json with samples/s under each definition the publications used (common/measure/hf_trainer.py),
  the switches that were in effect, the software that ran and the MFU (record.py).

Departures from the published script, none of which touches the timed training steps: evaluation
skips gathering every layer's hidden states (``IGNORE_AT_INFERENCE``); the fine-tuned model is saved
only with ``--save_final_model``; ``--remove_unused_columns`` is forced off (the published command
passes it, and the run cannot work without it); ``--freeze_*_model`` reach the encoders where they
live (``model.bridgetower.*``); and ``--image_pipeline`` offers the kit's faster image paths
(fastimage.py) beside the published one, which stays the default.

    python -m reprokit_trainers.bridgetower --output_dir out --random_init --synthetic_data \\
        --model_config_json "$(cat arch.json)" --remove_unused_columns false --do_train \\
        --per_device_train_batch_size 48 --bf16 --dataloader_num_workers 2 --throughput_warmup_steps 3
    torchrun --nproc_per_node 8 -m reprokit_trainers.bridgetower ...
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import sys
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import (
    BridgeTowerForContrastiveLearning,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from reprokit_trainers.common.data import caches, hub
from reprokit_trainers.common.data.synthetic import CARTOON_HEIGHTS, CARTOON_WIDTHS
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
    config_error,
    first_line,
    one_line_errors,
    parse_command_line,
    take_bool_flag,
    without_fields_of,
)
from reprokit_trainers.common.process.gaudi import SetupError
from reprokit_trainers.common.record import software, trainer_summary
from reprokit_trainers.common.record.rundir import RunDir

from . import offline, record
from .fastimage import (
    CLIP_MEAN,
    CLIP_STD,
    FastImageTransform,
    ImageModeError,
    decode_batch_on_device,
    published_transform,
)
from .mediapipe import check_mediapipe, check_mediapipe_rows, mediapipe_trainer

if typing.TYPE_CHECKING:
    import datasets

logger = logging.getLogger("run_bridgetower")

PROG = "run_bridgetower.py"
TRAINER_DIR = Path(__file__).resolve().parent
IMAGE_PIPELINES = ("published", "kit", "kit-draft", "gpu_decode")
# What the Trainer would otherwise gather over the whole eval set: every layer's hidden states, tens
# of GB at the published scale. No metric reads them; the loss is the only one (as published).
IGNORE_AT_INFERENCE = ["hidden_states", "attentions"]


@dataclass
class ModelArguments:
    model_name_or_path: str = arg(
        "BridgeTower/bridgetower-large-itm-mlm-itc", "hub id or local path of the checkpoint to fine-tune"
    )
    model_revision: str = arg("main", "branch, tag or commit of the checkpoint")
    model_config_json: str | None = arg(None, "BridgeTowerConfig kwargs as JSON (nested text_config / vision_config): the "
                  "architecture to build with random weights when the checkpoint cannot load, or with --random_init")  # fmt: skip
    random_init: bool = arg(False, "build the model from --model_config_json without trying the hub")
    tokenizer_name: str | None = arg(None, "tokenizer, if not the model's")
    cache_dir: str | None = arg(
        None,
        "where hub downloads and datasets are cached; given, the dataset and the checkpoint load from it "
        "(read through a writable view when it is read-only) or the run stops: nothing replaces them",
    )
    token: str | None = arg(None, "hub token for gated or private repositories")
    trust_remote_code: bool = arg(
        False, "run the dataset's loading script (the pinned revision has one; needs datasets < 4)"
    )
    use_fast_tokenizer: bool = arg(True, "use the tokenizers-backed tokenizer")
    freeze_vision_model: bool = arg(False, "do not train the vision encoder")
    freeze_text_model: bool = arg(False, "do not train the text encoder")
    freeze_text_pooler: bool = arg(
        True, "drop the text pooler, which the contrastive loss never uses (as published)"
    )


@dataclass
class DataTrainingArguments:
    dataset_name: str | None = arg(None, "hub dataset id")
    dataset_config_name: str | None = arg(None, "dataset configuration")
    dataset_revision: str = arg("main", "branch, tag or commit of the dataset")
    data_dir: str | None = arg(None, "data_dir passed to load_dataset")
    image_column: str = arg("image", "column with the images (or their paths)")
    caption_column: str = arg("image_description", "column with the captions")
    max_seq_length: int = arg(128, "captions are padded and truncated to this")
    max_train_samples: int | None = arg(None, "use only this many train rows")
    max_eval_samples: int | None = arg(None, "use only this many eval/test rows")
    overwrite_cache: bool = arg(False, "redo the cached tokenization")
    preprocessing_num_workers: int | None = arg(None, "processes for tokenizing")
    mediapipe_dataloader: bool = arg(
        False,
        "Gaudi only: decode and resize the dataset's JPEG files on the HPU (optimum-habana's "
        "HabanaDataloaderTrainer, from the gaudi2 image's vendor files); anything else is a one-line error",
    )
    synthetic_data: bool = arg(
        False,
        "synthesize the data (no hub); also the fallback when it is unreachable (a departure either way)",
    )
    synthetic_num_train: int = arg(9792, "synthetic train rows")
    synthetic_num_eval: int = arg(531, "synthetic validation rows")
    synthetic_num_test: int | None = arg(None, "synthetic test rows (default: as eval)")
    synthetic_image_width: list[int] = field(
        default_factory=lambda: list(CARTOON_WIDTHS),
        metadata={
            "help": "MIN MAX width of the synthetic JPEGs (default: the cartoons', common/data/synthetic.py)"
        },
    )
    synthetic_image_height: list[int] = field(
        default_factory=lambda: list(CARTOON_HEIGHTS),
        metadata={
            "help": "MIN MAX height of the synthetic JPEGs (default: an assumed range, common/data/synthetic.py)"
        },
    )
    synthetic_caption_words: list[int] = field(
        default_factory=lambda: [10, 40], metadata={"help": "MIN MAX words per synthetic caption"}
    )
    synthetic_unique_images: int = arg(
        512,
        "distinct synthetic cartoons, repeated over the rows as the real splits repeat each cartoon; "
        "every row still stores and decodes its own bytes",
    )
    synthetic_seed: int = arg(0, "seed of the synthetic data")


@dataclass
class BenchmarkArguments(MfuArguments):
    """The kit's own switches (MFU's among them), and the Gaudi trainer's arguments as understood on
    other machines.

    Where optimum-habana is installed, GaudiTrainingArguments defines the Gaudi ones itself and
    they are dropped from here (see ``without_fields_of``).
    """

    throughput_warmup_steps: int = arg(
        0, "steps left out of samples/s (time and samples), as Gaudi's trainer does"
    )
    image_pipeline: str = field(
        default="published",
        metadata={
            "help": "published: the published CPU path; kit: fastimage.py's exact CPU path (OpenCV's bicubic "
            "on uint8, within 1/4 of an 8-bit level); kit-draft: its fast one (fast IDCT, a few levels off on "
            "noisy photos; make bench prints the speeds); "
            "gpu_decode: workers ship JPEG bytes and the device decodes them",
            "choices": list(IMAGE_PIPELINES),
        },
    )
    save_final_model: bool = arg(
        False, "save the fine-tuned model at the end, as published (3.5 GB at full size)"
    )
    use_habana: bool = arg(False, "Gaudi only: run on HPUs")
    use_lazy_mode: bool = arg(False, "Gaudi only: lazy mode")
    use_hpu_graphs_for_inference: bool = arg(False, "Gaudi only: HPU graphs in eval")
    gaudi_config_name: str | None = arg(
        None,
        "Gaudi only: the Gaudi config, a path relative to this trainer's folder (gaudi_configs/clip.json: "
        "Habana/clip's switches) or the working directory, an absolute path, or a hub id",
    )
    distribution_strategy: str = field(
        default="ddp",
        metadata={
            "help": "ddp, or fast_ddp (Gaudi only: one all-reduce through HPU graphs)",
            "choices": ["ddp", "fast_ddp"],
        },
    )


# The argument dataclasses, in parsing order. On a Gaudi, optimum-habana's GaudiTrainingArguments
# takes TrainingArguments' place and owns the Gaudi flags (parse_args).
ARGUMENTS = (ModelArguments, DataTrainingArguments, BenchmarkArguments, TrainingArguments)
GAUDI_ONLY_FLAGS = ("use_habana", "use_lazy_mode", "use_hpu_graphs_for_inference", "gaudi_config_name")


@dataclass(frozen=True)
class Platform:
    """Where the run goes: on a Gaudi's HPUs (GaudiTrainer) or not, and the Gaudi config it loads."""

    on_gaudi: bool
    gaudi_config: gaudi.GaudiConfigFile | None = None
    # --tf32 as asked (None: the framework's default), set by the trainer before anything asks cuBLAS.
    tf32: bool | None = None


def parse_args(
    argv: Sequence[str] | None = None,
) -> tuple[ModelArguments, DataTrainingArguments, BenchmarkArguments, TrainingArguments, Platform]:
    """Parse the command line; configuration errors end in one line (SystemExit), never a traceback."""
    # --tf32 is the kit's to set (precision.set_tf32, over NGC's cuBLAS override), not TrainingArguments':
    # its own refuses true off an Ampere GPU (a CPU dry run of a cuda cell) and sets no override.
    argv, tf32 = take_bool_flag(sys.argv[1:] if argv is None else argv, "tf32")
    model_class, data_class, bench_class, training_class = ARGUMENTS
    gaudi_config = None
    stack = gaudi.habana_stack()
    if stack:
        # GaudiTrainingArguments loads the Gaudi config while it parses: give it the resolved local file.
        with one_line_errors(PROG, SetupError):
            argv, gaudi_config = gaudi.resolve_gaudi_config_arg(argv, TRAINER_DIR)
        try:
            from optimum.habana import GaudiTrainingArguments
        except Exception as error:  # noqa: BLE001 -- a broken install fails in many ways; one line names it
            raise config_error(
                PROG,
                f"Habana's stack is here but optimum-habana does not import ({type(error).__name__}: {error})",
            ) from None
        training_class = GaudiTrainingArguments
        bench_class = without_fields_of(BenchmarkArguments, training_class)
    # TrainingArguments' own checks (e.g. --bf16 where nothing supports it) end in one line too, and so
    # does a value outside arguments.json (the rules the host checks the recipe with).
    model_args, data_args, parsed_bench, training_args = parse_command_line(
        PROG, (model_class, data_class, bench_class, training_class), argv, trainer_dir=TRAINER_DIR
    )
    # One view of the benchmark settings, wherever each was parsed (its own checks run here too).
    with one_line_errors(PROG, ValueError):
        bench = BenchmarkArguments(
            **{
                f.name: getattr(parsed_bench, f.name)
                if hasattr(parsed_bench, f.name)
                else getattr(training_args, f.name)
                for f in dataclasses.fields(BenchmarkArguments)
            }
        )
    # After parsing: the HPU check imports Habana's bridge, which must come after the Gaudi config.
    gaudi_machine = stack and gaudi.hpu_available()
    check_accelerator_flags(bench, training_args, gaudi_machine)
    on_gaudi = gaudi_machine and bench.use_habana
    if data_args.mediapipe_dataloader:
        with one_line_errors(PROG, SetupError):
            check_mediapipe(on_gaudi, bench.image_pipeline)
    if not (training_args.do_train or training_args.do_eval or training_args.do_predict):
        raise config_error(PROG, "nothing to do: pass --do_train, --do_eval and/or --do_predict")
    if training_args.max_steps == 0:  # the schema cannot say "-1 or at least 1"
        raise config_error(
            PROG, "--max_steps 0 trains nothing: give a step count, or -1 for --num_train_epochs"
        )
    for name in ("synthetic_image_width", "synthetic_image_height", "synthetic_caption_words"):
        bounds = getattr(data_args, name)
        if len(bounds) != 2 or bounds[0] > bounds[1] or bounds[0] < 1:
            raise config_error(PROG, f"--{name} takes MIN MAX (1 <= MIN <= MAX), got {bounds}")
    return (
        model_args,
        data_args,
        bench,
        training_args,
        Platform(on_gaudi, gaudi_config if on_gaudi else None, tf32),
    )


def check_accelerator_flags(
    bench: BenchmarkArguments, training_args: TrainingArguments, gaudi_machine: bool
) -> None:
    if not gaudi_machine:
        for name in GAUDI_ONLY_FLAGS:
            if getattr(bench, name):
                raise config_error(
                    PROG,
                    f"--{name} needs a Gaudi (Habana's PyTorch bridge and an HPU), which this machine is "
                    "not; drop the flag or run the gaudi2 accelerator's image on a Gaudi",
                )
    if bench.distribution_strategy not in ("ddp", "fast_ddp"):
        raise config_error(
            PROG, f"--distribution_strategy is ddp or fast_ddp, got {bench.distribution_strategy!r}"
        )
    if bench.distribution_strategy == "fast_ddp":
        if not gaudi_machine or not bench.use_habana:
            raise config_error(
                PROG, "--distribution_strategy fast_ddp is Gaudi only (--use_habana on a Gaudi)"
            )
        if not hasattr(training_args, "distribution_strategy"):
            raise config_error(
                PROG, "this optimum-habana has no fast_ddp (it was removed later); pin a release that has it"
            )
    if gaudi_machine and bench.use_habana and not bench.gaudi_config_name:
        raise config_error(
            PROG,
            "--use_habana needs --gaudi_config_name (the recipe's gaudi_configs/clip.json: Habana/clip's switches)",
        )


# ----------------------------------------------------------------------------------------------
# Model and tokenizer


@dataclass(frozen=True)
class Sources:
    """Where the checkpoint and the data load from, and whether the user gave them. What was given
    (--cache_dir, a local checkpoint folder) is used or the run stops in one line; only what was not
    given may fall back to random weights or synthetic data, recorded as a departure."""

    hub_cache: str | None = None  # the folder checkpoints and tokenizers load from (None: the hub cache)
    checkpoint_given: bool = False
    data_given: bool = False
    given_cache: str | None = None  # --cache_dir as the user gave it (a view of it may be read instead)
    # The hub does not answer: read the cache alone (the same files), without retrying each for 30 s.
    cache_only: bool = False

    def hub_options(self, model_args: ModelArguments) -> dict[str, Any]:
        """How the checkpoint's files (weights and tokenizer alike) are asked of the hub or its cache."""
        return {
            "revision": model_args.model_revision,
            "cache_dir": self.hub_cache,
            "token": model_args.token,
            "local_files_only": self.cache_only,
        }


def resolve_sources(model_args: ModelArguments, data_args: DataTrainingArguments, scratch: Path) -> Sources:
    """--cache_dir, or the hub cache when none was given, made usable where it is read-only (a writable
    view: common/data/caches.py); what the user gave is recorded as given."""
    given = model_args.cache_dir
    if given:
        folder, view = caches.writable(given, scratch, "--cache_dir")
        if view:
            logger.info("--cache_dir %s is read-only: read through a writable view at %s", given, folder)
        model_args.cache_dir = str(folder)
        hub_cache: str | None = model_args.cache_dir
    else:
        from huggingface_hub import constants

        folder, view = caches.writable(constants.HF_HUB_CACHE, scratch, "the hub cache (HF_HUB_CACHE)")
        if view:
            logger.info(
                "the hub cache %s is read-only: read through a writable view at %s",
                constants.HF_HUB_CACHE,
                folder,
            )
        hub_cache = str(folder) if view else None
    return Sources(
        hub_cache=hub_cache,
        checkpoint_given=bool(given) or Path(model_args.model_name_or_path).is_dir(),
        data_given=bool(given) and not data_args.synthetic_data,
        given_cache=given,
        cache_only=not hub.answers(),
    )


def load_model(
    model_args: ModelArguments, sources: Sources | None = None
) -> tuple[BridgeTowerForContrastiveLearning, str, str | None]:
    """The checkpoint from the hub (or the given cache) when it can be had, else, where none was
    given, random weights: (model, source, why not hub)."""
    sources = sources or Sources()
    reason = "--random_init"
    if not model_args.random_init:
        try:
            model = BridgeTowerForContrastiveLearning.from_pretrained(
                model_args.model_name_or_path, **sources.hub_options(model_args)
            )
            return model, "hub", None
        except OSError as error:  # offline, unknown id or revision: transformers reports all as OSError
            reason = first_line(error)
            if sources.checkpoint_given:
                where = (
                    f"--cache_dir {sources.given_cache}"
                    if sources.given_cache
                    else model_args.model_name_or_path
                )
                raise config_error(
                    PROG,
                    f"cannot load the checkpoint {model_args.model_name_or_path}@{model_args.model_revision} from "
                    f"{where} ({reason}); it was given, so nothing replaces it: put the checkpoint there, or leave "
                    "the cache out to train random weights",
                ) from None
            if model_args.model_config_json is None:
                raise config_error(
                    PROG,
                    f"cannot load {model_args.model_name_or_path}@{model_args.model_revision} "
                    f"({reason}) and no --model_config_json to build it offline",
                ) from None
            logger.warning("checkpoint not loaded (%s): random weights from --model_config_json", reason)
    if model_args.model_config_json is None:
        raise config_error(PROG, "--random_init needs --model_config_json (the architecture to build)")
    try:
        return (
            BridgeTowerForContrastiveLearning(offline.build_config(model_args.model_config_json)),
            "random",
            reason,
        )
    except (json.JSONDecodeError, TypeError, ValueError) as error:  # e.g. a vision hidden_size below 64
        raise config_error(PROG, f"--model_config_json does not build: {first_line(error)}") from None


def load_tokenizer(
    model_args: ModelArguments, sources: Sources | None = None
) -> tuple[PreTrainedTokenizerBase, str]:
    from transformers import AutoTokenizer

    sources = sources or Sources()
    name = model_args.tokenizer_name or model_args.model_name_or_path
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            name,
            use_fast=model_args.use_fast_tokenizer,
            trust_remote_code=model_args.trust_remote_code,
            **sources.hub_options(model_args),
        )
        return tokenizer, "hub"
    except (OSError, ValueError) as error:
        if sources.checkpoint_given and not model_args.random_init:
            raise config_error(
                PROG,
                f"cannot load the tokenizer {name}@{model_args.model_revision} beside the given checkpoint "
                f"({first_line(error)}); nothing replaces it: put the tokenizer's files there",
            ) from None
        logger.warning(
            "tokenizer %s not loaded (%s): word-level tokenizer over the synthetic vocabulary",
            name,
            first_line(error),
        )
        return offline.offline_tokenizer(), "offline"


# ----------------------------------------------------------------------------------------------
# Data


def load_data(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    sources: Sources | None = None,
    read: Collection[str] = offline.SPLITS,
) -> tuple[datasets.DatasetDict, str, str | None]:
    """The dataset from the hub (or the given cache) when it can be had, else, where none was given, the
    synthetic one, with rows in the splits the run reads: (dataset, source, why not hub)."""
    sources = sources or Sources()
    reason = "--synthetic_data" if data_args.synthetic_data else "no --dataset_name"
    if not data_args.synthetic_data and data_args.dataset_name:
        from datasets import DownloadConfig, load_dataset

        try:
            dataset = load_dataset(
                data_args.dataset_name,
                data_args.dataset_config_name,
                cache_dir=model_args.cache_dir,
                download_config=DownloadConfig(local_files_only=True) if sources.cache_only else None,
                keep_in_memory=False,
                data_dir=data_args.data_dir,
                token=model_args.token,
                revision=data_args.dataset_revision,
                trust_remote_code=model_args.trust_remote_code,
            )
            return dataset, "hub", None
        # datasets raises ConnectionError, FileNotFoundError (DatasetNotFoundError) or ValueError
        # (e.g. a loading script without --trust_remote_code); the reason goes to the summary.
        except (OSError, ValueError) as error:
            reason = first_line(error)
            if sources.data_given:
                raise config_error(
                    PROG,
                    f"cannot load {data_args.dataset_name}@{data_args.dataset_revision} from --cache_dir "
                    f"{sources.given_cache} ({reason}); it was given, so nothing replaces it: put the prepared "
                    "dataset there (load_dataset with this cache_dir where the hub is reachable), or leave it out "
                    "to run on synthetic data",
                ) from None
            logger.warning(
                "dataset %s not loaded (%s): synthetic data instead", data_args.dataset_name, reason
            )
    return offline.synthetic_dataset(data_args, model_args.cache_dir, read), "synthetic", reason


def published_image_transform(
    image_size: int, mean: Sequence[float] = CLIP_MEAN, std: Sequence[float] = CLIP_STD
) -> Callable[[bytes | Any], torch.Tensor]:
    """JPEG bytes (or a PIL image) -> [3, S, S] as the published script makes it (fastimage.py)."""
    return published_transform(image_size, mean, std)


def image_pipeline(name: str, image_size: int) -> Callable[[bytes | Any], torch.Tensor] | None:
    """The per-image CPU transform of each ``--image_pipeline``; None where the device decodes."""
    if name == "published":
        return published_image_transform(image_size, CLIP_MEAN, CLIP_STD)
    if name in ("kit", "kit-draft"):
        return FastImageTransform(image_size, CLIP_MEAN, CLIP_STD, draft=name == "kit-draft")
    return None


def _encoded(item: Any) -> Any:
    """What a row's image cell holds, as the transforms take it: a PIL image or JPEG bytes."""
    if isinstance(item, dict):
        if item.get("bytes") is not None:
            return item["bytes"]
        item = item["path"]
    if isinstance(item, str):  # the script-based revision stores file paths
        return Path(item).read_bytes()
    return item


class ImageTransform:
    """The dataset's on-the-fly transform: runs in the loader workers, one batch of rows at a time."""

    def __init__(self, image_column: str, transform: Callable[[Any], torch.Tensor] | None) -> None:
        self.image_column = image_column
        self.transform = transform

    def __call__(self, examples: dict[str, list]) -> dict[str, list]:
        images = [_encoded(item) for item in examples[self.image_column]]
        if self.transform is None:
            examples["jpeg_bytes"] = [_jpeg(image) for image in images]
        else:
            examples["pixel_values"] = [self.transform(image) for image in images]
        return examples


def _jpeg(image: Any) -> bytes:
    if isinstance(image, bytes):
        return image
    buffer = io.BytesIO()  # a decoded image handed over by datasets: re-encode it for the device
    image.convert("RGB").save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def collate_fn(examples: list[dict[str, Any]]) -> dict[str, Any]:
    batch: dict[str, Any] = {
        "input_ids": torch.tensor([e["input_ids"] for e in examples], dtype=torch.long),
        "attention_mask": torch.tensor([e["attention_mask"] for e in examples], dtype=torch.long),
        "return_loss": True,
    }
    if "pixel_values" in examples[0]:
        batch["pixel_values"] = torch.stack([e["pixel_values"] for e in examples])
    else:
        batch["jpeg_bytes"] = [e["jpeg_bytes"] for e in examples]
    return batch


def prepare_split(
    dataset: Any,
    tokenizer: PreTrainedTokenizerBase,
    data_args: DataTrainingArguments,
    transform: ImageTransform,
    max_samples: int | None,
    desc: str,
    image_size: int,
    mediapipe: bool = False,
) -> Any:
    """Tokenize once (cached), then attach the image transform that runs per batch in the workers.

    With mediapipe the HPU pipeline reads the raw rows and the attributes the published example's
    loader reads; the transform is only handed over, as its CPU fallback expects (which the kit refuses).
    """
    if max_samples is not None:
        dataset = dataset.select(range(min(len(dataset), max_samples)))
    caption_column = data_args.caption_column

    def tokenize(examples: dict[str, list]) -> dict[str, list]:
        encoded = tokenizer(
            list(examples[caption_column]),
            max_length=data_args.max_seq_length,
            padding="max_length",
            truncation=True,
        )
        examples["input_ids"] = encoded.input_ids
        examples["attention_mask"] = encoded.attention_mask
        return examples

    dataset = dataset.map(
        tokenize,
        batched=True,
        remove_columns=[c for c in dataset.column_names if c != data_args.image_column],
        num_proc=data_args.preprocessing_num_workers,
        load_from_cache_file=not data_args.overwrite_cache,
        desc=f"Running tokenizer on {desc} dataset",
    )
    if mediapipe:
        dataset.transform_func = transform
        dataset.image_mean, dataset.image_std = list(CLIP_MEAN), list(CLIP_STD)
        dataset.text_max_length = data_args.max_seq_length
        dataset.image_resize = image_size
    else:
        dataset.set_transform(transform)
    return dataset


# ----------------------------------------------------------------------------------------------
# Trainer


def trainer_class(
    base: type, samples: StepSamples, device_decode: bool, image_size: int, published_logging: bool = True
) -> type:
    """``base``, counting the rows of every micro-batch it trains on (the meter's samples), and with
    ``device_decode`` decoding the batch's JPEG bytes on the device before the forward;
    ``published_logging``: its logging steps read what transformers 4.31's did (the loss, no gradient
    norm)."""

    class CountingTrainer(base):
        zero_grad_left: str | None = None  # software.zero_grad: what the loop's zero_grad left

        def training_step(self, model, inputs, *args, **kwargs):
            # A shape, read on the host: no device sync.
            samples.add(int(inputs["input_ids"].shape[0]))
            give_optimizer_train_modes(self.optimizer)
            if self.zero_grad_left is None and self.state.global_step == 1:
                self.zero_grad_left = software.zero_grad_left(model.parameters())
            return super().training_step(model, inputs, *args, **kwargs)

        def _maybe_log_save_evaluate(self, tr_loss, grad_norm, *args, **kwargs):
            # transformers 4.31 (the publication's) logged no gradient norm: 4.49 reads it to the host
            # at every logging step, a read 4.31's loop never made (tests/test_conformance_loop.py).
            if not published_logging:
                return super()._maybe_log_save_evaluate(tr_loss, grad_norm, *args, **kwargs)
            return super()._maybe_log_save_evaluate(tr_loss, None, *args, **kwargs)

    if not device_decode:
        return CountingTrainer

    class DeviceDecodeTrainer(CountingTrainer):
        def _prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
            jpegs = inputs.pop("jpeg_bytes", None)
            inputs = super()._prepare_inputs(inputs)
            if jpegs is not None:
                inputs["pixel_values"] = decode_batch_on_device(
                    jpegs, image_size, self.args.device, CLIP_MEAN, CLIP_STD
                )
            return inputs

    return DeviceDecodeTrainer


def gaudi_setup(platform: Platform, mediapipe: bool) -> tuple[type, dict[str, Any]]:
    """GaudiTrainer (HabanaDataloaderTrainer with mediapipe) and its Gaudi config, loaded from the
    file parse_args resolved."""
    from optimum.habana import GaudiTrainer

    assert platform.gaudi_config is not None  # check_accelerator_flags: --use_habana needs one
    base = mediapipe_trainer() if mediapipe else GaudiTrainer
    return base, {"gaudi_config": gaudi.load_gaudi_config(platform.gaudi_config)}


# ----------------------------------------------------------------------------------------------
# The run


def setup_logging(training_args: TrainingArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    # Every rank would repeat the same fallback warnings: only the main one speaks below errors.
    logger.setLevel(logging.INFO if training_args.should_log else logging.ERROR)
    # Loader workers fork after the captions are tokenized; tokenizers would then turn its threads
    # off itself, with a warning per worker.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())


def set_seed(seed: int, on_gaudi: bool) -> None:
    if on_gaudi:
        from optimum.habana.utils import set_seed as seed_everything
    else:
        from transformers import set_seed as seed_everything
    seed_everything(seed)


def prepare_model(model: BridgeTowerForContrastiveLearning, model_args: ModelArguments) -> None:
    """Drop the text pooler (as published) and freeze the encoders the arguments name."""
    if model_args.freeze_text_pooler:
        model.bridgetower.text_model.pooler = None
    for frozen, module in (
        (model_args.freeze_vision_model, model.bridgetower.vision_model),
        (model_args.freeze_text_model, model.bridgetower.text_model),
    ):
        if frozen:
            module.requires_grad_(False)


def load_splits(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    bench: BenchmarkArguments,
    training_args: TrainingArguments,
    tokenizer: PreTrainedTokenizerBase,
    image_size: int,
    mediapipe: bool,
    sources: Sources | None = None,
) -> tuple[dict[str, Any], str, str | None]:
    """The splits the run uses, tokenized, with their image transform: (splits, data source, why not hub)."""
    with training_args.main_process_first(desc="dataset"):
        wanted = (training_args.do_train, training_args.do_eval, training_args.do_predict)
        read = [split for split, reads in zip(offline.SPLITS, wanted, strict=True) if reads]
        dataset, data_source, data_fallback = load_data(model_args, data_args, sources, read)
    if "test" not in dataset:  # as published: carve validation and test out of train
        dataset = dataset["train"].train_test_split(test_size=0.4, shuffle=True, seed=training_args.seed)
        if "validation" not in dataset:
            held_out = dataset["test"].train_test_split(test_size=0.5, shuffle=False)
            dataset["validation"], dataset["test"] = held_out["train"], held_out["test"]
    first_split = "train" if training_args.do_train else "validation"
    for column in (data_args.image_column, data_args.caption_column):
        if column not in dataset[first_split].column_names:
            raise config_error(
                PROG,
                f"no column {column!r} in the dataset; it has {', '.join(dataset[first_split].column_names)}",
            )

    if bench.image_pipeline != "published" or (
        mediapipe and "image_path" not in dataset[first_split].column_names
    ):
        import datasets

        # These paths decode the JPEGs themselves: the kit's paths need the bytes, the HPU the file paths.
        dataset = dataset.cast_column(data_args.image_column, datasets.Image(decode=False))
    transform = ImageTransform(data_args.image_column, image_pipeline(bench.image_pipeline, image_size))
    splits: dict[str, Any] = {}
    with training_args.main_process_first(desc="tokenization"):
        limits = (data_args.max_train_samples, data_args.max_eval_samples, data_args.max_eval_samples)
        for split, limit in zip(offline.SPLITS, limits, strict=True):
            if split in read:
                splits[split] = prepare_split(
                    dataset[split], tokenizer, data_args, transform, limit, split, image_size, mediapipe
                )
    if mediapipe:
        with one_line_errors(PROG, SetupError):
            for split, rows in splits.items():
                check_mediapipe_rows(rows, data_args.image_column, split)
    return splits, data_source, data_fallback


def train_and_evaluate(
    trainer: Trainer,
    splits: dict[str, Any],
    training_args: TrainingArguments,
    bench: BenchmarkArguments,
    tokenizer: PreTrainedTokenizerBase,
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """--do_train, --do_eval, --do_predict as the published script runs them: (train, eval, test) metrics."""
    train_metrics: dict[str, Any] = {}
    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint is None and not training_args.overwrite_output_dir:
            checkpoint = get_last_checkpoint(training_args.output_dir)
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        train_metrics = dict(train_result.metrics)
        if bench.save_final_model:
            trainer.save_model()
            tokenizer.save_pretrained(training_args.output_dir)
        trainer.log_metrics("train", train_metrics)
        trainer.save_metrics("train", train_metrics)
        trainer.save_state()
    eval_metrics = test_metrics = None
    if training_args.do_eval:
        eval_metrics = trainer.evaluate(ignore_keys=IGNORE_AT_INFERENCE)
        trainer.log_metrics("validation", eval_metrics)
        trainer.save_metrics("validation", eval_metrics)
    if training_args.do_predict:
        test_metrics = trainer.predict(
            splits["test"], ignore_keys=IGNORE_AT_INFERENCE, metric_key_prefix="test"
        ).metrics
        trainer.log_metrics("test", test_metrics)
        trainer.save_metrics("test", test_metrics)
    return train_metrics, eval_metrics, test_metrics


def image_mode_error(error: ImageModeError) -> str:
    """The one line of an image the published transform cannot take, also when a loader worker
    raised it (its message then carries the worker's traceback; the last line is the error's)."""
    last = str(error).strip().splitlines()[-1]
    return last.split(f"{ImageModeError.__name__}: ", 1)[-1]


def build_trainer(
    run_dir: RunDir,
    parsed: tuple[ModelArguments, DataTrainingArguments, BenchmarkArguments, TrainingArguments, Platform],
    model: BridgeTowerForContrastiveLearning,
    splits: dict[str, Any],
    image_size: int,
) -> tuple[Trainer, Any]:
    """Gaudi's Trainer or transformers', counting the rows it trains on for the meter, and the meter's
    callback (common/measure/hf_trainer.py): the wait for each step's batches and DDP's all-reduce are timed."""
    _, data_args, bench, training_args, platform = parsed
    mediapipe = data_args.mediapipe_dataloader
    if platform.on_gaudi:
        with one_line_errors(PROG, SetupError):
            base, extra = gaudi_setup(platform, mediapipe)
    else:
        base, extra = Trainer, {}
    samples = StepSamples(training_args.world_size)
    throughput = throughput_callback(run_dir, bench.throughput_warmup_steps, samples, bench.profile)
    timed = timed_trainer(base, throughput)
    trainer = trainer_class(
        timed, samples, bench.image_pipeline == "gpu_decode", image_size, not platform.on_gaudi
    )(
        model=model,
        args=training_args,
        train_dataset=splits.get("train"),
        eval_dataset=splits.get("validation"),
        data_collator=collate_fn,
        callbacks=[throughput],
        **extra,
    )
    return trainer, throughput


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    # 1. Parse arguments
    argv = list(sys.argv[1:] if argv is None else argv)
    model_args, data_args, bench, training_args, platform = parse_args(argv)
    parsed = (model_args, data_args, bench, training_args, platform)
    mediapipe = data_args.mediapipe_dataloader  # parse_args has checked it can run
    setup_logging(training_args)
    # --tf32 as asked, NGC's cuBLAS override included, read back, before anything asks cuBLAS about it.
    tf32 = lifecycle.set_tf32(PROG, platform.tf32)
    lifecycle.require_accelerator(PROG)

    # 2. Open the run directory, where the Trainer's TensorBoard logs go too
    run_dir = RunDir(training_args.output_dir)
    run_dir.write_sysinfo(trainer=PROG, gaudi=platform.on_gaudi, precision=tf32)
    point_at_run_dir(training_args, argv, run_dir)
    set_seed(training_args.seed, platform.on_gaudi)
    with one_line_errors(PROG, caches.ReadOnlyCache):
        sources = resolve_sources(model_args, data_args, caches.scratch_root(run_dir.path))

    # 3. Build the model and the tokenizer: the given or the hub's, else (none given) offline ones
    model, model_source, model_fallback = load_model(model_args, sources)
    model_parameters = sum(p.numel() for p in model.parameters())
    prepare_model(model, model_args)
    trained_parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tokenizer, tokenizer_source = load_tokenizer(model_args, sources)
    image_size = model.config.vision_config.image_size

    # 4. Count the FLOPs of one training sample (rank 0, before the first timed step)
    sample_flops = flops.count_on_main_process(
        lambda: record.flops_per_sample(
            model.config, data_args.max_seq_length, lambda built: prepare_model(built, model_args)
        )
    )

    # 5. Load and preprocess the data: the hub's, else synthetic data of its shapes
    splits, data_source, data_fallback = load_splits(
        model_args, data_args, bench, training_args, tokenizer, image_size, mediapipe, sources
    )
    built = record.Built(
        model_source, model_fallback, tokenizer_source, data_source, data_fallback,
        model_parameters, trained_parameters, image_size,
    )  # fmt: skip
    record.departures(run_dir, data_args, built)

    # 6. Build the trainer: Gaudi's or transformers', counting the rows it trains on for the meter
    trainer, throughput = build_trainer(run_dir, parsed, model, splits, image_size)
    switches = record.switches(bench, training_args, mediapipe)
    logger.info(
        "%s (%s, %.1fM parameters, %.1fM trained), data %s, tokenizer %s, batch %d x %d x %d = %d, %s",
        model_args.model_name_or_path,
        model_source,
        model_parameters / 1e6,
        trained_parameters / 1e6,
        data_source,
        tokenizer_source,
        training_args.per_device_train_batch_size,
        training_args.world_size,
        training_args.gradient_accumulation_steps,
        trainer_summary.global_batch(training_args),
        trainer_summary.trainer_name(platform.on_gaudi),
    )
    logger.info("in effect: %s", ", ".join(f"{k} {v}" for k, v in switches.items()))
    watched = record.watch_attention(model, training_args, platform.on_gaudi)

    # 7. Train, evaluate and predict, as asked (mediapipe's loader may refuse here, in one line)
    try:
        with one_line_errors(PROG, SetupError):
            metrics = train_and_evaluate(trainer, splits, training_args, bench, tokenizer)
    except ImageModeError as error:
        raise config_error(PROG, image_mode_error(error)) from None

    # 8. Write the summary, last
    num_examples = len(splits["train"]) if "train" in splits else 0
    return record.write_summary(
        run_dir,
        trainer,
        throughput,
        metrics,
        parsed,
        built,
        sources,
        switches,
        watched,
        sample_flops,
        num_examples,
    )


if __name__ == "__main__":
    main()
