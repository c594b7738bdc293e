"""`inv history` at scale (part of `make bench`): a results folder of N sessions, timed as a user runs it.

One real session is made first: the kit's fake trainer (tests/fakes) run by `inv run` on this machine,
so results.jsonl and session.json are what collect writes. It is then copied N times, one session an
hour, alternating between two hosts, its numbers varied, its runs/ folders left out (history reads a
session's results.jsonl and session.json only). Each size is timed as a subprocess,
`inv history all --results DIR`, as wall time with the interpreter's start and the imports: until its
table is printed (the figure held to LIMITS), and until history.html is written with its plots; its
peak resident memory beside them. The 1,000 sessions are timed again with one session's device named
in a million characters (within results.jsonl's size bound), which the table, the plots and the page
show cut (issue 46: 224 s and 775 MB for two sessions before they did).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (100, 1_000, 5_000)
# How soon `inv history` must have printed its table on a developer's machine (issue 22), in seconds;
# history.html and its plots are drawn after the table, and timed beside it.
LIMITS = {1_000: 2.0, 5_000: 5.0}
# The device name of one session, in characters, for the second timing of this many sessions.
LONG_NAME = 1_000_000
LONG_AT = 1_000
VARIANTS = [
    {"name": "base", "baseline": True, "args": {"fake_rate": 100}},
    {"name": "fast", "args": {"fake_rate": 180}},
    {"name": "faster", "args": {"fake_rate": 240}},
]


def real_session(folder: Path) -> Path:
    """One session made by the kit with the fake trainer; its folder."""
    from tests.fakes import fake_env, fake_recipe

    recipe = fake_recipe(folder / "bench.yaml", VARIANTS)
    out = folder / "made"
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "run", str(recipe), "--accelerator", "cpu", "--scale", "smoke",
         "--runtime", "local", "--results", str(out)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **fake_env(), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"making the benchmark's session failed: {done.stderr.strip().splitlines()[-1:]}")
    (made,) = out.iterdir()
    return made


def populate(source: Path, results: Path, count: int, seed: int = 0) -> None:
    """`count` sessions under `results`, copies of `source`: an hour apart, two hosts taking turns."""
    rng = random.Random(seed)
    stored = json.loads((source / "session.json").read_text())
    rows = [json.loads(line) for line in (source / "results.jsonl").read_text().splitlines()]
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    results.mkdir(parents=True)
    for index in range(count):
        when = start + timedelta(hours=index)
        name = when.strftime("%Y%m%d-%H%M%S")
        folder = results / name
        folder.mkdir()
        host = f"node{index % 2 + 1}"
        (folder / "session.json").write_text(
            json.dumps(
                {**stored, "session": name, "created_at": when.isoformat(timespec="milliseconds")}, indent=2
            )
        )
        made = []
        for row in rows:
            factor = rng.uniform(0.95, 1.05) * (0.9 if host == "node2" else 1.0)
            made.append(
                {
                    **row,
                    "session": name,
                    "started_at": (when + timedelta(seconds=5)).isoformat(timespec="milliseconds"),
                    "measured": (row.get("measured") or 0) * factor,
                    "measured_per_device": (row.get("measured_per_device") or 0) * factor,
                    "provenance": {**(row.get("provenance") or {}), "hostname": host},
                }
            )
        (folder / "results.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in made))


def lengthen(results: Path, characters: int) -> None:
    """The middle session's device named in `characters` characters, in its results.jsonl."""
    folders = sorted(results.iterdir())
    path = folders[len(folders) // 2] / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["device_name"] = "GPU" + "x" * characters
        row["provenance"] = {**(row.get("provenance") or {}), "device_name": row["device_name"]}
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def timed(results: Path) -> dict:
    """Seconds until `inv history all --results DIR` has printed its table, and until it has ended
    (history.html written with its plots), as a user runs it; the table's rows."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "history", "all", "--results", str(results)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    lines, table_s = 0, None
    for line in proc.stdout:
        if line.rstrip().endswith(b"history.html"):  # the page's path: printed once the plots are drawn
            break
        lines += 1
        table_s = time.perf_counter() - start
    proc.stdout.read()
    err = proc.stderr.read()
    proc.wait()
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or table_s is None:
        raise SystemExit(f"inv history failed: {err.decode(errors='replace').strip().splitlines()[-1:]}")
    return {"table_s": table_s, "seconds": seconds, "rows": lines - 3}


# Linux carries a process's peak RSS across fork and exec (the parent's at the fork counts as the
# child's), so the child is started and waited for by a small Python of its own, not by this benchmark
# process, which is gigabytes large after the data-path and FLOP suites.
_WAIT_PEAK = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(os.wait4(proc.pid, 0)[2].ru_maxrss)
"""


def peak_rss_mib(results: Path) -> float:
    """The peak resident set of one `inv history` run, from the kernel's accounting of that child."""
    done = subprocess.run(
        [sys.executable, "-c", _WAIT_PEAK, sys.executable, "-m", "invoke", "history", "all", "--results", str(results)],
        cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    return int(done.stdout.split()[-1]) / 1024


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 3) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="reprokit-bench-history-") as scratch:
        source = real_session(Path(scratch))
        for size in sizes:
            results = Path(scratch) / f"results-{size}"
            populate(source, results, size)
            rows.append(_measured(results, f"inv history all: {size} sessions", size, repeats))
            if size == LONG_AT:
                lengthen(results, LONG_NAME)
                name = f"inv history all: {size} sessions, one device named in {LONG_NAME:,} characters"
                rows.append(_measured(results, name, size, repeats))
            shutil.rmtree(results)
    return rows


def _measured(results: Path, name: str, size: int, repeats: int) -> dict:
    runs = [timed(results) for _ in range(repeats)]
    table = min(r["table_s"] for r in runs)
    limit = LIMITS.get(size)
    return {
        "suite": "history",
        "name": name,
        "sessions": size,
        "table_rows": runs[0]["rows"],
        "table_s": table,
        "with_plots_s": min(r["seconds"] for r in runs),
        "peak_rss_mib": peak_rss_mib(results),
        "limit_s": limit if limit is not None else "",
        "within": "" if limit is None else ("yes" if table <= limit else "NO"),
    }
