"""Malformed sessions, generated: copies of a good session each broken in one way a results folder
meets (a value of the wrong type, a file nested 100,000 deep, a date of year 1, bytes that are not
UTF-8, a link out of the folder or to a FIFO, a number that is not finite, a file too large, its run
directories gone, no time recorded, a repeated row's range no runs could give, links planted where the
kit writes, a name of tens or hundreds of thousands of characters), for the store's fuzz test. Each
case says which file its damage is in, and what the kit must make of it."""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_FILES = ("cell.json", "sysinfo.json", "summary.json", "throughput.csv")
SESSION_FILES = ("session.json", "results.jsonl")
# What each JSON file holds that the kit reads, and values of another type for each.
WRONG_TYPES: dict[str, dict[str, list[Any]]] = {
    "session.json": {
        "created_at": [5, [], {"at": 1}, True],
        "cells": ["abc", 7, {"cell_id": "x"}, [7], [{"id": "x"}], [{"cell_id": 5}]],
        "resumed_at": ["2025-01-01", [5]],
        "request": ["all", [1]],
    },
    "results.jsonl": {
        "measured_per_device": ["fast", [1], {"v": 1}, True],
        "cell_id": [[1], 5, {"x": 1}],
        "provenance": [{"hostname": {}}, {"hostname": [1]}, "host"],
        "departures": [[{"reason": 5}], [{"reason": "x", "kind": "other"}], "synthetic data", [7]],
        "started_at": [12, ["x"]],
        "repeats": ["3", 2.5],
        "references": ["h100", [1]],
    },
    "cell.json": {
        "cell_id": [5, ["x"]],
        "devices": [0, -1, "eight", 1.5],
        "tolerance": ["ten", -0.5, 1e9, None],
        "references": [
            "h100",
            [{"device": "h100", "value": "fast"}],
            [{"device": "h100", "value": -5}],
            [{"value": 3}],
        ],
        "roles": [{"switches": []}, {"switches": {"a": {"label": "x"}}}, {"max_steps": 5}],
        "series_id": [["x"], {"a": 1}],
        "args": ["--lr 1", [1]],
    },
    "sysinfo.json": {
        "device_name": [5, ["H100"]],
        "world_size": [0, -8, "eight"],
        "hostname": [{"h": 1}, [1]],
        "hardware": ["big", [1]],
        "versions": [{"torch": {"v": 2}}, "2.5"],
        "started_at": [1735700000, ["x"]],
    },
    "summary.json": {
        "schema_version": ["three", 3.5, None],
        "status": [5, ["ok"]],
        "throughput": [{"after_warmup": {"value": "fast"}}, {"after_warmup": 5}, "fast"],
        "departures": ["synthetic data", [{"reason": "x", "kind": "nothing"}], [5]],
        "world_size": [0, "many"],
        "mfu": ["high", [0.3]],
        "log_tail": ["line", [1, 2]],
        "breakdown": ["most", {"compute": "most"}],
    },
}
DATES = {
    "session.json": ["created_at"],
    "results.jsonl": ["started_at", "finished_at"],
    "sysinfo.json": ["started_at"],
    "summary.json": ["finished_at"],
}
BAD_DATES = ["0001-01-01T00:00:00", "9999-12-31T23:59:59+00:00", "1969-12-31T23:59:59Z", "yesterday",
             "2025-13-45T99:99:99", "2025-01-01T10:00:00+25:00", ""]  # fmt: skip
NOT_FINITE = [float("nan"), float("inf"), float("-inf")]
NOT_RATES = [*NOT_FINITE, 0.0, -0.0, -12.5]
# A repeated row's range as a hand edit or another tool leaves it: (how, min, max, the runs it records,
# spread), each a factor of the row's figure (None: the spread its min and max give). Every number is
# finite and JSON: what makes it hostile is what it would let a comparison call `same` or `improved`.
HOSTILE_SPREADS = [
    ("a negative min", -5.0, 1.01, None, None),
    ("a zero min", 0.0, 1.01, None, None),
    ("an absurd max", 0.99, 1e300, None, None),
    ("min above max", 1.5, 0.5, None, None),
    ("a range wider than its runs", 0.01, 100.0, (0.99, 1.0, 1.01), None),
    ("a spread that is not its range's", 0.99, 1.01, None, 50.0),
    ("a negative spread", 0.99, 1.01, None, -0.5),
]
# Text that is no file's damage but reaches outputs: controls, rich markup, math text, HTML.
# How many sessions of each kind added since the seeded mix was fixed (Breaker.make).
LATER_EACH = 4
# What collect and report write in a session (report also the plots): a link planted at any of these
# names, or at the temporary name the writer once chose (`.results.jsonl.tmp<pid>`), leads outside.
COLLECTED = ("results.csv", "results.jsonl", "systems", "tensorboard")
REPORTED = (*COLLECTED, "report.md", "report.html")
PLANTED = "not the kit's: planted outside the results folder\n"
HOSTILE_TEXT = ["\x1b]0;owned\x07\x1b[2J", "[/]", "[bold]x[/bold", "$\\foo{$", "<script>alert(1)</script>",
                "<img src=x onerror=alert(1)>", "a\nb", "it's \"quoted\"", "\u202eevil", "\x00nul"]  # fmt: skip
