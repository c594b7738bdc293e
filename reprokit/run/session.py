"""A session in the making: a new results/<session>/ folder, its session.json written from the plan,
and `--resume SESSION` re-planning a session from it. The session's file names and their readers are
contract/sessions.py's."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reprokit.contract import files
from reprokit.contract.errors import ReprokitError
from reprokit.contract.gitinfo import kit_revision
from reprokit.contract.sessions import RESULTS_DIR, SESSION_FILE, now, stored
from reprokit.plan import recipes
from reprokit.plan.planner import Plan
from reprokit.plan.request import Request
from reprokit.run.placement import plan


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


def _recipe_ref(name: str) -> str:
    """A kit recipe by name stays a name; any other recipe file becomes an absolute path (a resume
    finds it without the --recipes folder it came from)."""
    path = recipes.resolve_path(name)
    return name if recipes.kit_name(path) == name else str(path.resolve())


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
    if request.reference and request.reference != asked.get("reference"):
        found.append(
            f"--reference {request.reference} (the session judged against {asked.get('reference') or 'the publication'})"
        )
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
    if saved.get("acceptance"):
        # Its cells are the one cell pinned to each node or device, which no plan of flags gives back.
        raise ReprokitError(
            f"{session_dir.name} is an acceptance run (`accept`): run the acceptance again, a new session that "
            "`compare` can set beside this one"
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
