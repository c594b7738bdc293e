"""The results tasks: a session's table and report, every session over time, two sessions side by
side, and an export to MLflow. Each takes a session as a folder, a name under the results folder,
`latest` or `previous`."""

from __future__ import annotations

import sys
from pathlib import Path

from reprokit.cli import settings
from reprokit.cli.positionals import OptionalPositionals
from reprokit.cli.tasking import friendly, task
from reprokit.collect import collect as collecting
from reprokit.contract import files, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.report import report as reporting
from reprokit.report import terminal

SESSION_HELP = "a session: its folder, its name under the results folder, latest or previous"
RESULTS_HELP = "the results folder of the sessions (default: the `results` setting, else results/)"


def _results(results: str | None) -> Path:
    """The results folder: --results, else the `results` setting, else results/."""
    folder = Path(results or settings.load().get("results") or sessions.RESULTS_DIR)
    if not folder.is_dir():
        raise ReprokitError(f"no results folder {folder} (--results DIR, or the `results` setting)")
    return folder


def _percent(value: object, flag: str) -> float:
    """A percentage flag's value as a fraction, or one line naming the flag."""
    try:
        found = float(str(value))
    except ValueError:
        found = -1.0
    if not 0 <= found < 1000:
        raise ReprokitError(f"--{flag} {value}: give a percentage (5 means 5%)")
    return found / 100


def say_skipped(skipped: list[Malformed]) -> None:
    """What was left out, on stderr: `skipped: <path>: <reason>`, one line each."""
    for found in skipped:
        print(found.skipped(), file=sys.stderr)


def _session(name: str, results: str | None = None) -> Path:
    skipped: list[Malformed] = []
    found = sessions.find(
        name, Path(results or settings.load().get("results") or sessions.RESULTS_DIR), skipped=skipped
    )
    say_skipped(skipped)  # latest, previous: the sessions that could not be placed in time
    return found


@task(help={"session": SESSION_HELP, "results": RESULTS_HELP})
@friendly
def collect(c, session, results=None):
    """Rebuild results.csv and results.jsonl of a session from its run directories."""
    folder = _session(session, results)
    found = collecting.collect(folder)
    say_skipped(found.skipped)
    print(f"{len(found.rows)} cells -> {line(folder / 'results.csv')}")


@task(name="report", help={"session": SESSION_HELP, "results": RESULTS_HELP})
@friendly
def report(c, session, results=None):
    """Write a session's report: report.md, a self-contained report.html and the plots; print its table."""
    written = reporting.write(_session(session, results))
    say_skipped(written.skipped)
    terminal.print_table(written.table)
    print(line(written.html))
    print(line(written.markdown))


@task(
    name="history",
    klass=OptionalPositionals,
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

    folder = _results(results)
    found = over_time.read(folder, None if recipe == "all" else recipe, cell, device)
    if json_:
        from reprokit import schemas

        print(schemas.dumps("history", over_time.to_json(folder, found)))
        return
    say_skipped(found.skipped)
    if not found.rows:
        raise ReprokitError(f"no completed cell under {folder} matches (sessions: {found.sessions})")
    over_time.print_table(found.rows)
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
        "threshold": "a change within this percentage is `same` (default 5)",
        "fail_on_regression": "exit 1 when a cell regressed by more than this percentage (CI of an image build)",
        "noise": "for cells that ran once (no --repeat): the run-to-run spread in percent to accept as `same`; "
        "--fail-on-regression on single runs needs it",
        "skip_unjudged": "with --fail-on-regression: gate on the cells it can judge, and pass over those it "
        "cannot (no figure, a NaN, infinite, zero or negative one, a cell in one session only) instead of failing",
        "results": RESULTS_HELP,
        "json_": "print the comparison as JSON instead of the table; the gate's exit code is the same "
        "(its schema: reprokit/schemas/compare.schema.json)",
    },
)
@friendly
def compare(
    c, a="previous", b="latest", threshold=5.0, fail_on_regression=None, noise=None, skip_unjudged=False,
    results=None, json_=False,
):  # fmt: skip
    """Per cell, B over A with a verdict (regressed, improved, same: the spread of repeated runs counts)
    and what changed between them: image, kit revision, recipe, driver, CUDA, torch, device, host.
    With --fail-on-regression, a cell it cannot judge fails the gate too, unless --skip-unjudged."""
    from reprokit.report import compare as comparing

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
    first, second, found = comparing.compare(folder, a, b, fraction, band, skipped)
    say_skipped(skipped)
    worse, unjudged = comparing.gate(found, limit, band) if limit is not None else ([], [])
    # A cell the gate cannot judge fails it, unless told to pass over such cells.
    blocking = [] if skip_unjudged else unjudged
    if json_:
        from reprokit import schemas

        payload = comparing.to_json(first, second, found, fraction, band, limit, worse, blocking)
        print(schemas.dumps("compare", payload))
    else:
        comparing.print_table(first, second, found)
    failures = []
    if worse:
        names = ", ".join(f"{line(x.cell_id)} ({x.ratio:.2f}x)" for x in worse)
        failures.append(f"{len(worse)} cell(s) regressed by more than {fail_on_regression}%: {names}")
    if blocking:
        failures.append(comparing.unjudged_line(blocking))
    if failures:
        raise ReprokitError("; and ".join(failures))


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
    numbers and provenance, under one run per session carrying the report."""
    if to != "mlflow":
        raise ReprokitError(f"--to {line(to)}: the kit exports to mlflow")
    from reprokit.report import export_mlflow

    # Before anything is read: one line naming the stores that work, or how to install the extra.
    if tracking_uri:
        export_mlflow.check_uri(tracking_uri)
    export_mlflow.check_extra(tracking_uri)
    done = export_mlflow.export(_session(session, results), tracking_uri)
    say_skipped(done.skipped)
    notes = []
    if done.rolled_back:
        notes.append(f"{done.rolled_back} unfinished run(s) of an interrupted export deleted and made again")
    if not done.made:
        notes.append("the session was there already")
    print(f"{len(done.made)} runs logged to {line(done.uri)}" + (f" ({'; '.join(notes)})" if notes else ""))