# A name within its file's bound and far beyond any name's: its run of this letter is what no output may
# show more than textsafe.NAME of. In results.jsonl (read by history and compare), a few hundred KB.
LONG_LETTER = "x"
LONG_IN_RESULTS = 300_000


@dataclass
class Case:
    """One broken session: its folder, the file (or folder) its damage is in, how it was broken, and
    what the kit must say of it: `skipped` (that file named in a skipped line, its session or cell
    left out), `not comparable` (a figure that is not a rate: the cell is not judged), `kept` (run
    directories gone: the measured rows survive a collect, each saying why it was not read again),
    `unplaced` (a session that recorded no time: left out of history and latest, read by name) or `not
    compared` (numbers a comparison cannot trust: compare leaves the cell out of its verdicts)."""

    folder: Path
    path: Path
    how: str
    expect: str = "skipped"
    kind: str = ""
    # What the session measured before it was broken (cell id: figure), where that must survive.
    measured: dict[str, float | None] = field(default_factory=dict)
    # Links planted where the kit writes (`planted`): the folder outside they lead to, as it was made.
    outside: Path | None = None
    outside_was: dict[str, str] = field(default_factory=dict)

    @property
    def in_run(self) -> bool:
        return self.path.name in RUN_FILES or self.path.parent.parent.name == "runs"


