"""The trainers as a package: each runs as `python -m reprokit_trainers.<name>`, reports the FLOPs of
a training sample and its MFU in summary.json, and stands alone: no sys.path edits, and never the
host package `reprokit` (the two sides meet only in the run directory)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.contract import trainers
from reprokit.plan import recipes
from tests.conftest import ROOT

PACKAGE = ROOT / "scripts" / "reprokit_trainers"
HOST = "reprokit"
# The kit's trainers, wherever each lives (a publication's folder or the shared package), as the host
# finds them; and the recipes that run each.
FOLDERS = {name: trainers.package_folder(name) for name in trainers.kit_trainers()}
RECIPES = {name: [r for r in recipes.available() if recipes.load(r).trainer == name] for name in FOLDERS}

# A few steps of each trainer at the smallest size that builds, on synthetic data.
TINY_BRIDGETOWER = {
    "text_config": {
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 128,
    },
    "vision_config": {"hidden_size": 64, "num_hidden_layers": 1, "patch_size": 14, "image_size": 294},
    "hidden_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 1,
    "contrastive_hidden_size": 32,
}
TINY_VOLO = {
    "layers": [1, 1, 1, 1],
    "embed_dims": [32, 64, 64, 64],
    "num_heads": [1, 2, 2, 2],
    "stem_hidden_dim": 16,
}
SMOKE = {
    "bridgetower": [
        "--random_init", "--synthetic_data", "--model_config_json", json.dumps(TINY_BRIDGETOWER),
        "--synthetic_num_train", "12", "--synthetic_num_eval", "2", "--synthetic_unique_images", "2",
        "--per_device_train_batch_size", "2", "--do_train", "--max_steps", "3", "--logging_steps", "1",
        "--throughput_warmup_steps", "1", "--save_strategy", "no", "--dataloader_num_workers", "0",
        "--remove_unused_columns", "false", "--overwrite_output_dir",
    ],
    "volo": [
        "--model_name_or_path", "volo_d1", "--model_kwargs_json", json.dumps(TINY_VOLO), "--img_size", "64",
        "--synthetic_data", "--synthetic_num_train", "16", "--synthetic_pool_size", "2",
        "--per_device_train_batch_size", "2", "--dataloader_num_workers", "0", "--max_steps", "3",
        "--logging_steps", "1", "--throughput_warmup_steps", "1", "--amp", "no", "--save_checkpoint", "false",
    ],
    "vit": [
        "--model_name_or_path", "pycls-vit-tiny", "--img_size", "32", "--synthetic_data",
        "--synthetic_num_train", "16", "--synthetic_pool_size", "2", "--synthetic_image_width", "64", "96",
        "--synthetic_image_height", "64", "96", "--per_device_train_batch_size", "2",
        "--dataloader_num_workers", "0", "--max_steps", "3", "--logging_steps", "1",
        "--throughput_warmup_steps", "1",
    ],
}  # fmt: skip


def modules() -> list[Path]:
    return sorted({*PACKAGE.rglob("*.py"), *(p for f in FOLDERS.values() for p in f.rglob("*.py"))})


def test_each_trainer_folder_has_its_main_and_a_readme_with_the_published_commands():
    yaml = pytest.importorskip("yaml")
    assert FOLDERS and all(RECIPES.values()), RECIPES
    for name, folder in FOLDERS.items():
        assert (folder / "__main__.py").exists() and (folder / f"run_{name}.py").exists()
        readme = (folder / "README.md").read_text()
        assert f"python -m reprokit_trainers.{name} " in readme and "torchrun --standalone" in readme
        assert "## Departures" in readme
        published = [
            entry
            for recipe in RECIPES[name]
            for entry in yaml.safe_load(recipes.resolve_path(recipe).read_text()).get("published_commands")
            or []
        ]
        for entry in published:
            assert entry["command"] in readme, (
                f"{name}/README.md lacks the published command of {entry['source']} ({entry.get('version')}) "
                "as the recipe holds it"
            )


MAIN_LINES = 150  # a main a reader takes in at once, as transformers' examples and nanoGPT's train.py


def test_each_trainers_main_is_at_most_150_lines_of_numbered_steps():
    # Every trainer: a folder with its argument schema (the host's view of a trainer) and its script.
    assert FOLDERS
    for name, folder in FOLDERS.items():
        script = folder / f"run_{name}.py"
        (main,) = [
            node
            for node in ast.parse(script.read_text()).body
            if isinstance(node, ast.FunctionDef) and node.name == "main"
        ]
        span = main.end_lineno - main.lineno + 1
        assert span <= MAIN_LINES, (
            f"{script.relative_to(ROOT)}: main is {span} lines (at most {MAIN_LINES}): move what records the run "
            "to its record.py, what stands in offline to its own module"
        )
        steps = [
            int(n)
            for n in re.findall(r"^    # (\d+)\. ", ast.get_source_segment(script.read_text(), main), re.M)
        ]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 5, (
            f"{name}: main's steps are {steps}"
        )


def test_no_module_edits_sys_path():
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), (
                    f"{path.relative_to(ROOT)}:{node.lineno}: sys.path"
                )


def absolute_imports(path: Path) -> list[tuple[int, str]]:
    """Each absolute import of a module file, with its line: `import a.b` and `from a.b import c`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
    return found


