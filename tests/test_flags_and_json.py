"""The command line as its users expect it: no short flag but the chosen ones, value flags shown with
their values, one name for the results folder in every task (`--results`; `--out`, its old name, said
to be one), usage errors exit 2, `--quiet`, and a `--json` output on recipes, history, compare and
preflight that validates against its published schema (reprokit/schemas/)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from reprokit import schemas
from tests.conftest import ROOT, run_inv
from tests.fakes import fake_env, fake_recipe

jsonschema = pytest.importorskip("jsonschema")

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local")


def valid(name: str, text: str) -> dict:
    payload = json.loads(text)
    jsonschema.Draft202012Validator(schemas.schema(name)).validate(payload)
    assert payload["schema"] == f"reprokit/{name}/{schemas.VERSION}"
    return payload


@pytest.mark.parametrize("name", schemas.NAMES)
def test_each_schema_is_a_valid_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(schemas.schema(name))


def test_the_recipes_json_validates_and_lists_every_recipe_and_variant():
    done = run_inv("recipes", "--json")
    assert done.returncode == 0, done.stderr
    found = valid("recipes", done.stdout)
    by_name = {r["name"]: r for r in found["recipes"]}
    assert {"bridgetower", "volo", "vit-speedups"} <= set(by_name)
    assert "workers0" in {v["name"] for v in by_name["bridgetower"]["variants"]}


def test_a_schema_rejects_what_it_does_not_describe():
    # The schemas are not a formality: a missing field or a wrong type fails validation.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema": "reprokit/recipes/1"}, schemas.schema("recipes"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"schema": "reprokit/compare/1", "a": "x", "b": "y", "threshold": "5", "noise": None, "cells": [],
             "changed_everywhere": {}, "gate": None},
            schemas.schema("compare"),
        )  # fmt: skip


@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory):
    """The same fake recipe twice; the second's `fast` variant 30% slower (a planted regression)."""
    where = tmp_path_factory.mktemp("json")
    results = where / "results"
    for name, fast in (("a", 200), ("b", 140)):
        recipe = fake_recipe(
            where / f"{name}.yaml",
            [{"name": "base", "baseline": True, "args": {"fake_rate": 100}}, {"name": "fast", "args": {"fake_rate": fast}}],
        )  # fmt: skip
        done = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(results), env=fake_env())
        assert done.returncode == 0, done.stderr
    return results


def test_compare_json_validates_and_carries_the_gates_answer_and_exit_code(two_sessions):
    done = run_inv(
        "compare", "--results", str(two_sessions), "--json", "--fail-on-regression", "5", "--noise", "5"
    )
    table = run_inv("compare", "--results", str(two_sessions), "--fail-on-regression", "5", "--noise", "5")
    # The gate fails the same way with or without --json (the one line on stderr, the JSON on stdout).
    assert done.returncode == table.returncode == 1, done.stderr
    assert done.stderr == table.stderr
    found = valid("compare", done.stdout)
    cells = {c["cell_id"]: c for c in found["cells"]}
    assert cells["fake--fast"]["verdict"] == "regressed" and cells["fake--fast"]["ratio"] == pytest.approx(
        0.7
    )
    assert cells["fake--base"]["verdict"] == "same"
    assert found["gate"] == {"limit": 0.05, "regressed": ["fake--fast"], "unjudged": [], "passed_over": [],
                             "judged": 2, "cells": 2, "passed": False}  # fmt: skip
    # Without the gate: exit 0, gate null, the same cells.
    done = run_inv("compare", "--results", str(two_sessions), "--json")
    assert done.returncode == 0 and valid("compare", done.stdout)["gate"] is None


def test_history_json_validates_and_holds_every_sessions_cells(two_sessions):
    done = run_inv("history", "all", "--results", str(two_sessions), "--json")
    assert done.returncode == 0, done.stderr
    found = valid("history", done.stdout)
    assert found["sessions"] == 2 and len(found["rows"]) == 4
    assert {r["cell_id"] for r in found["rows"]} == {"fake--base", "fake--fast"}
    assert not (two_sessions / "history.html").exists()  # --json writes no page


