"""A result row that reads the same everywhere: results.jsonl gives back the row collect wrote, a row
another kit wrote still reads, a cell that never started is a row like any other, and what is
computed across rows (repetitions, speedups) comes back as values, the rows it came from untouched."""

from __future__ import annotations

import dataclasses
import json

import pytest

from reprokit.collect import results_folder
from reprokit.contract.definitions import DEFINITIONS
from reprokit.contract.records import Departure
from reprokit.judge import ratios, repeats, verdicts
from reprokit.judge.result_row import COLUMNS, NUMBERS, Row
from tests.fixtures.make_results_session import collected


def test_a_row_read_back_from_results_jsonl_is_the_row_collect_wrote(tmp_path):
    session = collected(tmp_path)
    written = [json.loads(line) for line in (session / "results.jsonl").read_text().splitlines()]
    read = results_folder.rows_of(session)
    assert [Row.from_json(r) for r in written] == read
    # Departures come back with their kind: a quality-only one still does not block a verdict.
    base = next(r for r in read if r.cell_id == "bridgetower--workers0")
    assert base.departures == [Departure(reason="random weights", kind="quality")]
    assert [r.to_json() for r in read] == written


def test_a_row_another_kit_wrote_reads_with_what_this_kit_knows():
    newer = {"cell_id": "x--a", "verdict": "reproduced", "measured": 10.0, "a_field_from_a_later_kit": [1, 2]}
    row = Row.from_json(newer)
    assert (row.cell_id, row.verdict, row.measured, row.repetitions) == ("x--a", "reproduced", 10.0, [])
    # An older kit: a departure as its reason alone (it blocked the verdict), nulls where lists are now.
    older = Row.from_json({"cell_id": "x--b", "departures": ["synthetic data"], "references": None})
    assert older.departures == [Departure(reason="synthetic data", kind="throughput")]
    assert older.references == [] and older.all_references() == []


def test_every_definition_a_trainer_records_has_its_column():
    assert {f"measured_{name}" for name in DEFINITIONS} <= set(COLUMNS)
    assert {"measured", "measured_whole_run", "ratio_per_device", "repeats"} <= NUMBERS
    assert not {"verdict", "cell_id", "energy", "trace"} & NUMBERS


def test_a_cell_that_never_started_is_a_row_with_no_result():
    entry = {"cell_id": "bridgetower--workers2", "recipe": "bridgetower", "variant": "workers2",
             "scale": "published", "accelerator": "cuda", "baseline": False, "recipe_hash": "abc"}  # fmt: skip
    row = Row.planned(entry)
    assert (row.status, row.verdict) == ("not started", verdicts.NO_RESULT)
    assert row.measured is None and row.run_dir is None
    assert repeats.summary([row]) == {"repeats": 0}


def _run(cell_id: str, measured: float, **fields) -> Row:
    return Row(cell_id=cell_id, series_id="r--beyond", status="ok", measured=measured, world_size=1,
               tolerance=0.1, measurements={"after_warmup": measured}, **fields)  # fmt: skip


def test_a_repeated_variant_beyond_the_publication_keeps_its_verdict():
    runs = [
        _run("r--beyond--r1", 100.0, beyond="published"),
        _run("r--beyond--r2", 120.0, beyond="published"),
    ]
    series = dataclasses.replace(repeats.kept(runs), **repeats.summary(runs))
    assert (series.cell_id, series.measured, series.repeats) == ("r--beyond", 110.0, 2)
    assert series.verdict == verdicts.BEYOND and series.ratio_per_device is None
    assert series.spread == pytest.approx(20 / 110)


def test_speedups_are_values_and_leave_the_rows_they_compare_as_they_were():
    base = Row(cell_id="r--a", recipe="r", variant="a", baseline=True, world_size=1, measured_per_device=100.0,
               measurements={"after_warmup": 100.0}, references=[{"device": "h100", "value": 800, "devices": 8}])  # fmt: skip
    rung = Row(cell_id="r--b", recipe="r", variant="b", world_size=1, device="h100", tolerance=0.1,
               measured_per_device=150.0, measurements={"after_warmup": 150.0},
               references=[{"device": "h100", "value": 1200, "devices": 8}])  # fmt: skip
    before = [dataclasses.replace(base), dataclasses.replace(rung)]
    found = ratios.speedups([base, rung])
    assert found["r--a"] == ratios.Speedup(measured_speedup=1.0, published_speedup=1.0)
    assert found["r--b"] == ratios.Speedup(1.5, 1.5, "h100", "after_warmup", verdicts.REPRODUCED, None)
    assert [base, rung] == before and rung.measured_speedup is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        rung.measured_speedup = 2.0  # type: ignore[misc]
