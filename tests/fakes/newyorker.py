"""A Hugging Face cache folder as `--data dataset_cache=P` gives one, made offline: the New Yorker set at
the pinned revision as datasets 3.6 prepares it (its cache layout: <namespace>___<name>/<config>/<version>/
<hash>/ with dataset_info.json and one arrow file per split), and a BridgeTower checkpoint with its
tokenizer in the hub cache's layout (models--<org>--<name>/snapshots/<commit>/, refs/main). Small: a few
JPEGs and the tiny architecture, so a run on it takes seconds. Imports torch and transformers."""

from __future__ import annotations

import io
import json
from pathlib import Path

DATASET = "jmhessel/newyorker_caption_contest"
CONFIG = "matching"
CHECKPOINT = "BridgeTower/bridgetower-large-itm-mlm-itc"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _prepare_dataset(root: Path, rows: dict[str, int]) -> None:
    import datasets
    from PIL import Image

    class NewYorker(datasets.GeneratorBasedBuilder):
        BUILDER_CONFIGS = [datasets.BuilderConfig(name=CONFIG)]

        def _info(self):
            return datasets.DatasetInfo(
                features=datasets.Features(
                    {"image": datasets.Image(), "image_description": datasets.Value("string")}
                )
            )

        def _split_generators(self, _):
            return [datasets.SplitGenerator(name=split, gen_kwargs={"n": n}) for split, n in rows.items()]

        def _generate_examples(self, n):
            for i in range(n):
                jpeg = io.BytesIO()
                Image.new("RGB", (320 + 8 * (i % 32), 300), (20 * i % 255, 110, 60)).save(jpeg, "JPEG")
                yield (
                    i,
                    {
                        "image": {"bytes": jpeg.getvalue(), "path": None},
                        "image_description": f"a man at his desk talks to cartoon number {i}",
                    },
                )

    builder = NewYorker(
        cache_dir=str(root),
        dataset_name=DATASET.split("/")[1],
        repo_id=DATASET,
        config_name=CONFIG,
        hash="3c6c4f6c0ff7e902",
    )
    builder.download_and_prepare()


def _save_checkpoint(root: Path, architecture: dict) -> None:
    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning

    from reprokit_trainers.bridgetower.offline import offline_tokenizer

    repo = root / f"models--{CHECKPOINT.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    BridgeTowerForContrastiveLearning(BridgeTowerConfig(**architecture)).save_pretrained(snapshot)
    offline_tokenizer().save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)


def newyorker_cache(root: Path, architecture: dict, rows: dict[str, int] | None = None) -> Path:
    """A cache folder holding the prepared dataset and a checkpoint of `architecture`, without the
    lock files their making left (a cache copied onto read-only storage has none)."""
    _prepare_dataset(root, rows or {"train": 12, "validation": 4, "test": 4})
    _save_checkpoint(root, architecture)
    for lock in root.rglob("*.lock"):
        lock.unlink()
    (root / "README.reprokit.json").write_text(json.dumps({"made_by": "tests/fakes/newyorker.py"}))
    return root
