"""Slurm: rendered sbatch scripts a cluster user can submit, per-rank binding, and real multi-node
runs on the two-node cluster `.ci/services/slurm.sh` starts on this machine.

Tests marked `slurm` need a Slurm controller that answers (`scontrol ping`). Without one they are
skipped, except in CI (CI=true), where a missing cluster is a failure: CI exists to run them.
The others run the rendered scripts with stand-ins for srun, scontrol, numactl and nvidia-smi.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from reprokit import images
from reprokit.collect import collect
from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError
from reprokit.images.export import export_command
from reprokit.judge import ratios
from reprokit.judge.result_row import COLUMNS, Row
from reprokit.plan import accelerators, cells, recipes
from reprokit.run.containers.apptainer import Apptainer
from reprokit.run.containers.images_on_nodes import NodeImageOptions
from reprokit.run.containers.none import NoContainer
from reprokit.run.containers.pyxis import Pyxis
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes import slurm
from tests import fakes
from tests.conftest import INV, ROOT, run_inv
from tests.fakes import fake_env

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
FAKES = ROOT / "tests" / "fakes"


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason}; in CI (CI=true) the Slurm tests must run, not skip", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def cluster():
    reason = slurm.cluster_status()
    if reason is not None:
        _unavailable(f"{reason} (.ci/services/slurm.sh starts a two-node cluster here)")
    idle = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True).stdout
    if len(idle.split("\n")) < 2:
        _unavailable(f"the cluster has fewer than two nodes: {idle.strip()!r}")


def shim(folder: Path, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


# The BridgeTower smoke cell on two CPU nodes, no container: what the CI cluster runs.
TWO_CPU_NODES = ("--accelerator", "cpu", "--scale", "smoke", "--nodes", "2", "--container", "none")


def render_slurm(tmp_path: Path, *args: str) -> Path:
    result = run_inv("render", *args, "--runtime", "slurm", "--out", str(tmp_path / "rendered"))
    assert result.returncode == 0, result.stderr
    scripts = [Path(line) for line in result.stdout.splitlines() if line.endswith("sbatch.sh")]
    assert scripts, result.stdout
    return scripts[0]


def slurm_runtime(container=None, **options) -> slurm.SlurmRuntime:
    return slurm.SlurmRuntime(slurm.SlurmOptions(**options), container or NoContainer(NoOptions()))


def directives(script: Path) -> list[str]:
    return [line.split(None, 1)[1] for line in script.read_text().splitlines() if line.startswith("#SBATCH ")]


# ---- rendered scripts: what a cluster user submits ------------------------------------------------


def test_render_writes_an_sbatch_script_per_cell_with_one_task_per_node(tmp_path):
    script = render_slurm(
        tmp_path, "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--nodes", "2",
        "--container", "none", "--partition", "debug", "--account", "proj1", "--time-limit", "00:20:00",
    )  # fmt: skip
    run_dir = script.parent
    assert {p.name for p in run_dir.iterdir()} == {"cell.json", "run.sh", "bind-rank.sh", "sbatch.sh"}
    assert directives(script) == [
        "--job-name=reprokit-bridgetower--workers0",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=debug",
        "--account=proj1",
        "--time=00:20:00",
        "--exclusive",
        "--mem=0",
        f"--output={run_dir.resolve()}/stdout.log",
        "--open-mode=append",
    ]
    for path in (script, run_dir / "run.sh", run_dir / "bind-rank.sh"):
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0, path
    assert json.loads((run_dir / "cell.json").read_text())["nodes"] == 2
    # One torchrun per node, meeting in a c10d rendezvous: run.sh's multi-node launch.
    run_sh = (run_dir / "run.sh").read_text()
    assert "--nnodes 2 --nproc_per_node 1" in run_sh and "--rdzv_backend c10d" in run_sh


def test_no_exclusive_and_gpu_types_change_the_directives(tmp_path):
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", "cuda", "published", ["workers1"], None, 3
    )[0]
    runtime = slurm_runtime(Apptainer(NodeImageOptions(image="/shared/img.sif")), exclusive=False)
    text = runtime.job_script(cell, accelerators.get("cuda"), tmp_path / "runs" / cell.cell_id)
    assert "#SBATCH --exclusive" not in text and "#SBATCH --mem=0" not in text
    assert "#SBATCH --gpus-per-node=8" in text and "#SBATCH --nodes=3" in text
    assert (
        f'  apptainer exec --nv --bind {tmp_path}:{tmp_path} /shared/img.sif bash "$RUN_DIR/run.sh"' in text
    )
    typed = accelerators.get("cuda").model_copy(
        update={"slurm": accelerators.Slurm(gres="gpu:a100", distributed_backend="nccl")}
    )
    assert slurm.gpus_per_node(typed, 8) == "a100:8"
    assert slurm.gpus_per_node(accelerators.get("cpu"), 1) is None


def test_a_superpod_user_gets_pyxis_rendezvous_binding_and_the_published_command(tmp_path):
    has_volo = (ROOT / "recipes" / "volo" / "recipe.yaml").exists()
    recipe, variant = ("volo", "pretrain-d5") if has_volo else ("bridgetower", "workers0")
    script = render_slurm(tmp_path, recipe, "--accelerator", "cuda", "--nodes", "5", "--variant", variant)
    text = script.read_text()
    run_dir = script.parent.resolve()
    profile = accelerators.get("cuda")
    assert "--nodes=5" in directives(script) and "--gpus-per-node=8" in directives(script)
    # pyxis: the exported squashfs, the session folder mounted at the same path on every node.
    squashfs = images.export_path(profile, "enroot")
    mount = run_dir.parent.parent  # the session-like folder that holds runs/
    assert f"  --container-image={squashfs} \\" in text
    assert f"  --container-mounts={mount}:{mount} \\" in text
    assert "srun --ntasks-per-node=1" in text and text.rstrip().endswith('bash "$RUN_DIR/run.sh"')
    # The rendezvous on the first node; one id per job.
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p' in text
    assert "export RDZV_ID=$SLURM_JOB_ID" in text
    assert 'export REPROKIT_RANK_WRAPPER="$RUN_DIR/bind-rank.sh"' in text
    run_sh = (run_dir / "run.sh").read_text()
    assert "--nnodes 5 --nproc_per_node 8" in run_sh
    assert 'LAUNCH+=(--no-python "$REPROKIT_RANK_WRAPPER" "$PYTHON")' in run_sh
    bind = (run_dir / "bind-rank.sh").read_text()
    assert "numactl --cpunodebind=" in bind and "--membind=" in bind and "NCCL_IB_HCA" in bind
    command = recipes.load(recipe).published_command(variant).command
    comment = " ".join(
        line.lstrip("# ").strip()
        for line in text.splitlines()
        if line.startswith("#   ") or line.startswith("#     ")
    )
    assert command.split() == comment.split()
    if has_volo:
        assert "--model volo_d5 --img-size 224 -b 44 --lr 1.0e-4" in comment
        # The job's own global batch over its five nodes, not the published one node's 8 x 44 = 352.
        assert "# This job's global batch: 5 node(s) x 8 device(s) x 44 per device = 1760." in text
        assert not [
            line for line in text.splitlines() if "= 352" in line and "published one-node" not in line
        ]


def test_the_sbatch_script_exports_the_rendezvous_and_runs_run_sh_once_per_node(tmp_path):
    """sbatch.sh run as Slurm would run it, with srun and scontrol standing in."""
    script = render_slurm(tmp_path, "bridgetower", *TWO_CPU_NODES)
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "scontrol", """
case "$1 $2" in
  "show hostnames") printf 'gpu-a01\\ngpu-a02\\n' ;;
  "show node") echo "NodeName=$3 Arch=x86_64 NodeAddr=10.0.0.11 NodeHostName=$3" ;;