def as_it_stands(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder`, with each file's text: what a planted link leads to, to be
    found the same after the kit wrote beside the links."""
    return {
        str(p.relative_to(folder)): p.read_text() if p.is_file() else "/" for p in sorted(folder.rglob("*"))
    }


def links_left(case: Case, names: tuple[str, ...]) -> list[str]:
    """Which of a session's own files or folders `names` are still links (the kit wrote them all)."""
    return [name for name in names if (case.folder / name).is_symlink()]


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _set_json(path: Path, key: str, value: Any) -> None:
    if path.name == "results.jsonl":
        lines = path.read_text().splitlines()
        row = json.loads(lines[0])
        row[key] = value
        lines[0] = json.dumps(row)
        path.write_text("\n".join(lines) + "\n")
    else:
        found = _json(path)
        found[key] = value
        path.write_text(json.dumps(found))


def _raw_value(path: Path, key: str, raw: str) -> None:
    """Set `key` to raw JSON text (NaN, 100,000 levels: what json.dumps would not write)."""
    marker = "__RAW__"
    _set_json(path, key, marker)
    path.write_text(path.read_text().replace(f'"{marker}"', raw, 1))


class Breaker:
    """Breaks copies of a good session, one way each, chosen by a seeded random generator."""

    def __init__(self, template: Path, results: Path, outside: Path, seed: int) -> None:
        self.template, self.results, self.outside = template, results, outside
        self.rng = random.Random(seed)
        self.count = self.spreads = 0
        outside.mkdir(parents=True, exist_ok=True)

    def _copy(self) -> Path:
        self.count += 1
        folder = self.results / f"bad{self.count:03d}"
        shutil.copytree(self.template, folder, symlinks=True)
        return folder

    def _target(self, folder: Path, names: tuple[str, ...]) -> Path:
        name = self.rng.choice(names)
        if name in RUN_FILES:
            cell = self.rng.choice(sorted(p.name for p in (folder / "runs").iterdir()))
            return folder / "runs" / cell / name
        return folder / name

    def wrong_type(self) -> Case:
        folder = self._copy()
        path = self._target(folder, tuple(WRONG_TYPES))
        key = self.rng.choice(sorted(WRONG_TYPES[path.name]))
        value = self.rng.choice(WRONG_TYPES[path.name][key])
        _set_json(path, key, value)
        return Case(folder, path, f"{path.name} {key}={value!r}")

    def deep(self) -> Case:
        folder = self._copy()
        path = self._target(
            folder, ("session.json", "results.jsonl", "cell.json", "sysinfo.json", "summary.json")
        )
        depth = self.rng.choice([65, 1000, 100_000])
        _raw_value(path, "nested", _nested(depth))
        return Case(folder, path, f"{path.name} nested {depth} deep")

    def bad_date(self) -> Case:
        folder = self._copy()
        path = self._target(folder, tuple(DATES))
        key, value = self.rng.choice(DATES[path.name]), self.rng.choice(BAD_DATES)
        _set_json(path, key, value)
        return Case(folder, path, f"{path.name} {key}={value!r}")

    def bad_bytes(self) -> Case:
        folder = self._copy()
        path = self._target(folder, (*SESSION_FILES, *RUN_FILES))
        data = path.read_bytes()
        how = self.rng.choice(["not utf-8", "utf-16", "nul", "latin-1", "truncated", "empty", "surrogate"])
        if how == "not utf-8":
            data = b"\xff\xfe" + data
        elif how == "utf-16":
            data = data.decode().encode("utf-16")
        elif how == "nul":
            data = data[: len(data) // 2] + b"\x00" + data[len(data) // 2 :]
        elif how == "latin-1":
            data = data.replace(b'"', b'"caf\xe9', 1) if path.suffix != ".csv" else data + b"caf\xe9,1\n"
        elif how == "truncated":
            data = data[: len(data) // 2]
        elif how == "empty":
            data = b""
        elif path.suffix in (".json", ".jsonl"):
            data = data.replace(b'"', b'"\\udc80', 1)
        else:
            data = data + b"\\udc80,1,2,3\n"
        path.write_bytes(data)
        # An empty throughput.csv (a trainer that never logged a step) or one cut mid-row (killed while
        # writing) is what a run leaves: read as far as it goes, nothing to name.
        expect = "tolerated" if path.name == "throughput.csv" and how in ("empty", "truncated") else "skipped"
        if path.name == "results.jsonl" and how == "empty":
            expect = "tolerated"  # a session with no cell collects to an empty results.jsonl
        return Case(folder, path, f"{path.name}: {how}", expect)

    def link(self) -> Case:
        folder = self._copy()
        how = self.rng.choice(["out", "loop", "device", "folder", "fifo", "nowhere", "session out"])
        if how == "session out":
            shutil.move(folder, self.outside / folder.name)
            folder.symlink_to(self.outside / folder.name)
            return Case(folder, folder, "the session folder links out")
        path = self._target(folder, (*SESSION_FILES, *RUN_FILES))
        copy = self.outside / f"{folder.name}-{path.name}"
        shutil.copyfile(path, copy)
        path.unlink()
        if how == "out":
            path.symlink_to(copy)
        elif how == "loop":
            path.symlink_to(path)
        elif how == "device":
            path.symlink_to("/dev/zero")
        elif how == "folder":
            path.mkdir()
        elif how == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(self.outside / "nothing-here")
        return Case(folder, path, f"{path.name}: a {how} link")

    def planted(self) -> Case:
        """No damage to read: links planted where the kit writes, at the temporary names its writer once
        chose (`.results.jsonl.tmp<pid>`, the pid this process's: the fuzz runs the kit in it) and at
        the session's own files' and folders' names, each to a file or folder outside. The kit must
        write none of them through: what they lead to stays as it was, and its files are its own."""
        folder = self._copy()
        outside = self.outside / f"{folder.name}-planted"
        outside.mkdir()
        where = self.rng.choice([("temporary",), ("own",), ("temporary", "own")])
        if "temporary" in where:
            for name in ("results.jsonl", "results.csv", "report.md", "report.html"):
                (outside / f"tmp-{name}").write_text(PLANTED)
                (folder / f".{name}.tmp{os.getpid()}").symlink_to(outside / f"tmp-{name}")
        if "own" in where:
            # results.jsonl is read before it is written (history, compare): its link out is the `link` kind.
            for name in ("results.csv", "report.md", "report.html"):
                (folder / name).unlink(missing_ok=True)
                (outside / name).write_text(PLANTED)
                (folder / name).symlink_to(outside / name)
            for name in ("systems", "tensorboard"):
                shutil.rmtree(folder / name, ignore_errors=True)
                (outside / name).mkdir()
                (outside / name / "keep").write_text(PLANTED)
                (folder / name).symlink_to(outside / name, target_is_directory=True)
        how = " and ".join(
            {"temporary": "the writer's temporary names", "own": "its own files' names"}[w] for w in where
        )
        return Case(folder, folder, f"links planted at {how}", "written inside", outside=outside,
                    outside_was=as_it_stands(outside))  # fmt: skip

    def not_finite(self) -> Case:
        folder = self._copy()
        path = self._target(folder, ("results.jsonl", "summary.json"))
        value = self.rng.choice(NOT_RATES if path.name == "summary.json" else NOT_FINITE)
        raw = json.dumps(value)  # NaN, Infinity, -Infinity, 0.0, -0.0
        if path.name == "results.jsonl":
            _raw_value(path, "measured_per_device", raw)
            return Case(folder, path, f"results.jsonl measured_per_device={raw}")
        summary = _json(path)
        if self.rng.random() < 0.5:
            summary["throughput"]["after_warmup"]["value"] = value
            summary["throughput"]["whole_run"]["value"] = value
            path.write_text(json.dumps(summary))
            return Case(folder, path, f"summary.json throughput={raw}", "not comparable")
        key = self.rng.choice(["samples_per_joule", "mfu", "energy_joules", "train_runtime_s"])
        summary[key] = value if value != 0 else -1.0
        path.write_text(json.dumps(summary))
        return Case(folder, path, f"summary.json {key}={summary[key]!r}")

    def hostile_spread(self) -> Case:
        """A row of results.jsonl made the median of three runs whose min, max or spread no three runs
        could give: a comparison must never call it `same` or `improved` (it is `not compared`)."""
        folder = self._copy()
        path = folder / "results.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        row = next(r for r in rows if r.get("measured") is not None)
        how, low, high, runs, spread = HOSTILE_SPREADS[self.spreads % len(HOSTILE_SPREADS)]
        self.spreads += 1
        figure = row["measured"]
        low, high = figure * low, figure * high
        ran = [figure * f for f in runs] if runs else [low, figure, high]
        row.update(
            repeats=3, measured_min=low, measured_max=high,
            spread=(high - low) / figure if spread is None else spread,
            repetitions=[{"cell_id": f"{row['cell_id']}--r{n}", "status": "ok", "measured": value,
                          "measured_per_device": value, "error": None} for n, value in enumerate(ran, 1)],
        )  # fmt: skip
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return Case(folder, path, f"results.jsonl {row['cell_id']}: {how}", "not compared")

    def too_large(self, limit: int) -> Case:
        folder = self._copy()
        path = self._target(folder, ("session.json", "cell.json", "sysinfo.json", "summary.json"))
        _set_json(path, "padding", "x" * (limit + 10))
        return Case(folder, path, f"{path.name} larger than {limit} bytes")

    def folder(self) -> Case:
        how = self.rng.choice(["not utf-8", "empty", "not collected", "loop", "nowhere"])
        self.count += 1
        name = f"bad{self.count:03d}"
        if how == "not utf-8":
            folder = Path(os.fsdecode(os.fsencode(self.results) + f"/{name}\xff".encode("latin-1")))
            shutil.copytree(self.template, folder)
        elif how == "empty":
            folder = self.results / name
            folder.mkdir()
        elif how == "not collected":
            folder = self.results / name
            shutil.copytree(self.template, folder)
            (folder / "results.jsonl").unlink()
        elif how == "loop":
            folder = self.results / name
            folder.symlink_to(folder)
        else:
            folder = self.results / name
            folder.symlink_to(self.outside / "no-session-here")
        return Case(folder, folder, f"folder: {how}")

    def hostile_text(self) -> Case:
        """No damage: words that must reach every output as text (a cell id, a device, a host)."""
        folder = self._copy()
        text = self.rng.choice(HOSTILE_TEXT)
        cell = self.rng.choice(sorted(p.name for p in (folder / "runs").iterdir()))
        run_dir = folder / "runs" / cell
        key = self.rng.choice(["device_name", "hostname", "cell_id"])
        if key == "cell_id":
            _set_json(run_dir / "cell.json", "cell_id", f"{cell}{text}")
            _set_json(run_dir / "cell.json", "series_id", f"{cell}{text}")
        else:
            _set_json(run_dir / "sysinfo.json", key, text)
        return Case(folder, run_dir, f"{key} {text!r}", "shown")

    def missing_runs(self) -> Case:
        """A session copied without its run directories (runs/ pruned, or one cell's folder removed):
        what its last collect stored is all there is of what it measured."""
        folder = self._copy()
        rows = [json.loads(text) for text in (folder / "results.jsonl").read_text().splitlines()]
        measured = {r["cell_id"]: r["measured"] for r in rows if r["status"] == "ok"}
        if self.rng.random() < 0.5:
            path, how = folder / "runs", "no runs/ folder"
        else:
            path = folder / "runs" / self.rng.choice(sorted(p.name for p in (folder / "runs").iterdir()))
            how = f"runs/{path.name} removed"
        shutil.rmtree(path)
        return Case(folder, path, how, "kept", measured=measured)

    def no_time(self) -> Case:
        """A session that recorded no time: a session.json without created_at (an older tool's), rows
        without their start."""
        folder = self._copy()
        stored = _json(folder / "session.json")
        del stored["created_at"]
        (folder / "session.json").write_text(json.dumps(stored))
        rows = [json.loads(text) for text in (folder / "results.jsonl").read_text().splitlines()]
        for row in rows:
            row["started_at"] = row["finished_at"] = None
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return Case(folder, folder, "no created_at, no start in its rows", "unplaced")

    def large_text(self, limit: int) -> Case:
        """No damage: a device, host or cell id of tens of thousands of characters in the run files (as
        long as their size bound `limit` allows; collected again, as the kit would), or of hundreds of
        thousands in results.jsonl alone, with a window title sequence in it: every output shows it cut."""
        from reprokit.collect import collect

        folder = self._copy()
        cell = self.rng.choice(sorted(p.name for p in (folder / "runs").iterdir()))
        run_dir = folder / "runs" / cell
        key = self.rng.choice(["device_name", "hostname", "cell_id"])
        if self.rng.random() < 0.5:
            text = f"{key}\x1b]0;TITLE\x07" + LONG_LETTER * (limit // 3)  # cell.json holds it twice
            if key == "cell_id":
                _set_json(run_dir / "cell.json", "cell_id", text)
                _set_json(run_dir / "cell.json", "series_id", text)
            else:
                _set_json(run_dir / "sysinfo.json", key, text)
            collect.collect(folder)
            return Case(folder, run_dir, f"{key} of {len(text):,} characters in the run files", "bounded")
        path = folder / "results.jsonl"
        text = f"{key}\x1b]0;TITLE\x07" + LONG_LETTER * LONG_IN_RESULTS
        row = json.loads(path.read_text().splitlines()[0])
        if key == "hostname":
            _set_json(path, "provenance", {**row["provenance"], "hostname": text})
        else:
            _set_json(path, key, text)
        return Case(folder, path, f"{key} of {len(text):,} characters in results.jsonl", "bounded")

    def make(self, count: int, limit: int) -> list[Case]:
        """`count` cases of the random kinds, then each hostile spread once."""
        makers = {"wrong type": self.wrong_type, "deep": self.deep, "date": self.bad_date, "bytes": self.bad_bytes,
                  "link": self.link, "not finite": self.not_finite, "folder": self.folder, "text": self.hostile_text,
                  "too large": lambda: self.too_large(limit)}  # fmt: skip
        # Kinds added since: made after the others, so that a seed gives the cases it gave before, and
        # each a few times (a session without runs/, a cell's run directory removed, links planted where the kit writes,
        # names of tens or hundreds of thousands of characters).
        later = {
            "missing runs": self.missing_runs,
            "no time": self.no_time,
            "planted": self.planted,
            "large strings": lambda: self.large_text(limit),
        }
        # Every kind at least once, then at random (types and bytes twice as often: the most ways to go wrong).
        kinds = [
            *makers,
            *(self.rng.choice([*makers, "wrong type", "bytes"]) for _ in range(count - len(makers))),
        ]
        # Kinds with few ways, each of which must be seen: every way once, after the random ones (whose
        # draws they leave as they were).
        each = {"hostile spreads": (self.hostile_spread, len(HOSTILE_SPREADS))}
        kinds += [kind for kind, (_, ways) in each.items() for _ in range(ways)]
        makers.update({kind: make for kind, (make, _) in each.items()})
        cases = []
        for kind in [*kinds, *(k for k in later for _ in range(LATER_EACH))]:
            case = {**makers, **later}[kind]()
            case.kind = kind
            cases.append(case)
        return cases
