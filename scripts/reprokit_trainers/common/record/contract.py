"""The run-directory contract, as the trainers read it: reprokit_trainers/contract.json, the one file
the host loads too (its schema version, file names, throughput.csv columns, departure kinds and
the keys of the software a run records)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTRACT: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "contract.json").read_text())
SCHEMA_VERSION: int = CONTRACT["schema_version"]
FILES: dict[str, str] = CONTRACT["files"]
THROUGHPUT_FIELDS: list[str] = CONTRACT["throughput_fields"]
THROUGHPUT, QUALITY = CONTRACT["departure_kinds"]
SOFTWARE_KEYS: tuple[str, ...] = tuple(CONTRACT["software_keys"])
DEFINITIONS: tuple[str, ...] = tuple(CONTRACT["definitions"])
