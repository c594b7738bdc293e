"""The command line a user types: help per task in both commands, one-line refusals of bad values,
and `--resume` only of a session."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_inv

CPU_DRY = ("--accelerator", "cpu", "--scale", "smoke", "--dry-run")


@pytest.mark.parametrize("program", [("-m", "invoke"), ("-m", "reprokit")])
@pytest.mark.parametrize("task", ["reproduce", "run", "show", "render", "report", "resume", "history", "compare"])
def test_every_task_prints_its_help_in_both_commands(program, task):
    result = subprocess.run(
        [sys.executable, *program, task, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: ") and f" {task} " in result.stdout.splitlines()[0]


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


def test_out_naming_a_file_is_refused(tmp_path):
    file = tmp_path / "taken"
    file.write_text("")
    result = run_inv("reproduce", "bridgetower", *CPU_DRY, "--out", str(file))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"reprokit: --out {file}: a file is there; give a folder to write into"


def test_resume_refuses_a_folder_that_is_not_a_session(tmp_path):
    dataset = tmp_path / "imagenet"
    (dataset / "train").mkdir(parents=True)
    result = run_inv("resume", str(dataset), "--out", str(tmp_path))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(f"reprokit: no session '{dataset}' with session.json")
    assert not (dataset / "runs").exists() and list(dataset.iterdir()) == [dataset / "train"]


def test_several_recipes_are_given_separated_by_commas():
    result = run_inv("reproduce", "bridgetower,volo", *CPU_DRY)
    assert result.returncode == 0, result.stderr
    ids = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("# ") and "--" in line.split()[1]]
    assert {i.split("--")[0] for i in ids} == {"bridgetower", "volo"}
