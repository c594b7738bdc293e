"""The archive a node run sends back: one .tar.gz of at most 16 MiB with what explains each number
(the session's plan, results and report, each run directory's cell, summary, sysinfo, throughput,
breakdown and energy, TensorBoard events, logs, profiles), the node's checks and software, and
`nvidia-smi -q`; never a checkpoint. Rewritten whole after each cell, atomically, so a run stopped at
any moment leaves the last complete one.

Logs are cut to their last 256 KiB; over the limit, the TensorBoard events are left out, then the
profiles, then the logs; the archive's own `archive.json` says what was left out.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from reprokit.contract import files, rundirs

LIMIT_BYTES = 16 * 2**20
LOG_TAIL_BYTES = 256 * 1024
# Never sent back: what a finetune reads (GBs), and caches a trainer leaves in its folder.
EXCLUDED_DIRS = {rundirs.FILES["checkpoint"], "__pycache__", ".cache"}
EXCLUDED_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".arrow")
# What goes first when the archive is over the limit: TensorBoard's events (the CSVs hold the same
# steps), then the traces, then the logs (their tails are in each summary).
DROP_ORDER: tuple[tuple[str, ...], ...] = (
    (),
    ("tensorboard",),
    ("tensorboard", "profile"),
    ("tensorboard", "profile", "log"),
)


def _files(root: Path) -> list[Path]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDED_DIRS)
        for name in sorted(names):
            path = Path(folder) / name
            if not name.endswith(EXCLUDED_SUFFIXES) and path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def pack(out_file: Path, parts: dict[str, Path]) -> dict[str, object]:
    """Write `out_file` from `parts` (name in the archive -> a file or folder); returns what it holds
    and what was left out to stay under the limit."""
    entries = []
    for name, path in parts.items():
        if path.is_dir():
            entries += [(f"{name}/{p.relative_to(path)}", p) for p in _files(path)]
        elif path.is_file():
            entries.append((name, path))
    left_out: list[str] = []
    for drop in DROP_ORDER:
        data = _tar(entries, drop, left_out)
        if len(data) <= LIMIT_BYTES:
            break
        left_out.append(
            f"over {LIMIT_BYTES // 2**20} MiB with {', '.join(drop) or 'everything'}: left out the next"
        )
    else:
        raise OSError(f"the archive stays over {LIMIT_BYTES // 2**20} MiB with only results and summaries")
    files.write_bytes(out_file, data)
    return {"bytes": len(data), "files": len(entries), "left_out": left_out}


def _tar(entries: list[tuple[str, Path]], drop: tuple[str, ...], left_out: list[str]) -> bytes:
    buffer = io.BytesIO()
    kept = []
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for name, path in entries:
            parts = name.split("/")
            if any(d in parts for d in ("tensorboard", "profile") if d in drop) or (
                "log" in drop and name.endswith(".log")
            ):
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue  # a file a trainer is still replacing: the next pack has it
            if name.endswith(".log") and len(data) > LOG_TAIL_BYTES:
                data = b"[... cut to its last 256 KiB ...]\n" + data[-LOG_TAIL_BYTES:]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(path.stat().st_mtime)
            archive.addfile(info, io.BytesIO(data))
            kept.append(name)
        note = json.dumps({"files": kept, "left_out": left_out}, indent=1).encode()
        info = tarfile.TarInfo("archive.json")
        info.size = len(note)
        archive.addfile(info, io.BytesIO(note))
    return buffer.getvalue()