esac
""")  # fmt: skip
    shim(bin_dir, "srun", f"""
{{ printf '%s\\n' "$@"; env | grep -E '^(MASTER_ADDR|MASTER_PORT|RDZV_ID|REPROKIT_[A-Z_]+|PYTHON|RUN_DIR)=' | sort; }} > {tmp_path}/srun.txt
""")  # fmt: skip
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-a[01-02]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_ON_NODE": "64",
        "REPROKIT_TRAINERS_PATH": "",
    }
    env.pop("MASTER_PORT", None)
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "srun.txt").read_text().splitlines()
    run_dir = str(script.parent.resolve())
    assert lines[:6] == [
        "--ntasks-per-node=1",
        "--cpus-per-task=64",
        "--cpu-bind=none",
        "--kill-on-bad-exit=1",
        "--label",
        "bash",
    ]
    assert lines[6] == f"{run_dir}/run.sh"
    assert "MASTER_ADDR=10.0.0.11" in lines and "RDZV_ID=4242" in lines
    assert f"MASTER_PORT={20000 + 4242 % 20000}" in lines
    assert "REPROKIT_NUM_NODES=2" in lines and f"RUN_DIR={run_dir}" in lines
    assert f"REPROKIT_RANK_WRAPPER={run_dir}/bind-rank.sh" in lines
    assert f"REPROKIT_TRAINERS_PATH={trainers.search_path()}" in lines and f"PYTHON={sys.executable}" in lines


def test_run_sh_hands_each_rank_to_the_wrapper_through_torchrun(tmp_path):
    script = render_slurm(tmp_path, "bridgetower", *TWO_CPU_NODES)
    run_dir = script.parent.resolve()
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "python", f'printf "%s\\n" "$@" > {tmp_path}/argv.txt\n')
    env = {
        **os.environ,
        "PYTHON": str(bin_dir / "python"),
        "REPROKIT_TRAINERS_PATH": "/trainers",
        "RUN_DIR": str(run_dir),
        "MASTER_ADDR": "10.0.0.11",
        "MASTER_PORT": "24242",
        "RDZV_ID": "4242",
        "REPROKIT_RANK_WRAPPER": str(run_dir / "bind-rank.sh"),
    }
    result = subprocess.run(["bash", str(run_dir / "run.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    wrapper = argv.index("--no-python")
    assert argv[:2] == ["-m", "torch.distributed.run"]
    assert argv[argv.index("--rdzv_endpoint") + 1] == "10.0.0.11:24242"
    assert argv[argv.index("--rdzv_id") + 1] == "4242"
    # torchrun's entrypoint is the wrapper; the wrapper's arguments are the interpreter and the trainer.
    assert argv[wrapper + 1 : wrapper + 5] == [
        str(run_dir / "bind-rank.sh"),
        str(bin_dir / "python"),
        "-m",
        "reprokit_trainers.bridgetower",
    ]


def _fake_topology(root: Path) -> None:
    """Two GPUs on NUMA node 1 with two InfiniBand cards there, one on node 0, and an Ethernet port."""
    for bus, node in (("0000:07:00.0", 0), ("0000:47:00.0", 1), ("0000:4e:00.0", 1)):
        (root / "bus/pci/devices" / bus).mkdir(parents=True)
        (root / "bus/pci/devices" / bus / "numa_node").write_text(f"{node}\n")
    for nic, node, layer in (
        ("mlx5_0", 0, "InfiniBand"),
        ("mlx5_2", 1, "InfiniBand"),
        ("mlx5_3", 1, "InfiniBand"),
        ("mlx5_4", 1, "Ethernet"),
    ):
        (root / "class/infiniband" / nic / "device").mkdir(parents=True)
        (root / "class/infiniband" / nic / "device/numa_node").write_text(f"{node}\n")
        (root / "class/infiniband" / nic / "ports/1").mkdir(parents=True)
        (root / "class/infiniband" / nic / "ports/1/link_layer").write_text(f"{layer}\n")


def _bind(tmp_path: Path, accelerator: str, rank: int, **env: str) -> tuple[list[str], str]:
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", accelerator, "smoke", ["workers0"], None, 2
    )[0]
    profile = accelerators.get(accelerator)
    run_dir = tmp_path / "runs" / cell.cell_id
    slurm_runtime().prepare(cell, run_dir, profile)
    bin_dir = tmp_path / "bin"
    shim(
        bin_dir,
        "numactl",
        f'{{ printf "%s\\n" "$@"; echo "HCA=${{NCCL_IB_HCA:-}}"; }} > {tmp_path}/numactl.txt\n',
    )
    # nvidia-smi -i N: the PCI bus of physical GPU N (4 and 5 are on NUMA node 1).
    shim(
        bin_dir,
        "nvidia-smi",
        'case "${@: -1}" in 3) echo 00000000:07:00.0;; 4) echo 00000000:47:00.0;; 5) echo 00000000:4E:00.0;; esac\n',
    )
    (tmp_path / "numactl.txt").unlink(missing_ok=True)
    result = subprocess.run(
        ["bash", str(run_dir / "bind-rank.sh"), "/venv/python", "trainer.py", "--x", "1"],
        env={
            **{k: v for k, v in os.environ.items() if k not in ("NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES")},
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "LOCAL_RANK": str(rank),
            **env,
        },
        capture_output=True,
        text=True,
    )
    called = tmp_path / "numactl.txt"
    return (called.read_text().splitlines() if called.exists() else []), result.stderr + result.stdout


def test_each_gpu_rank_is_bound_to_the_numa_node_and_infiniband_card_of_its_gpu(tmp_path):
    _fake_topology(tmp_path / "sys")
    env = {"REPROKIT_SYSFS": str(tmp_path / "sys"), "CUDA_VISIBLE_DEVICES": "4,5"}
    argv, log = _bind(tmp_path, "cuda", 1, **env)
    # Local rank 1 is GPU 5 (NUMA node 1), the second GPU there: the second IB card there.
    assert argv == ["--cpunodebind=1", "--membind=1", "/venv/python", "trainer.py", "--x", "1", "HCA==mlx5_3"]
    assert "local rank 1 -> NUMA node 1, NIC mlx5_3" in log
    argv, _ = _bind(tmp_path, "cuda", 0, **env)
    assert argv[:2] == ["--cpunodebind=1", "--membind=1"] and argv[-1] == "HCA==mlx5_2"
    argv, _ = _bind(tmp_path, "cuda", 0, **{**env, "CUDA_VISIBLE_DEVICES": "3"})
    assert argv[:2] == ["--cpunodebind=0", "--membind=0"] and argv[-1] == "HCA==mlx5_0"
    # A known topology, said by the user, wins over detection; so does the user's own NCCL_IB_HCA.
    argv, _ = _bind(
        tmp_path, "cuda", 2, REPROKIT_NUMA_NODES="3,3,1,1", REPROKIT_NICS="mlx5_0,mlx5_1,mlx5_6,mlx5_7"
    )
    assert argv[:2] == ["--cpunodebind=1", "--membind=1"] and argv[-1] == "HCA==mlx5_6"
    argv, _ = _bind(tmp_path, "cuda", 0, NCCL_IB_HCA="mlx5_9", **env)
    assert argv[-1] == "HCA=mlx5_9"
    # REPROKIT_BIND=0: the trainer itself, no numactl.
    argv, _ = _bind(tmp_path, "cuda", 0, REPROKIT_BIND="0", **env)
    assert argv == []


def _pcie_topology(root: Path) -> None:
    """sysfs as the kernel lays it out: devices under their PCIe root ports and switches, with
    bus/pci/devices/* and class/infiniband/*/device as symlinks into that tree. On NUMA node 1, GPU 4
    shares a switch with mlx5_2 and GPU 5 one with mlx5_10 (which a name order puts first); mlx5_4 is
    an Ethernet port on GPU 4's switch; GPU 3 and mlx5_0 are on node 0."""
    devices = {
        "0000:07:00.0": ("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:08.0", 0),
        "0000:47:00.0": ("pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:08.0", 1),
        "0000:4e:00.0": ("pci0000:40/0000:40:03.1/0000:4b:00.0/0000:4c:08.0", 1),
    }
    nics = {
        "mlx5_0": ("pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:10.0/0000:08:00.0", 0, "InfiniBand"),
        "mlx5_2": ("pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:10.0/0000:48:00.0", 1, "InfiniBand"),
        "mlx5_4": ("pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:18.0/0000:49:00.0", 1, "Ethernet"),
        "mlx5_10": ("pci0000:40/0000:40:03.1/0000:4b:00.0/0000:4c:10.0/0000:50:00.0", 1, "InfiniBand"),
    }
    for bus, (parent, node) in devices.items():
        folder = root / "devices" / parent / bus
        folder.mkdir(parents=True)
        (folder / "numa_node").write_text(f"{node}\n")
        (root / "bus/pci/devices").mkdir(parents=True, exist_ok=True)
        (root / "bus/pci/devices" / bus).symlink_to(Path("../../../devices") / parent / bus)
    for nic, (path, node, layer) in nics.items():
        folder = root / "devices" / path
        folder.mkdir(parents=True)
        (folder / "numa_node").write_text(f"{node}\n")
        (root / "class/infiniband" / nic / "ports/1").mkdir(parents=True)
        (root / "class/infiniband" / nic / "ports/1/link_layer").write_text(f"{layer}\n")
        (root / "class/infiniband" / nic / "device").symlink_to(Path("../../../devices") / path)


