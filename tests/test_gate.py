"""The regression gate cannot be fooled: a throughput that is not a rate (NaN, infinite, zero, below
zero, beyond any device's speed) is never shown as measured nor judged, the cell says `not comparable
(throughput not finite)`, and `inv compare --fail-on-regression` fails on every cell it cannot judge
unless told to skip it. Nor is any other number it reads taken on trust: a repeated row's min, max,
spread and count are checked against each other and its runs; a run that stalled or shared its
machine is not judged unless asked; the gate says how many cells it judged, fails when it judged
none, refuses thresholds that make it unable to fail, and exits 1 when it fails (2: a usage error)."""

from __future__ import annotations

import io
import json
import math

import jsonschema
import pytest
from invoke import Context, Exit
from rich.console import Console

from reprokit import schemas
from reprokit.cli import result_tasks
from reprokit.collect import collect
from reprokit.report import terminal
from tests.fakes.sessions import edit_json, write_session
from tests.inprocess import run_command

# What a broken meter, a hand edit or another tool leaves in summary.json's figures.
NOT_RATES = {"nan": math.nan, "infinite": math.inf, "zero": 0.0, "negative-zero": -0.0, "negative": -42.0,
             "beyond-any-device": 1e308}  # fmt: skip
CELL = "bridgetower--workers0"
# The fixture's repeated cell: three runs (76, 70, 74.5 samples/s), one row of median, min, max, spread.
SERIES = "bridgetower--workers1"
RUNS = tuple(f"{SERIES}--r{n}" for n in (1, 2, 3))


def _word(value: float) -> str:
    """How the kit says why `value` is not a rate."""
    if not math.isfinite(value):
        return "not finite"
    return "not positive" if value <= 0 else "above 1e+09 per device"


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    write_session(folder / "a", "2025-01-01T10:00:00+00:00")
    write_session(folder / "b", "2025-01-02T10:00:00+00:00")
    return folder


def _gate(results, **flags) -> None:
    result_tasks.compare(Context(), results=str(results), fail_on_regression="5", noise="5", **flags)


def _break(session, value) -> None:
    summary = session / "runs" / CELL / "summary.json"
    edit_json(summary, {"throughput.after_warmup.value": value, "throughput.whole_run.value": value})
    collect.collect(session)


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("value", NOT_RATES.values(), ids=list(NOT_RATES))
def test_a_throughput_that_is_not_a_rate_is_not_comparable_and_fails_the_gate(results, side, value, capsys):
    _break(results / side, value)
    row = next(r for r in collect.rows(results / side) if r.cell_id == CELL)
    word = _word(value)
    assert row.verdict == "not comparable" and f"throughput {word} (after_warmup: " in row.verdict_reasons
    assert row.measured is None and row.measured_per_device is None and row.ratio_per_device is None
    # The terminal shows no number for it, and why.
    shown = io.StringIO()
    terminal.print_table(collect.rows(results / side), Console(file=shown, width=300))
    (line,) = [text for text in shown.getvalue().splitlines() if CELL in text]
    status, per_device, published, ratio, verdict = (cell.strip() for cell in line.split("│")[2:7])
    assert (status, per_device, ratio) == ("ok", "-", "-") and published != "-"
    assert verdict.startswith(f"not comparable (throughput {word}")

    with pytest.raises(Exit) as stopped:
        _gate(results)
    assert stopped.value.code != 0
    assert stopped.value.message.startswith(
        f"reprokit: --fail-on-regression cannot judge 1 cell(s): {CELL} ("
    )
    assert f"throughput {word}" in stopped.value.message and "--skip-unjudged" in stopped.value.message
    # Told to skip what it cannot judge, the gate judges the other cell (the same on both sides).
    _gate(results, skip_unjudged=True)
    assert "not compared" in capsys.readouterr().out


