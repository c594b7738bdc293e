"""The image-classification trainer (optimum-habana's example, ViT on CIFAR-10): an offline run in this
process writes its run directory with every throughput definition, the example's data path holds out
its validation rows and makes its batches, and what it cannot run is refused in one line."""

from __future__ import annotations

import json

import pytest

from tests.conftest import departures_of_the_run

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

from reprokit_trainers.image_classification import data, run_image_classification  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning",
    "ignore::FutureWarning",
    "ignore:'pin_memory' argument is set as true but no accelerator is found:UserWarning",
)

TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "image_size": 32, "patch_size": 8}  # fmt: skip
SMALL_RUN = [
    "--random_init", "--synthetic_data", "--model_config_json", json.dumps(TINY),
    "--synthetic_num_train", "40", "--synthetic_num_test", "4", "--synthetic_unique_images", "3",
    "--image_column_name", "img", "--remove_unused_columns", "false", "--do_train", "--do_eval",
    "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--max_steps", "3",
    "--logging_steps", "1", "--throughput_warmup_steps", "1", "--save_strategy", "no",
    "--dataloader_num_workers", "0", "--seed", "1337", "--overwrite_output_dir",
]  # fmt: skip


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    """One small offline run in this process (a new Python costs seconds): its run directory and summary."""
    import huggingface_hub.constants

    out = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        summary = run_image_classification.main(["--output_dir", str(out), *SMALL_RUN])
    return out, summary


def test_an_offline_run_writes_its_summary_with_each_throughput_definition(offline_run):
    out, summary = offline_run
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["trainer"] == "Trainer"
    assert set(summary["throughput"]) == {"after_warmup", "whole_run", "gaudi_trainer"}
    # GaudiTrainer's count: max_steps x global batch less the warm-up step's batch.
    assert summary["throughput"]["gaudi_trainer"]["samples"] == 3 * 4 - 1 * 4
    assert summary["measured_samples"] == 2 * 4 and summary["global_batch_size"] == 4
    assert summary["eval_metrics"]["eval_accuracy"] is not None
    assert summary["flops_per_sample"] > 0 and summary["software"]["data_path"] == "published"


def test_an_offline_run_records_its_stand_ins_as_departures(offline_run):
    _, summary = offline_run
    assert [(d["kind"], d["reason"]) for d in departures_of_the_run(summary)] == [
        ("quality", "random weights"),
        ("throughput", "synthetic data"),
    ]
    assert (summary["model_source"], summary["data_source"]) == ("random", "synthetic")


def test_the_validation_rows_are_the_examples_share_of_train_held_out():
    dataset = data.synthetic_cifar10(100, 10, 5, 0, "img", "label")
    held = data.hold_out_validation(dataset, 0.15, seed=1337)
    assert (len(held["train"]), len(held["validation"]), len(held["test"])) == (85, 15, 10)
    assert held["train"].features["label"].names == list(data.CIFAR10_CLASSES)
    again = data.hold_out_validation(data.synthetic_cifar10(100, 10, 5, 0, "img", "label"), 0.15, seed=1337)
    assert held["validation"]["label"] == again["validation"]["label"]  # the run's seed: the same rows


def test_a_batch_is_the_transformed_pixels_and_the_labels():
    dataset = data.synthetic_cifar10(8, 1, 2, 0, "img", "label")["train"]
    dataset.set_transform(data.batch_transform(data.train_transform(32, [0.5] * 3, [0.5] * 3), "img"))
    batch = data.collate("label")([dataset[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 32, 32) and batch["labels"].dtype == torch.long
    # Normalized by mean and std 0.5: every value in [-1, 1].
    assert batch["pixel_values"].min() >= -1.0 and batch["pixel_values"].max() <= 1.0


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--use_habana"], "--use_habana needs a Gaudi"),
        (["--sdp_on_bf16"], "--sdp_on_bf16 needs a Gaudi"),
        (["--do_train", "false", "--do_eval", "false"], "nothing to do"),
    ],
)
def test_what_this_machine_cannot_run_is_refused_in_one_line(tmp_path, extra, said):
    with pytest.raises(SystemExit) as stopped:
        run_image_classification.main(["--output_dir", str(tmp_path), *SMALL_RUN, *extra])
    message = str(stopped.value)
    assert message.startswith("run_image_classification.py: error: ") and said in message
    assert "\n" not in message and not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers 0: give a whole number of at least 1"),
        ({"patch_size": 0}, "patch_size 0: give a whole number of at least 1"),
        (
            {"num_attention_heads": 3},
            "The hidden size (32,) is not a multiple of the number of attention heads 3.",
        ),
    ],
    ids=["no-layers", "no-patch", "heads"],
)
def test_an_architecture_that_cannot_build_is_one_line_naming_it(tmp_path, override, said, monkeypatch):
    """Before: an IndexError, a ZeroDivisionError and transformers' ValueError, each a traceback."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [*SMALL_RUN, "--model_config_json", json.dumps({**TINY, **override})]
    with pytest.raises(SystemExit) as stopped:
        run_image_classification.main(["--output_dir", str(tmp_path), *argv])
    assert (
        str(stopped.value)
        == f"run_image_classification.py: error: --model_config_json does not build: {said}"
    )
    assert not (tmp_path / "summary.json").exists()


def test_a_given_cache_without_the_dataset_stops_the_run_instead_of_a_stand_in(tmp_path, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    # The hub's own switch too, as a machine without the hub sets it: else each of its calls is tried
    # five times over 23 s of back-off before the same refusal.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    argv = [a for a in SMALL_RUN if a != "--synthetic_data"]
    with pytest.raises(SystemExit) as stopped:
        run_image_classification.main(
            ["--output_dir", str(tmp_path / "out"), *argv, "--dataset_name", "cifar10",
             "--cache_dir", str(tmp_path / "empty")]
        )  # fmt: skip
    message = str(stopped.value)
    assert "cannot load cifar10" in message and "nothing replaces it" in message
    assert not (tmp_path / "out" / "summary.json").exists()
