"""Gaudi for the BridgeTower trainer: is there one, which Gaudi config, and mediapipe.

- A Gaudi is a machine where Habana's PyTorch bridge (``habana_frameworks.torch``) imports and sees
  an HPU. Whether optimum-habana imports says nothing: it is installed in images without the Habana
  stack too, where importing it fails (IndexError, deep inside).
- The Gaudi config (fused Adam, fused clip-norm, bf16 autocast) ships with the trainer as a file
  (``gaudi_configs/clip.json``, Habana/clip's settings): a relative ``--gaudi_config_name`` is looked
  up in this folder, then in the working directory; an absolute path or a hub id (read through the
  Hugging Face cache) still work. It is resolved to a local file before the arguments are parsed,
  because GaudiTrainingArguments loads it while parsing; the summary records its path and sha256.
- ``--mediapipe_dataloader`` runs optimum-habana's example loader (HabanaDataloaderTrainer: JPEG
  files decoded and resized on the HPU), which the gaudi2 image puts on the Python path. Where the
  published loader would quietly fall back to the CPU loader (no Gaudi, no pipeline, rows without
  JPEG files), the kit stops with one line instead.

Problems are raised as ``SetupError``; the trainer turns them into its one-line error.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRAINER_DIR = Path(__file__).resolve().parent
HUB_FILE = "gaudi_config.json"
# GaudiConfig's switches (optimum-habana 1.17 gaudi_configuration.py) and the type each must have.
SWITCHES = ("use_torch_autocast", "use_dynamic_shapes", "use_fused_adam", "use_fused_clip_norm")
OP_LISTS = ("autocast_bf16_ops", "autocast_fp32_ops")
# optimum-habana v1.17.0 examples/contrastive-image-text: HabanaDataloaderTrainer and what it imports.
MEDIAPIPE_MODULES = ("habana_dataloader_trainer", "clip_mediapipe_dataloader", "clip_media_pipe")
VENDOR_DIR = "/opt/reprokit/vendor/optimum-habana-1.17.0-contrastive-image-text"
# The example's pipeline reads this column's file paths when the dataset has no `image_path` column.
MEDIAPIPE_IMAGE_COLUMN = "image"


class SetupError(Exception):
    """A Gaudi setting that cannot work here: the trainer ends with this one line."""


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def habana_stack() -> bool:
    """Habana's PyTorch bridge is installed (checked without importing it: the Gaudi config's
    autocast op lists must be declared before it is imported)."""
    return _importable("habana_frameworks.torch")


def hpu_available() -> bool:
    """An HPU is there to run on (imports the bridge: call it after the arguments are parsed)."""
    try:
        import habana_frameworks.torch.hpu as hpu

        return bool(hpu.is_available())
    except Exception:  # noqa: BLE001 -- a stack without a device or driver fails in many ways; none is a Gaudi
        return False


def gaudi_available() -> bool:
    return habana_stack() and hpu_available()


# ----------------------------------------------------------------------------------------------
# The Gaudi config


@dataclass(frozen=True)
class GaudiConfigFile:
    name: str  # as given on the command line
    path: Path  # the local file GaudiConfig loads
    sha256: str
    settings: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "sha256": self.sha256, "settings": self.settings}


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+/[\w.-]+", name)) and not name.endswith(".json")


def _local_candidates(name: str, trainer_dir: Path) -> list[Path]:
    given = Path(name).expanduser()
    if given.is_absolute():
        return [given]
    return [trainer_dir / given, Path.cwd() / given]


def _from_hub(name: str, cache_dir: str | None, token: str | None) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(name, HUB_FILE, cache_dir=cache_dir, token=token))
    except (OSError, ValueError) as error:  # offline, unknown repository, no such file
        if isinstance(error, FileNotFoundError):  # huggingface_hub's LocalEntryNotFoundError
            first = "not in the Hugging Face cache, and the hub not reachable or HF_HUB_OFFLINE set"
        else:
            first = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:160]}"
        raise SetupError(
            f"--gaudi_config_name {name}: no local file of that name, and the hub's {HUB_FILE} cannot be "
            f"read ({first}); give the trainer's gaudi_configs/clip.json or a path"
        ) from None


def resolve_gaudi_config(
    name: str, trainer_dir: Path = TRAINER_DIR, cache_dir: str | None = None, token: str | None = None
) -> GaudiConfigFile:
    """The local file ``--gaudi_config_name name`` stands for, read and checked."""
    path = next((p for p in _local_candidates(name, trainer_dir) if p.exists()), None)
    if path is not None and path.is_dir():
        path = path / HUB_FILE
    if path is None:
        if not _looks_like_hub_id(name):
            places = " or ".join(str(p) for p in _local_candidates(name, trainer_dir))
            raise SetupError(f"--gaudi_config_name {name}: no such file ({places})")
        path = _from_hub(name, cache_dir, token)
    try:
        data = path.read_bytes()
        settings = json.loads(data)
    except OSError as error:
        raise SetupError(f"--gaudi_config_name {name}: cannot read {path} ({error.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SetupError(f"--gaudi_config_name {name}: {path} is not valid JSON ({error})") from None
    if not isinstance(settings, dict):
        raise SetupError(
            f"--gaudi_config_name {name}: {path} must hold a JSON object, not {type(settings).__name__}"
        )
    for key in SWITCHES:
        if key in settings and not isinstance(settings[key], bool):
            raise SetupError(f"--gaudi_config_name {name}: {path}: {key} must be true or false")
    for key in OP_LISTS:
        value = settings.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise SetupError(f"--gaudi_config_name {name}: {path}: {key} must be a list of op names")
    # absolute(), not resolve(): a hub file stays its snapshot path (named gaudi_config.json), not its blob.
    return GaudiConfigFile(name, path.absolute(), hashlib.sha256(data).hexdigest(), settings)


def _is_flag(token: str, flag: str) -> bool:
    # argparse accepts any unambiguous prefix of a long option, and --flag=value.
    key = token.split("=", 1)[0]
    return key.startswith("--") and len(key) > len("--gaudi") and flag.startswith(key)


def resolve_gaudi_config_arg(
    argv: Sequence[str], trainer_dir: Path = TRAINER_DIR
) -> tuple[list[str], GaudiConfigFile | None]:
    """``argv`` with ``--gaudi_config_name`` pointing at the resolved local file, and that file."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--gaudi_config_name")
    peek.add_argument("--cache_dir")
    peek.add_argument("--token")
    known, _ = peek.parse_known_args(list(argv))
    if not known.gaudi_config_name:
        return list(argv), None
    resolved = resolve_gaudi_config(known.gaudi_config_name, trainer_dir, known.cache_dir, known.token)
    flag, out, tokens = "--gaudi_config_name", [], iter(argv)
    for token in tokens:
        if _is_flag(token, flag) and "=" in token:
            out.append(f"{token.split('=', 1)[0]}={resolved.path}")
        elif _is_flag(token, flag):
            out += [token, str(resolved.path)]
            next(tokens, None)
        else:
            out.append(token)
    return out, resolved


