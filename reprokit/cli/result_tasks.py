"""The results tasks: a session's table and report, every session over time, two sessions side by
side, and an export to MLflow. Each takes a session as a folder, a name under the results folder,
`latest` or `previous`."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from reprokit.cli import settings
from reprokit.cli.options import RESULTS_HELP
from reprokit.cli.tasking import friendly, task
from reprokit.collect import collect as collecting
from reprokit.collect import results_folder
from reprokit.contract import files, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import GateFailed, ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge.result_row import Row
from reprokit.report import report as reporting
from reprokit.report import terminal

SESSION_HELP = (
    "a session: its folder, its name under the results folder, latest or previous (by when each started, "
    "among those that can be read)"
)


def _results(results: str | None) -> Path:
    """The results folder: --results, else the `results` setting, else results/."""
    folder = Path(results or settings.load().get("results") or sessions.RESULTS_DIR)
    if not folder.is_dir():
        raise ReprokitError(f"no results folder {folder} (--results DIR, or the `results` setting)")
    return folder


# compare's percentages, bounded so that each still says something: (lowest, whether the lowest itself
# is allowed, below what, why). A band of 50% calls a halving `same`; a gate at 100% could never fail (a
# figure cannot lose all of itself and stay a rate), and one at 0% is the threshold's, not the gate's.
PERCENTAGES = {
    "threshold": (0.0, True, 50.0, "a wider band would call a halving `same`"),
    "noise": (0.0, True, 50.0, "a wider band would call a halving `same`"),
    "fail-on-regression": (0.0, False, 100.0, "a gate at 100% or more could never fail"),
}


def _percent(value: object, flag: str) -> float:
    """A percentage flag's value as a fraction, within PERCENTAGES' bounds, or one line naming the flag."""
    low, low_allowed, high, why = PERCENTAGES[flag]
    try:
        found = float(str(value))
    except ValueError:
        found = math.nan
    if not ((low <= found if low_allowed else low < found) and found < high):
        lowest = f"from {low:g}" if low_allowed else f"above {low:g}"
        raise ReprokitError(
            f"--{flag} {value}: give a percentage {lowest} and below {high:g} (5 means 5%): {why}"
        )
    return found / 100


def say_skipped(skipped: list[Malformed], table: list[Row] | None = None) -> None:
    """What was left out, on stderr: `skipped: <path>: <reason>`, one line each; then each row of
    `table` kept from the last collect because its run directory could not be read: `kept: <why>`."""
    for found in skipped:
        print(found.skipped(), file=sys.stderr)
    for text in collecting.kept_lines(table or []):
        print(text, file=sys.stderr)


def _session(name: str, results: str | None = None) -> Path:
    skipped: list[Malformed] = []
    try:
        return results_folder.resolve_session(
            Path(results or settings.load().get("results") or sessions.RESULTS_DIR),
            name,
            skipped,
            holding=sessions.SESSION_FILE,
        )
    finally:
        say_skipped(skipped)  # latest, previous: the sessions passed over (said when none is left too)


@task(help={"session": SESSION_HELP, "results": RESULTS_HELP})
@friendly
def collect(c, session, results=None):
    """Rebuild results.csv and results.jsonl of a session from its run directories (a cell whose run
    directory is gone or unreadable keeps the row the last collect stored, and says why)."""
    folder = _session(session, results)
    found = collecting.collect(folder)
    say_skipped(found.skipped, found.rows)
    print(f"{len(found.rows)} cells -> {line(folder / 'results.csv')}")


@task(name="report", help={"session": SESSION_HELP, "results": RESULTS_HELP})
@friendly
def report(c, session, results=None):
    """Write a session's report: report.md, a self-contained report.html and the plots; print its table."""
    written = reporting.write(_session(session, results))
    say_skipped(written.skipped, written.table)
    terminal.print_table(written.table)
    print(line(written.html))
    print(line(written.markdown))


@task(
    name="history",
    positional=["recipe"],
    fallbacks={"recipe": "all"},
    help={
        "recipe": "a recipe, or all (the default)",
        "cell": "only cells whose id contains this",
        "device": "only runs on devices whose name contains this (H100, a100-80gb, ...)",
        "results": RESULTS_HELP,
        "json_": "print the rows as JSON instead of the table, and write no page "
        "(its schema: reprokit/schemas/history.schema.json)",
    },
)
@friendly
def history(c, recipe, cell=None, device=None, results=None, json_=False):
    """Every session's numbers over time: a table here, and history.html (a plot per cell) in the
    results folder."""
    from reprokit.report import history as over_time
    from reprokit.report import history_tables

    folder = _results(results)
    found = over_time.read(folder, None if recipe == "all" else recipe, cell, device)
    if json_:
        from reprokit import schemas

        print(schemas.dumps("history", history_tables.to_json(folder, found)))
        return
    say_skipped(found.skipped)
    if not found.rows:
        raise ReprokitError(f"no completed cell under {folder} matches (sessions: {found.sessions})")
    history_tables.print_table(found.rows)
    try:
        print(line(over_time.write(folder, found.rows)))
    except OSError as exc:
        # A results folder to read, not to write (a team's, mounted read-only): the table is the answer.
        if not files.is_storage_failure(exc):
            raise
        print(f"history.html not written: {files.describe(exc)}", file=sys.stderr)


