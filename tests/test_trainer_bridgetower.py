"""The BridgeTower trainer: offline runs, the published preprocessing, the run directory it writes,
each throughput definition, Gaudi's config and mediapipe (as far as a machine without Habana goes)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, departures_of_the_run

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from reprokit_trainers.bridgetower import mediapipe, offline, record, run_bridgetower  # noqa: E402
from reprokit_trainers.common.data.synthetic import (  # noqa: E402
    CARTOON_HEIGHTS,
    CARTOON_WIDTHS,
    cartoon_jpeg_bytes,
    sample_sizes,
)
from reprokit_trainers.common.measure import hf_trainer as throughput  # noqa: E402
from reprokit_trainers.common.measure.meter import ThroughputMeter  # noqa: E402
from reprokit_trainers.common.process import gaudi  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning",
    "ignore::FutureWarning",
    # The Trainer's loader on a machine without a GPU, in the runs made in this process (main_here).
    "ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning",
)

TRAINER = ["-m", "reprokit_trainers.bridgetower"]  # run from ROOT, as a user would
# The smallest BridgeTower that builds: the vision encoder has hidden_size // 64 heads, so 64 at least.
TINY = {
    "text_config": {
        "vocab_size": 50265,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 514,
    },
    "vision_config": {"hidden_size": 64, "num_hidden_layers": 2, "patch_size": 14, "image_size": 294},
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "contrastive_hidden_size": 32,
    "logit_scale_init_value": 2.6592,
}
# BridgeTower/bridgetower-large-itm-mlm-itc as recipes/bridgetower/SOURCES.md §2 describes it.
LARGE = {
    "text_config": {
        "vocab_size": 50265,
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "max_position_embeddings": 514,
    },
    "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24, "patch_size": 14, "image_size": 294},
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_hidden_layers": 6,
    "contrastive_hidden_size": 512,
    "logit_scale_init_value": 2.6592,
}
# The published hub ids, as the recipe passes them: offline, the trainer must fall back on its own.
HUB_ARGS = [
    "--model_name_or_path", "BridgeTower/bridgetower-large-itm-mlm-itc",
    "--dataset_name", "jmhessel/newyorker_caption_contest", "--dataset_config_name", "matching",
    "--dataset_revision", "3c6c4f6c0ff7e902833d3afa5f8f3875c2b036e6", "--trust_remote_code",
    "--image_column", "image", "--caption_column", "image_description",
]  # fmt: skip
SMALL_RUN = [
    "--model_config_json", json.dumps(TINY),
    "--synthetic_num_train", "24", "--synthetic_num_eval", "4",
    "--synthetic_image_width", "500", "900", "--synthetic_image_height", "400", "800",
    "--synthetic_caption_words", "10", "40", "--synthetic_seed", "0",
    "--remove_unused_columns", "false", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
    "--logging_steps", "2", "--throughput_warmup_steps", "2", "--save_strategy", "no",
    "--report_to", "tensorboard", "--overwrite_output_dir",
]  # fmt: skip


def offline_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
        "OMP_NUM_THREADS": "1",  # two cores, shared
    }


def in_a_process(
    tmp_path: Path, command: list[str], env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess:
    """`command` run from ROOT as a user would, offline (offline_env), ``env`` laid over it."""
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**offline_env(tmp_path), **(env or {})},
        timeout=timeout,
        cwd=ROOT,
    )


def train(
    tmp_path: Path, *args: str, launcher: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, Path]:
    """A small run in a process of its own (``launcher``: torchrun's); ``env`` is read as it starts."""
    run_dir = tmp_path / "run"
    command = [sys.executable, *launcher, *TRAINER, "--output_dir", str(run_dir), *SMALL_RUN, *args]
    result = in_a_process(tmp_path, command, env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, run_dir


def refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """The one line a refused command line ends with (and nothing written, no traceback)."""
    command = [sys.executable, *TRAINER, "--output_dir", str(tmp_path / "run"), *args]
    result = in_a_process(tmp_path, command, env, timeout=120)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1], result.stderr
    assert not (tmp_path / "run" / "summary.json").exists()
    return errors[0]


@pytest.fixture
def main_here(tmp_path, monkeypatch):
    """The trainer's main, called in this process as a new one started with offline_env would run it
    (importing torch and transformers is most of a small run's time in a new process: 9 CPU-s against
    3 for the smoke run): offline, with the hub's and datasets' caches under tmp_path/hf (the libraries
    read both once, on import: a checkpoint or tokenizer in this machine's cache would be loaded where
    the run must fall back), and what main sets for its process put back after."""
    import datasets.config
    import huggingface_hub.constants
    import transformers.utils.hub
    import transformers.utils.logging

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(transformers.utils.hub, "_is_offline_mode", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    hf = tmp_path / "hf"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hf / "hub"))
    monkeypatch.setattr(transformers.utils.hub, "TRANSFORMERS_CACHE", str(hf / "hub"))
    monkeypatch.setattr(transformers.utils.hub, "HF_MODULES_CACHE", str(hf / "modules"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", hf / "datasets")
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", hf / "modules")
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    verbosity = transformers.utils.logging.get_verbosity()
    yield run_bridgetower.main
    transformers.utils.logging.set_verbosity(verbosity)


@pytest.fixture
def train_here(tmp_path, main_here):
    """`train` with main called in this process (main_here); returns the run directory. `python -m
    reprokit_trainers.bridgetower` itself runs in test_trainers_package.py and in this file's process
    tests (torchrun, a read-only cache, a refusal)."""

    def run(*args: str) -> Path:
        run_dir = tmp_path / "run"
        main_here(["--output_dir", str(run_dir), *SMALL_RUN, *args])
        return run_dir

    return run


@pytest.fixture
def refused_here(tmp_path, main_here, capsys):
    """What `refused` checks, with the trainer's main called in this process (main_here): a SystemExit
    of one line naming the error (the interpreter prints it last and exits 1), no other error said,
    nothing written. `refused` keeps the process test of the one line without a traceback."""

    def run(*args: str) -> str:
        with pytest.raises(SystemExit) as raised:
            main_here(["--output_dir", str(tmp_path / "run"), *args])
        line = raised.value.code
        assert isinstance(line, str) and "\n" not in line and "error:" in line, line
        said = capsys.readouterr()
        assert "error:" not in said.err and "Traceback" not in said.err, said.err
        assert not (tmp_path / "run" / "summary.json").exists()
        return line

    return run


def test_a_smoke_run_writes_the_whole_run_directory(train_here):
    run_dir = train_here(
        "--random_init", "--synthetic_data", "--do_train", "--do_eval", "--do_predict",
        "--max_steps", "6", "--dataloader_num_workers", "1", "--optim", "adamw_hf",
    )  # fmt: skip

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["steps"] == 6 and summary["warmup_steps"] == 2 and summary["world_size"] == 1
    # samples/s counts the 4 steps after the warm-up; the Trainer's own figure counts all 6.
    assert summary["measured_samples"] == 16 and summary["samples"] == 24
    assert summary["samples_per_second"] == summary["throughput"]["after_warmup"]["value"] > 0
    assert summary["trainer_metrics"]["train_samples_per_second"] == summary["train_samples_per_second"] > 0
    # What ran other than the publication, and the switches in effect.
    assert departures_of_the_run(summary) == [
        {"reason": "random weights", "kind": "quality"},
        {"reason": "offline tokenizer", "kind": "quality"},
        {"reason": "synthetic data", "kind": "throughput"},
    ]
    assert (summary["mediapipe"], summary["loader"], summary["image_pipeline"]) == (
        False,
        "torch",
        "published",
    )
    assert summary["distribution_strategy"] == "none (one process)" and summary["torch_compile"] is False
    # The software that ran, read back: transformers 4.31's per-tensor AdamW as the recipe asks,
    # transformers' own attention in the text layers, torch's MultiheadAttention (SDPA) in the vision's.
    assert summary["software"] == {
        "attention": "text math, vision sdpa-flash",
        "optimizer": "adamw-per-tensor (transformers)",
        "ddp": "none",
        "tf32": summary["software"]["tf32"],
        "mixed_precision": "fp32",
        "data_path": "published",
        # transformers' loop: each step's loss checked for NaN on the host, gradients freed (torch 2).
        "host_sync": "every-step",
        "zero_grad": "set-to-none",
    }
    assert summary["trainer"] == "Trainer" and summary["gaudi_config"] is None
    assert summary["eval_metrics"]["eval_loss"] > 0 and summary["test_metrics"]["test_loss"] > 0
    assert (summary["model_source"], summary["data_source"], summary["tokenizer_source"]) == (
        "random",
        "synthetic",
        "offline",
    )
    assert summary["model_parameters"] == record.count_parameters(offline.build_config(json.dumps(TINY)))
    assert summary["dataloader_num_workers"] == 1 and summary["global_batch_size"] == 4
    # The FLOPs of one sample of the model trained (128 caption tokens, 294 px), counted at start.
    assert summary["flops_per_sample"] == pytest.approx(
        record.flops_per_sample(offline.build_config(json.dumps(TINY)), 128)
    )
    if not torch.cuda.is_available():  # no peak for a CPU, so no MFU
        assert summary["device_peak_tflops"] is None and summary["mfu"] is None

    with open(run_dir / "throughput.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [2, 4, 6]
    assert all(float(r["samples_per_second"]) > 0 and float(r["loss"]) > 0 for r in rows)
    # Where each interval went: the Trainer's fetch of its batches timed, one process communicates nothing.
    assert all(
        float(r["data_wait"]) > 0 and float(r["compute"]) > 0 and r["communication"] == "" for r in rows
    )
    breakdown = summary["breakdown"]
    assert breakdown["counted"] == "steps 3-6, rank 0" and breakdown["steps"] == 4
    assert breakdown["data_wait"] + breakdown["compute"] + breakdown["other"] == pytest.approx(1, abs=1e-3)
    assert breakdown["communication"] is None and breakdown["communication_timed"] == "none (one process)"
    # Energy: this machine's RAPL, or why there is none.
    assert (
        summary["energy_joules"] > 0
        if isinstance(summary["energy"], dict)
        else summary["energy"].startswith("unavailable (")
    )

    sysinfo = json.loads((run_dir / "sysinfo.json").read_text())
    assert sysinfo["trainer"] == "run_bridgetower.py" and sysinfo["started_at"]
    # The Trainer's scalars and the kit's throughput scalars, both under tensorboard/.
    events = list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert any(e.parent.name == "tensorboard" for e in events)
    assert any(e.parent.name == "throughput" for e in events)


def test_offline_it_falls_back_to_random_weights_and_synthetic_data_and_records_both(train_here, capsys):
    """The published command line, unreachable hub: the run still completes, says what it used, and
    records each fallback as a departure (the host then gives no verdict)."""
    run_dir = train_here(*HUB_ARGS, "--do_train", "--max_steps", "3", "--image_pipeline", "kit-draft")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 3
    assert summary["model_source"] == "random" and summary["model_fallback_reason"]
    assert (
        summary["data_source"] == "synthetic"
        and "newyorker_caption_contest" in summary["data_fallback_reason"]
    )
    assert [(d["reason"], d["kind"]) for d in summary["departures"]] == [
        ("random weights", "quality"),
        ("model fallback: the checkpoint could not be loaded (model_fallback_reason)", "quality"),
        ("offline tokenizer", "quality"),
        ("synthetic data", "throughput"),
        (
            "data fallback: jmhessel/newyorker_caption_contest could not be loaded (data_fallback_reason)",
            "throughput",
        ),
    ]
    assert summary["image_pipeline"] == "kit-draft" and summary["mediapipe"] is False
    assert "[reprokit] departure from the publication (throughput): synthetic data" in capsys.readouterr().out


def test_each_throughput_definition_counts_what_its_publication_counted(train_here):
    """10 rows in batches of 4 make a partial third batch: 5 steps hold 4, 4, 2, 4, 4 samples."""
    run_dir = train_here(
        "--random_init", "--synthetic_data", "--do_train", "--synthetic_num_train", "10",
        "--max_steps", "5", "--throughput_warmup_steps", "1", "--dataloader_num_workers", "0",
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    figures = summary["throughput"]
    # The kit's meter: what steps 2-5 really held, the partial batch as it was.
    assert figures["after_warmup"]["samples"] == 14 and summary["samples"] == 18
    assert figures["after_warmup"]["value"] == pytest.approx(14 / figures["after_warmup"]["seconds"])
    # The GPU figures' definition: the stock Trainer's own metric, unchanged (max_steps x batch = 20).
    metrics = summary["trainer_metrics"]
    assert figures["whole_run"]["value"] == metrics["train_samples_per_second"]
    assert (
        figures["whole_run"]["samples"] == 20 and figures["whole_run"]["seconds"] == metrics["train_runtime"]
    )
    # Gaudi's: GaudiTrainer's formula (max_steps x batch - warm-up x batch), over the meter's steady time.
    assert figures["gaudi_trainer"]["samples"] == 5 * 4 - 1 * 4
    assert figures["gaudi_trainer"]["seconds"] == figures["after_warmup"]["seconds"]
    assert "GaudiTrainer's formula" in figures["gaudi_trainer"]["counted"]


def test_gaudi_trainer_samples_follow_its_formula_over_epochs():
    # The published Gaudi2 run: 9,792 rows, 5 epochs, 3 warm-up steps of 8 x 48.
    assert throughput.gaudi_trainer_samples(9792, 5, -1, 3, 384) == 9792 * 5 - 3 * 384
    # Partial last batches are not looked at: 10 rows in batches of 4 count 10 per epoch.
    assert throughput.trainer_samples(10, 2, -1, 4) == 20
    assert throughput.gaudi_trainer_samples(10, 2, -1, 1, 4) == 16
    assert throughput.gaudi_trainer_samples(10, 2, 5, 1, 4) == 16  # max_steps wins over epochs


def test_when_gaudi_trainer_ran_its_own_figure_is_the_gaudi_trainer_definition():
    meter = ThroughputMeter(warmup_steps=1)
    for step in range(1, 4):
        meter.step_end(4, boundary=step == 3)
    metrics = {"train_samples_per_second": 123.456, "train_runtime": 9.0}
    figures = throughput.definitions(meter, "GaudiTrainer", metrics, 10, 1.0, -1, 4)
    assert figures["gaudi_trainer"]["value"] == 123.456 and figures["gaudi_trainer"]["samples"] == 10 - 4
    assert figures["gaudi_trainer"]["counted"].startswith("GaudiTrainer's own")
    # GaudiTrainer's metric is not a whole-run figure: that one stays the kit meter's.
    assert figures["whole_run"]["samples"] == 12 and "kit's meter" in figures["whole_run"]["counted"]


@pytest.fixture(scope="module")
def tokenizer():
    return offline.offline_tokenizer()


def test_synthetic_rows_are_drawn_only_for_the_splits_a_run_reads(tmp_path):
    # A run that trains only keeps the dataset's three splits (none is carved out of train), but draws
    # no cartoons for the two it never reads.
    data_args = run_bridgetower.DataTrainingArguments(synthetic_num_train=3, synthetic_num_eval=2)
    dataset = offline.synthetic_dataset(data_args, cache_dir=str(tmp_path), read=["train"])
    assert {s: len(d) for s, d in dataset.items()} == {"train": 3, "validation": 0, "test": 0}
    assert dataset["test"].features == dataset["train"].features


def test_preprocessing_is_the_published_one(tmp_path, tokenizer):
    """Caption -> 128 RoBERTa-style ids; JPEG -> CLIP-normalized 294 x 294, in the dataset's transform."""
    data_args = run_bridgetower.DataTrainingArguments(synthetic_num_train=2, synthetic_num_eval=1)
    dataset = offline.synthetic_dataset(data_args, cache_dir=str(tmp_path))
    transform = run_bridgetower.ImageTransform("image", run_bridgetower.published_image_transform(294))
    train_split = run_bridgetower.prepare_split(
        dataset["train"], tokenizer, data_args, transform, None, "train", 294
    )

    row = train_split[0]
    assert row["pixel_values"].shape == (3, 294, 294) and row["pixel_values"].dtype == torch.float32
    pixels = row["pixel_values"]
    # CLIP's normalization: the drawing's white paper, its commonest pixel, becomes (1 - mean) / std.
    # (Ink lines overshoot that range: a bicubic resize without antialiasing rings at sharp edges,
    # and nothing clamps the float tensor, as published.)
    for channel, (mean, std) in enumerate(
        zip(run_bridgetower.CLIP_MEAN, run_bridgetower.CLIP_STD, strict=True)
    ):
        paper = float(pixels[channel].flatten().mode().values)
        assert paper == pytest.approx((1 - mean) / std, abs=1e-4)
    ids, mask = row["input_ids"], row["attention_mask"]
    assert len(ids) == len(mask) == 128
    words = len(dataset["train"][0]["image_description"].split())
    assert 10 <= words <= 40
    assert ids[0] == 0 and ids[sum(mask) - 1] == 2  # <s> ... </s>
    assert sum(mask) == words + 3  # the words, the final period, <s> and </s>
    assert set(ids[sum(mask) :]) == {1}  # padded with <pad> to max_length

    # The rows are stored as JPEG bytes and decoded by datasets, like the real ones: the tensor is
    # exactly what the published transform makes of those bytes.
    raw = dataset["train"].cast_column("image", datasets.Image(decode=False))[0]
    assert torch.equal(pixels, run_bridgetower.published_image_transform(294)(raw["image"]["bytes"]))


def test_a_new_yorker_sized_jpeg_becomes_a_294_crop(tokenizer):
    jpeg = cartoon_jpeg_bytes(700, 560, np.random.default_rng(0))
    transform = run_bridgetower.ImageTransform("image", run_bridgetower.published_image_transform(294))
    batch = transform({"image": [{"bytes": jpeg, "path": None}]})
    assert batch["pixel_values"][0].shape == (3, 294, 294)
    encoded = tokenizer(["A man sitting at a desk."], max_length=128, padding="max_length", truncation=True)
    assert len(encoded.input_ids[0]) == 128


def test_the_published_architecture_has_866_6m_parameters():
    config = offline.build_config(json.dumps(LARGE))
    assert config.logit_scale_init_value == pytest.approx(2.6592)
    assert record.count_parameters(config) == pytest.approx(866.6e6, abs=0.05e6)


def test_the_logit_scale_is_pinned_when_the_architecture_omits_it():
    """BridgeTowerConfig has no default logit scale; the model would fail on first use without one."""
    partial = {k: v for k, v in TINY.items() if k != "logit_scale_init_value"}
    model = run_bridgetower.BridgeTowerForContrastiveLearning(offline.build_config(json.dumps(partial)))
    assert model.logit_scale.item() == pytest.approx(2.6592)


def test_the_recipe_architectures_build():
    yaml = pytest.importorskip("yaml")
    recipe = yaml.safe_load((ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text())
    published = offline.build_config(json.dumps(recipe["model"]["architecture"]))
    assert record.count_parameters(published) == pytest.approx(866.6e6, abs=0.05e6)
    for name, scale in recipe["scales"].items():
        if "architecture" in scale:
            config = offline.build_config(json.dumps(scale["architecture"]))
            try:
                record.count_parameters(config)
            except ValueError as error:  # the vision encoder has hidden_size // 64 heads
                pytest.fail(f"the {name} scale's architecture does not build: {error}")


@pytest.mark.skipif(gaudi.gaudi_available(), reason="a Gaudi: the Gaudi flags are valid here")
@pytest.mark.parametrize(
    "flag",
    [
        ["--use_habana"],
        ["--use_lazy_mode"],
        ["--use_hpu_graphs_for_inference"],
        ["--gaudi_config_name", "gaudi_configs/clip.json"],
        ["--distribution_strategy", "fast_ddp"],
    ],
)
def test_gaudi_only_flags_are_refused_elsewhere(tmp_path, flag):
    with pytest.raises(SystemExit) as raised:
        run_bridgetower.parse_args(["--output_dir", str(tmp_path), "--do_train", *flag])
    message = str(raised.value)
    assert message.startswith("run_bridgetower.py: error: ") and "\n" not in message
    assert flag[0] in message and "Gaudi" in message


@pytest.mark.skipif(gaudi.gaudi_available(), reason="a Gaudi: the Gaudi flags are valid here")
def test_a_gaudi_flag_ends_the_command_in_one_line_without_a_traceback(tmp_path):
    line = refused(tmp_path, "--use_habana", "--do_train")
    assert line.startswith("run_bridgetower.py: error: --use_habana needs a Gaudi")


def _without(config: dict, key: str) -> dict:
    return {k: v for k, v in config.items() if k != key}


@pytest.mark.parametrize(
    "architecture, said",
    [
        (
            _without(TINY, "contrastive_hidden_size"),
            "contrastive_hidden_size is missing: the contrastive heads",
        ),
        (
            {**TINY, "contrastive_hidden_size": 0},
            "contrastive_hidden_size 0: give a whole number of at least 1",
        ),
        (
            {**TINY, "text_config": {**TINY["text_config"], "num_hidden_layers": 0}},
            "text_config.num_hidden_layers 0: give a whole number of at least 1",
        ),
        (
            {**TINY, "vision_config": {**TINY["vision_config"], "hidden_size": "64"}},
            "vision_config.hidden_size '64': give a whole number of at least 1",
        ),
        (
            {**TINY, "vision_config": {**TINY["vision_config"], "num_hidden_layers": 3}},
            "text_config.num_hidden_layers 2 and vision_config.num_hidden_layers 3: both towers are split",
        ),
    ],
    ids=["no-contrastive-size", "zero-contrastive", "no-text-layers", "text-size", "towers-differ"],
)
def test_an_architecture_that_cannot_build_is_one_line_naming_the_key(refused_here, architecture, said):
    """Before: a traceback from the model's code (AttributeError, IndexError), torch's message on a size
    given as text, or a run that trained (a contrastive space of no dimension; towers of two depths
    split at the text tower's layer)."""
    # SMALL_RUN less its architecture: a run that builds trains three steps of it.
    rest = SMALL_RUN[2:]
    line = refused_here(
        "--random_init", "--synthetic_data", "--do_train", "--max_steps", "3", *rest,
        "--model_config_json", json.dumps(architecture),
    )  # fmt: skip
    assert line.startswith(f"run_bridgetower.py: error: --model_config_json does not build: {said}"), line


def test_optimum_habana_alone_is_no_gaudi(monkeypatch):
    """Images without Habana's stack may still carry optimum-habana (whose import then fails)."""
    import types

    monkeypatch.setitem(sys.modules, "optimum.habana", types.ModuleType("optimum.habana"))
    assert gaudi.habana_stack() is False and gaudi.gaudi_available() is False


def test_a_value_outside_the_argument_schema_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as raised:
        run_bridgetower.parse_args(
            ["--output_dir", str(tmp_path), "--do_train", "--per_device_train_batch_size", "0"]
        )
    assert (
        str(raised.value)
        == "run_bridgetower.py: error: --per_device_train_batch_size: must be at least 1, got 0"
    )


# ----------------------------------------------------------------------------------------------
# The Gaudi config: shipped with the trainer, resolved to a local file before parsing


def test_the_recipes_gaudi_config_is_the_trainers_own_file_with_habana_clips_switches():
    resolved = gaudi.resolve_gaudi_config("gaudi_configs/clip.json", run_bridgetower.TRAINER_DIR)
    shipped = ROOT / "recipes" / "bridgetower" / "bridgetower" / "gaudi_configs" / "clip.json"
    assert resolved.path == shipped.resolve()
    assert resolved.settings == {
        "use_fused_adam": True,
        "use_fused_clip_norm": True,
        "use_torch_autocast": True,
    }
    assert resolved.sha256 == hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert resolved.summary()["path"] == str(shipped.resolve())


def test_the_gaudi_config_argument_is_handed_on_as_an_absolute_path(tmp_path):
    argv = ["--do_train", "--gaudi_config_name", "gaudi_configs/clip.json", "--use_habana"]
    rewritten, resolved = gaudi.resolve_gaudi_config_arg(argv, run_bridgetower.TRAINER_DIR)
    assert rewritten == ["--do_train", "--gaudi_config_name", str(resolved.path), "--use_habana"]
    mine = tmp_path / "mine.json"
    mine.write_text('{"use_fused_adam": false}')
    rewritten, resolved = gaudi.resolve_gaudi_config_arg(
        [f"--gaudi_config_name={mine}"], run_bridgetower.TRAINER_DIR
    )
    assert rewritten == [f"--gaudi_config_name={mine.resolve()}"] and resolved.settings == {
        "use_fused_adam": False
    }
    assert gaudi.resolve_gaudi_config_arg(["--do_train"], run_bridgetower.TRAINER_DIR) == (
        ["--do_train"],
        None,
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("{not json", "is not valid JSON"),
        ("[true]", "must hold a JSON object"),
        ('{"use_fused_adam": "yes"}', "use_fused_adam must be true or false"),
    ],
)
def test_a_gaudi_config_that_cannot_load_is_one_line_naming_it(tmp_path, content, expected):
    path = tmp_path / "broken.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(gaudi.SetupError) as raised:
        gaudi.resolve_gaudi_config(str(path), run_bridgetower.TRAINER_DIR)
    message = str(raised.value)
    assert message.startswith(f"--gaudi_config_name {path}: ") and expected in message and "\n" not in message


def test_a_hub_gaudi_config_offline_and_not_cached_is_one_line(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(gaudi.SetupError) as raised:
        gaudi.resolve_gaudi_config("Habana/clip", run_bridgetower.TRAINER_DIR, cache_dir=str(tmp_path))
    assert str(raised.value).startswith("--gaudi_config_name Habana/clip: no local file of that name")
    assert "not in the Hugging Face cache" in str(raised.value)


@pytest.fixture
def habana_stack_path(tmp_path, monkeypatch):
    """This process's path with a folder where `habana_frameworks.torch` imports (and nothing else of
    Habana's); what it imported is forgotten after the test."""
    fake = tmp_path / "fake-habana"
    (fake / "habana_frameworks" / "torch").mkdir(parents=True)
    (fake / "habana_frameworks" / "__init__.py").write_text("")
    (fake / "habana_frameworks" / "torch" / "__init__.py").write_text("")
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(fake))
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("habana_frameworks", "optimum"):
            del sys.modules[name]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nope.json", "--gaudi_config_name nope.json: no such file"),
        ("Habana/clip", "--gaudi_config_name Habana/clip: no local file of that name"),
        # A config that loads gets as far as optimum-habana, which is not here.
        ("gaudi_configs/clip.json", "Habana's stack is here but optimum-habana does not import"),
    ],
)
def test_where_habanas_stack_imports_the_gaudi_config_is_resolved_first_and_refused_in_one_line(
    habana_stack_path, refused_here, name, expected
):
    assert gaudi.habana_stack()
    line = refused_here("--do_train", "--gaudi_config_name", name)
    assert line.startswith(f"run_bridgetower.py: error: {expected}")


# ----------------------------------------------------------------------------------------------
# mediapipe: the example's HPU loader, or one line saying why not


def test_mediapipe_off_gaudi_is_one_line(refused_here):
    line = refused_here("--do_train", "--random_init", "--synthetic_data", "--mediapipe_dataloader")
    assert line.startswith(
        "run_bridgetower.py: error: --mediapipe_dataloader decodes the JPEGs on Gaudi's HPUs"
    )


def test_mediapipe_without_the_vendor_files_says_how_to_build_the_image(monkeypatch):
    monkeypatch.setattr(
        mediapipe, "importable", lambda module: not module.startswith(("habana_data", "clip_"))
    )
    with pytest.raises(gaudi.SetupError) as raised:
        mediapipe.check_mediapipe(on_gaudi=True, image_pipeline="published")
    message = str(raised.value)
    assert "habana_dataloader_trainer.py, clip_mediapipe_dataloader.py, clip_media_pipe.py" in message
    assert "`inv build --accelerator gaudi2`, not --without-vendor" in message


def test_mediapipe_with_another_image_pipeline_is_refused(monkeypatch):
    monkeypatch.setattr(mediapipe, "importable", lambda module: True)
    mediapipe.check_mediapipe(on_gaudi=True, image_pipeline="published")
    with pytest.raises(
        gaudi.SetupError, match="--image_pipeline kit does nothing with --mediapipe_dataloader"
    ):
        mediapipe.check_mediapipe(on_gaudi=True, image_pipeline="kit")


def test_mediapipe_reads_files_so_synthetic_rows_are_files_for_it_and_bytes_are_refused(tmp_path):
    """The HPU pipeline reads the JPEG files the rows point at (the pinned revision's layout)."""
    args = dict(synthetic_num_train=3, synthetic_num_eval=1, synthetic_unique_images=2)
    as_bytes = offline.synthetic_dataset(
        run_bridgetower.DataTrainingArguments(**args), cache_dir=str(tmp_path / "a")
    )["train"].cast_column("image", datasets.Image(decode=False))
    with pytest.raises(gaudi.SetupError, match="a train row has no file path"):
        mediapipe.check_mediapipe_rows(as_bytes, "image", "train")

    as_files = offline.synthetic_dataset(
        run_bridgetower.DataTrainingArguments(**args, mediapipe_dataloader=True),
        cache_dir=str(tmp_path / "b"),
    )["train"].cast_column("image", datasets.Image(decode=False))
    mediapipe.check_mediapipe_rows(as_files, "image", "train")
    paths = {row["image"]["path"] for row in as_files}
    assert len(paths) == 2 and all(Path(p).read_bytes()[:2] == b"\xff\xd8" for p in paths)
    with pytest.raises(gaudi.SetupError, match="reads file paths from an `image_path` or `image` column"):
        mediapipe.check_mediapipe_rows(as_files.rename_column("image", "picture"), "picture", "train")


def test_a_mediapipe_loader_that_falls_back_to_the_cpu_ends_the_run_with_its_reason(tmp_path, monkeypatch):
    """The example's loader catches any failure of the HPU pipeline, logs it and builds a CPU loader;
    the kit stops there instead, with the reason the loader gave."""
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / "habana_dataloader_trainer.py").write_text(
        "import logging\n"
        "class Loader:\n"
        "    fallback_activated = True\n"
        "class HabanaDataloaderTrainer:\n"
        "    def get_train_dataloader(self):\n"
        "        logging.getLogger('clip_mediapipe_dataloader').warning(\n"
        "            'Using Pytorch native dataloader because: no HPU media device.')\n"
        "        return Loader()\n"
    )
    monkeypatch.syspath_prepend(str(vendor))
    monkeypatch.delitem(sys.modules, "habana_dataloader_trainer", raising=False)
    trainer = mediapipe.mediapipe_trainer()()
    with pytest.raises(gaudi.SetupError) as raised:
        trainer.get_train_dataloader()
    assert "fell back to the CPU one (Using Pytorch native dataloader because: no HPU media device.)" in str(
        raised.value
    )
    logging.getLogger("clip_mediapipe_dataloader").handlers.clear()


# ----------------------------------------------------------------------------------------------
# Synthetic cartoons of the real sizes


def test_synthetic_cartoons_take_their_sizes_from_one_place_and_weigh_what_real_rows_do():
    yaml = pytest.importorskip("yaml")
    data = run_bridgetower.DataTrainingArguments()
    assert data.synthetic_image_width == list(CARTOON_WIDTHS) == [800, 1680]
    assert data.synthetic_image_height == list(CARTOON_HEIGHTS)
    recipe = yaml.safe_load((ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text())
    assert not {"image_width", "image_height"} & set(recipe["dataset"]["synthetic"])
    # About 56 KB a row: 548 MB of parquet shards for 9,792 train rows.
    rng = np.random.default_rng(0)
    sizes = [
        len(cartoon_jpeg_bytes(w, h, rng)) for w, h in sample_sizes(48, rng, CARTOON_WIDTHS, CARTOON_HEIGHTS)
    ]
    assert 50_000 < sum(sizes) / len(sizes) < 62_000


def test_profile_traces_the_trainers_steps_after_its_warmup(train_here):
    run_dir = train_here(
        "--random_init", "--synthetic_data", "--do_train", "--max_steps", "6",
        "--dataloader_num_workers", "0", "--profile", '{"active": 2}',
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    profile = summary["profile"]
    assert profile["schedule"] == {"wait": 2, "warmup": 1, "active": 2} and profile["steps"] == [4, 5]
    trace = json.loads(gzip.decompress((run_dir / profile["trace"]).read_bytes()))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"ProfilerStep#4", "ProfilerStep#5"} <= names and "ProfilerStep#3" not in names
    assert profile["cpu_top_ops"] and "departures" in summary
    assert any(
        d["reason"].startswith("profiled: torch.profiler traced steps 4-5") for d in summary["departures"]
    )


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory) -> Path:
    """Two processes under torchrun, started as NGC's images start them (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1,
    which torch reads once a process, so only a new one shows what it does) and asked for --tf32 false:
    the run directory the torchrun and the TF32 tests read (one launch of three Pythons, not two)."""
    _, run_dir = train(
        tmp_path_factory.mktemp("torchrun"),
        "--random_init", "--synthetic_data", "--do_train", "--max_steps", "4",
        "--per_device_train_batch_size", "2", "--dataloader_num_workers", "0", "--tf32", "false",
        launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
        env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"},
    )  # fmt: skip
    return run_dir


@pytest.mark.slow
def test_two_processes_train_together_under_torchrun(torchrun_run):
    run_dir = torchrun_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["world_size"] == 2
    # Global: 2 per device x 2 processes, 4 steps, the first 2 of them warm-up.
    assert summary["global_batch_size"] == 4 and summary["samples"] == 16 and summary["measured_samples"] == 8
    assert summary["samples_per_second"] > 0
    # DDP's gradient all-reduce, timed by DDP's own reducer on rank 0 (no hook of the kit's).
    assert summary["breakdown"]["communication"] > 0
    assert summary["breakdown"]["communication_timed"].startswith("DDP's reducer timers")
    # Rank 1 writes nothing: one row per logging step, not two.
    with open(run_dir / "throughput.csv") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [2, 4]


def test_an_optimizer_without_train_modes_survives_accelerate_033s_unguarded_call():
    """The gaudi2 image's accelerate 0.33 forwards optimizer.train() to torch's AdamW, which has none
    (the stand-in's smoke cell found it); optimizers with real train modes keep theirs."""
    from types import SimpleNamespace

    from reprokit_trainers.common.process.accelerate_compat import give_optimizer_train_modes

    adamw = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    wrapper = SimpleNamespace(optimizer=adamw)
    give_optimizer_train_modes(wrapper)
    assert wrapper.optimizer.train() is None and wrapper.optimizer.eval() is None

    calls = []
    schedule_free = SimpleNamespace(train=lambda: calls.append("train"), eval=lambda: calls.append("eval"))
    give_optimizer_train_modes(SimpleNamespace(optimizer=schedule_free))
    schedule_free.train()
    assert calls == ["train"]


# ----------------------------------------------------------------------------------------------
# The published image path: what optimum-habana v1.7.0's get_image hands the transform


def test_the_published_path_makes_no_rgb_copy_and_gives_the_same_pixels(monkeypatch):
    """v1.7.0 turns an RGB image into a tensor as it is: the kit's former .convert("RGB") copied every
    image and changed no pixel (on the synthetic cartoons the output is bit for bit the same)."""
    import io

    from PIL import Image

    from reprokit_trainers.bridgetower import fastimage

    transform = fastimage.published_transform(294)
    rng = np.random.default_rng(0)
    convert, converted = Image.Image.convert, []

    def counting_convert(self, *args, **kwargs):
        converted.append(args)
        return convert(self, *args, **kwargs)

    for width, height in sample_sizes(3, rng, CARTOON_WIDTHS, CARTOON_HEIGHTS):
        image = Image.open(io.BytesIO(cartoon_jpeg_bytes(width, height, rng)))
        image.load()  # as datasets hands it over
        copied = transform(image.convert("RGB"))  # what the kit's path computed before
        monkeypatch.setattr(Image.Image, "convert", counting_convert)
        published = transform(image)
        monkeypatch.setattr(Image.Image, "convert", convert)
        assert converted == [] and torch.equal(published, copied)


def test_a_grey_image_is_made_grey_rgb_and_a_four_band_one_stops_in_one_line():
    """v1.7.0: a one-band image goes through to_grayscale(3 channels) (the same pixels as the RGB
    convert); an RGBA or CMYK image became a 4-channel tensor and the run failed at Normalize."""
    from PIL import Image

    from reprokit_trainers.bridgetower import fastimage

    transform = fastimage.published_transform(294)
    grey = Image.fromarray(np.random.default_rng(1).integers(0, 256, (300, 400), dtype=np.uint8), "L")
    assert torch.equal(transform(grey), transform(grey.convert("RGB")))
    for mode in ("RGBA", "CMYK"):
        with pytest.raises(
            fastimage.ImageModeError, match=f"an image of mode {mode}: the published transform"
        ):
            transform(Image.new(mode, (300, 400)))
    worker = fastimage.ImageModeError(
        "Caught ImageModeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        "  ...\nreprokit_trainers.bridgetower.fastimage.ImageModeError: an image of mode CMYK: the published"
    )
    assert run_bridgetower.image_mode_error(worker) == "an image of mode CMYK: the published"


# ---- what was given is used or the run stops: --cache_dir (--data dataset_cache=P), the checkpoint ----


def _can_mount_read_only() -> bool:
    probe = (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True) if shutil.which("unshare") else None
    )
    return probe is not None and probe.returncode == 0


