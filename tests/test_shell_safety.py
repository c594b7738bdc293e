"""Rendered scripts that cannot be escaped: a recipe from a colleague, a folder name, an option's
value reach run.sh and sbatch.sh as comments and as quoted words, never as commands; and what the
kit writes is the owner's alone to change, whatever the umask."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.request import Request
from reprokit.render import shell_values
from reprokit.render.templates import render
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for
from tests.conftest import INV, ROOT
from tests.fakes import FAKES, fake_env, fake_recipe


def _payload(marker: Path) -> str:
    """Text that runs `touch marker` wherever a shell reads it as code: after a newline, in a command
    substitution, in backticks, after closing a quote of either kind, after a comment's end."""
    touch = f"touch {marker}"
    return f"x\n{touch}\r\n#\n{touch} #\n$({touch}) `{touch}` '; {touch}; ' \"; {touch}; \" \\\n{touch}"


def _hostile_recipe(path: Path, marker: Path) -> tuple[Path, str]:
    evil = _payload(marker)
    fake_recipe(
        path,
        [
            {"name": "v", "baseline": True, "notes": [evil], "args": {"fake_rate": 50, "run_name": evil}},
            {"name": "w", "needs": {"resume_from": "v"}, "notes": [evil], "args": {"fake_rate": 60}},
        ],
    )
    data = yaml.safe_load(path.read_text())
    data["title"] = evil
    data["notes"] = [evil, evil]
    data["assumptions"] = [evil]
    data["publication"]["title"] = evil
    data["publication"]["organization"] = evil
    data["scales"]["smoke"]["notes"] = [evil]
    data["published_commands"] = [
        {
            "command": f"python run.py {evil}",
            "source": evil,
            "version": evil,
            "variants": ["v", "w"],
            "notes": [evil],
        }
    ]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, evil


def _fake_slurm(bin_dir: Path) -> None:
    """scontrol and srun as a one-node allocation sees them: srun runs its command after its flags."""
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\n[ "$2" = hostnames ] && echo node1 || echo "NodeName=node1 NodeAddr=127.0.0.1"\n'
    )
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; done\nexec "$@"\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)


