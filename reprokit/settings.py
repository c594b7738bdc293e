"""Site settings: what a cluster's users would otherwise repeat on every command, written once.

invoke's configuration files and environment, with the prefix `reprokit`:

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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invoke.config import Config
from invoke.exceptions import UncastableEnvVar

from reprokit.errors import ReprokitError

KEYS = ("runtime", "container", "partition", "account", "time_limit", "exclusive", "image", "timeout",
        "results", "recipes", "data")  # fmt: skip


class KitConfig(Config):
    """invoke's Config reading reprokit.yaml files and REPROKIT_* variables."""

    prefix = "reprokit"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Data, not code: a reprokit.py in the folder the kit runs in is never executed.
        self._set(_file_suffixes=("yaml", "yml", "json"))

    @staticmethod
    def global_defaults() -> dict[str, Any]:
        defaults = Config.global_defaults()
        # None: a string from the environment is taken as it is (lists and mappings are parsed below).
        defaults.update(dict.fromkeys(KEYS))
        return defaults


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


def load(where: str | os.PathLike | None = None) -> Settings:
    config = KitConfig(project_location=str(where or Path.cwd()))
    try:
        config.load_system()
        config.load_user()
        config.load_project()
        config.load_shell_env()
    except UncastableEnvVar as exc:
        raise ReprokitError(f"a REPROKIT_* variable cannot be read: {exc}") from None
    except Exception as exc:  # a malformed YAML file: invoke lets the parser's error through
        raise ReprokitError(f"a reprokit settings file cannot be read: {str(exc).splitlines()[0]}") from None
    values = {key: config.get(key) for key in KEYS if config.get(key) is not None}
    paths = [getattr(config, f"_{layer}_path") for layer in ("system", "user", "project")]
    files = [str(Path(path).resolve()) for path in paths if path and Path(path).is_file()]
    env = sorted(
        name
        for name in os.environ
        if name.removeprefix("REPROKIT_").lower() in KEYS and name.startswith("REPROKIT_")
    )
    return Settings(_normalize(values), files, env)


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