def read_only(path: Path, command: list[str]) -> list[str]:
    """`command` in a mount namespace where `path` is a read-only bind mount of itself (what a container's
    `:ro` volume is), as an unprivileged user namespace allows."""
    return [
        "unshare",
        "-rm",
        "sh",
        "-c",
        f'mount --bind -o ro "{path}" "{path}" && exec "$@"',
        "sh",
        *command,
    ]


@pytest.fixture
def given_cache(tmp_path):
    from tests.fakes.newyorker import newyorker_cache

    return newyorker_cache(tmp_path / "dataset-cache", TINY)


CACHED_RUN = [
    *HUB_ARGS, "--remove_unused_columns", "false", "--per_device_train_batch_size", "4",
    "--logging_steps", "2", "--throughput_warmup_steps", "1", "--save_strategy", "no",
    "--report_to", "tensorboard", "--overwrite_output_dir", "--do_train", "--max_steps", "3",
]  # fmt: skip


@pytest.mark.skipif(not _can_mount_read_only(), reason="no unprivileged mount namespaces here")
def test_a_read_only_cache_is_used_as_given_through_a_writable_view(tmp_path, given_cache):
    """datasets 3.6 writes its lock beside a prepared dataset: on a read-only mount that was an OSError
    the trainer turned into synthetic data. Now the data and the checkpoint are read from the given
    cache itself, through a writable view, and nothing is written into it."""
    before = sorted(str(p) for p in given_cache.rglob("*"))
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        *TRAINER,
        "--output_dir",
        str(run_dir),
        "--cache_dir",
        str(given_cache),
        *CACHED_RUN,
    ]
    result = subprocess.run(
        read_only(given_cache, command),
        capture_output=True,
        text=True,
        env=offline_env(tmp_path),
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["data_source"], summary["model_source"], summary["tokenizer_source"]) == (
        "hub",
        "hub",
        "hub",
    )
    assert departures_of_the_run(summary) == [] and summary["steps"] == 3
    assert summary["cache_dir"] == str(given_cache)
    assert summary["cache_read_through"].startswith(str(run_dir / ".scratch"))
    assert sorted(str(p) for p in given_cache.rglob("*")) == before


