"""The BridgeTower trainer: offline runs, the published preprocessing, the run directory it writes."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from transformers import TrainingArguments  # noqa: E402

from reprokit_trainers.bridgetower import run_bridgetower  # noqa: E402
from reprokit_trainers.common.synthetic import cartoon_jpeg_bytes  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

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
# BridgeTower/bridgetower-large-itm-mlm-itc as SOURCES.md §4 describes it.
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


def train(
    tmp_path: Path, *args: str, launcher: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp_path / "run"
    command = [sys.executable, *launcher, *TRAINER, "--output_dir", str(run_dir), *SMALL_RUN, *args]
    result = subprocess.run(
        command, capture_output=True, text=True, env=offline_env(tmp_path), timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result, run_dir


def test_a_smoke_run_writes_the_whole_run_directory(tmp_path):
    _, run_dir = train(
        tmp_path,
        "--random_init", "--synthetic_data", "--do_train", "--do_eval", "--do_predict",
        "--max_steps", "6", "--dataloader_num_workers", "1",
    )  # fmt: skip

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok"
    assert summary["steps"] == 6 and summary["warmup_steps"] == 2 and summary["world_size"] == 1
    # samples/s counts the 4 steps after the warm-up; the Trainer's own figure counts all 6.
    assert summary["measured_samples"] == 16 and summary["samples"] == 24
    assert summary["samples_per_second"] > 0
    assert summary["train_samples_per_second"] > 0
    assert summary["trainer_metrics"]["train_samples_per_second"] == summary["train_samples_per_second"]
    assert summary["eval_metrics"]["eval_loss"] > 0 and summary["test_metrics"]["test_loss"] > 0
    assert (summary["model_source"], summary["data_source"], summary["tokenizer_source"]) == (
        "random",
        "synthetic",
        "offline",
    )
    assert summary["model_parameters"] == run_bridgetower.count_parameters(
        run_bridgetower.build_config(json.dumps(TINY))
    )
    assert summary["dataloader_num_workers"] == 1 and summary["global_batch_size"] == 4
    # The FLOPs of one sample of the model trained (128 caption tokens, 294 px), counted at start.
    assert summary["flops_per_sample"] == pytest.approx(
        run_bridgetower.flops_per_sample(run_bridgetower.build_config(json.dumps(TINY)), 128)
    )
    if not torch.cuda.is_available():  # no peak for a CPU, so no MFU
        assert summary["device_peak_tflops"] is None and summary["mfu"] is None

    with open(run_dir / "throughput.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [2, 4, 6]
    assert all(float(r["samples_per_second"]) > 0 and float(r["loss"]) > 0 for r in rows)

    sysinfo = json.loads((run_dir / "sysinfo.json").read_text())
    assert sysinfo["trainer"] == "run_bridgetower.py" and sysinfo["started_at"]
    # The Trainer's scalars and the kit's throughput scalars, both under tensorboard/.
    events = list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert any(e.parent.name == "tensorboard" for e in events)
    assert any(e.parent.name == "throughput" for e in events)


def test_offline_it_falls_back_to_random_weights_synthetic_data_and_the_cpu_loader(tmp_path):
    """The published command line, unreachable hub: the run still completes and says what it used."""
    result, run_dir = train(
        tmp_path,
        *HUB_ARGS,
        "--do_train",
        "--max_steps",
        "2",
        "--mediapipe_dataloader",
        "--image_pipeline",
        "kit-draft",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 2
    assert summary["model_source"] == "random" and summary["model_fallback_reason"]
    assert (
        summary["data_source"] == "synthetic"
        and "newyorker_caption_contest" in summary["data_fallback_reason"]
    )
    assert summary["mediapipe"] is False and summary["image_pipeline"] == "kit-draft"
    assert "--mediapipe_dataloader needs Gaudi: falling back to the CPU loader" in result.stdout


@pytest.fixture(scope="module")
def tokenizer():
    return run_bridgetower.offline_tokenizer()


def test_preprocessing_is_the_published_one(tmp_path, tokenizer):
    """Caption -> 128 RoBERTa-style ids; JPEG -> CLIP-normalized 294 x 294, in the dataset's transform."""
    data_args = run_bridgetower.DataTrainingArguments(synthetic_num_train=2, synthetic_num_eval=1)
    dataset = run_bridgetower.synthetic_dataset(data_args, cache_dir=str(tmp_path))
    transform = run_bridgetower.ImageTransform("image", run_bridgetower.published_image_transform(294))
    train_split = run_bridgetower.prepare_split(
        dataset["train"], tokenizer, data_args, transform, None, "train", 294
    )

    row = train_split[0]
    assert row["pixel_values"].shape == (3, 294, 294) and row["pixel_values"].dtype == torch.float32
    pixels = row["pixel_values"]
    # CLIP's normalization maps 8-bit pixels to about [-1.79, 2.15]; bicubic overshoots a little.
    assert -2.0 < float(pixels.min()) < -1.0 and 1.5 < float(pixels.max()) < 2.4
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
    config = run_bridgetower.build_config(json.dumps(LARGE))
    assert config.logit_scale_init_value == pytest.approx(2.6592)
    assert run_bridgetower.count_parameters(config) == pytest.approx(866.6e6, abs=0.05e6)