def test_preflight_json_validates_and_answers_per_cell(tmp_path):
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True}])
    done = run_inv("preflight", str(recipe), *CPU_SMOKE, "--no-steps", "--json", "--results", str(tmp_path / "r"),
                   env=fake_env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = valid("preflight", done.stdout)
    assert [c["cell_id"] for c in found["cells"]] == ["fake--v"] and found["refused"] == 0
    assert found["cells"][0]["verdict"] == "would run, not judged"


def test_no_short_flag_is_made_up_from_a_flags_letters():
    # invoke made -v --variant, -t --data and -y --dry-run: each is now an unknown flag, never a guess.
    for short in ("-v", "-t", "-y"):
        done = run_inv("run", "bridgetower", short, "x")
        assert done.returncode != 0, short
    shown = run_inv("run", "--help").stdout
    assert "-q, --quiet" in shown and "-v," not in shown and "-y," not in shown


@pytest.mark.parametrize("task", ["run", "reproduce", "resume", "preflight", "render"])
def test_q_is_quiet_in_every_task_that_takes_quiet(task):
    # reproduce and preflight, whose recipe may be left out, were made by another task class and had no -q.
    assert "-q, --quiet" in run_inv(task, "--help").stdout


def test_help_shows_every_value_flag_with_its_value():
    shown = run_inv("run", "--help").stdout
    assert "--variant=STRING" in shown and "--data=STRING" in shown and "--dry-run=" not in shown
    assert "--threshold=NUMBER" in run_inv("compare", "--help").stdout


def test_the_reprokit_command_exits_2_on_a_usage_error():
    for argv in (
        ["run", "bridgetower", "--no-such-flag"],
        ["no-such-task"],
        ["run", "bridgetower", "--repeat"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "reprokit", *argv], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_quiet_prints_the_result_and_no_messages(tmp_path):
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True}])
    loud = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(tmp_path / "a"), env=fake_env())
    quiet = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(tmp_path / "b"), "-q", env=fake_env())
    assert loud.returncode == quiet.returncode == 0, quiet.stderr
    assert loud.stderr.strip() and not quiet.stderr.strip(), quiet.stderr
    assert list((tmp_path / "b").glob("*/results.csv"))


# ---- one name for the results folder: --results in every task, --out its old name ---------------------

SESSION_TASKS = [
    "reproduce",
    "run",
    "resume",
    "preflight",
    "collect",
    "report",
    "history",
    "compare",
    "export-results",
    "accept",
]
NOTE = "reprokit: --out is the old name of --results: taken as --results "


@pytest.mark.parametrize("program", ["inv", "reprokit"])
@pytest.mark.parametrize("task", SESSION_TASKS)
def test_every_task_that_reads_or_writes_sessions_names_the_results_folder_results(program, task):
    from tests.inprocess import run_command

    shown = run_command(task, "--help", program=program).stdout
    assert "--results=STRING" in shown and "the results folder" in shown, shown
    assert "--out=STRING" in shown and "the old name of --results" in shown


@pytest.mark.parametrize("program", ["inv", "reprokit"])
@pytest.mark.parametrize(
    "command",
    [
        (
            "reproduce",
            "bridgetower",
            "--accelerator",
            "cpu",
            "--scale",
            "smoke",
            "--container",
            "none",
            "--dry-run",
        ),
        ("resume", "latest", "--dry-run"),
        ("collect", "latest"),
        ("report", "previous"),
        ("history", "all", "--json"),
        ("compare",),
        ("export-results", "latest", "--to", "nowhere"),
    ],
    ids=lambda command: command[0],
)
def test_out_is_taken_as_results_and_says_it_is_the_old_name(two_sessions, program, command):
    """Before, `reproduce --results X` was "No idea what '--results' is!" and `history --out X` "No idea
    what 'X' is!": each task knew one of the two names."""
    from tests.inprocess import run_command

    env = fake_env()  # resume plans the fake recipe's session again
    new = run_command(*command, "--results", str(two_sessions), program=program, env=env)
    old = run_command(*command, "--out", str(two_sessions), program=program, env=env)
    expected = 2 if command[0] == "export-results" else 0  # --to nowhere: refused after the flags parse
    assert new.returncode == old.returncode == expected, (new.stderr, old.stderr)
    assert NOTE not in new.stderr
    assert old.stderr.splitlines()[0] == f"{NOTE}{two_sessions}"
    assert steady(old.stdout) == steady(new.stdout)
    assert old.stderr.splitlines()[1:] == new.stderr.splitlines()


def steady(text: str) -> str:
    """A dry run's output without what a second run says otherwise: how long the trainers took to import,
    that this Python's answer was kept from the first, and the disk's free space."""
    from reprokit.preflight.pythonreads import KEPT

    text = re.sub(r" in \d+ s\b", " in N s", text.replace(f" ({KEPT})", ""))
    return re.sub(r"[\d.]+ [KMGT]iB free", "N free", text)


def test_resume_takes_results_as_the_folder_never_as_its_session(two_sessions):
    """Before, `inv resume --results DIR` took `--results` as the session and DIR as an unknown word."""
    done = run_inv("resume", "--results", str(two_sessions))
    assert done.returncode != 0
    assert done.stderr.strip() == "'resume' did not receive required positional arguments: 'session'"
    resumed = run_inv("resume", "latest", "--results", str(two_sessions), "--dry-run", env=fake_env())
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(
        f"# resuming {(two_sessions / sorted(p.name for p in two_sessions.iterdir() if p.is_dir())[-1]).resolve()}"
    )


def test_out_and_results_naming_two_folders_is_one_line(tmp_path):
    done = run_inv(
        "reproduce",
        "bridgetower",
        "--dry-run",
        "--out",
        str(tmp_path / "a"),
        "--results",
        str(tmp_path / "b"),
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"reprokit: --out {tmp_path / 'a'} and --results {tmp_path / 'b'}: give it once, as --results (--out is its old name)"
    )
