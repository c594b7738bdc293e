"""Site settings: a cluster's partition, account, container platform and data paths written once in
reprokit.yaml (or REPROKIT_* variables), used by every command, and recorded by every session."""

from __future__ import annotations

import json
import os

import yaml

from tests.conftest import ROOT, run_inv
from tests.fakes import fake_env, fake_recipe

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke")


def a_cluster_with(tmp_path, *partitions: str) -> dict[str, str]:
    """PATH with a fake sinfo listing `partitions`: the user's cluster the settings are written for (a
    dry run asks sinfo whether the partition is there)."""
    folder = tmp_path / "cluster-bin"
    folder.mkdir(exist_ok=True)
    lines = "".join(f"echo '{name}|up|2'\n" for name in partitions)
    (folder / "sinfo").write_text(f"#!/bin/sh\n{lines}")
    (folder / "sinfo").chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


def test_a_settings_file_fills_the_flags_a_user_did_not_give(tmp_path):
    (tmp_path / "reprokit.yaml").write_text(
        yaml.safe_dump({"runtime": "slurm", "container": "none", "partition": "batch", "account": "proj123"})
    )
    cluster = a_cluster_with(tmp_path, "batch", "debug")
    result = run_inv(
        "--search-root", str(ROOT), "run", "bridgetower", *CPU_SMOKE, "--dry-run", "--results", str(tmp_path / "r"),
        cwd=tmp_path, env=cluster,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --partition=batch" in result.stdout and "#SBATCH --account=proj123" in result.stdout
    # A variable beats the file, a flag beats both.
    result = run_inv(
        "--search-root", str(ROOT), "run", "bridgetower", *CPU_SMOKE, "--dry-run", "--account", "mine",
        cwd=tmp_path, env={**cluster, "REPROKIT_PARTITION": "debug"},
    )  # fmt: skip
    assert "#SBATCH --partition=debug" in result.stdout and "#SBATCH --account=mine" in result.stdout


def test_a_session_records_the_settings_it_ran_with(tmp_path):
    (tmp_path / "reprokit.yaml").write_text(yaml.safe_dump({"runtime": "local", "timeout": 120}))
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True}])
    result = run_inv(
        "--search-root", str(ROOT), "run", str(recipe), *CPU_SMOKE, "--container", "none", "--results", "out",
        cwd=tmp_path, env=fake_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (session,) = (tmp_path / "out").iterdir()
    stored = json.loads((session / "session.json").read_text())
    settings = stored["request"]["settings"]
    assert settings["values"] == {"runtime": "local", "timeout": 120}
    assert settings["files"] == [str(tmp_path / "reprokit.yaml")]
    assert stored["request"]["timeout"] == 120.0


def test_a_broken_settings_file_is_one_line(tmp_path):
    (tmp_path / "reprokit.yaml").write_text("runtime: [unclosed\n")
    result = run_inv("--search-root", str(ROOT), "reproduce", "all", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1].startswith("reprokit: a reprokit settings file cannot be read")
    )


def test_settings_are_data_a_python_file_beside_them_never_runs(tmp_path):
    (tmp_path / "reprokit.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').close()\nruntime = 'slurm'\n"
    )
    (tmp_path / "reprokit.yml").write_text(yaml.safe_dump({"runtime": "slurm", "partition": "from-yml"}))
    result = run_inv(
        "--search-root", str(ROOT), "run", "bridgetower", *CPU_SMOKE, "--dry-run", "--results", str(tmp_path / "r"),
        cwd=tmp_path, env=a_cluster_with(tmp_path, "from-yml"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --partition=from-yml" in result.stdout
    assert not (tmp_path / "ran").exists()


def test_a_settings_file_that_is_not_a_mapping_is_one_line_naming_it(tmp_path):
    (tmp_path / "reprokit.yaml").write_text("- runtime\n- slurm\n")
    result = run_inv("--search-root", str(ROOT), "reproduce", "all", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "reprokit.yaml") in last and "mapping" in last


def test_a_misspelt_settings_key_is_one_line_naming_the_closest_key(tmp_path):
    # `partion:` would otherwise be dropped, and every job sent to the cluster's default partition.
    (tmp_path / "reprokit.yaml").write_text("runtime: slurm\npartion: batch\n")
    result = run_inv(
        "--search-root", str(ROOT), "run", "bridgetower", *CPU_SMOKE, "--dry-run", "--results", str(tmp_path / "r"),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2 and "#SBATCH" not in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "reprokit.yaml") in last and "'partion' (did you mean 'partition'?)" in last


def test_a_recipe_folder_named_in_the_settings_may_not_shadow_a_kit_recipe(tmp_path):
    mine = tmp_path / "my-recipes" / "volo.yaml"
    mine.parent.mkdir()
    mine.write_text(
        (ROOT / "recipes" / "volo" / "recipe.yaml")
        .read_text()
        .replace("\ntitle: ", "\ntitle: My edit of ", 1)
    )
    (tmp_path / "reprokit.yaml").write_text(yaml.safe_dump({"recipes": [str(mine.parent)]}))
    for task in (
        ("show", "volo", "--accelerator", "cpu"),
        ("reproduce", "volo", "--accelerator", "cpu", "--dry-run"),
    ):
        result = run_inv("--search-root", str(ROOT), *task, cwd=tmp_path)
        assert result.returncode != 0, result.stdout[-2000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"reprokit: two recipes named 'volo': {ROOT / 'recipes' / 'volo' / 'recipe.yaml'} and {mine}; a session's cells "
            "and results are named by the recipe, so rename the second (its `name:`, and its file if it is volo.yaml)"
        )


def test_the_results_folders_old_flag_name_as_a_settings_key_is_refused_naming_the_key(tmp_path):
    # `out:` is the old name of the --results flag, never a key: dropped, the sessions would go to results/.
    (tmp_path / "reprokit.yaml").write_text(f"out: {tmp_path / 'team'}\n")
    result = run_inv(
        "--search-root", str(ROOT), "reproduce", "bridgetower", *CPU_SMOKE, "--dry-run", cwd=tmp_path
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert str(tmp_path / "reprokit.yaml") in last and "'out' (did you mean 'results'?)" in last


def test_a_timeout_set_by_the_settings_names_the_setting_and_its_limit(tmp_path):
    (tmp_path / "reprokit.yaml").write_text(yaml.safe_dump({"runtime": "local", "timeout": 1}))
    recipe = fake_recipe(
        tmp_path / "fake.yaml", [{"name": "hang", "baseline": True, "args": {"fake_hang": True}}]
    )
    result = run_inv(
        "--search-root", str(ROOT), "run", str(recipe), *CPU_SMOKE, "--container", "none", "--results", "out",
        cwd=tmp_path, env=fake_env(),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    (session,) = (tmp_path / "out").iterdir()
    summary = json.loads((session / "runs" / "fake--hang" / "summary.json").read_text())
    # Before: `timeout`, which said neither the limit nor where it came from (no flag was given).
    assert (summary["status"], summary["error"]) == (
        "timeout",
        "timeout after 1 s (the `timeout` setting, 1)",
    )
