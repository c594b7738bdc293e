"""A session folder: results/<session>/ with session.json (the request and its plan), runs/<cell>/
and what results make of them. The one home of the session's file names; `--resume SESSION`
re-plans a session from its session.json.

Sessions are ordered by when they started (session.json's `created_at`, UTC with its offset), never
by their folder names: a name is the local time of the machine that made it, readable but no order
between machines in two time zones, or across a change of daylight saving time.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reprokit.contract import bounded, files
from reprokit.contract.errors import ReprokitError
from reprokit.contract.gitinfo import kit_revision
from reprokit.plan import recipes
from reprokit.plan.planner import Plan
from reprokit.plan.request import Request
from reprokit.run.placement import plan

RESULTS_DIR = Path("results")
SESSION_FILE = "session.json"
RUNS = "runs"  # runs/<cell>/: one run directory per cell
RESULTS_CSV = "results.csv"
RESULTS_JSONL = "results.jsonl"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# Every cell's event files side by side, for one `tensorboard --logdir` (a copy: the run directories hold them).
TENSORBOARD = "tensorboard"
# How the trainers and kits before session times in UTC wrote a time (local, with its offset).
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def now() -> str:
    """This moment in UTC, ISO 8601 with its offset: what session.json records."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def parse_time(text: object) -> datetime | None:
    """A recorded time as an aware datetime: ISO 8601 with an offset (any kit's), or without one
    (read as this machine's local time); None when it is not a time, or not one a run had (before
    1970, after 2200: bounded.py)."""
    if not isinstance(text, str):
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        try:
            found = datetime.strptime(text, TIME_FORMAT)
        except ValueError:
            return None
    try:
        found = found if found.tzinfo else found.astimezone()
        return found if bounded.EARLIEST <= found <= bounded.LATEST else None
    except (OverflowError, ValueError, OSError):
        return None


class PlannedCell(BaseModel):
    """A cell as session.json plans it (save() below writes these keys)."""

    model_config = ConfigDict(extra="allow")
    cell_id: str
    recipe: str | None = None
    variant: str | None = None
    scale: str | None = None
    accelerator: str | None = None
    devices: int | None = Field(default=None, ge=1)
    nodes: int | None = Field(default=None, ge=1)
    baseline: bool = False
    recipe_hash: str | None = None


class SessionFile(BaseModel):
    """session.json's schema: what the readers of a session take from it."""

    model_config = ConfigDict(extra="allow")
    session: str | None = None
    created_at: str | None = None
    kit_revision: str | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    accelerator: str | None = None
    scale: str | None = None
    runtime: str | None = None
    container: str | None = None
    cells: list[PlannedCell] = Field(default_factory=list)
    resumed_at: list[str] = Field(default_factory=list)


def stored(session_dir: Path, root: Path | None = None) -> dict[str, Any]:
    """The plan `inv reproduce` stored when the session started (empty for a folder without one);
    bounded.Malformed (the file and why) for a session.json that is not one the kit wrote."""
    path = session_dir / SESSION_FILE
    found = bounded.json_object(path, root)
    if found is None:
        return {}
    bounded.checked(SessionFile, found, path)
    bounded.time_of(found.get("created_at"), path, "created_at")
    for when in found.get("resumed_at") or []:
        bounded.time_of(when, path, "resumed_at")
    return found


def new_dir(out: str | None) -> Path:
    base = files.make_dir(Path(out) if out else RESULTS_DIR)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    # Two sessions started in the same second must not share (and mix) one folder.
    for suffix in ["", *(f"-{n}" for n in range(2, 1000))]:
        path = base / f"{stamp}{suffix}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        os.chmod(path, files.DIR_MODE)
        return path
    raise ReprokitError(f"cannot make a new session folder under {base}: too many named {stamp}-*")


def started(folder: Path, root: Path | None = None) -> datetime:
    """When a session started: session.json's created_at, else its folder's modification time;
    bounded.Malformed for a session.json that is not one the kit wrote (or a link out of `root`)."""
    found = parse_time(stored(folder, root).get("created_at"))
    if found is not None:
        return found
    try:
        return datetime.fromtimestamp(folder.stat().st_mtime, timezone.utc)
    except (OSError, OverflowError, ValueError):
        return datetime.fromtimestamp(0, timezone.utc)


