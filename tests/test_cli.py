"""The command line a user types: help per task in both commands, one-line refusals of bad values,
and `--resume` only of a session."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from reprokit.plan import recipes
from tests.conftest import ROOT, run_inv
from tests.inprocess import run_command

CPU_DRY = ("--accelerator", "cpu", "--scale", "smoke", "--dry-run")


@pytest.mark.parametrize("program", ["inv", "reprokit"])
@pytest.mark.parametrize(
    "task", ["reproduce", "run", "show", "render", "report", "resume", "history", "compare", "preflight"]
)
def test_every_task_prints_its_help_in_both_commands(program, task):
    result = run_command(task, "--help", program=program)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ") and f" {task} " in result.stdout.splitlines()[0]


@pytest.mark.parametrize("program", [("-m", "invoke"), ("-m", "reprokit")])
def test_both_commands_start_as_a_new_process_and_print_a_tasks_help(program):
    result = subprocess.run(
        [sys.executable, *program, "reproduce", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ") and " reproduce " in result.stdout.splitlines()[0]
    assert (
        result.stdout
        == run_command("reproduce", "--help", program=program[1].replace("invoke", "inv")).stdout
    )


@pytest.mark.parametrize(
    "flags, expected",
    [
        (("--repeat", "two"), "--repeat two: give how many times to run each cell"),
        (("--repeat", "0"), "--repeat 0: give how many times to run each cell"),
        (("--devices", "0"), "--devices 0: give devices per node"),
        (("--timeout", "-1"), "--timeout -1: give a number of seconds above 0"),
        (("--nodes", "0"), "--nodes 0: node counts must be distinct and at least 1"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(flags, expected):
    result = run_inv("reproduce", "bridgetower", *CPU_DRY, *flags)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"reprokit: {expected}")


def test_results_naming_a_file_is_refused(tmp_path):
    file = tmp_path / "taken"
    file.write_text("")
    result = run_inv("reproduce", "bridgetower", *CPU_DRY, "--results", str(file))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip() == f"reprokit: --results {file}: a file is there; give a folder to write into"
    )


@pytest.mark.parametrize("where", ["/proc/self", "under a file", "/proc/self/new/results"])
def test_results_where_no_folder_can_be_made_is_refused_in_one_line_before_anything_runs(tmp_path, where):
    if where == "under a file":
        (tmp_path / "taken").write_text("")
        where = str(tmp_path / "taken" / "results")
    # Not a dry run: before, the session's folder was made after planning, and /proc/self refused it
    # with FileNotFoundError and its traceback.
    result = run_inv(
        "reproduce", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--results", where
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (said,) = result.stderr.strip().splitlines()
    assert said.startswith(f"reprokit: --results {where}: the kit cannot make a folder there (")
    assert said.endswith("); give a folder it can write into")
    assert not (tmp_path / "taken").is_dir()


def test_resume_refuses_a_folder_that_is_not_a_session(tmp_path):
    dataset = tmp_path / "imagenet"
    (dataset / "train").mkdir(parents=True)
    result = run_inv("resume", str(dataset), "--results", str(tmp_path))
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"reprokit: no session '{dataset}' with session.json")
    )
    assert not (dataset / "runs").exists() and list(dataset.iterdir()) == [dataset / "train"]


def test_several_recipes_are_given_separated_by_commas():
    result = run_inv("reproduce", "bridgetower,volo", *CPU_DRY)
    assert result.returncode == 0, result.stderr
    ids = [
        line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith("# ") and "--" in line.split()[1]
    ]
    assert {i.split("--")[0] for i in ids} == {"bridgetower", "volo"}


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("vit-speedups", "--variant", "compile", "--accelerator", "cpu"),
            "nothing to run: variant compile of vit-speedups runs only on cuda, not cpu",
        ),
        (
            ("volo", "--variant", "pretrain-d5", "--accelerator", "cpu", "--scale", "smoke"),
            "nothing to run: variant pretrain-d5 of volo has no smoke scale (the smoke scale runs pretrain-d1, finetune-d1-384, pretrain-d1-modern-kernels)",
        ),
        (
            ("volo", "--accelerator", "gaudi2"),
            "nothing to run: recipe volo has no variant for gaudi2 at the published scale (its variants run on cpu, cuda)",
        ),
    ],
    ids=["accelerator", "scale", "recipe"],
)
def test_a_plan_with_no_cell_is_an_error_naming_why(args, expected):
    result = run_inv("reproduce", *args, "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"reprokit: {expected}"


def test_a_variant_left_out_beside_others_that_run_is_named():
    result = run_inv("reproduce", "all", "--variant", "compile", "--variant", "workers0", *CPU_DRY)
    assert result.returncode == 0, result.stderr
    assert "warning: variant compile of vit-speedups runs only on cuda, not cpu; left out" in result.stderr
    assert "# bridgetower--workers0 " in result.stdout


def test_several_nodes_with_the_local_runtime_are_refused_before_anything_runs(tmp_path):
    result = run_inv("reproduce", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--nodes", "2",
                     "--runtime", "local", "--results", str(tmp_path))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "reprokit: --nodes 2: the local runtime runs cells on this machine only; several nodes need --runtime slurm"
    )
    assert list(tmp_path.iterdir()) == []


def test_render_for_an_accelerator_no_variant_runs_on_says_so_and_writes_nothing(tmp_path):
    result = run_inv("render", "volo", "--accelerator", "gaudi2", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "recipe volo has no variant for gaudi2" in result.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task", ["collect", "report", "export-results"])
def test_a_missing_session_names_the_argument_a_user_gives(task):
    result = run_inv(task)
    assert result.returncode != 0
    assert result.stderr.strip().endswith("did not receive required positional arguments: 'session'")


@pytest.mark.parametrize("task", ["collect", "report"])
def test_latest_and_previous_name_a_session_for_every_task_that_takes_one(tmp_path, task):
    import json
    import shutil

    fixture = ROOT / "tests" / "fixtures" / "results_session" / "20250102-030405"
    results = tmp_path / "results"
    for name, started in (
        ("zz-older", "2025-01-01T00:00:00+00:00"),
        ("aa-newer", "2025-01-02T00:00:00+00:00"),
    ):
        shutil.copytree(fixture, results / name)
        stored = json.loads((results / name / "session.json").read_text())
        (results / name / "session.json").write_text(json.dumps({**stored, "created_at": started}))
    result = run_inv(task, "latest", "--results", str(results))
    assert result.returncode == 0, result.stderr
    assert (results / "aa-newer" / "results.csv").is_file()
    assert not (results / "zz-older" / "results.csv").exists()
    result = run_inv(task, "previous", "--results", str(results))
    assert result.returncode == 0, result.stderr
    assert (results / "zz-older" / "results.csv").is_file()


@pytest.mark.parametrize(
    "argv0, expected",
    [
        ("/home/u/.venv/bin/inv", "inv"),
        ("/home/u/.venv/lib/python3.11/site-packages/invoke/__main__.py", "inv"),
        ("/home/u/.local/bin/reprokit", "reprokit"),
        ("/home/u/.venv/lib/python3.11/site-packages/reprokit/__main__.py", "python -m reprokit"),
    ],
)
def test_hints_name_the_command_the_user_ran(monkeypatch, argv0, expected):
    from reprokit.contract import invocation

    monkeypatch.setattr(sys, "argv", [argv0, "reproduce"])
    assert invocation.command() == expected


# ---- a recipe left out means every recipe; a session resumed is named, not SESSION ------------------------


def test_preflight_with_no_recipe_checks_every_recipe(tmp_path):
    result = run_inv("preflight", "--accelerator", "cpu", "--no-steps", "--results", str(tmp_path))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert re.fullmatch(r"Preflight of \d+ cell\(s\): cpu, smoke scale, every recipe", first), first
    # Every recipe the kit finds has its cells checked (found, never a list of names here).
    assert {f"{name}--" for name in recipes.available()} <= {
        word[: word.index("--") + 2] for word in result.stdout.split() if "--" in word[1:]
    }


def test_reproduce_with_no_recipe_plans_every_recipe():
    result = run_inv("reproduce", *CPU_DRY)
    assert result.returncode == 0, result.stderr
    shown = {
        line.split()[1].split("--")[0]
        for line in result.stdout.splitlines()
        if line.startswith("# ") and "--" in line
    }
    assert shown == set(recipes.available()) and "bridgetower" in shown


def test_history_with_no_recipe_reads_every_recipe_of_the_results_folder(tmp_path):
    from tests.fixtures.make_results_session import collected

    session = collected(tmp_path / "results")
    result = run_inv("history", "--results", str(session.parent))
    assert result.returncode == 0, result.stderr
    assert "bridgetower--workers0" in result.stdout and "volo--pretrain-d5" in result.stdout


def _half_done_session(tmp_path):
    """A session of a fake recipe: one cell complete, one failed."""
    from tests.fakes import fake_env, fake_recipe

    recipe = fake_recipe(tmp_path / "fake.yaml", [
        {"name": "done", "baseline": True, "args": {"fake_steps": 2}},
        {"name": "broke", "args": {"fake_crash": "a disk went away"}},
    ])  # fmt: skip
    out = tmp_path / "results"
    ran = run_inv("run", str(recipe), "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
                  "--container", "none", "--results", str(out), env=fake_env())  # fmt: skip
    assert ran.returncode == 1, ran.stderr  # one cell did not complete
    (session,) = [p for p in out.iterdir() if p.is_dir()]
    return out, session


def test_a_dry_run_ends_with_the_preflights_quick_checks_and_exits_3_where_they_would_refuse(tmp_path):
    from tests.fakes import fake_env, fake_recipe

    # A published cell with a figure for this machine and no data given: it would train on synthetic data.
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True, "references": [
        {"device": "cpu", "devices": 1, "value": 100, "definition": "after_warmup"}]}])  # fmt: skip
    flags = ("--accelerator", "cpu", "--runtime", "local", "--container", "none", "--dry-run",
             "--out", str(tmp_path / "out"))  # fmt: skip
    env = {**fake_env(), "HF_HUB_OFFLINE": "1"}
    refused = run_inv("reproduce", str(recipe), "--scale", "published", *flags, env=env)
    assert refused.returncode == 3, refused.stderr
    lines = refused.stdout.splitlines()
    start = lines.index(
        f"# Preflight of 1 cell(s): cpu, published scale, {recipe}: the quick checks (`inv preflight` also "
        "steps each trainer)"
    )
    assert "# fake--v (local, published, cpu)" in lines[:start]  # what would run comes first
    summary = lines[start + 1 :]
    assert "  - devices   1 x cpu (cpu)" in summary
    assert (
        "  x data      fake: synthetic data: offline (HF_HUB_OFFLINE is set) and no --data dataset_cache=PATH [fake--v]"
        in summary
    )
    assert summary[-1].split()[:3] == ["fake--v", "would", "not"]
    assert refused.stderr.strip().splitlines()[-1] == (
        "reprokit: dry run: 1 of 1 cell(s) would not run or be judged; fake--v: data: fake: synthetic data: "
        "offline (HF_HUB_OFFLINE is set) and no --data dataset_cache=PATH"
    )
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written
    # The smoke scale's stand-in data is by design: the same dry run says the cell would run, and exits 0.
    ran = run_inv("reproduce", str(recipe), "--scale", "smoke", *flags, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].split()[:5] == ["fake--v", "would", "run,", "not", "judged"]


@pytest.mark.parametrize("command", [("resume", "latest"), ("reproduce", "--resume", "latest")])
def test_a_resumes_dry_run_lists_only_what_would_run_in_the_sessions_own_folder(tmp_path, command):
    from tests.fakes import fake_env

    out, session = _half_done_session(tmp_path)
    result = run_inv(*command, "--results", str(out), "--dry-run", env=fake_env())
    assert result.returncode == 0, result.stderr
    assert "# complete, kept (not rerun): fake--done" in result.stdout
    planned = [
        line for line in result.stdout.splitlines() if line.startswith("# fake--") and "(local" in line
    ]
    assert planned == ["# fake--broke (local, smoke, cpu)"]
    assert "fake--done" not in result.stdout.replace("# complete, kept (not rerun): fake--done", "")
    assert "SESSION" not in result.stdout
    assert result.stdout.startswith(f"# resuming {session.resolve()}\n")
    # Its quick checks are of the cells that would run again, where they would write: the session's folder.
    assert result.stdout.splitlines()[-1].split()[:3] == ["fake--broke", "would", "run,"]
    assert f"  - storage   {session.resolve()}: writable" in result.stdout