def test_no_module_imports_the_host_package():
    for path in modules():
        for line, name in absolute_imports(path):
            assert name.split(".")[0] != HOST, f"{path.relative_to(ROOT)}:{line}: import {name}"


def test_no_publications_trainer_imports_another_publications_trainer():
    # A publication is its folder: what two trainers share lives in common/, so that one publication
    # moves, changes or goes without breaking another.
    for name, folder in FOLDERS.items():
        others = {f"reprokit_trainers.{other}" for other in FOLDERS if other != name}
        for path in sorted(folder.rglob("*.py")):
            for line, imported in absolute_imports(path):
                taken = {o for o in others if imported == o or imported.startswith(f"{o}.")}
                assert not taken, f"{path.relative_to(ROOT)}:{line}: import {imported}"


def test_the_device_peak_is_the_given_one_or_the_datasheets():
    torch = pytest.importorskip("torch")
    from reprokit_trainers.common.measure import flops

    assert flops.device_peak_tflops(400.0) == 400.0
    if not torch.cuda.is_available():
        assert flops.device_peak_tflops() is None
    fields = flops.summary_fields(2e9, 100.0, world_size=2, device_peak=1.0)
    assert fields == {
        "flops_per_sample": 2e9,
        "device_peak_tflops": 1.0,
        "mfu_precision": "bf16",
        "mfu": pytest.approx(0.1),
    }
    assert (
        flops.summary_fields(2e9, None, world_size=1, device_peak=1.0)["mfu"] is None
    )  # never past the warm-up


@pytest.mark.parametrize("name", list(SMOKE))
def test_a_device_peak_that_is_not_positive_is_a_one_line_error(tmp_path, name):
    pytest.importorskip("timm")
    trainer = importlib.import_module(f"reprokit_trainers.{name}.run_{name}")
    something_to_do = ["--do_train"] if name == "bridgetower" else []
    with pytest.raises(SystemExit) as stopped:
        trainer.parse_args(["--output_dir", str(tmp_path), *something_to_do, "--device_peak_tflops", "0"])
    message = str(stopped.value.code)
    assert message == f"run_{name}.py: error: --device_peak_tflops 0.0: a peak is a positive TFLOP/s"