def folders(base: Path) -> list[Path]:
    """The folders directly under `base`, its path taken literally (`team?`, `res[1]` are names, not
    patterns); a broken link or a link loop is not a folder."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            if entry.is_dir():
                found.append(Path(entry.path))
        except OSError:
            continue
    return found


def listed(
    base: Path, holding: str = SESSION_FILE, skipped: list[bounded.Malformed] | None = None
) -> list[Path]:
    """The session folders under `base` that hold `holding`, oldest first (by when they started). A
    session that cannot be placed (a malformed session.json, a link out of `base`) is left out, and
    added to `skipped` when given."""
    found = []
    for folder in folders(base):
        if not (folder / holding).is_file():
            continue
        try:
            bounded.check_inside(folder, base)
            found.append((started(folder, base), folder.name, folder))
        except bounded.Malformed as exc:
            if skipped is not None:
                skipped.append(exc)
    return [p for _, _, p in sorted(found)]


def find(
    name: str,
    base: Path | None = None,
    holding: str = SESSION_FILE,
    skipped: list[bounded.Malformed] | None = None,
) -> Path:
    """A session by folder, by name under the results folder `base`, or `latest` / `previous` (among
    the sessions that can be placed; those that cannot are added to `skipped`). A session folder that is
    a link out of its results folder is refused: results are read and written inside it only."""
    base = base or RESULTS_DIR
    if name in ("latest", "previous"):
        known = listed(base, holding, skipped)
        wanted = 1 if name == "latest" else 2
        if len(known) < wanted:
            raise ReprokitError(
                f"{base} holds {len(known)} session(s) with {holding}: there is no {name} one"
            )
        return known[-wanted]
    for candidate, root in ((Path(name), Path(name).parent), (base / name, base)):
        if (candidate / holding).is_file():
            bounded.check_inside(candidate, root, f"its results folder {root}")
            return candidate
    raise ReprokitError(
        f"no session {name!r} with {holding} under {base} (give a session folder, a name in it, latest or previous)"
    )


def _recipe_ref(name: str) -> str:
    """A kit recipe by name stays a name; any other recipe file becomes an absolute path (a resume
    finds it without the --recipes folder it came from)."""
    path = recipes.resolve_path(name)
    return name if recipes.is_kit_recipe(path) and path.stem == name else str(path.resolve())


def save(session_dir: Path, the_plan: Plan, request: Request) -> Path:
    """session.json: the request and its resolved plan, written when the session starts."""
    asked = asdict(request)
    asked["recipes"] = [_recipe_ref(n) for n in request.recipes]
    payload = {
        "session": session_dir.name,
        "created_at": now(),
        "kit_revision": kit_revision(),
        "request": asked,
        "accelerator": the_plan.accelerator,
        "scale": the_plan.scale,
        "runtime": the_plan.runtime,
        "container": the_plan.container,
        "devices": the_plan.devices,
        "nodes": the_plan.nodes,
        "cells": [
            {
                "cell_id": c.cell_id,
                "recipe": c.recipe,
                "variant": c.variant,
                "scale": c.scale,
                "accelerator": c.accelerator,
                "devices": c.devices,
                "nodes": c.nodes,
                "baseline": c.baseline,
                "recipe_file": c.recipe_file,
                "recipe_hash": c.recipe_hash,
            }
            for c in the_plan.cells
        ],
        "resumed_at": [],
    }
    path = session_dir / SESSION_FILE
    files.write_json(path, payload)
    return path


def _conflicts(saved: dict[str, Any], request: Request) -> list[str]:
    """Flags given with --resume that would plan other cells than the session's."""
    asked = saved.get("request", {})
    found = []
    used = {key: saved.get(key) for key in ("accelerator", "scale", "runtime", "container")}
    for key, value in used.items():
        given = getattr(request, key)
        if given != "auto" and given not in (value, asked.get(key)):
            found.append(f"--{key} {given} (the session used {value})")
    if request.recipes and [_recipe_ref(n) for n in request.recipes] != asked.get("recipes"):
        found.append(
            f"recipes {' '.join(request.recipes)} (the session ran {' '.join(asked.get('recipes') or ['all'])})"
        )
    if request.variants and request.variants != asked.get("variants"):
        found.append(
            f"--variant {' '.join(request.variants)} (the session ran {' '.join(asked.get('variants') or ['all'])})"
        )
    if request.profile and not asked.get("profile"):
        found.append("--profile (the session traced nothing)")
    for key in ("devices", "nodes"):
        given = getattr(request, key)
        if given is not None and given != saved.get(key):
            used_value = saved.get(key) or "each recipe's own"
            found.append(f"--{key} {given} (the session used {used_value})")
    return found


def resume_plan(session_dir: Path, request: Request) -> tuple[Plan, Request]:
    """The plan of a session being resumed: its stored plan, re-expanded to the same cells, and the
    request it was made from (a new --timeout and plug-in options apply; anything else that would
    change the cells is refused)."""
    saved = stored(session_dir)
    if not saved:
        raise ReprokitError(
            f"{session_dir} is not a session (no {SESSION_FILE}): --resume takes a folder `inv reproduce` made"
        )
    conflicts = _conflicts(saved, request)
    if conflicts:
        raise ReprokitError(
            f"--resume {session_dir.name} reruns the session's own plan ({session_dir / SESSION_FILE}); "
            f"leave out {'; '.join(conflicts)}"
        )
    asked = saved.get("request", {})
    stored_options = {k: v for k, v in (asked.get("runtime_options") or {}).items() if k != "container"}
    effective = Request(
        **{
            **{k: v for k, v in asked.items() if k in Request.__dataclass_fields__},
            "runtime": saved["runtime"],
            "container": saved["container"],
            "accelerator": saved["accelerator"],
            "scale": saved["scale"],
            "devices": saved.get("devices"),
            "nodes": saved.get("nodes"),
            "repeat": int(asked.get("repeat") or 1),
            "timeout": request.timeout if request.timeout is not None else asked.get("timeout"),
            "runtime_options": {**stored_options, **request.runtime_options},
            "settings": request.settings or asked.get("settings") or {},
        }
    )
    the_plan = plan(effective)
    by_id = {c.cell_id: c for c in the_plan.cells}
    wanted = saved.get("cells") or []
    missing = [c["cell_id"] for c in wanted if c["cell_id"] not in by_id]
    if missing:
        raise ReprokitError(
            f"session {session_dir.name} planned {', '.join(missing)}, which the recipes no longer give; "
            "start a new session"
        )
    for item in wanted:
        now = by_id[item["cell_id"]].recipe_hash
        if item.get("recipe_hash") and now != item["recipe_hash"]:
            the_plan.messages.append(
                f"warning: recipe {item['recipe']} changed since the session started "
                f"(hash {item['recipe_hash']} -> {now}); cells kept from before ran the old one"
            )
    the_plan.messages[:] = list(dict.fromkeys(the_plan.messages))
    the_plan.cells = [by_id[c["cell_id"]] for c in wanted]
    return the_plan, effective


def mark_resumed(session_dir: Path) -> None:
    saved = stored(session_dir)
    if saved:
        saved.setdefault("resumed_at", []).append(now())
        files.write_json(session_dir / SESSION_FILE, saved)