def load_gaudi_config(resolved: GaudiConfigFile) -> Any:
    """optimum-habana's GaudiConfig from the resolved file."""
    from optimum.habana import GaudiConfig

    try:
        return GaudiConfig.from_pretrained(str(resolved.path))
    except (OSError, ValueError, TypeError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise SetupError(
            f"--gaudi_config_name {resolved.name}: GaudiConfig cannot load {resolved.path} ({first})"
        ) from None


# ----------------------------------------------------------------------------------------------
# mediapipe


def check_mediapipe(on_gaudi: bool, image_pipeline: str) -> None:
    """What can be known before any data is loaded: a Gaudi, and the example's modules."""
    if not on_gaudi:
        raise SetupError(
            "--mediapipe_dataloader decodes the JPEGs on Gaudi's HPUs and this run has none (it needs the "
            "Habana stack, an HPU and --use_habana); drop the flag"
        )
    missing = [m for m in MEDIAPIPE_MODULES if not _importable(m)]
    if missing:
        raise SetupError(
            f"--mediapipe_dataloader needs optimum-habana's {', '.join(m + '.py' for m in missing)} on the Python "
            f"path ({VENDOR_DIR} in the gaudi2 image): build the gaudi2 image with its vendor files "
            "(`inv build --accelerator gaudi2`, not --without-vendor)"
        )
    if not _importable("habana_frameworks.mediapipe"):
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