def test_hostile_recipe_text_and_paths_are_never_run_by_the_rendered_scripts(tmp_path):
    marker = tmp_path / "pwned"
    recipe, evil = _hostile_recipe(tmp_path / "evil $(touch pwned).yaml", marker)
    # The session folder's name is hostile too: it reaches RUN_DIR, #SBATCH --output and a comment.
    session = tmp_path / "out 'q' \"d\" $(touch pwned) `touch pwned`"
    the_plan = plan(
        Request(recipes=[str(recipe)], accelerator="cpu", scale="smoke", runtime="slurm", container="none"),
        fit_devices=False,
    )
    runtime = runtime_for(the_plan, {"partition": "debug'$(touch pwned)`touch pwned`", "account": "a b #c"})
    profile = accelerators.get("cpu")
    bin_dir = tmp_path / "bin"
    _fake_slurm(bin_dir)
    env = {
        **os.environ,
        **fake_env(),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(FAKES.parent),
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_CPUS_ON_NODE": "2",
    }
    for cell in the_plan.cells:
        run_dir = session / "runs" / cell.cell_id
        sbatch_sh = runtime.prepare(cell, run_dir, profile)
        for script in (run_dir / "run.sh", sbatch_sh):
            text = script.read_text()
            assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, text
            assert "\r" not in text
            # Every line holding the payload's command is a comment, or the quoted run_name argument.
            for line in text.splitlines():
                if "touch" in line and not line.lstrip().startswith("#"):
                    assert line.strip().startswith(("--run_name $'", "export RUN_DIR='")), line
        # sbatch.sh runs run.sh (srun), which runs the fake trainer in this Python.
        ran = subprocess.run(["bash", str(sbatch_sh)], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        argv = json.loads((run_dir / "argv.json").read_text())["argv"]
        if cell.variant == "v":
            assert argv[argv.index("--run_name") + 1] == evil
        assert argv[:2] == ["--output_dir", str(run_dir)]
    # run.sh by hand, as a user would run it.
    hand = subprocess.run(
        ["bash", str(session / "runs" / "fake--w" / "run.sh")], cwd=tmp_path, capture_output=True, text=True,
        env={**env, "PYTHON": sys.executable, "RUN_DIR": str(tmp_path / "by hand $(touch pwned)")},
    )  # fmt: skip
    assert hand.returncode == 0, hand.stderr
    resume_from = json.loads((tmp_path / "by hand $(touch pwned)" / "argv.json").read_text())["argv"]
    assert resume_from[resume_from.index("--resume_from") + 1] == str(
        tmp_path / "by hand $(touch pwned)/../fake--v/checkpoint"
    )
    assert not marker.exists() and not list(tmp_path.rglob("pwned")) and not (ROOT / "pwned").exists()


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"partition": "gpu\nsrun touch pwned"}, "--partition 'gpu\\nsrun touch pwned' holds a newline"),
        ({"account": "lab\\x"}, "--account 'lab\\\\x' holds a backslash"),
    ],
)
def test_an_sbatch_value_that_sbatch_cannot_carry_is_refused_in_one_line(tmp_path, options, expected):
    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": "v", "args": {"fake_rate": 5}}])
    the_plan = plan(
        Request(recipes=[str(recipe)], accelerator="cpu", scale="smoke", runtime="slurm", container="none"),
        fit_devices=False,
    )
    runtime = runtime_for(the_plan, options)
    with pytest.raises(ReprokitError) as refused:
        runtime.prepare(the_plan.cells[0], tmp_path / "runs" / "fake--v", accelerators.get("cpu"))
    assert expected in str(refused.value) and "\n" not in str(refused.value).replace("\\n", "")
    # A run directory whose path sbatch would expand (%j) is refused alike.
    with pytest.raises(ReprokitError, match="holds a %"):
        runtime_for(the_plan).prepare(
            the_plan.cells[0], tmp_path / "100%j" / "fake--v", accelerators.get("cpu")
        )


def test_a_value_that_skips_its_filter_stops_the_render(tmp_path):
    (tmp_path / "bad.sh.j2").write_text("# {{ title | comment }}\necho {{ title }}\n")
    from reprokit.render import templates

    assert shell_values.comment("a\nb\x1b[2J  c") == "a b [2J c"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(templates, "JOBS", tmp_path)
        with pytest.raises(ReprokitError, match="would reach a shell file unfiltered"):
            render(tmp_path, "bad.sh.j2", title="x\ntouch pwned")
        assert render(tmp_path, "bad.sh.j2", title="plain-word") == "# plain-word\necho plain-word\n"


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def test_files_the_kit_writes_are_not_group_or_other_writable_under_umask_000(tmp_path):
    recipe = fake_recipe(
        tmp_path / "r.yaml",
        [{"name": "v", "baseline": True, "args": {"fake_rate": 5, "fake_tensorboard": True}}],
    )
    out = tmp_path / "results"
    done = subprocess.run(
        [*INV, "reproduce", str(recipe), "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
         "--results", str(out)],
        cwd=ROOT, env={**os.environ, **fake_env()}, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: os.umask(0),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    modes = _modes(out)
    shared = {name: oct(mode) for name, mode in modes.items() if mode & 0o022}
    assert not shared, shared
    (session,) = out.iterdir()
    name = session.name
    assert modes[f"{name}/results.csv"] == 0o644 and modes[f"{name}/results.jsonl"] == 0o644
    assert modes[f"{name}/report.html"] == 0o644 and modes[f"{name}/session.json"] == 0o644
    assert modes[f"{name}/runs/fake--v/summary.json"] == 0o644  # the trainer's own file
    assert modes[f"{name}/runs/fake--v/run.sh"] == 0o755
    assert modes[name] == modes[f"{name}/runs"] == modes[f"{name}/runs/fake--v"] == 0o755