def imported(stderr: str) -> tuple[list[str], str]:
    """What a process run with -X importtime imported (the modules' names, from its stderr), and the
    rest of its stderr."""
    lines = stderr.splitlines()
    timed = [line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")]
    return timed[1:], "\n".join(line for line in lines if not line.startswith("import time:"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SMOKE))
def test_each_trainer_runs_as_a_module_without_the_host_package_and_reports_mfu_against_the_given_peak(
    tmp_path, name
):
    pytest.importorskip("timm")
    out = tmp_path / "run"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "OMP_NUM_THREADS": "1",
    }
    # -X importtime names every module the process imports, the trainer's own and whatever its run
    # loads later: the run itself shows that the trainer never needs the host package (a Python of its
    # own only to import the trainers cost as much as one of these runs).
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        f"reprokit_trainers.{name}",
        "--output_dir",
        str(out),
    ]
    result = subprocess.run(
        [*command, *SMOKE[name], "--device_peak_tflops", "0.5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    modules, stderr = imported(result.stderr)
    assert result.returncode == 0, result.stdout[-2000:] + stderr[-3000:]
    assert f"reprokit_trainers.{name}.run_{name}" in modules
    host = [module for module in modules if module.split(".")[0] == HOST]
    assert not host, f"the {name} trainer's process imported the host package: {host}"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 3
    assert summary["flops_per_sample"] > 0 and summary["device_peak_tflops"] == 0.5
    expected = summary["samples_per_second"] * summary["flops_per_sample"] / (summary["world_size"] * 0.5e12)
    assert summary["mfu"] == pytest.approx(expected)
    assert "GFLOP per training sample" in result.stdout  # counted once, at start, and said so


def test_the_mfu_of_an_fp32_run_is_over_the_peak_of_the_precision_that_ran(monkeypatch):
    """An fp32 rung against the bf16 tensor-core peak would read 16x (TF32) to 50x (plain fp32) too low."""
    torch = pytest.importorskip("torch")
    from reprokit_trainers.common.measure import flops

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "NVIDIA A100-SXM4-80GB")
    by_mode = {
        (mode, tf32): flops.summary_fields(1e12, 10.0, 1, precision=flops.matmul_precision(mode, tf32))
        for mode, tf32 in (("amp-bf16", True), ("pure-fp16", False), ("fp32", True), ("no", False))
    }
    assert [(f["mfu_precision"], f["device_peak_tflops"]) for f in by_mode.values()] == [
        ("bf16", 312.0),
        ("fp16", 312.0),
        ("tf32", 156.0),
        ("fp32", 19.5),
    ]
    assert by_mode[("no", False)]["mfu"] == pytest.approx(10.0 / 19.5)


# One refusal as run.sh's shell sees it (a new process: exit 1, its last line); the others from main in this
# process, where the same SystemExit carries the line (a new process is mostly importing torch).
@pytest.mark.filterwarnings("ignore::FutureWarning")  # timm's import, where this test is the first to make it
@pytest.mark.parametrize(
    ("trainer", "where"), [("vit", "process"), ("bridgetower", "main"), ("volo", "main")]
)
def test_a_cell_planned_for_gpus_never_trains_on_the_cpu_unseen(trainer, where, tmp_path, monkeypatch):
    """run.sh says what the cell was planned for; a process that sees no CUDA device stops in one line."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")

    prog = {"bridgetower": "run_bridgetower.py", "volo": "run_volo.py", "vit": "run_vit.py"}[trainer]
    argv = ["--output_dir", str(tmp_path / "run"), *(["--do_train"] if trainer == "bridgetower" else [])]
    if where == "process":
        result = subprocess.run(
            [sys.executable, "-m", f"reprokit_trainers.{trainer}", *argv],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "REPROKIT_ACCELERATOR": "cuda", "HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        assert result.returncode == 1, result.stderr[-2000:]
        line = result.stderr.strip().splitlines()[-1]
    else:
        monkeypatch.setenv("REPROKIT_ACCELERATOR", "cuda")  # main stops before anything asks the hub
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)  # what bridgetower's main sets, put back
        main = importlib.import_module(f"reprokit_trainers.{trainer}.run_{trainer}").main
        verbosity = _transformers_verbosity()
        try:
            with pytest.raises(SystemExit) as raised:
                main(argv)
        finally:
            _transformers_verbosity(verbosity)
        line = raised.value.code  # the interpreter prints a str code as the last line and exits 1
        assert isinstance(line, str) and "\n" not in line, line
    assert line == (
        f"{prog}: error: this cell was planned for cuda and this process sees no CUDA device: make the GPUs "
        "visible (docker --gpus all, apptainer --nv, srun --gpus) or plan it for --accelerator cpu"
    )
    assert not (tmp_path / "run" / "summary.json").exists()


def _transformers_verbosity(level: int | None = None) -> int:
    """transformers' log level (bridgetower's main sets its process's), set to ``level`` when given."""
    from transformers.utils import logging as hf_logging

    if level is not None:
        hf_logging.set_verbosity(level)
    return hf_logging.get_verbosity()
