"""Regenerate image_classification_golden.json (beside this file) from optimum-habana's image-classification example at 7e37a6e.

    git clone https://github.com/huggingface/optimum-habana /path/to/optimum-habana   # has commit 7e37a6e
    python -m venv side && side/bin/pip install torch torchvision numpy pillow "transformers==4.49.0" "datasets==3.6.0" accelerate
    side/bin/python recipes/vit-in21k-cifar10/conformance/make_image_classification_golden.py --optimum-habana /path/to/optimum-habana

Nothing upstream is copied into the kit: the example script
``examples/image-classification/run_image_classification.py`` is read from the clone at the commit
(``git show``) and its ``main`` is executed as written, up to the point where it builds its
GaudiTrainer. What needs Habana's stack is stood in for by this script, and only that:
``optimum.habana``'s GaudiConfig (no autocast), GaudiTrainingArguments (transformers'
TrainingArguments with the Gaudi flags the CI passes) and GaudiTrainer (which records what main hands
it, then stops main); ``load_dataset`` returns a fake cifar10 of inputs.py's rows (a train split only,
as cifar10 has no validation split); the checkpoint is a tiny ViT saved in a temporary folder, its
parameters by tests/conformance/weights.py's rule; evaluate's ``accuracy`` (which needs the hub) is
the mean of equal predictions, as evaluate's is. The CI's own arguments are passed (scaled down: the
batch sizes), with the example's defaults for the rest (``--train_val_split`` 0.15).

The committed fixture was made in a side environment of the line above alone, run from a clone at
the commit (transformers 4.49.0, datasets 3.6.0, torch 2.14.1 and torchvision 0.29.1: a torchvision
loads only with the torch build it was made for, and PyPI's 0.28.0 wants the CUDA libraries a CPU
build of torch 2.13.0 lacks); ``made_with`` records the versions, and ``loaded_roots`` what that
environment loaded.

What the fixture keeps, each from the example's own objects: the rows it trains and validates on, the
model config's labels, its train transform's output for fixed images and torch seeds, its validation
transform's, its collate's batch, the loss and logits of the model it built on that batch, and its
compute_metrics on fixed predictions.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIT = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(KIT / "tests" / "conformance"))

import inputs  # noqa: E402
from weights import deterministic_  # noqa: E402

REPOSITORY, COMMIT = "huggingface/optimum-habana", "7e37a6eaae5f090bf1cbf8c38f24d9ec68d45f36"
SCRIPT = "examples/image-classification/run_image_classification.py"
UPSTREAM_MODULES: tuple[str, ...] = ()  # the example script is read from the clone, not imported
# tests/test_examples.py's command for the single-card cifar10 test, batch sizes scaled down.
ARGV = [
    "--gaudi_config_name", "Habana/vit", "--dataset_name", "cifar10", "--do_train",
    "--overwrite_output_dir", "--learning_rate", "3e-05", "--per_device_train_batch_size", "4",
    "--per_device_eval_batch_size", "4", "--num_train_epochs", "1", "--use_habana",
    "--throughput_warmup_steps", "3", "--save_strategy", "no", "--use_lazy_mode", "--do_eval",
    "--remove_unused_columns", "False", "--image_column_name", "img", "--seed", "1337",
    "--use_hpu_graphs_for_inference", "--dataloader_num_workers", "1", "--pipelining_fwd_bwd", "True",
    "--non_blocking_data_copy", "True", "--sdp_on_bf16",
]  # fmt: skip


class Captured(Exception):
    """main reached its GaudiTrainer: what it handed over is recorded, the rest of main is not run."""


def stand_ins(captured: dict) -> None:
    """optimum.habana and evaluate as the example imports them, on a machine without Habana's stack."""
    import numpy as np
    import transformers

    @dataclasses.dataclass
    class GaudiTrainingArguments(transformers.TrainingArguments):
        use_habana: bool = False
        use_lazy_mode: bool = False
        gaudi_config_name: str | None = None
        throughput_warmup_steps: int = 0
        use_hpu_graphs_for_inference: bool = False
        pipelining_fwd_bwd: bool = False
        non_blocking_data_copy: bool = False
        sdp_on_bf16: bool = False

    class GaudiConfig:
        use_torch_autocast = False

        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            return cls()

    class GaudiTrainer:
        def __init__(self, **kwargs):
            captured.update(kwargs)
            raise Captured

    class Accuracy:
        def compute(self, predictions, references):
            return {"accuracy": float(np.mean(np.asarray(predictions) == np.asarray(references)))}

    habana = types.ModuleType("optimum.habana")
    habana.GaudiConfig, habana.GaudiTrainer = GaudiConfig, GaudiTrainer
    habana.GaudiTrainingArguments = GaudiTrainingArguments
    utils = types.ModuleType("optimum.habana.utils")
    utils.set_seed = transformers.set_seed
    utils.check_optimum_habana_min_version = lambda *args, **kwargs: None
    optimum = types.ModuleType("optimum")
    optimum.habana = habana
    evaluate = types.ModuleType("evaluate")
    evaluate.load = lambda name, **kwargs: Accuracy()
    sys.modules.update({"optimum": optimum, "optimum.habana": habana, "optimum.habana.utils": utils,
                        "evaluate": evaluate})  # fmt: skip


