"""The regression gate cannot be fooled: a throughput that is not a rate (NaN, infinite, zero, below
zero) is never shown as measured nor judged, the cell says `not comparable (throughput not finite)`,
and `inv compare --fail-on-regression` fails on every cell it cannot judge unless told to skip it."""

from __future__ import annotations

import io
import json
import math

import pytest
from invoke import Context, Exit
from rich.console import Console

from reprokit.cli import result_tasks
from reprokit.collect import collect
from reprokit.report import terminal
from tests.fakes.sessions import edit_json, write_session

# What a broken meter, a hand edit or another tool leaves in summary.json's figures.
NOT_RATES = {"nan": math.nan, "infinite": math.inf, "zero": 0.0, "negative-zero": -0.0, "negative": -42.0}
CELL = "bridgetower--workers0"


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
    word = "not finite" if not math.isfinite(value) else "not positive"
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
    assert json.loads(capsys.readouterr().out)["gate"] == {
        "limit": 0.05,
        "regressed": [],
        "unjudged": [],
        "passed": True,
    }