@pytest.mark.parametrize("value", [0.0, -0.0, -5.0])
def test_a_results_jsonl_from_another_kit_with_a_rate_of_zero_or_below_fails_the_gate(results, value):
    path = results / "a" / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["measured_per_device"] = row["measured"] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(Exit) as stopped:  # before: ZeroDivisionError, or a `regressed`/`improved` verdict
        _gate(results)
    assert stopped.value.code != 0 and "cannot judge 2 cell(s)" in stopped.value.message
    assert f"A: throughput not positive ({value})" in stopped.value.message


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_results_jsonl_holding_a_number_that_is_not_finite_is_refused_in_one_line(results, value):
    path = results / "b" / "results.jsonl"
    text = path.read_text()
    first = json.loads(text.splitlines()[0])["measured_per_device"]
    path.write_text(
        text.replace(f'"measured_per_device": {json.dumps(first)}', f'"measured_per_device": {value}', 1)
    )
    with pytest.raises(Exit) as stopped:  # by name: `latest` passes over one it cannot read (test_latest.py)
        _gate(results, a="a", b="b")
    assert stopped.value.code == 2
    assert stopped.value.message == (
        f"reprokit: session b cannot be read: {path}: line 1: measured_per_device is "
        f"{float(value)!r}, not a finite number or null"
    )


def test_a_samples_per_joule_that_is_not_a_rate_is_not_an_energy_verdict(results, capsys):
    summary = results / "b" / "runs" / CELL / "summary.json"
    edit_json(summary, {"samples_per_joule": math.nan})
    found = collect.collect(results / "b")
    assert [s.skipped() for s in found.skipped] == [
        f"skipped: {summary}: samples_per_joule is nan, not a finite number from 0: left out"
    ]
    result_tasks.compare(Context(), results=str(results), noise="5")
    shown = capsys.readouterr().out
    line = next(text for text in shown.splitlines() if CELL in text)
    assert "samples/J" not in shown and "nan" not in line.lower()


def test_compare_json_names_the_cells_the_gate_cannot_judge(results, capsys):
    _break(results / "b", math.nan)
    with pytest.raises(Exit) as stopped:
        _gate(results, json_=True)
    assert stopped.value.code != 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["passed"] is False and gate["regressed"] == []
    assert [u["cell_id"] for u in gate["unjudged"]] == [CELL]
    assert gate["unjudged"][0]["why"].startswith("B: no figure (throughput not finite")
    _gate(results, json_=True, skip_unjudged=True)
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate == {
        "limit": 0.05,
        "regressed": [],
        "unjudged": [],
        "passed_over": [{"cell_id": CELL, "why": gate["passed_over"][0]["why"]}],
        "judged": 1,
        "cells": 2,
        "passed": True,
    }
    assert gate["passed_over"][0]["why"].startswith("B: no figure (throughput not finite")


def _rows(session) -> list[dict]:
    return [json.loads(line) for line in (session / "results.jsonl").read_text().splitlines()]