def fake_cifar10():
    import datasets

    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=inputs.CLASSES)}
    )
    train = datasets.Dataset.from_dict({"img": inputs.images(), "label": inputs.labels()}, features=features)
    return datasets.DatasetDict({"train": train})


def tiny_checkpoint(folder: Path) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    names = {
        "id2label": dict(enumerate(inputs.CLASSES)),
        "label2id": {n: i for i, n in enumerate(inputs.CLASSES)},
    }
    model = ViTForImageClassification(ViTConfig(**inputs.TINY, num_labels=len(inputs.CLASSES), **names))
    deterministic_(dict(model.named_parameters()))
    model.save_pretrained(folder)
    side = inputs.PROCESSOR["size"]
    ViTImageProcessor(
        size={"height": side, "width": side},
        image_mean=inputs.PROCESSOR["mean"],
        image_std=inputs.PROCESSOR["std"],
    ).save_pretrained(folder)


def tensor64(tensor) -> dict:
    import numpy as np

    array = tensor.detach().to("cpu").float().numpy().astype("<f4")
    return {
        "shape": list(array.shape),
        "float32": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode(),
    }


def run_upstream(source: str, work: Path) -> dict:
    """The example's main, run as written over the stand-ins until it builds its GaudiTrainer."""
    import datasets

    captured: dict = {}
    stand_ins(captured)
    tiny_checkpoint(work / "checkpoint")
    datasets.load_dataset = lambda *args, **kwargs: fake_cifar10()  # the script imports it from here
    # A module of its own (its dataclasses look their module up), run from the text read at the commit.
    module = types.ModuleType("upstream_run_image_classification")
    module.__file__ = SCRIPT
    sys.modules[module.__name__] = module
    exec(compile(source, SCRIPT, "exec"), module.__dict__)  # noqa: S102
    namespace = module.__dict__
    sys.argv = [
        SCRIPT,
        "--model_name_or_path",
        str(work / "checkpoint"),
        "--output_dir",
        str(work / "out"),
        *ARGV,
    ]
    try:
        namespace["main"]()
    except Captured:
        return captured
    raise SystemExit("the example's main returned without building its GaudiTrainer")


def golden_values(captured: dict) -> dict:
    import numpy as np
    import torch
    from transformers import EvalPrediction

    train, validation = captured["train_dataset"], captured["eval_dataset"]
    train_transform = train.format["format_kwargs"]["transform"]
    val_transform = validation.format["format_kwargs"]["transform"]
    images, labels = inputs.images(), inputs.labels()
    trained, validated = [], []
    for index, seed in enumerate(inputs.TRANSFORM_SEEDS):
        torch.manual_seed(seed)
        trained.append(train_transform({"img": [images[index]], "label": [labels[index]]})["pixel_values"][0])
        validated.append(val_transform({"img": [images[index]], "label": [labels[index]]})["pixel_values"][0])
    batch = captured["data_collator"](
        [{"pixel_values": trained[i], "label": labels[i]} for i in range(inputs.BATCH)]
    )
    model = captured["model"].eval()
    with torch.no_grad():
        output = model(**batch)
    predictions = EvalPrediction(
        predictions=np.array(inputs.PREDICTIONS["logits"]), label_ids=np.array(inputs.PREDICTIONS["labels"])
    )
    return {
        "rows": {"train": len(train), "validation": len(validation)},
        "labels": {"num_labels": model.config.num_labels, "id2label": model.config.id2label},
        "train_pixels": [tensor64(t) for t in trained],
        "val_pixels": [tensor64(t) for t in validated],
        "collate": {
            "pixel_values": tensor64(batch["pixel_values"]),
            "labels": batch["labels"].tolist(),
            "labels_dtype": str(batch["labels"].dtype),
        },  # fmt: skip
        "logits": tensor64(output.logits),
        "loss": output.loss.item(),
        "metrics": captured["compute_metrics"](predictions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimum-habana", required=True, help="a clone of huggingface/optimum-habana")
    parser.add_argument("--out", default=str(HERE / "image_classification_golden.json"))
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"  # the example's telemetry and the hub: none (set before importing)
    import environment  # tests/conformance/environment.py
    import torch
    import torchvision
    import transformers

    source = subprocess.run(
        ["git", "-C", args.optimum_habana, "show", f"{COMMIT}:{SCRIPT}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory() as work:
        captured = run_upstream(source, Path(work))
        values = golden_values(captured)
    golden = {
        "upstream": {"repository": REPOSITORY, "commit": COMMIT, "script": SCRIPT},
        "made_with": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "loaded_roots": environment.loaded_roots(),
        },
        "command": "python recipes/vit-in21k-cifar10/conformance/make_image_classification_golden.py "
        "--optimum-habana /path/to/optimum-habana",
        "argv": ARGV,
        "config": {"tiny": inputs.TINY, "processor": inputs.PROCESSOR, "seeds": inputs.TRANSFORM_SEEDS},
        **values,
    }
    Path(args.out).write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