@task(
    name="compare",
    help={
        "a": "the first session: a folder, a name under the results folder, latest or previous (default previous)",
        "b": "the second session, in the same forms (default latest)",
        "threshold": "a change within this percentage is `same` (default 5; from 0 to below 50)",
        "fail_on_regression": "exit 1 when a cell regressed by more than this percentage (above 0, below 100; "
        "CI of an image build)",
        "noise": "for cells that ran once (no --repeat): the run-to-run spread in percent to accept as `same` "
        "(from 0 to below 50); --fail-on-regression on single runs needs it",
        "skip_unjudged": "with --fail-on-regression: gate on the cells it can judge, and pass over those it "
        "cannot (no figure, a number it cannot trust, a disturbed run, a cell in one session only) instead of "
        "failing; a gate that judged no cell still fails",
        "judge_departed": "judge a side whose run was disturbed (it stalled, or the machine was shared) instead "
        "of leaving the cell `not compared`; the verdict says so",
        "results": RESULTS_HELP,
        "json_": "print the comparison as JSON instead of the table; the gate's exit code is the same "
        "(its schema: reprokit/schemas/compare.schema.json)",
    },
)
@friendly
def compare(
    c, a="previous", b="latest", threshold=5.0, fail_on_regression=None, noise=None, skip_unjudged=False,
    judge_departed=False, results=None, json_=False,
):  # fmt: skip
    """Per cell, B over A with a verdict (regressed, improved, same: the spread of repeated runs counts)
    and what changed between them: image, kit revision, recipe, driver, CUDA, torch, device, host.
    Every number a verdict reads is checked (figure, min, max, spread, repeats): a cell whose numbers
    cannot be trusted, or whose run stalled or shared its machine, is `not compared`, saying why.
    With --fail-on-regression, a cell it cannot judge fails the gate too, unless --skip-unjudged; the
    gate says how many cells it judged, and one that judged none fails.
    Exit codes: 0 the comparison (and the gate, if asked) passed; 1 the gate failed (a regression beyond
    --fail-on-regression, a cell it cannot judge, no cell judged); 2 a usage error (a flag's value, a
    session that cannot be read, single runs gated without --noise). Under `inv`, invoke's own parse
    errors (an unknown flag) exit 1: a CI job runs `reprokit compare`."""
    from reprokit.report import compare as comparing
    from reprokit.report import compare_view, gate

    # Two session folders need no results folder; a name, latest or previous is looked up in one.
    given = [Path(a), Path(b)]
    if results is None and all((x / sessions.RESULTS_JSONL).is_file() for x in given):
        folder = given[1].resolve().parent
    else:
        folder = _results(results)
    band = None if noise is None else _percent(noise, "noise")
    limit = None if fail_on_regression is None else _percent(fail_on_regression, "fail-on-regression")
    fraction = _percent(threshold, "threshold")
    skipped: list[Malformed] = []
    try:
        first, second, found = comparing.compare(folder, a, b, fraction, band, skipped, judge_departed)
    finally:
        say_skipped(skipped)
    gated = None if limit is None else gate.gate(found, limit, band, skip_unjudged)
    if json_:
        from reprokit import schemas

        print(schemas.dumps("compare", compare_view.to_json(first, second, found, fraction, band, gated)))
    else:
        compare_view.print_table(first, second, found)
    if gated is None:
        return
    if not gated.passed:
        raise GateFailed(gated.said())
    print(gated.said(), file=sys.stderr)


@task(
    name="export-results",
    help={
        "session": SESSION_HELP,
        "to": "where to: mlflow",
        "tracking_uri": "an MLflow tracking URI (default: sqlite in the results folder, results/mlflow.db)",
        "results": RESULTS_HELP,
    },
)
@friendly
def export_results(c, session, to="mlflow", tracking_uri=None, results=None):
    """Log a session into MLflow: a run per cell with its parameters, per-step samples/s and loss, its
    numbers and provenance, under one run per session carrying the report. A repeated cell is one run
    with the median of its runs (tagged reprokit.repeats and reprokit.runs; the curves of the run its row
    keeps); a row kept from the last collect (its run directory gone or unreadable) logs its stored
    numbers, tagged reprokit.kept with why."""
    if to != "mlflow":
        raise ReprokitError(f"--to {line(to)}: the kit exports to mlflow")
    from reprokit.report import export_mlflow, mlflow_store

    # Before anything is read: one line naming the stores that work, or how to install the extra.
    if tracking_uri:
        mlflow_store.check_uri(tracking_uri)
    mlflow_store.check_extra(tracking_uri)
    done = export_mlflow.export(_session(session, results), tracking_uri)
    say_skipped(done.skipped, done.table)
    notes = []
    if done.rolled_back:
        notes.append(f"{done.rolled_back} unfinished run(s) of an interrupted export deleted and made again")
    if not done.made:
        notes.append("the session was there already")
    print(f"{len(done.made)} runs logged to {line(done.uri)}" + (f" ({'; '.join(notes)})" if notes else ""))