def test_a_given_cache_without_the_checkpoint_stops_in_one_line(tmp_path, refused_here):
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    line = refused_here("--cache_dir", str(empty), "--model_config_json", json.dumps(TINY), *CACHED_RUN)
    assert line.startswith(
        f"run_bridgetower.py: error: cannot load the checkpoint BridgeTower/bridgetower-large-itm-mlm-itc@main from --cache_dir {empty} ("
    )
    assert line.endswith(
        "it was given, so nothing replaces it: put the checkpoint there, or leave the cache out to train random weights"
    )


def test_a_given_cache_without_the_dataset_stops_in_one_line_not_on_synthetic_data(given_cache, refused_here):
    import shutil as sh

    sh.rmtree(given_cache / "jmhessel___newyorker_caption_contest")
    line = refused_here("--cache_dir", str(given_cache), *CACHED_RUN)
    assert line.startswith(
        "run_bridgetower.py: error: cannot load jmhessel/newyorker_caption_contest@3c6c4f6c0ff7e902833d3afa5f8f3875c2b036e6 "
        f"from --cache_dir {given_cache} ("
    )
    assert "it was given, so nothing replaces it" in line


def test_tf32_is_set_over_ngcs_override_and_recorded(torchrun_run):
    run_dir = torchrun_run  # started with NGC's override, asked for --tf32 false
    precision = json.loads((run_dir / "sysinfo.json").read_text())["precision"]
    assert precision["tf32_matmul"] is False and precision["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "0"
    # On a CPU TF32 is set (the switches read back) but has nothing to act on: the software block says so.
    assert json.loads((run_dir / "summary.json").read_text())["software"]["tf32"] == "not used (cpu)"


def test_the_bare_tf32_flag_the_host_writes_is_the_trainers_to_set_even_off_a_gpu():
    """The cuda cells' `tf32: true` renders as a bare --tf32; TrainingArguments' own wants a value and
    refuses true off an Ampere GPU, so the trainer takes it and sets it itself (a CPU dry run parses)."""
    from reprokit_trainers.common.process.args import take_bool_flag

    assert take_bool_flag(["--tf32", "--do_train"], "tf32") == (["--do_train"], True)
    assert take_bool_flag(["--x", "1", "--tf32"], "tf32") == (["--x", "1"], True)
    assert take_bool_flag(["--tf32", "false", "--y"], "tf32") == (["--y"], False)
    assert take_bool_flag(["--tf32=true"], "tf32") == ([], True)
    assert take_bool_flag(["--do_train"], "tf32") == (["--do_train"], None)
    *_, training_args, platform = run_bridgetower.parse_args(
        ["--output_dir", "/tmp/unused", "--do_train", "--tf32", "--model_config_json", json.dumps(TINY)]
    )
    assert platform.tf32 is True and training_args.tf32 is None


def test_where_the_hub_does_not_answer_loaders_read_the_cache_at_once(tmp_path, monkeypatch):
    """No half-minute of retries per file on a machine without the hub: the checkpoint and tokenizer
    are read from the cache alone, and what is not there is said at once."""
    import time

    from reprokit_trainers.common.data import hub

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard: nothing listens
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub.answers(timeout=1.0) is False
    args = run_bridgetower.ModelArguments(model_name_or_path="BridgeTower/bridgetower-large-itm-mlm-itc")
    started = time.monotonic()
    tokenizer, source = run_bridgetower.load_tokenizer(args, run_bridgetower.Sources(cache_only=True))
    assert source == "offline" and time.monotonic() - started < 5
