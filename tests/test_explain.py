"""The report explains its numbers: a sentence per cell reading where its window went (data wait,
compute, communication, other), the story across cells, samples per joule beside samples per second
(results.csv, the report, `inv compare`), and a link to each trace with how to open it."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from reprokit.collect import explain
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from tests.conftest import run_inv
from tests.fakes import fake_env, fake_recipe
from tests.mdtable import column

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local")


def row(variant: str, data_wait: float | None, compute: float, other: float, **extra) -> Row:
    return Row(
        variant=variant,
        group="main",
        data_wait_share=data_wait,
        compute_share=compute,
        communication_share=None,
        other_share=other,
        **extra,
    )


def test_the_story_across_cells_reads_their_data_wait():
    rows = [row("workers0", 0.41, 0.55, 0.04, baseline=True), row("workers2", 0.03, 0.93, 0.04)]
    assert (
        explain.comparison_sentence(rows)
        == "workers0 spends 41% of its window waiting for data; workers2 3%."
    )


def test_a_cells_sentence_gives_its_shares_largest_first_and_the_baselines_where_they_differ_most():
    rows = [row("workers0", 0.41, 0.55, 0.04, baseline=True), row("workers2", 0.03, 0.93, 0.04)]
    assert explain.cell_sentence(rows[0], rows) == (
        "workers0 spends 55% of its measured window computing, 41% waiting for data, "
        "4% elsewhere (logging, synchronizing, the loop's own work)."
    )
    assert explain.cell_sentence(rows[1], rows).endswith("; the baseline workers0 41% waiting for data.")


def test_a_slower_cell_names_its_largest_share_and_the_same_share_in_its_baseline():
    rows = [
        row("workers0", 0.10, 0.85, 0.05, baseline=True),
        row("workers2", 0.62, 0.35, 0.03, verdict=verdicts.SLOWER),
    ]
    assert explain.cell_sentence(rows[1], rows).endswith(
        " Slower than published: its largest share is data wait (62%), 10% in its group's baseline workers0."
    )


def test_a_share_the_trainer_could_not_time_is_left_out_not_shown_as_zero():
    untimed = row("alone", None, 0.9, 0.1)
    assert "waiting for data" not in explain.cell_sentence(untimed, [untimed])
    assert explain.shares(untimed) == {"compute": 0.9, "other": 0.1}
    assert explain.cell_sentence(Row(variant="old"), []) is None  # a run from before the breakdown


@pytest.fixture
def profiled_session(tmp_path):
    """`inv run --profile` of a recipe whose baseline waits on data and whose other cell does not."""
    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [
            {"name": "workers0", "baseline": True,
             "args": {"fake_rate": 100, "fake_data_wait": 0.41, "fake_samples_per_joule": 2.0}},
            {"name": "workers2", "args": {"fake_rate": 150, "fake_data_wait": 0.03, "fake_samples_per_joule": 3.0}},
        ],
    )  # fmt: skip
    results = tmp_path / "results"
    done = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(results), "--profile", env=fake_env())
    assert done.returncode == 0, done.stderr
    (session,) = [p for p in results.iterdir() if (p / "results.jsonl").exists()]
    return session


def test_a_profiled_session_records_the_schedule_and_the_report_explains_and_links(profiled_session):
    session = profiled_session
    cell = json.loads((session / "runs" / "fake--workers0" / "cell.json").read_text())
    # The schedule in cell.json, and what the trainer was given: right after the warm-up.
    assert cell["profile"] == {"wait": 2, "warmup": 1, "active": 3} == cell["args"]["profile"]
    assert (
        '--profile \'{"active":3,"wait":2,"warmup":1}\''
        in (session / "runs" / "fake--workers0" / "run.sh").read_text()
    )

    with open(session / "results.csv") as fh:
        rows = {r["variant"]: r for r in csv.DictReader(fh)}
    assert (rows["workers0"]["data_wait_share"], rows["workers2"]["data_wait_share"]) == ("0.41", "0.03")
    assert rows["workers0"]["communication_share"] == ""  # not timed
    assert (rows["workers0"]["samples_per_joule"], rows["workers2"]["samples_per_joule"]) == ("2.0", "3.0")
    assert rows["workers0"]["trace"] == "runs/fake--workers0/profile/rank0.pt.trace.json.gz"

    md = (session / "report.md").read_text()
    assert "workers0 spends 41% of its window waiting for data; workers2 3%." in md
    assert "workers2 spends 95% of its measured window computing" in md
    assert column(md, "variant", "samples/J") == ["2.000", "3.000"]
    for plot in ("breakdown-fake.png", "energy-fake.png"):
        assert (session / plot).exists() and f"]({plot})" in md
    link = "[workers0: trace of steps 4-6](runs/fake--workers0/profile/rank0.pt.trace.json.gz)"
    assert link in md and "Perfetto (https://ui.perfetto.dev" in md and "torch-tb-profiler" in md
    # The link leads to a trace that loads as Chrome-trace JSON with the profiled steps.
    trace = json.loads(
        gzip.decompress((session / "runs/fake--workers0/profile/rank0.pt.trace.json.gz").read_bytes())
    )
    assert [e["name"] for e in trace["traceEvents"]] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    html = (session / "report.html").read_text()
    assert '<a href="runs/fake--workers0/profile/rank0.pt.trace.json.gz">' in html


def test_compare_compares_samples_per_joule_too(tmp_path):
    results = tmp_path / "results"
    for name, per_joule in (("a", 2.0), ("b", 1.5)):
        recipe = fake_recipe(
            tmp_path / f"{name}.yaml",
            [
                {
                    "name": "base",
                    "baseline": True,
                    "args": {"fake_rate": 100, "fake_samples_per_joule": per_joule},
                }
            ],
        )
        done = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(results), env=fake_env())
        assert done.returncode == 0, done.stderr
    compared = run_inv("compare", "--results", str(results))
    assert compared.returncode == 0, compared.stderr
    assert "samples/J B/A" in compared.stdout
    (line,) = [line for line in compared.stdout.splitlines() if "│ fake--base" in line]
    assert "0.750 regressed" in line


def test_only_profile_or_a_scale_that_says_so_traces_cells_after_their_warmup(tmp_path):
    import yaml

    from reprokit.plan import cells, recipes
    from reprokit.plan.request import Request
    from reprokit.run.placement import plan

    plain = fake_recipe(tmp_path / "plain.yaml", [{"name": "base", "baseline": True, "args": {}}])
    asked = {"recipes": [str(plain)], "accelerator": "cpu", "scale": "smoke", "runtime": "local"}
    assert [c.profile for c in plan(Request(**asked)).cells] == [None]
    traced = plan(Request(**asked, profile=True)).cells
    assert [c.profile for c in traced] == [{"wait": 2, "warmup": 1, "active": 3}]

    path = fake_recipe(tmp_path / "fake.yaml", [{"name": "base", "baseline": True, "args": {}}])
    data = yaml.safe_load(path.read_text())
    data["scales"]["smoke"]["profile"] = True
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (traced,) = cells.expand(recipes.load(str(path)), str(path), "cpu", "smoke")
    (plain,) = cells.expand(recipes.load(str(path)), str(path), "cpu", "published")
    assert traced.profile == traced.args["profile"] == {"wait": 2, "warmup": 1, "active": 3}
    assert plain.profile is None and "profile" not in plain.args
    assert cells.expand(recipes.load(str(path)), str(path), "cpu", "published", profiled=True)[0].profile == {
        "wait": 3,
        "warmup": 1,
        "active": 3,
    }


def test_resuming_with_profile_a_session_that_traced_nothing_is_refused_in_one_line():
    from reprokit.plan.request import Request
    from reprokit.run import session

    stored = {
        "request": {"recipes": [], "profile": False},
        "accelerator": "cpu",
        "scale": "smoke",
        "runtime": "local",
    }
    assert session._conflicts(stored, Request(profile=True)) == ["--profile (the session traced nothing)"]
    assert (
        session._conflicts({**stored, "request": {"recipes": [], "profile": True}}, Request(profile=True))
        == []
    )
