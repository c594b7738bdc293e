"""The same session gives the same table, whatever the kit's insides: collect of a committed session
folder (tests/fixtures/results_session: a reproduced cell, one not comparable, a variant beyond the
publication, a cell run three times, a failed cell, one cut off, one that never started, and a cell on
one and two nodes) rebuilds results.csv byte for byte and results.jsonl with the same content."""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.make_results_session import EXPECTED, collected
from tests.mdtable import table

EMPTY: tuple[Any, ...] = (None, [], {})


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_collect_rebuilds_the_committed_sessions_results_csv_byte_for_byte(tmp_path):
    session = collected(tmp_path)
    assert (session / "results.csv").read_bytes() == (EXPECTED / "results.csv").read_bytes()


def test_collect_rebuilds_the_committed_sessions_results_jsonl_with_the_same_content(tmp_path):
    session = collected(tmp_path)
    found, expected = (
        _jsonl((session / "results.jsonl").read_text()),
        _jsonl((EXPECTED / "results.jsonl").read_text()),
    )
    assert [r["cell_id"] for r in found] == [r["cell_id"] for r in expected]
    for mine, theirs in zip(found, expected, strict=True):
        # Every value a row held is held again; a field a row of this shape did not carry may now be
        # there, empty (a reader's .get() of it was None before too).
        assert {k: mine.get(k) for k in theirs} == theirs, mine["cell_id"]
        added = {k: v for k, v in mine.items() if k not in theirs and v not in EMPTY}
        assert added == {}, mine["cell_id"]


def test_the_report_says_which_cells_ran_published_software_and_which_go_beyond_it(tmp_path):
    from reprokit.report import report

    written = report.write(collected(tmp_path))
    text = written.markdown.read_text()
    # The recipe's table: a row per variant.
    headers, body = table(text, "variant", containing="| software |")
    software = [r[headers.index("software")] for r in body]
    assert software.count("beyond, over workers2") == 3 and "published" in software
    beyond = [r for r in body if r[headers.index("software")] != "published"]
    # The one beyond cell that completed is read as its speedup; the others (failed, never started) are not.
    speedups = [r[headers.index("speedup, measured")] for r in beyond]
    assert speedups.count("-") == len(beyond) - 1
    (done,) = [r for r in beyond if r[headers.index("speedup, measured")] != "-"]
    assert done[-1].startswith(
        f"beyond the publication: {done[headers.index('speedup, measured')]} over workers2"
    )
    assert "software other than the publication's" in text and "beyond the publication" in text


def test_a_disk_that_fills_while_drawing_leaves_a_report_without_plots_that_still_explains(
    tmp_path, monkeypatch
):
    import errno

    from reprokit.collect import explain
    from reprokit.report import plots, report

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "breakdown.png"))

    monkeypatch.setattr(plots, "draw", full)
    session = collected(tmp_path)
    written = report.write(session)
    text = written.markdown.read_text()
    assert written.plots == [] and ".png" not in text
    sentences = [line.text for line in explain.reading(written.table) if line.kind == "p"]
    assert sentences and all(sentence in text for sentence in sentences)
