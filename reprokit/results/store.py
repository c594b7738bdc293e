"""The results store: every session's results.jsonl under a results folder, queried in place with
DuckDB (in process, no server). A new session shows up the moment its results.jsonl is written, a
deleted one is gone with its folder: there is nothing to import and nothing to keep in step.

The folder is results/ by default, `--results DIR` or the `results` setting for a team's shared one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.run import session


def sessions(results: Path) -> list[dict[str, Any]]:
    """The sessions of a results folder that have results, oldest first: name, folder, when made."""
    return [
        {"session": folder.name, "folder": folder, "created_at": session.stored(folder).get("created_at") or folder.name}
        for folder in session.listed(results, "results.jsonl")
    ]


def resolve_session(results: Path, name: str) -> Path:
    """A session with results: by folder, by name under the results folder, or `latest` / `previous`."""
    return session.find(name, results, "results.jsonl")


NUMBERS = {"devices", "world_size", "nodes", "batch_per_device", "workers", "max_steps", "steps", "repeats"}
TEXT = {"recipe", "variant", "group", "scale", "accelerator", "device_name", "device", "unit", "definition",
        "reference_source", "normalization", "verdict", "verdict_reasons", "quality_departures", "speedup_reference_device",
        "speedup_verdict", "speedup_verdict_reasons", "status", "error", "data", "image_id", "kit_revision",
        "recipe_hash", "torch", "transformers", "timm", "started_at", "finished_at", "cell_id", "session",
        "energy", "trace"}  # fmt: skip
NESTED = ("provenance", "repetitions", "measurements")


def _schema() -> str:
    """Every column results.jsonl may hold, typed: sessions of any kit version read alike, and a column an
    older kit did not write reads as NULL."""
    from reprokit.results.collect import COLUMNS

    types = {c: ("BIGINT" if c in NUMBERS else "VARCHAR" if c in TEXT else "DOUBLE") for c in COLUMNS}
    types.update({c: "JSON" for c in NESTED})
    return "{" + ", ".join(f"'{c}': '{t}'" for c, t in types.items()) + "}"


def query(results: Path, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    """Run `sql` over the view `rows` (every session's rows; the session in the column `session_folder`;
    provenance, repetitions and measurements as JSON)."""
    import duckdb

    pattern = str(results.resolve() / "*" / "results.jsonl")
    if not list(results.glob("*/results.jsonl")):
        return []
    connection = duckdb.connect()
    try:
        quoted = pattern.replace("'", "''")
        # The session is the folder the file is in (rows of older kits do not name it).
        connection.execute(
            "CREATE VIEW rows AS SELECT *, regexp_extract(filename, '([^/]+)/results[.]jsonl$', 1) AS session_folder "
            f"FROM read_json('{quoted}', columns = {_schema()}, filename = true, "
            "format = 'newline_delimited', maximum_object_size = 67108864)"
        )
        result = connection.execute(sql, params or [])
        names = [d[0] for d in result.description]
        found = [dict(zip(names, values, strict=True)) for values in result.fetchall()]
    except duckdb.Error as exc:
        raise ReprokitError(
            f"the results store under {results} cannot be read: {str(exc).splitlines()[0]}"
        ) from None
    finally:
        connection.close()
    for row in found:
        for key in NESTED:
            if isinstance(row.get(key), str):
                row[key] = json.loads(row[key])
    return found
