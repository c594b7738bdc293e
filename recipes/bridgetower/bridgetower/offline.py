"""BridgeTower offline: what stands in for the hub's checkpoint, tokenizer and dataset when it cannot
be reached and none was given (run_bridgetower.py's load_model, load_tokenizer and load_data decide).

The model is built from the architecture (``--model_config_json``) with random weights; the tokenizer
is a word-level one over the synthetic vocabulary with RoBERTa's special tokens; the data is the New
Yorker set's shapes (common/data/synthetic.py): JPEG bytes of the cartoons' sizes and captions of the
descriptions' lengths, stored and preprocessed as the real rows are. Each is a departure the summary
records (record.py).
"""

from __future__ import annotations

import hashlib
import json
import typing
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import BridgeTowerConfig, PreTrainedTokenizerBase

from reprokit_trainers.common.data.synthetic import VOCABULARY, caption, cartoon_jpeg_bytes, sample_sizes
from reprokit_trainers.common.process.args import check_sizes

if typing.TYPE_CHECKING:
    import datasets

    from .run_bridgetower import DataTrainingArguments

# The splits of the New Yorker set's matching config.
SPLITS = ("train", "validation", "test")
# The class defaults of BridgeTowerConfig define no logit scale at all (the model then fails on
# first use), and the checkpoint's is CLIP's log(1/0.07): every offline build gets it unless told.
LOGIT_SCALE_INIT = 2.6592


# The architecture's sizes, where each part has them (common/process/args.py's check_sizes).
SIZES = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "patch_size", "image_size",
    "vocab_size", "max_position_embeddings", "contrastive_hidden_size",
)  # fmt: skip


def build_config(config_json: str) -> BridgeTowerConfig:
    """BridgeTowerConfig from ``--model_config_json``; ValueError, in one line, for one that cannot build."""
    kwargs = json.loads(config_json)
    # BridgeTowerConfig has no default for it (transformers 4.49) and the contrastive heads read it: left
    # out, the model's __init__ raised AttributeError.
    if isinstance(kwargs, dict) and "contrastive_hidden_size" not in kwargs:
        raise ValueError(
            "contrastive_hidden_size is missing: the contrastive heads project both towers to it "
            "(the published checkpoint's is 512)"
        )
    kwargs.setdefault("logit_scale_init_value", LOGIT_SCALE_INIT)
    config = BridgeTowerConfig(**kwargs)
    for where, part in (
        ("", config),
        ("text_config.", config.text_config),
        ("vision_config.", config.vision_config),
    ):
        check_sizes(part, SIZES, where)
    text, vision = config.text_config.num_hidden_layers, config.vision_config.num_hidden_layers
    if text != vision or text < config.num_hidden_layers:
        # The forward splits both towers at one index and bridges the top num_hidden_layers of each.
        raise ValueError(
            f"text_config.num_hidden_layers {text} and vision_config.num_hidden_layers {vision}: both towers "
            f"are split at the same layer and their top {config.num_hidden_layers} (num_hidden_layers) bridged to "
            f"the cross-modal layers; give both the same count, at least {config.num_hidden_layers}"
        )
    return config


def offline_tokenizer(words: Sequence[str] = VOCABULARY) -> PreTrainedTokenizerBase:
    """A word-level tokenizer over the synthetic vocabulary, with RoBERTa's special tokens and ids.

    Captions are padded to max_seq_length either way, so the model's cost does not depend on the
    tokenizer; what matters is that ids stay in the vocabulary and the specials sit where RoBERTa's do.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for token in [*words, *(w.capitalize() for w in words), ".", ",", "'", "?", "!"]:
        vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=512,
    )


def synthetic_rows(
    num_rows: int,
    widths: Sequence[int],
    heights: Sequence[int],
    words: Sequence[int],
    unique_images: int,
    seed: int,
    image_column: str,
    caption_column: str,
    image_dir: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Rows shaped like the New Yorker set's: a JPEG (as datasets stores images) and a description.

    With ``image_dir`` the JPEGs are files there and the rows hold their paths, as the pinned
    revision's loading script stores the cartoons (one file per cartoon): what mediapipe reads."""
    rng = np.random.default_rng(seed)
    sizes = sample_sizes(max(1, min(unique_images, num_rows)), rng, widths, heights)
    cartoons: list[dict[str, Any]] = [
        {"bytes": cartoon_jpeg_bytes(w, h, rng), "path": None} for w, h in sizes
    ]
    if image_dir is not None:
        Path(image_dir).mkdir(parents=True, exist_ok=True)
        for i, cartoon in enumerate(cartoons):
            path = Path(image_dir) / f"{i}.jpeg"
            path.write_bytes(cartoon["bytes"])
            cartoons[i] = {"bytes": None, "path": str(path)}
    for i in range(num_rows):
        length = int(rng.integers(words[0], words[-1] + 1))
        yield {image_column: cartoons[i % len(cartoons)], caption_column: caption(rng, length, VOCABULARY)}


def synthetic_dataset(
    data_args: DataTrainingArguments, cache_dir: str | None, read: Collection[str] = SPLITS
) -> datasets.DatasetDict:
    """train / validation / test, written once to the datasets cache and memory-mapped by every rank.
    A split the run does not read (`read`) is there, as in the real dataset, with no rows: drawing its
    cartoons (528 for the test split) would take seconds of every run that never looks at them.

    For --mediapipe_dataloader the cartoons are JPEG files beside that cache (the HPU pipeline reads
    files), otherwise bytes in the rows."""
    import datasets

    features = datasets.Features(
        {data_args.image_column: datasets.Image(), data_args.caption_column: datasets.Value("string")}
    )
    counts = {
        "train": data_args.synthetic_num_train,
        "validation": data_args.synthetic_num_eval,
        "test": data_args.synthetic_num_test
        if data_args.synthetic_num_test is not None
        else data_args.synthetic_num_eval,
    }
    splits = {}
    for offset, (split, rows) in enumerate(counts.items()):
        if split not in read:
            empty = {name: [] for name in features}
            splits[split] = datasets.Dataset.from_dict(empty, features=features, split=split)
            continue
        gen_kwargs = {
            "num_rows": rows,
            "widths": list(data_args.synthetic_image_width),
            "heights": list(data_args.synthetic_image_height),
            "words": list(data_args.synthetic_caption_words),
            "unique_images": data_args.synthetic_unique_images,
            "seed": data_args.synthetic_seed * 1000 + offset,  # a different draw per split
            "image_column": data_args.image_column,
            "caption_column": data_args.caption_column,
        }
        if data_args.mediapipe_dataloader:
            # Keyed by the draw, so a cached dataset's rows and their files always belong together.
            key = hashlib.sha256(json.dumps(gen_kwargs, sort_keys=True).encode()).hexdigest()[:16]
            root = Path(cache_dir or datasets.config.HF_DATASETS_CACHE)
            gen_kwargs["image_dir"] = str(root / "reprokit_synthetic_cartoons" / key)
        splits[split] = datasets.Dataset.from_generator(
            synthetic_rows, features=features, gen_kwargs=gen_kwargs, cache_dir=cache_dir, split=split
        )
    return datasets.DatasetDict(splits)
