"""summary.json's fields, typed: the one JSON Schema both sides check a summary against
(reprokit_trainers/summary.schema.json), and the small validator they check it with.

The trainers check what they are about to write (record/rundir.py), the host what it reads back
(reprokit/contract/records.py); a summary with a field the schema does not declare, without one it
requires, or with a value of the wrong type is refused in one line naming the field. The trainers run
in vendor images that do not carry the ``jsonschema`` package, so this module is the standard library
only, and the host loads it by its path (the host never imports the trainers' package). It knows the
part of JSON Schema (draft 2020-12) that summary.schema.json uses, and refuses a schema that uses any
other keyword rather than ignoring it; tests/test_summary_schema.py holds it to the ``jsonschema``
package on the same schema.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

SCHEMA_FILE = "summary.schema.json"
# A summary of this contract version or later is typed by the schema; an older one (written before the
# schema existed) is read as it was then.
TYPED_FROM = 4

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # bool is an int in Python, never a number in JSON.
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and math.isfinite(v) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_NAMES = {"object": "a mapping", "array": "a list", "string": "text", "integer": "an integer",
          "number": "a number", "boolean": "true or false", "null": "null"}  # fmt: skip
# Keywords that only document: the validator reads past them.
_NOTES = {"$schema", "$id", "$comment", "title", "description", "$defs", "examples"}
_CHECKS = {"type", "enum", "const", "properties", "required", "additionalProperties", "items", "$ref",
           "allOf", "if", "then", "else", "minimum"}  # fmt: skip


class SchemaError(ValueError):
    """The schema uses a keyword this validator does not know (a schema edit to review, not a bad summary)."""


def load(folder: str | Path | None = None) -> dict[str, Any]:
    """summary.schema.json from the trainers' package folder (``folder``; default: this package's)."""
    where = Path(folder) if folder is not None else Path(__file__).resolve().parents[2]
    return json.loads((where / SCHEMA_FILE).read_text())


def typed(summary: Any) -> bool:
    """Whether ``summary`` claims a contract version the schema types (older ones predate it)."""
    version = summary.get("schema_version") if isinstance(summary, dict) else None
    return isinstance(version, int) and not isinstance(version, bool) and version >= TYPED_FROM


def problem(summary: Any, schema: dict[str, Any]) -> str | None:
    """The first thing wrong with ``summary`` under ``schema``, in one line naming the field; None
    when it conforms."""
    found = problems(summary, schema)
    return found[0] if found else None


def problems(summary: Any, schema: dict[str, Any]) -> list[str]:
    """Everything wrong with ``summary`` under ``schema``, one line each, in the order met."""
    found: list[str] = []
    _check(summary, schema, schema, "", found)
    return found


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:39] + "…"


def _name(key: str) -> str:
    """A field's name as a reason shows it: control characters escaped (a hand-edited or hostile file's
    key stays on one line and moves no terminal), long ones cut."""
    text = json.dumps(str(key))[1:-1]
    return text if len(text) <= 60 else text[:59] + "…"


def _field(path: str) -> str:
    return f"field `{path}`" if path else "the summary"


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise SchemaError(f"$ref {ref!r}: only references inside the schema (#/...) are read")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _check(value: Any, schema: Any, root: dict[str, Any], path: str, found: list[str]) -> None:
    if schema is True:
        return
    if schema is False:
        found.append(f"{_field(path)} is not allowed")
        return
    unknown = set(schema) - _CHECKS - _NOTES
    if unknown:
        raise SchemaError(
            f"{SCHEMA_FILE} uses {', '.join(sorted(unknown))}, which this validator does not read"
        )
    if "$ref" in schema:
        _check(value, _resolve(schema["$ref"], root), root, path, found)
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[kind](value) for kind in kinds):
            wanted = " or ".join(_NAMES[kind] for kind in kinds)
            found.append(f"{_field(path)} is {_show(value)}, not {wanted}")
            return
    if "const" in schema and value != schema["const"]:
        found.append(f"{_field(path)} is {_show(value)}, not {_show(schema['const'])}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{_field(path)} is {_show(value)}, not one of {', '.join(map(str, schema['enum']))}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        found.append(f"{_field(path)} is {_show(value)}, below {schema['minimum']}")
    if isinstance(value, dict):
        _check_object(value, schema, root, path, found)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _check(item, schema["items"], root, f"{path}[{index}]", found)
    for part in schema.get("allOf", []):
        _check(value, part, root, path, found)
    if "if" in schema:
        tried: list[str] = []
        _check(value, schema["if"], root, path, tried)
        branch = schema.get("else" if tried else "then")
        if branch is not None:
            _check(value, branch, root, path, found)


def _check_object(value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], path: str,
                  found: list[str]) -> None:  # fmt: skip
    where = f"{path}." if path else ""  # path: names already shown safe
    for name in schema.get("required", []):
        if name not in value:
            found.append(f"required field `{where}{_name(name)}` is missing")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        shown = f"{where}{_name(name)}"
        if name in properties:
            _check(item, properties[name], root, shown, found)
        elif extra is False:
            found.append(f"field `{shown}` is not declared in {SCHEMA_FILE}")
        elif extra is not True:
            _check(item, extra, root, shown, found)