def test_the_logit_scale_is_pinned_when_the_architecture_omits_it():
    """BridgeTowerConfig has no default logit scale; the model would fail on first use without one."""
    partial = {k: v for k, v in TINY.items() if k != "logit_scale_init_value"}
    model = run_bridgetower.BridgeTowerForContrastiveLearning(
        run_bridgetower.build_config(json.dumps(partial))
    )
    assert model.logit_scale.item() == pytest.approx(2.6592)


def test_the_recipe_architectures_build():
    yaml = pytest.importorskip("yaml")
    recipe = yaml.safe_load((ROOT / "recipes" / "bridgetower.yaml").read_text())
    published = run_bridgetower.build_config(json.dumps(recipe["model"]["architecture"]))
    assert run_bridgetower.count_parameters(published) == pytest.approx(866.6e6, abs=0.05e6)
    for name, scale in recipe["scales"].items():
        if "architecture" in scale:
            config = run_bridgetower.build_config(json.dumps(scale["architecture"]))
            try:
                run_bridgetower.count_parameters(config)
            except ValueError as error:  # the vision encoder has hidden_size // 64 heads
                pytest.fail(f"the {name} scale's architecture does not build: {error}")


@pytest.mark.skipif(
    run_bridgetower.habana_available(), reason="optimum-habana is installed: Gaudi flags are valid"
)
@pytest.mark.parametrize(
    "flag",
    [
        ["--use_habana"],
        ["--use_lazy_mode"],
        ["--use_hpu_graphs_for_inference"],
        ["--gaudi_config_name", "Habana/clip"],
        ["--distribution_strategy", "fast_ddp"],
    ],
)
def test_gaudi_only_flags_are_refused_elsewhere(tmp_path, flag):
    with pytest.raises(SystemExit) as raised:
        run_bridgetower.parse_args(["--output_dir", str(tmp_path), *flag])
    message = str(raised.value)
    assert message.startswith("run_bridgetower.py: error: ") and "\n" not in message
    assert flag[0] in message and "Gaudi" in message


@pytest.mark.skipif(
    run_bridgetower.habana_available(), reason="optimum-habana is installed: Gaudi flags are valid"
)
def test_a_gaudi_flag_ends_the_command_in_one_line_without_a_traceback(tmp_path):
    command = [sys.executable, *TRAINER, "--output_dir", str(tmp_path / "run"), "--use_habana", "--do_train"]
    result = subprocess.run(
        command, capture_output=True, text=True, env=offline_env(tmp_path), timeout=120, cwd=ROOT
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("run_bridgetower.py: error: --use_habana needs a Gaudi")
    )
    assert not (tmp_path / "run" / "summary.json").exists()


def test_on_gaudi_the_gaudi_trainer_arguments_are_the_ones_parsed(tmp_path, monkeypatch):
    """With optimum-habana, GaudiTrainingArguments owns the Gaudi flags (parsed once, no duplicates)."""

    @dataclass
    class GaudiTrainingArguments(TrainingArguments):
        use_habana: bool = False
        use_lazy_mode: bool = False
        use_hpu_graphs_for_inference: bool = False
        gaudi_config_name: str | None = None
        throughput_warmup_steps: int = 0
        distribution_strategy: str = "ddp"

    fake = types.ModuleType("optimum.habana")
    fake.GaudiTrainingArguments = GaudiTrainingArguments
    monkeypatch.setitem(sys.modules, "optimum.habana", fake)
    monkeypatch.setattr(run_bridgetower, "habana_available", lambda: True)
    published = (
        "--use_habana --use_lazy_mode --use_hpu_graphs_for_inference --gaudi_config_name Habana/clip "
        "--throughput_warmup_steps 3 --mediapipe_dataloader --distribution_strategy fast_ddp --do_train"
    ).split()
    _, data_args, bench, training_args, gaudi = run_bridgetower.parse_args(
        ["--output_dir", str(tmp_path), *published]
    )
    assert gaudi and isinstance(training_args, GaudiTrainingArguments)
    assert (training_args.use_habana, training_args.throughput_warmup_steps) == (True, 3)
    assert (bench.use_habana, bench.throughput_warmup_steps, bench.distribution_strategy) == (
        True,
        3,
        "fast_ddp",
    )
    assert bench.gaudi_config_name == "Habana/clip" and data_args.mediapipe_dataloader


@pytest.mark.slow
def test_two_processes_train_together_under_torchrun(tmp_path):
    _, run_dir = train(
        tmp_path,
        "--random_init", "--synthetic_data", "--do_train", "--max_steps", "4",
        "--per_device_train_batch_size", "2", "--dataloader_num_workers", "0",
        launcher=("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["world_size"] == 2
    # Global: 2 per device x 2 processes, 4 steps, the first 2 of them warm-up.
    assert summary["global_batch_size"] == 4 and summary["samples"] == 16 and summary["measured_samples"] == 8
    assert summary["samples_per_second"] > 0
    # Rank 1 writes nothing: one row per logging step, not two.
    with open(run_dir / "throughput.csv") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [2, 4]