def test_each_gpu_rank_gets_the_infiniband_card_nearest_its_gpu_on_pcie(tmp_path):
    _pcie_topology(tmp_path / "sys")
    env = {"REPROKIT_SYSFS": str(tmp_path / "sys"), "CUDA_VISIBLE_DEVICES": "4,5"}
    argv, log = _bind(tmp_path, "cuda", 0, **env)
    assert argv[:2] == ["--cpunodebind=1", "--membind=1"] and argv[-1] == "HCA==mlx5_2"
    assert "local rank 0 -> NUMA node 1, NIC mlx5_2" in log
    argv, _ = _bind(tmp_path, "cuda", 1, **env)
    assert argv[-1] == "HCA==mlx5_10"
    argv, _ = _bind(tmp_path, "cuda", 0, **{**env, "CUDA_VISIBLE_DEVICES": "3"})
    assert argv[:2] == ["--cpunodebind=0", "--membind=0"] and argv[-1] == "HCA==mlx5_0"


def test_without_infiniband_the_nic_is_left_to_nccl_and_the_log_says_so(tmp_path):
    _pcie_topology(tmp_path / "sys")
    import shutil

    shutil.rmtree(tmp_path / "sys/class/infiniband")
    argv, log = _bind(tmp_path, "cuda", 0, REPROKIT_SYSFS=str(tmp_path / "sys"), CUDA_VISIBLE_DEVICES="4,5")
    assert argv[-1] == "HCA=" and "local rank 0 -> NUMA node 1, NIC left to NCCL" in log


