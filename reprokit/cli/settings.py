"""Site settings: what a cluster's users would otherwise repeat on every command, written once.

The files invoke's own configuration would read under the prefix `reprokit`, read here as data
(YAML or JSON, never a Python file that would run):

- /etc/reprokit.yaml (the machine), ~/.reprokit.yaml (the user), ./reprokit.yaml (the folder the
  kit runs in), each overriding the one before;
- REPROKIT_<KEY> environment variables over all files (REPROKIT_PARTITION=batch);
- a flag on the command line over everything.

Keys are the options' names: runtime, container, partition, account, time_limit, exclusive,
image, timeout, results (the folder sessions go into), recipes (folders of your own recipes),
data (a mapping KEY: PATH of the recipes' real data). For example::

    runtime: slurm
    container: pyxis
    partition: batch
    account: proj123
    data: {imagenet: /datasets/imagenet, token_labels: /datasets/volo-token-labels}

Every session records the settings it used (session.json, `settings`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reprokit.contract.errors import ReprokitError

KEYS = ("runtime", "container", "partition", "account", "time_limit", "exclusive", "image", "timeout",
        "results", "recipes", "data")  # fmt: skip
# Old names of options, the command line's aliases (tasking.py): old -> the option's name, the key here.
OLD_NAMES = {"out": "results"}
SUFFIXES = ("yaml", "yml", "json")
ENV_PREFIX = "REPROKIT_"


@dataclass
class Settings:
    values: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    def record(self) -> dict[str, Any]:
        """What session.json keeps: the values in effect and where they came from."""
        return {"values": self.values, "files": self.files, "env": self.env}


def candidates(where: str | os.PathLike | None = None) -> list[Path]:
    """The settings file of each layer that exists (the first suffix found), machine to folder."""
    layers = (Path("/etc/reprokit"), Path("~/.reprokit").expanduser(), Path(where or Path.cwd()) / "reprokit")
    found = []
    for stem in layers:
        path = next((p for p in (Path(f"{stem}.{suffix}") for suffix in SUFFIXES) if p.is_file()), None)
        if path is not None:
            found.append(path.resolve())
    return found


def load(where: str | os.PathLike | None = None) -> Settings:
    values: dict[str, Any] = {}
    files = candidates(where)
    for path in files:
        _merge(values, _read(path))
    env = sorted(name for name in os.environ if name.startswith(ENV_PREFIX) and _key(name) in KEYS)
    for name in env:
        values[_key(name)] = os.environ[name]
    picked = {key: values[key] for key in KEYS if values.get(key) is not None}
    return Settings(_normalize(picked), [str(path) for path in files], env)


def _key(variable: str) -> str:
    return variable.removeprefix(ENV_PREFIX).lower()


def _check_keys(path: Path, data: dict[str, Any]) -> None:
    """A key the kit does not know is an error naming the closest one it does: a misspelt `partion:`
    must not send every job to the default partition."""
    import difflib

    for key in data:
        if key in KEYS:
            continue
        close = [OLD_NAMES[key]] if key in OLD_NAMES else difflib.get_close_matches(str(key), KEYS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ReprokitError(
            f"a reprokit settings file has an unknown key: {path}: '{key}'{hint}; the keys are {', '.join(KEYS)}"
        )


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ReprokitError(f"a reprokit settings file cannot be read: {path}: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ReprokitError(
            f"a reprokit settings file cannot be read: {path}: a mapping of KEY: VALUE is expected"
        )
    _check_keys(path, data)
    return data


def _merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
    """A later layer overrides an earlier one key by key, mappings (data) entry by entry."""
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = {**into[key], **value}
        else:
            into[key] = value


def _normalize(values: dict[str, Any]) -> dict[str, Any]:
    """Lists and mappings as the options use them, whether a file or a variable gave them."""
    out = dict(values)
    if isinstance(out.get("recipes"), str):
        out["recipes"] = [p for p in out["recipes"].split(os.pathsep) if p]
    if isinstance(out.get("data"), str):  # REPROKIT_DATA=imagenet=/d/imagenet,token_labels=/d/tl
        out["data"] = dict(item.split("=", 1) for item in out["data"].split(",") if "=" in item)
    if isinstance(out.get("data"), dict):
        out["data"] = {str(k): str(v) for k, v in out["data"].items()}
    elif "data" in out:
        raise ReprokitError(
            "the 'data' setting is a mapping of KEY: PATH (e.g. imagenet: /datasets/imagenet)"
        )
    if isinstance(out.get("exclusive"), str):
        out["exclusive"] = out["exclusive"].lower() not in ("0", "false", "no", "")
    return out
