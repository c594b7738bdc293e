"""Where the test suite's CPU goes: a pytest plugin.

    make test ARGS="-p benchmarks.suite_cpu --suite-cpu benchmarks/results/suite_cpu.csv"

On two cores the suite is CPU-bound, so its wall time is its CPU seconds over the cores. Making it
faster means finding those seconds. For each test the plugin takes the CPU of the process that ran it,
plus the children that process waited for (trainers, `inv`, pip): `getrusage` before and after, on
each xdist worker. At the end it writes one CSV row per test file, slowest first, and prints the top of
it. Beside the files it prints the machine's busy CPU over the run, from /proc/stat, and how much of
that the rows do not cover.

What the rows cannot see: work done by the Docker engine and its containers, Slurm's daemons and their
jobs, and any process that outlived its test. That is the gap between the two totals. Those tests'
wall times (`--durations`) stand for them."""

from __future__ import annotations

import csv
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

# Per-test lines from every worker, appended by each (a line is one write, far under PIPE_BUF), read by
# the controller at the end.
PARTIAL_SUFFIX = ".tests.jsonl"
SHOWN = 15
# The machine's busy CPU-s and the clock when the session started (the controller's).
_STARTED = pytest.StashKey[tuple[float | None, float]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-cpu",
        metavar="CSV",
        type=Path,
        help="write each test file's CPU seconds (its processes and their children) to CSV, and print the top",
    )


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def machine_busy_s() -> float | None:
    """CPU seconds every core of the machine has spent busy since boot (user, nice, system, irq, softirq,
    steal), or None where there is no /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _partial(config: pytest.Config) -> Path | None:
    out = config.getoption("suite_cpu", default=None)
    return None if out is None else Path(str(out) + PARTIAL_SUFFIX)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    partial = _partial(session.config)
    if partial is None or _is_worker(session.config):
        return
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    session.config.stash[_STARTED] = (machine_busy_s(), time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 - a hook wrapper
    partial = _partial(item.config)
    if partial is None:
        yield
        return
    own, children = _cpu()
    started = time.monotonic()
    yield
    own_after, children_after = _cpu()
    line = {
        "test": item.nodeid,
        "own_s": round(own_after - own, 3),
        "children_s": round(children_after - children, 3),
        "wall_s": round(time.monotonic() - started, 3),
    }
    with open(partial, "a") as out:
        out.write(json.dumps(line) + "\n")


def by_file(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per test file: its tests' CPU (own and children's) and wall seconds, most CPU first."""
    files: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"tests": 0, "own_s": 0.0, "children_s": 0.0, "wall_s": 0.0}
    )
    for line in lines:
        row = files[line["test"].split("::", 1)[0]]
        row["tests"] += 1
        for key in ("own_s", "children_s", "wall_s"):
            row[key] += line[key]
    rows = [{"file": name, "cpu_s": row["own_s"] + row["children_s"], **row} for name, row in files.items()]
    return sorted(rows, key=lambda row: row["cpu_s"], reverse=True)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    partial = _partial(config)
    if partial is None or _is_worker(config):
        return
    lines = [json.loads(text) for text in partial.read_text().splitlines()] if partial.exists() else []
    rows = by_file(lines)
    out = Path(config.getoption("suite_cpu"))
    with open(out, "w", newline="") as handle:
        fields = ["file", "tests", "cpu_s", "own_s", "children_s", "wall_s"]
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {key: round(row[key], 2) if isinstance(row[key], float) else row[key] for key in fields}
            )
    partial.unlink(missing_ok=True)
    counted = sum(row["cpu_s"] for row in rows)
    write = terminalreporter.write_line
    terminalreporter.section("CPU by test file (benchmarks/suite_cpu.py)")
    for row in rows[:SHOWN]:
        write(f"{row['cpu_s']:8.1f} CPU-s {row['wall_s']:8.1f} s wall {row['tests']:4d} tests  {row['file']}")
    busy_before, started = config.stash.get(_STARTED, (None, time.monotonic()))
    busy_after = machine_busy_s()
    summary = f"{counted:,.0f} CPU-s in the tests' processes, over {len(rows)} files ({out})"
    if busy_before is not None and busy_after is not None:
        busy = busy_after - busy_before
        summary += (
            f"; the machine was busy {busy:,.0f} CPU-s in {time.monotonic() - started:,.0f} s: "
            f"{busy - counted:,.0f} of them elsewhere (the Docker engine and its containers, Slurm's jobs, "
            "processes that outlived their test, anything else running)"
        )
    write(summary)
