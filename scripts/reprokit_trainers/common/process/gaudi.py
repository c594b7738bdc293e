"""A trainer on a Gaudi: is there one, and which Gaudi config (the trainers that run transformers'
Trainer or optimum-habana's GaudiTrainer share both).

- A Gaudi is a machine where Habana's PyTorch bridge (``habana_frameworks.torch``) imports and sees
  an HPU. Whether optimum-habana imports says nothing: it is installed in images without the Habana
  stack too, where importing it fails (IndexError, deep inside).
- The Gaudi config (fused Adam, fused clip-norm, bf16 autocast) may ship with the trainer as a file
  (BridgeTower's ``gaudi_configs/clip.json``, Habana/clip's settings): a relative ``--gaudi_config_name``
  is looked up in the trainer's folder, then in the working directory; an absolute path or a hub id (read through the
  Hugging Face cache) still work. It is resolved to a local file before the arguments are parsed,
  because GaudiTrainingArguments loads it while parsing; the summary records its path and sha256.

Problems are raised as ``SetupError``; the trainer turns them into its one-line error.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HUB_FILE = "gaudi_config.json"
# GaudiConfig's switches (optimum-habana 1.17 gaudi_configuration.py) and the type each must have.
SWITCHES = ("use_torch_autocast", "use_dynamic_shapes", "use_fused_adam", "use_fused_clip_norm")
OP_LISTS = ("autocast_bf16_ops", "autocast_fp32_ops")


class SetupError(Exception):
    """A Gaudi setting that cannot work here: the trainer ends with this one line."""


def importable(module: str) -> bool:
    """``module`` can be imported, checked without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def habana_stack() -> bool:
    """Habana's PyTorch bridge is installed (checked without importing it: the Gaudi config's
    autocast op lists must be declared before it is imported)."""
    return importable("habana_frameworks.torch")


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
            f"read ({first}); give a Gaudi config file in the trainer's folder (gaudi_configs/) or a path"
        ) from None


def resolve_gaudi_config(
    name: str, trainer_dir: Path, cache_dir: str | None = None, token: str | None = None
) -> GaudiConfigFile:
    """The local file ``--gaudi_config_name name`` stands for (looked up in ``trainer_dir``, the
    trainer's folder, first), read and checked."""
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
    argv: Sequence[str], trainer_dir: Path
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