def test_cpu_ranks_take_the_numa_nodes_in_turn(tmp_path):
    for node in (0, 1):
        (tmp_path / "sys/devices/system/node" / f"node{node}").mkdir(parents=True)
    env = {"REPROKIT_SYSFS": str(tmp_path / "sys")}
    assert _bind(tmp_path, "cpu", 0, **env)[0][:2] == ["--cpunodebind=0", "--membind=0"]
    assert _bind(tmp_path, "cpu", 3, **env)[0][:2] == ["--cpunodebind=1", "--membind=1"]
    assert "NCCL_IB_HCA" not in (tmp_path / "runs/bridgetower--workers0/bind-rank.sh").read_text()


def test_rendering_for_slurm_imports_no_torch():
    code = (
        "import sys; sys.path.insert(0, '.');"
        "from reprokit.run.runtimes import slurm; from reprokit.plan import accelerators, cells, recipes;"
        "from reprokit.run.containers.pyxis import Pyxis; from reprokit.run.containers.images_on_nodes import NodeImageOptions;"
        "from pathlib import Path;"
        "c = cells.expand(recipes.load('bridgetower'), 'bridgetower', 'cuda', 'published', ['workers0'], None, 2)[0];"
        "r = slurm.SlurmRuntime(slurm.SlurmOptions(), Pyxis(NodeImageOptions()));"
        "r.job_script(c, accelerators.get('cuda'), Path('/tmp/r/runs/x'));"
        "bad = [m for m in ('torch', 'transformers', 'timm') if m in sys.modules]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- flags and failures users see without a cluster -------------------------------------------------


def test_slurm_flags_without_the_slurm_runtime_are_refused(tmp_path):
    result = run_inv(
        "run", "bridgetower", "--runtime", "local", "--accelerator", "cpu", "--scale", "smoke",
        "--partition", "gpu", "--results", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "reprokit: --partition is an option of the slurm runtime (this session runs local)"
    )


def test_without_a_controller_the_slurm_runtime_says_so_in_one_line(tmp_path):
    result = run_inv(
        "run", "bridgetower", "--runtime", "slurm", "--accelerator", "cpu", "--scale", "smoke",
        "--container", "none", "--results", str(tmp_path),
        env={"SLURM_CONF": str(tmp_path / "no-such-slurm.conf")},
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("reprokit: the slurm runtime needs a Slurm cluster: ")
    assert "Traceback" not in result.stderr


def test_multi_node_mpirun_profiles_are_refused_rather_than_started_on_every_node(tmp_path):
    result = run_inv(
        "render", "bridgetower", "--runtime", "slurm", "--accelerator", "gaudi2", "--nodes", "2",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "reprokit: gaudi2 launches with mpirun: the slurm runtime runs it on one node per job (--nodes 1)"
    )


def test_dry_run_prints_the_sbatch_script_and_submits_nothing(tmp_path):
    result = run_inv(
        "run", "bridgetower", "--runtime", "slurm", "--accelerator", "cpu", "--scale", "smoke",
        "--nodes", "2", "--container", "none", "--dry-run", "--results", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2" in result.stdout
    assert f"export RUN_DIR={tmp_path}/SESSION/runs/bridgetower--workers0" in result.stdout
    assert not any(tmp_path.iterdir())


def test_export_builds_the_enroot_or_apptainer_command_and_needs_the_tool(tmp_path):
    profile = accelerators.get("cpu")
    tag = images.image_tag(profile)
    dest = tmp_path / "x.sqsh"
    assert export_command(tag, "enroot", dest) == [
        "enroot",
        "import",
        "--output",
        str(dest),
        f"dockerd://{tag}",
    ]
    assert export_command(tag, "apptainer", tmp_path / "x.sif") == [
        "apptainer", "build", str(tmp_path / "x.sif"), f"docker-daemon://{tag}",
    ]  # fmt: skip
    result = run_inv("export", "--accelerator", "cpu", "--format", "enroot", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "enroot",
        "import",
        "--output",
        str(images.export_path(profile, "enroot")),
        f"dockerd://{tag}",
    ]
    assert images.export_path(profile, "enroot").name == tag.replace("/", "+").replace(":", "+") + ".sqsh"
    bare = {"PATH": str(tmp_path)}  # no enroot, no apptainer
    result = run_inv(
        "export", "--accelerator", "cpu", "--format", "apptainer", "--dest", str(tmp_path / "x.sif"), env=bare
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: `apptainer` is not installed here; run this where it is: "
        f"apptainer build {tmp_path / 'x.sif'} docker-daemon://{tag}"
    )
    assert not (tmp_path / "x.sif").exists()


def test_a_missing_squashfs_is_named_with_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "cluster_status", lambda: None)
    cell = cells.expand(recipes.load("bridgetower"), "bridgetower", "cuda", "smoke", ["workers0"])[0]
    runtime = slurm_runtime(Pyxis(NodeImageOptions(image=str(tmp_path / "missing.sqsh"))))
    with pytest.raises(ReprokitError, match="inv export --accelerator cuda --format enroot"):
        runtime.check(accelerators.get("cuda"))
    assert cell.accelerator == "cuda"


def test_the_first_exception_of_any_rank_is_the_root_cause(tmp_path):
    log = tmp_path / "stdout.log"
    log.write_text(
        "reprokit: Slurm job 7 on n[1-2]\n"
        "1: Traceback (most recent call last):\n"
        '1:   File "train.py", line 3, in <module>\n'
        "1: [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "0: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "0: RuntimeError: [../third_party/gloo] Connection closed by peer\n"
        "srun: error: n2: task 1: Exited with exit code 1\n"
    )
    assert (
        slurm.root_cause(log)
        == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (Slurm task 1)"
    )
    log.write_text(
        "0: run_volo.py: error: argument --lr: invalid float value: 'x'\nsrun: error: n1: task 0\n"
    )
    assert (
        slurm.root_cause(log) == "run_volo.py: error: argument --lr: invalid float value: 'x' (Slurm task 0)"
    )
    log.write_text("srun: error: n1: task 0: Exited with exit code 1\n")
    assert slurm.root_cause(log) is None


def test_scaling_efficiency_compares_per_device_throughput_with_the_single_node_row():
    def row(nodes: int, per_device: float | None, variant: str = "pretrain-d5") -> Row:
        return Row(recipe="volo", variant=variant, scale="published", accelerator="cuda", nodes=nodes,
                   measured_per_device=per_device, cell_id=f"volo--{variant}--{nodes}n")  # fmt: skip

    # The VOLO post: 500 img/s on one DGX A100 (8 GPUs), 2100 on five (40 GPUs).
    one, five, other = row(1, 500 / 8), row(5, 2100 / 40), row(2, 50.0, variant="pretrain-d1")
    found = ratios.scaling_efficiency([one, five, other])
    assert found == {five.cell_id: pytest.approx(0.84)}  # none for the single node, none without a twin
    assert "scaling_efficiency" in COLUMNS


# ---- on a cluster ---------------------------------------------------------------------------------


def fake_recipe(tmp_path: Path, **variant_args) -> Path:
    variant = {"name": "v", "baseline": True, "args": {"fake_tensorboard": True, **variant_args}}
    return fakes.fake_recipe(tmp_path / "slurmfake.yaml", [variant], name="slurmfake")


def run_on_cluster(
    tmp_path: Path, recipe: str, *extra: str, timeout: float = 600, env: dict | None = None, nodes: str = "2"
):
    started = time.monotonic()
    result = run_inv(
        "run", recipe, "--runtime", "slurm", "--accelerator", "cpu", "--scale", "smoke", "--nodes", nodes,
        "--container", "none", "--results", str(tmp_path / "out"), *extra, timeout=timeout, env=env,
    )  # fmt: skip
    sessions = sorted((tmp_path / "out").iterdir()) if (tmp_path / "out").exists() else []
    run_dirs = sorted((sessions[-1] / "runs").iterdir()) if sessions else []
    return result, (run_dirs[0] if run_dirs else None), time.monotonic() - started


def job(run_dir: Path) -> dict:
    return json.loads((run_dir / "slurm.json").read_text())


@pytest.mark.slurm
def test_a_two_node_job_runs_one_task_per_node_and_settles_its_run_directory(tmp_path, cluster):
    result, run_dir, _ = run_on_cluster(tmp_path, str(fake_recipe(tmp_path)), env=fake_env())
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok"
    record = job(run_dir)
    assert record["state"] == "COMPLETED" and record["exit_code"] == 0 and record["nodes"] == "n[1-2]"
    log = (run_dir / "stdout.log").read_text(errors="replace")  # srun --label splits lines mid-character
    # Both Slurm tasks (one per node) ran the trainer, each bound by the wrapper.
    assert "0: fake trainer:" in log and "1: fake trainer:" in log
    assert "0: reprokit: " in log and "local rank 0 -> NUMA node 0" in log


@pytest.mark.slurm
def test_a_rank_that_crashes_fails_the_job_with_its_own_error(tmp_path, cluster):
    recipe = fake_recipe(tmp_path, fake_crash="diverged at step 3")
    result, run_dir, _ = run_on_cluster(tmp_path, str(recipe), env=fake_env())
    assert result.returncode == 1, result.stdout + result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["exit_code"] not in (0, None)
    assert summary["error"].startswith("RuntimeError: diverged at step 3 (Slurm task ")
    assert job(run_dir)["state"] == "FAILED"


@pytest.mark.slurm
def test_a_job_past_the_kits_timeout_is_cancelled_and_recorded(tmp_path, cluster):
    recipe = fake_recipe(tmp_path, fake_hang=True)
    result, run_dir, took = run_on_cluster(tmp_path, str(recipe), "--timeout", "10", env=fake_env())
    assert result.returncode == 1, result.stdout + result.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "timeout"
    record = job(run_dir)
    assert record["state"] == "CANCELLED"
    queue = subprocess.run(["squeue", "-h", "-j", record["job_id"]], capture_output=True, text=True)
    assert queue.stdout.strip() == ""
    assert took < 90


@pytest.mark.slurm
def test_bridgetower_trains_data_parallel_across_two_nodes_with_its_scaling_efficiency(tmp_path, cluster):
    result, run_dir, took = run_on_cluster(
        tmp_path, "bridgetower", "--variant", "workers0", timeout=900, nodes="1,2"
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    runs = run_dir.parent
    assert sorted(p.name for p in runs.iterdir()) == [
        "bridgetower--workers0--1n",
        "bridgetower--workers0--2n",
    ]
    run_dir = runs / "bridgetower--workers0--2n"
    summary = json.loads((run_dir / "summary.json").read_text())
    sysinfo = json.loads((run_dir / "sysinfo.json").read_text())
    assert summary["status"] == "ok"
    assert summary["world_size"] == 2 and summary["num_nodes"] == 2
    assert sysinfo["world_size"] == 2 and sysinfo["num_nodes"] == 2
    assert summary["samples_per_second"] > 0
    rows = (run_dir / "throughput.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) >= 3
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    log = (run_dir / "stdout.log").read_text(errors="replace")  # srun --label splits lines mid-character
    assert "0: " in log and "1: " in log
    assert job(run_dir)["state"] == "COMPLETED"
    one, two = collect.rows(runs.parent)
    assert (one.nodes, one.world_size, two.nodes, two.world_size) == (1, 1, 2, 2)
    # Per device, 2 nodes against 1 in the same session: the figure the VOLO post gives as 2100 vs 500.
    assert two.scaling_efficiency == pytest.approx(two.measured_per_device / one.measured_per_device)
    assert one.scaling_efficiency is None
    print(
        f"BridgeTower smoke on 1 and 2 nodes ({took:.0f}s): {one.measured_per_device:.2f} and "
        f"{two.measured_per_device:.2f} samples/s per device, scaling efficiency {two.scaling_efficiency:.2f}"
    )


@pytest.mark.slurm
def test_data_reaches_the_trainer_in_a_slurm_job(tmp_path, cluster):
    from tests.fakes import IMAGENET_KEY, tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    recipe = fake_recipe(tmp_path)
    data = yaml.safe_load(recipe.read_text())
    data["dataset"]["data"] = IMAGENET_KEY
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    result, run_dir, _ = run_on_cluster(
        tmp_path, str(recipe), "--data", f"imagenet={root}", env=fake_env(), nodes="1"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seen = json.loads((run_dir / "seen_data.json").read_text())
    assert seen["data_dir"] == str(root) and "train/n01440764/n01440764_1.JPEG" in seen["files"]


def test_a_gaudi_job_runs_the_images_python_and_gives_mpirun_the_nodes_slots(tmp_path):
    """Under `srun --ntasks-per-node=1` Open MPI would read one slot from Slurm and refuse 8 ranks; and
    the job runs Habana's stack in the image, not the submitting machine's venv."""
    script = render_slurm(tmp_path, "bridgetower", "--accelerator", "gaudi2", "--variant", "workers1")
    text = script.read_text()
    assert "apptainer exec" in text and "unset PYTHON REPROKIT_TRAINERS_PATH" in text
    assert f"PYTHON={sys.executable}" not in text
    bin_dir = tmp_path / "bin"
    shim(bin_dir, "mpirun", f'printf "%s\\n" "$@" > {tmp_path}/mpirun.txt\n')
    shim(bin_dir, "lscpu", 'printf "Socket(s):  2\\nCore(s) per socket:  16\\n"\n')
    run_sh = script.parent / "run.sh"
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RUN_DIR": str(script.parent)}
    for env, slots in (
        ({"SLURM_JOB_ID": "77"}, ["--host", "localhost:8", "--mca", "ras", "^slurm"]),
        ({}, None),
    ):
        done = subprocess.run(["bash", str(run_sh)], env={**base, **env}, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        argv = (tmp_path / "mpirun.txt").read_text().splitlines()
        assert argv[:2] == ["-n", "8"]
        if slots:
            assert argv[2:7] == slots and argv[7:9] == ["--mca", "plm"]
        else:
            assert "--host" not in argv
        # The image's own interpreter (the profile's), then the trainer.
        assert argv[argv.index("--allow-run-as-root") + 1 :][:3] == [
            "python3",
            "-m",
            "reprokit_trainers.bridgetower",
        ]


def test_gaudi_cells_in_this_machines_python_need_habanas_stack(tmp_path):
    profile = accelerators.get("gaudi2")
    assert slurm_runtime().auto_container(profile) == ("apptainer", None)
    with pytest.raises(
        ReprokitError, match=r"^the gaudi2 cells need habana_frameworks in the Python that runs them"
    ):
        NoContainer(NoOptions()).check(profile, "slurm")


@pytest.mark.parametrize("platform", ["pyxis", "apptainer"])
def test_slurm_containers_bind_given_data_read_only_and_give_the_trainer_a_writable_scratch(
    tmp_path, platform
):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    script = render_slurm(
        tmp_path, "bridgetower", "--accelerator", "cuda", "--container", platform, "--variant", "workers0",
        "--data", f"dataset_cache={cache}",
    )  # fmt: skip
    text = script.read_text()
    mount = script.parent.parent.parent.resolve()
    if platform == "pyxis":
        assert f"  --container-mounts={mount}:{mount},{cache}:{cache}:ro \\" in text
    else:
        assert f"apptainer exec --nv --bind {mount}:{mount},{cache}:{cache}:ro " in text
    assert 'export REPROKIT_SCRATCH="$RUN_DIR/.scratch"' in text
    # The trainer is told the cache itself (its view is its own business), and no stand-in.
    run_sh = (script.parent / "run.sh").read_text()
    assert (
        f"--cache_dir {cache}" in run_sh
        and "--synthetic_data" not in run_sh
        and "--random_init" not in run_sh
    )


@pytest.mark.slurm
def test_resume_refuses_to_submit_again_while_the_job_of_a_killed_kit_still_runs(tmp_path, cluster):
    import signal

    hung = tmp_path / "hung-once"
    recipe = fake_recipe(tmp_path, fake_hang_once=str(hung))
    out = tmp_path / "out"
    kit = subprocess.Popen(
        [*INV, "run", str(recipe), "--runtime", "slurm", "--accelerator", "cpu", "--scale", "smoke",
         "--nodes", "1", "--container", "none", "--results", str(out)],
        cwd=ROOT, env={**os.environ, **fake_env()}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    job_id = None
    try:
        deadline = time.monotonic() + 120
        while job_id is None or slurm.job_state(job_id).state != "RUNNING":
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.5)
            found = list(out.glob("*/runs/*/slurm.json"))
            job_id = json.loads(found[0].read_text())["job_id"] if found else None
        # The trainer itself hangs (its marker made), not only the job: a job killed before its trainer
        # started would leave the resumed one to hang in its place.
        while not hung.exists():
            assert time.monotonic() < deadline, "the trainer never started in its job"
            time.sleep(0.2)
        kit.kill()  # kill -9: nothing cancels the job
        kit.wait(30)
        (session_dir,) = out.iterdir()
        refused = run_inv("resume", str(session_dir), env=fake_env())
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            "reprokit: cannot resume while a cell of the session still runs (slurmfake--v: its Slurm job "
            f"{job_id} is RUNNING (cancel it with: scancel {job_id})); wait for it to end"
        )
        assert slurm.job_state(job_id).state == "RUNNING"  # untouched, and not submitted twice
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(kit.pid, signal.SIGKILL)
        if job_id is not None:
            slurm.cancel(job_id)
    resumed = run_inv("resume", str(session_dir), env=fake_env(), timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((session_dir / "runs" / "slurmfake--v" / "summary.json").read_text())["status"] == "ok"


# ---- a partition that is not there is said before a submission would -----------------------------------


@pytest.mark.slurm
@pytest.mark.parametrize("task", ["dry-run", "preflight"])
def test_a_partition_the_cluster_lacks_is_refused_by_a_dry_run_and_the_preflight(cluster, tmp_path, task):
    args = ("--runtime", "slurm", "--partition", "nosuch", "--accelerator", "cpu", "--scale", "smoke")
    if task == "dry-run":
        result = run_inv("reproduce", "volo", *args, "--dry-run")
    else:
        result = run_inv("preflight", "volo", *args, "--no-steps", "--results", str(tmp_path))
    assert result.returncode != 0, result.stdout
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("--partition nosuch: the cluster has no such partition (sinfo lists: ci)")
    )
    assert "#!/usr/bin/env bash" not in result.stdout  # no job script shown as if it would run


@pytest.mark.slurm
def test_the_partition_the_cells_go_to_is_said_with_its_nodes(cluster):
    ok = run_inv("reproduce", "volo", "--runtime", "slurm", *TWO_CPU_NODES, "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert "Cells go to partition ci (the default): up, 2 node(s)." in ok.stderr
    three = run_inv("reproduce", "volo", "--runtime", "slurm", *TWO_CPU_NODES[:-4], "--nodes", "3",
                    "--container", "none", "--dry-run")  # fmt: skip
    assert three.returncode != 0
    assert three.stderr.strip().splitlines()[-1] == (
        "reprokit: partition ci (the default) has 2 node(s); the cells ask for 3"
    )


def test_a_partition_that_is_down_is_refused_from_sinfos_own_words(tmp_path, monkeypatch):
    shim(tmp_path / "bin", "sinfo", 'echo "gpu|down|4"; echo "batch*|up|2"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    runtime = slurm_runtime(partition="gpu")
    cell = cells.expand(recipes.load("volo"), "volo", "cpu", "smoke")[0]
    with pytest.raises(ReprokitError, match=r"^partition gpu is down: no job of it would start \(sinfo\)$"):
        runtime.where([cell])
    assert slurm_runtime().where([cell]) == "partition batch (the default): up, 2 node(s)"