def _edit_rows(session, cell: str, **changes) -> None:
    """Set keys of one cell's row in a session's results.jsonl, as a hand edit or another tool would."""
    rows = _rows(session)
    for row in rows:
        if row["cell_id"] == cell:
            row.update(changes)
    (session / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def repeated(tmp_path):
    """Two sessions of one cell run three times each; B's runs 51% slower than A's (a regression)."""
    folder = tmp_path / "results"
    write_session(folder / "a", "2025-01-01T10:00:00+00:00", cells=RUNS)
    write_session(folder / "b", "2025-01-02T10:00:00+00:00", rate=0.49, cells=RUNS)
    return folder


def _verdict(capsys) -> str:
    (line,) = [text for text in capsys.readouterr().out.splitlines() if SERIES in text]
    return line


@pytest.mark.parametrize(
    "low, high, why",
    [
        (-5.0, 1e308, "B: measured_min -5.0 is not positive"),
        (0.0, 1e308, "B: measured_min 0.0 is not positive"),
        (30.0, 1e308, "B: measured_max 1e+308 is above 1e+09 per device"),
        (50.0, 20.0, "B: measured_min 50.0 is above the figure (36.505)"),
        (1.0, 1000.0, "B: measured_min 1.0 is not the slowest run's (34.3)"),
    ],
    ids=["negative-min", "zero-min", "absurd-max", "min-above-max", "wider-than-its-runs"],
)
def test_a_range_no_repeated_runs_could_give_is_not_compared_and_fails_the_gate(
    repeated, low, high, why, capsys
):
    (b_row,) = _rows(repeated / "b")
    assert b_row["repeats"] == 3 and b_row["measured_per_device"] == pytest.approx(36.505)
    # A thorough edit: the spread kept in step with the range.
    _edit_rows(repeated / "b", SERIES, measured_min=low, measured_max=high, spread=(high - low) / 36.505)
    # Before: `same (within the spread of the repeated runs)`, and the gate passed a 51% drop.
    with pytest.raises(Exit) as stopped:
        _gate(repeated)
    assert stopped.value.code == 1
    assert stopped.value.message == (
        f"reprokit: --fail-on-regression cannot judge 1 cell(s): {SERIES} ({why}) (--skip-unjudged gates on "
        "the others) (0 of 1 cell(s) judged)"
    )
    # The table shows the range B holds beside the reason it was not used.
    line = _verdict(capsys)
    assert f"not compared ({why})" in line and "[70.00..76.00]" in line
    shown = f"[{low:,.2f}..{high:,.2f}]" if high < 1e12 else f"[{low:,.2f}..1e+308]"
    assert shown in line


def test_a_spread_that_is_not_its_ranges_is_not_compared(repeated, capsys):
    _edit_rows(repeated / "b", SERIES, spread=0.01)  # the runs' range gives 0.082
    result_tasks.compare(Context(), results=str(repeated))
    assert "not compared (B: spread 0.01 is not (measured_max - measured_min) / median (" in _verdict(capsys)


def test_a_figure_beyond_any_devices_speed_is_not_a_rate_to_the_gate(results, capsys):
    _edit_rows(results / "b", CELL, measured=1e308, measured_per_device=1e308)
    with pytest.raises(Exit) as stopped:  # before: `improved`, and the gate passed
        _gate(results)
    assert stopped.value.code == 1
    assert f"{CELL} (B: throughput above 1e+09 per device (1e+308))" in stopped.value.message
    (line,) = [text for text in capsys.readouterr().out.splitlines() if CELL in text]
    assert "1e+308" in line and "improved" not in line


def test_the_table_and_json_show_the_range_and_spread_each_side_was_judged_by(repeated, capsys):
    with pytest.raises(Exit) as stopped:
        _gate(repeated, json_=True)
    assert stopped.value.code == 1 and f"regressed by more than 5%: {SERIES} (0.49x)" in stopped.value.message
    found = json.loads(capsys.readouterr().out)
    jsonschema.validate(found, schemas.schema("compare"))
    (cell,) = found["cells"]
    assert cell["verdict"] == "regressed" and cell["single"] is False
    a, b = cell["a"], cell["b"]
    assert (a["measured_min_per_device"], a["measured_max_per_device"], a["repeats"]) == (70.0, 76.0, 3)
    assert a["spread"] == pytest.approx(6 / 74.5)
    assert (b["measured_min_per_device"], b["measured_max_per_device"]) == (
        pytest.approx(34.3),
        pytest.approx(37.24),
    )
    assert b["spread"] == pytest.approx(6 / 74.5)
    result_tasks.compare(Context(), results=str(repeated))
    line = _verdict(capsys)
    assert "74.50 [70.00..76.00]" in line and "36.51 [34.30..37.24]" in line


def _stall() -> str:
    """A stall as the trainers word it: one step of 60 s in a window of 0.0625 s steps."""
    from reprokit_trainers.common.measure.stalls import StallWatch

    watch, now = StallWatch(), 0.0
    watch.restart(now)
    for step in range(1, 40):
        now += 60.0 if step == 12 else 0.0625
        watch.step(step, now, measured=True)
    return watch.departure(now)


def _shared() -> str:
    """A shared machine as the trainers word it: other processes used most of two cores."""
    from reprokit_trainers.common.measure.machineload import LoadWatch

    return LoadWatch(cpus=2, others=[1.6, 1.7], load_max=6.5, session=1).departure()


def _disturb(session, reason: str, cells=(CELL,), rate: float | None = None) -> None:
    """The runs of `cells` recorded a throughput departure `reason` (and measured `rate`)."""
    for cell in cells:
        summary = session / "runs" / cell / "summary.json"
        found = json.loads(summary.read_text())
        changes = {"departures": [*found["departures"], {"reason": reason, "kind": "throughput"}]}
        if rate is not None:
            changes.update({f"throughput.{d}.value": rate for d in found["throughput"]})
        edit_json(summary, changes)
    collect.collect(session)


@pytest.mark.parametrize("disturbance", [_stall, _shared], ids=["stalled", "shared-machine"])
def test_a_run_that_stalled_or_shared_its_machine_is_not_judged_unless_asked(results, disturbance, capsys):
    reason = disturbance()
    assert reason.startswith(("the run stalled for 60.0 s at step 12", "the machine was shared"))
    _disturb(results / "a", reason, rate=0.53)  # A, the baseline, measured its pause
    with pytest.raises(Exit) as stopped:  # before: `81.132 improved`, and the gate passed any regression
        _gate(results)
    assert stopped.value.code == 1
    assert f"{CELL} (A: {reason} (--judge-departed judges it))" in stopped.value.message
    assert "(1 of 2 cell(s) judged)" in stopped.value.message
    (line,) = [text for text in capsys.readouterr().out.splitlines() if CELL in text]
    assert "not compared (A: the " in line and line.split("│")[4].strip() == "-"  # no ratio shown
    # Asked to, the gate judges it, and the verdict says what it rests on.
    _gate(results, judge_departed=True)
    out, err = capsys.readouterr()
    (line,) = [text for text in out.splitlines() if CELL in text]
    assert "improved" in line and "A judged though the " in line
    assert err.splitlines()[-1] == "gate passed: 2 of 2 cell(s) judged, none regressed by more than 5%"


def test_a_gate_that_judged_no_cell_fails_and_every_gate_says_how_many_it_judged(results, capsys):
    _gate(results)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "gate passed: 2 of 2 cell(s) judged, none regressed by more than 5%"
    )
    _disturb(results / "b", _stall(), cells=(CELL, "bridgetower--workers2"))
    with pytest.raises(Exit) as stopped:  # before: passed, saying nothing, having judged nothing
        _gate(results, skip_unjudged=True)
    assert stopped.value.code == 1
    assert stopped.value.message == (
        "reprokit: the gate judged none of 2 cell(s): nothing to pass (2 passed over (--skip-unjudged): "
        f"{CELL}, bridgetower--workers2)"
    )


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"fail_on_regression": "999"}, "--fail-on-regression 999: give a percentage above 0 and below 100 "
         "(5 means 5%): a gate at 100% or more could never fail"),
        ({"fail_on_regression": "100"}, "--fail-on-regression 100: give a percentage above 0 and below 100 "
         "(5 means 5%): a gate at 100% or more could never fail"),
        ({"fail_on_regression": "0"}, "--fail-on-regression 0: give a percentage above 0 and below 100 "
         "(5 means 5%): a gate at 100% or more could never fail"),
        ({"threshold": "60"}, "--threshold 60: give a percentage from 0 and below 50 (5 means 5%): a wider band "
         "would call a halving `same`"),
        ({"noise": "-1"}, "--noise -1: give a percentage from 0 and below 50 (5 means 5%): a wider band would "
         "call a halving `same`"),
        ({"noise": "nan"}, "--noise nan: give a percentage from 0 and below 50 (5 means 5%): a wider band would "
         "call a halving `same`"),
    ],
    ids=["gate-999", "gate-100", "gate-0", "threshold-60", "noise-negative", "noise-nan"],
)  # fmt: skip
def test_a_gate_threshold_that_could_never_fail_is_refused_naming_the_flag(results, flags, expected):
    with pytest.raises(Exit) as refused:  # before: 999 and 60 were taken, and the gate passed
        result_tasks.compare(
            Context(), results=str(results), **{"fail_on_regression": "5", "noise": "5", **flags}
        )
    assert refused.value.code == 2 and refused.value.message == f"reprokit: {expected}"


def test_a_failed_gate_exits_1_as_its_help_says_and_a_usage_error_exits_2(results):
    write_session(results / "slower", "2025-01-03T10:00:00+00:00", rate=0.5)
    gate = ("compare", "-a", "b", "-b", "slower", "--results", str(results), "--noise", "5")
    failed = run_command(*gate, "--fail-on-regression", "10", program="reprokit")
    assert failed.returncode == 1, failed.stderr  # before: 2, as a usage error
    assert failed.stderr.strip().endswith(
        f"{CELL} (0.50x), bridgetower--workers2 (0.50x) (2 of 2 cell(s) judged)"
    )
    assert run_command(*gate, "--fail-on-regression", "60", program="reprokit").returncode == 0
    for usage in (("--fail-on-regression", "999"), ("--no-such-flag",)):
        assert run_command(*gate, *usage, program="reprokit").returncode == 2, usage
    shown = " ".join(run_command("compare", "--help", program="reprokit").stdout.split())
    assert "Exit codes: 0 the comparison (and the gate, if asked) passed; 1 the gate failed" in shown
    assert "2 a usage error" in shown
