"""BridgeTower's ``--mediapipe_dataloader``: optimum-habana's example loader (HabanaDataloaderTrainer:
JPEG files decoded and resized on the HPU), which the gaudi2 image puts on the Python path. Where the
published loader would quietly fall back to the CPU loader (no Gaudi, no pipeline, rows without JPEG
files), the kit stops with one line instead (``SetupError``, common/process/gaudi.py's).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from reprokit_trainers.common.process.gaudi import SetupError, importable

# optimum-habana v1.17.0 examples/contrastive-image-text: HabanaDataloaderTrainer and what it imports.
MEDIAPIPE_MODULES = ("habana_dataloader_trainer", "clip_mediapipe_dataloader", "clip_media_pipe")
VENDOR_DIR = "/opt/reprokit/vendor/optimum-habana-1.17.0-contrastive-image-text"
# The example's pipeline reads this column's file paths when the dataset has no `image_path` column.
MEDIAPIPE_IMAGE_COLUMN = "image"


def check_mediapipe(on_gaudi: bool, image_pipeline: str) -> None:
    """What can be known before any data is loaded: a Gaudi, and the example's modules."""
    if not on_gaudi:
        raise SetupError(
            "--mediapipe_dataloader decodes the JPEGs on Gaudi's HPUs and this run has none (it needs the "
            "Habana stack, an HPU and --use_habana); drop the flag"
        )
    missing = [m for m in MEDIAPIPE_MODULES if not importable(m)]
    if missing:
        raise SetupError(
            f"--mediapipe_dataloader needs optimum-habana's {', '.join(m + '.py' for m in missing)} on the Python "
            f"path ({VENDOR_DIR} in the gaudi2 image): build the gaudi2 image with its vendor files "
            "(`inv build --accelerator gaudi2`, not --without-vendor)"
        )
    if not importable("habana_frameworks.mediapipe"):
        raise SetupError("--mediapipe_dataloader needs Habana's media pipeline (habana_frameworks.mediapipe)")
    if image_pipeline != "published":
        raise SetupError(
            f"--image_pipeline {image_pipeline} does nothing with --mediapipe_dataloader (the HPU decodes); drop one"
        )


def check_mediapipe_rows(dataset: Any, image_column: str, split: str) -> None:
    """The rows the example's pipeline can read: JPEG files on disk, under `image_path` or `image`."""
    columns = dataset.column_names
    if "image_path" in columns:
        paths = [dataset[i]["image_path"] for i in _probes(len(dataset))]
    elif image_column == MEDIAPIPE_IMAGE_COLUMN:
        paths = [(dataset[i][image_column] or {}).get("path") for i in _probes(len(dataset))]
    else:
        raise SetupError(
            f"--mediapipe_dataloader reads file paths from an `image_path` or `image` column; the {split} "
            f"split has {', '.join(columns)} (--image_column {image_column})"
        )
    for path in paths:
        if not path or not os.path.isfile(path):
            raise SetupError(
                f"--mediapipe_dataloader reads the JPEG files the rows point at; a {split} row has "
                f"{'no file path' if not path else f'a missing file ({path})'} (rows that hold the images' "
                "bytes, as the parquet revisions do, have no files: use the script-based revision the recipe pins)"
            )


def _probes(length: int) -> list[int]:
    return sorted({0, length // 2, length - 1}) if length else []


class _Reasons(logging.Handler):
    """Keeps the example loader's warnings: the reason it gives when it falls back."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def mediapipe_trainer() -> type:
    """optimum-habana's HabanaDataloaderTrainer, refusing the CPU fallback its loader would take."""
    try:
        from habana_dataloader_trainer import HabanaDataloaderTrainer
    except Exception as error:  # noqa: BLE001 -- whatever the example's import chain raises, one line
        raise SetupError(
            f"--mediapipe_dataloader: optimum-habana's habana_dataloader_trainer does not import "
            f"({type(error).__name__}: {str(error).strip()[:200]})"
        ) from None
    reasons = _Reasons()
    logging.getLogger("clip_mediapipe_dataloader").addHandler(reasons)

    def refuse_fallback(loader: Any) -> Any:
        if getattr(loader, "fallback_activated", False):
            why = next((m for m in reversed(reasons.messages) if "native dataloader" in m), "no reason given")
            raise SetupError(
                f"--mediapipe_dataloader: the HPU media pipeline did not start and its loader fell back to the "
                f"CPU one ({why.strip()[:240]})"
            )
        return loader

    class MediapipeTrainer(HabanaDataloaderTrainer):
        def get_train_dataloader(self):
            return refuse_fallback(super().get_train_dataloader())

        def get_eval_dataloader(self, eval_dataset=None):
            return refuse_fallback(super().get_eval_dataloader(eval_dataset))

        def get_test_dataloader(self, test_dataset):
            return refuse_fallback(super().get_test_dataloader(test_dataset))

    return MediapipeTrainer
