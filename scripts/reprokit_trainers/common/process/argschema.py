"""Light schemas of the trainers' arguments (``<trainer>/arguments.json``): types, ranges, choices.

Stdlib only, so the host can load this file by path and check a recipe's arguments before it
builds an image or waits in a queue, with the same rules the trainer applies to its own command
line after parsing it. A schema is ``{"closed": bool, "arguments": {name: rule}}``; a rule has a
``type`` (int, float, bool, str, list[int], list[float], or json: a mapping, or its JSON text as
a command line carries it) and optionally ``nullable``, ``min``,
``max``, ``above`` (strictly greater than) and ``choices``. A closed schema names every argument the
trainer takes, so a misspelt key is caught too; an open one (a trainer that also passes
TrainingArguments through) checks only the names it lists. ``relations`` tie two arguments: one is
another divided by a number (VOLO's token-label size is its image size / 16: ``{"arg", "equals",
"divided_by", "why"}``), or a step count is above another where it counts steps at all (max_steps
over the warm-up: ``{"arg", "above", "from", "why"}``, ``from`` the first value that is a count). ``roles`` name
the arguments the host reads without knowing the trainer: the per-device batch, the loader workers,
the step cap, the warm-up steps, the logging interval, the arguments that choose the data path
(``loader``: a list), and the switches whose effect the trainer records (arg -> recorded summary field).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def load(trainer_dir: str | Path) -> dict[str, Any]:
    """The schema shipped in a trainer's folder."""
    return json.loads((Path(trainer_dir) / "arguments.json").read_text())


def _type_problem(kind: str, value: Any) -> str | None:
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return f"must be a JSON object, got {value!r}"
        return None if isinstance(value, dict) else f"must be a JSON object, got {value!r}"
    if kind.startswith("list[") and kind.endswith("]"):
        if not isinstance(value, list | tuple):
            return f"must be a list of {kind[5:-1]}, got {value!r}"
        for item in value:
            found = _type_problem(kind[5:-1], item)
            if found:
                return f"every item {found}"
        return None
    wanted = _SCALARS[kind]
    # bool is an int in Python; a recipe's `true` for a batch size is a mistake, not 1.
    if isinstance(value, bool) and kind != "bool":
        return f"must be {kind}, got {value!r}"
    if not isinstance(value, wanted):
        return f"must be {kind}, got {value!r}"
    return None


def problem(rule: dict[str, Any], value: Any) -> str | None:
    """What is wrong with one value under its rule, or None."""
    if value is None:
        return None if rule.get("nullable") else f"must be {rule['type']}, got null"
    found = _type_problem(rule["type"], value)
    if found:
        return found
    if "choices" in rule and value not in rule["choices"]:
        return f"must be one of {', '.join(map(str, rule['choices']))}; got {value!r}"
    if "min" in rule and value < rule["min"]:
        return f"must be at least {rule['min']}, got {value!r}"
    if "above" in rule and value <= rule["above"]:
        return f"must be above {rule['above']}, got {value!r}"
    if "max" in rule and value > rule["max"]:
        return f"must be at most {rule['max']}, got {value!r}"
    return None


def check(schema: dict[str, Any], args: dict[str, Any], only_known: bool = False) -> list[str]:
    """Every problem of ``args`` under ``schema`` as ``key: what is wrong``, in the order of ``args``.
    ``only_known``: skip names the schema does not list (a parsed command line: argparse has already
    refused unknown flags, and asdict() of TrainingArguments holds more than any recipe sets)."""
    rules = schema["arguments"]
    found = []
    for key, value in args.items():
        rule = rules.get(key)
        if rule is None:
            if schema.get("closed") and not only_known:
                found.append(f"{key}: not an argument of this trainer")
            continue
        wrong = problem(rule, value)
        if wrong:
            found.append(f"{key}: {wrong}")
    for relation in schema.get("relations", []):
        wrong = _relation_problem(relation, args)
        if wrong:
            found.append(wrong)
    return found


def _relation_problem(relation: dict[str, Any], args: dict[str, Any]) -> str | None:
    value = args.get(relation["arg"])
    if "equals" in relation:
        other = args.get(relation["equals"])
        if isinstance(value, int) and isinstance(other, int) and value != other // relation["divided_by"]:
            return (
                f"{relation['arg']} {value} does not match {relation['equals']} {other} "
                f"(= {other // relation['divided_by']}: {relation['why']})"
            )
        return None
    floor = args.get(relation["above"])
    counts = isinstance(value, int) and not isinstance(value, bool) and value >= relation.get("from", 0)
    if counts and isinstance(floor, int) and value <= floor:
        return f"{relation['arg']} {value} is not above {relation['above']} {floor} ({relation['why']})"
    return None
