"""Containers: the pinned image is built from a local wheelhouse, labelled, cached, free of secrets,
and a cell runs inside it with its results landing in the host's run directory.

The tests marked `docker` need a Docker engine and the local base image that
`.ci/services/docker.sh` makes (reprokit/base:bookworm). Without them they are skipped, except
in CI (CI=true), where a missing engine is a failure: CI exists to run them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename
from rich.console import Console

from reprokit import __version__, images
from reprokit.contract.errors import ReprokitError
from reprokit.contract.gitinfo import kit_revision
from reprokit.images import buildkit, index_hashes, locks
from reprokit.images.build import BUILD_DIR, plan_build
from reprokit.images.buildlog import failure, stream_build
from reprokit.images.wheelhouse import serve_directory, wheelhouse_port
from reprokit.plan import accelerators, cells, recipes
from reprokit.run import supervise
from reprokit.run.containers import docker as docker_platform
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes.local import LocalRuntime
from tests.conftest import ROOT, departures_of_the_run, run_inv

BASE_IMAGE = "reprokit/base:bookworm"
SECRET = "dummy-secret-123"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason}; in CI (CI=true) the container tests must run, not skip", pytrace=False)
    pytest.skip(reason)


def smoke_cell(variant: str = "workers0") -> cells.Cell:
    return cells.expand(recipes.load("bridgetower"), "bridgetower", "cpu", "smoke", [variant])[0]


# ---- without an engine: what users see, what would run ------------------------------------------


def test_build_dry_run_prints_the_docker_build_command_a_user_would_type(tmp_path):
    result = run_inv("build", "--accelerator", "cuda", "--dry-run", env={"HF_TOKEN": SECRET})
    assert result.returncode == 0, result.stderr
    profile = accelerators.get("cuda")
    tag = images.image_tag(profile)
    lines = result.stdout.strip().splitlines()
    assert lines[1] == "docker build \\"
    assert f"  --tag {tag} \\" in lines
    # The base by digest where the vendor publishes one: what builds is what the pins were resolved on.
    assert f"  --build-arg BASE_IMAGE={profile.pinned_base} \\" in lines
    assert "@sha256:" in profile.pinned_base
    assert any(line.startswith("  --label org.opencontainers.image.revision=") for line in lines)
    assert lines[-1] == f"  {(ROOT / BUILD_DIR / 'cuda').resolve()}"
    # The printed context is there to build from by hand, and holds what `inv build` sends.
    assert (ROOT / BUILD_DIR / "cuda" / "Dockerfile").read_text().startswith("# reprokit image for `cuda`")
    # It is a shell command: bash parses it (echoing instead of building) into the same argv.
    echoed = subprocess.run(
        ["bash", "-c", "docker() { printf '%s\\n' \"$@\"; }\n" + "\n".join(lines[1:])],
        capture_output=True,
        text=True,
    )
    assert echoed.stdout.splitlines()[:3] == ["build", "--tag", tag]
    assert SECRET not in result.stdout


def test_build_dry_run_with_a_wheelhouse_serves_it_on_localhost_and_uses_the_host_network(tmp_path):
    result = run_inv(
        "build",
        "--accelerator",
        "cpu",
        "--dry-run",
        "--base-image",
        BASE_IMAGE,
        "--wheelhouse",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    port = wheelhouse_port("cpu")
    assert f"python3 -m http.server --bind 127.0.0.1 --directory {tmp_path} {port} &" in result.stdout
    assert "  --network host \\" in result.stdout
    assert f"  --build-arg WHEELHOUSE_URL=http://127.0.0.1:{port}/ \\" in result.stdout
    assert f"  --label org.opencontainers.image.base.name={BASE_IMAGE} \\" in result.stdout


def test_docker_run_dry_run_prints_the_container_command_with_secrets_by_name_only():
    result = run_inv(
        "run", "bridgetower", "--runtime", "docker", "--accelerator", "cpu", "--scale", "smoke",
        "--variant", "workers0", "--dry-run", "--results", "/tmp/reprokit-out",
        env={"HF_TOKEN": SECRET},
    )  # fmt: skip
    tag = images.image_tag(accelerators.get("cpu"))
    # The command is printed either way; the dry run's checks then refuse where no image of the tag is
    # built yet (exit 3), as the run itself would.
    if _built(tag):
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 3, result.stderr
        assert "would not run or be judged; image: " in result.stderr.strip().splitlines()[-1]
    out = result.stdout
    assert "docker run --rm --init --name reprokit-bridgetower--workers0-" in out
    assert "  -v /tmp/reprokit-out/SESSION/runs:/reprokit/runs:rw \\" in out
    assert "  -e RUN_DIR=/reprokit/runs/bridgetower--workers0 \\" in out
    assert "  --ipc=host \\" in out and "  --shm-size=2g \\" in out
    assert "  -e HF_TOKEN \\" in out and SECRET not in out
    assert (
        f"{images.image_tag(accelerators.get('cpu'))} bash /reprokit/runs/bridgetower--workers0/run.sh" in out
    )


def _built(tag: str) -> bool:
    """Whether an engine answers here with the image `tag` built."""
    if images.engine_status() is not None:
        return False
    with contextlib.suppress(Exception):
        images.client().images.get(tag)
        return True
    return False


def test_profile_run_options_become_the_containers_devices_limits_and_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-hub-cache"))
    cell = smoke_cell()
    cuda = docker_platform.container_spec(
        cell, tmp_path / "runs" / cell.cell_id, accelerators.get("cuda"), "img"
    )
    kwargs = cuda.sdk_kwargs()
    request = kwargs["device_requests"][0]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert (kwargs["ipc_mode"], kwargs["shm_size"]) == ("host", "16g")
    assert {(u["Name"], u["Soft"], u["Hard"]) for u in kwargs["ulimits"]} == {
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
    }
    assert kwargs["environment"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    # The token reaches the container at run time, from the host's environment.
    assert kwargs["environment"]["HF_TOKEN"] == SECRET
    # The host's OpenMP thread count, as a trainer run without a container inherits it.
    assert kwargs["environment"]["OMP_NUM_THREADS"] == "3"
    assert kwargs["volumes"] == {str((tmp_path / "runs").resolve()): {"bind": "/reprokit/runs", "mode": "rw"}}
    assert kwargs["command"] == ["bash", "/reprokit/runs/bridgetower--workers0/run.sh"]

    gaudi = docker_platform.container_spec(
        cell, tmp_path / "runs" / cell.cell_id, accelerators.get("gaudi2"), "img"
    )
    kwargs = gaudi.sdk_kwargs()
    assert (kwargs["runtime"], kwargs["network_mode"], kwargs["cap_add"]) == ("habana", "host", ["sys_nice"])
    assert "device_requests" not in kwargs
    assert "--runtime=habana" in gaudi.command_line() and "--cap-add=sys_nice" in gaudi.command_line()


def test_a_profile_without_a_docker_runtime_passes_its_device_nodes_and_groups(tmp_path):
    """AMD's GPUs have no Docker runtime: the container is given /dev/kfd and /dev/dri, the video group
    and seccomp unconfined, as AMD's docker run line does, by the profile alone."""
    cell = smoke_cell()
    opts = {
        "devices": ["/dev/kfd", "/dev/dri"],
        "group_add": ["video"],
        "security_opt": ["seccomp=unconfined"],
    }
    profile = accelerators.get("cpu").model_copy(update={"docker_run": opts})
    spec = docker_platform.container_spec(cell, tmp_path / "runs" / cell.cell_id, profile, "img")
    kwargs = spec.sdk_kwargs()
    assert kwargs["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert (kwargs["group_add"], kwargs["security_opt"]) == (["video"], ["seccomp=unconfined"])
    line = spec.command_line()
    assert "--device=/dev/kfd" in line and "--group-add video" in line
    assert "--security-opt seccomp=unconfined" in line


def test_the_container_runs_as_the_host_user_unless_the_kit_runs_as_root(tmp_path, monkeypatch):
    cell = smoke_cell()
    profile = accelerators.get("cpu")
    monkeypatch.setattr(os, "getuid", lambda: 1234)
    monkeypatch.setattr(os, "getgid", lambda: 99)
    spec = docker_platform.container_spec(cell, tmp_path / cell.cell_id, profile, "img")
    assert spec.user == "1234:99" and spec.environment["HOME"] == "/tmp"
    # No passwd entry for the uid in the image: getpass.getuser() (inductor's cache dir) needs a name.
    assert spec.environment["USER"] == spec.environment["LOGNAME"] == "reprokit-1234"
    assert spec.environment["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/torchinductor_1234"
    assert "  --user 1234:99 \\" in spec.command_line()
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert docker_platform.container_spec(cell, tmp_path / cell.cell_id, profile, "img").user is None


def test_the_hub_cache_is_mounted_read_only_when_the_user_has_one(tmp_path, monkeypatch):
    cell = smoke_cell()
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    spec = docker_platform.container_spec(
        cell, tmp_path / "runs" / cell.cell_id, accelerators.get("cpu"), "img"
    )
    assert str(tmp_path / "hf") not in spec.volumes and "HF_HUB_CACHE" not in spec.environment
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    spec = docker_platform.container_spec(
        cell, tmp_path / "runs" / cell.cell_id, accelerators.get("cpu"), "img"
    )
    assert spec.volumes[str(tmp_path / "hf")] == {"bind": "/reprokit/hf-home", "mode": "ro"}
    assert spec.environment["HF_HUB_CACHE"] == "/reprokit/hf-home/hub"


def test_given_data_is_mounted_read_only_and_the_trainer_gets_a_scratch_folder_it_may_write(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-hub-cache"))
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    (cell,) = cells.expand(
        recipes.load("bridgetower"),
        "bridgetower",
        "cpu",
        "smoke",
        ["workers0"],
        data={"dataset_cache": str(cache)},
    )
    spec = docker_platform.container_spec(
        cell, tmp_path / "runs" / cell.cell_id, accelerators.get("cpu"), "img"
    )
    assert spec.volumes[str(cache)] == {"bind": str(cache), "mode": "ro"}
    assert spec.environment["REPROKIT_SCRATCH"] == "/tmp/reprokit-scratch"
    assert "  -e REPROKIT_SCRATCH=/tmp/reprokit-scratch \\" in spec.command_line()


def test_a_log_the_disk_refuses_is_given_up_while_the_containers_output_is_still_followed():
    """The full disk is /dev/full (every write ENOSPC): the copy gives up the log, not the stream, so
    the handle still sees the container end, and no thread dies with a traceback."""
    import threading

    chunks = [b"step %d\n" % i for i in range(50)]
    read: list[bytes] = []

    class Container:
        def logs(self, **_):
            for chunk in chunks:
                read.append(chunk)
                yield chunk

    died: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda hook: died.append(hook.exc_value)
    try:
        copier = threading.Thread(target=docker_platform._copy_logs, args=(Container(), Path("/dev/full")))
        copier.start()
        copier.join(10)
    finally:
        threading.excepthook = previous
    assert not copier.is_alive() and died == []
    assert read == chunks  # followed to the container's end


def test_the_wheelhouse_holds_wheels_for_the_images_python_and_glibc(tmp_path):
    argv = images.wheelhouse_command(accelerators.get("cpu"), tmp_path)
    assert argv[1:4] == ["-m", "pip", "download"]
    assert "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.11" and argv[argv.index("--abi") + 1] == "cp311"
    platforms = {argv[i + 1] for i, token in enumerate(argv) if token == "--platform"}
    assert {"manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_36_x86_64"} <= platforms
    assert "manylinux_2_38_x86_64" not in platforms  # newer than bookworm's glibc 2.36
    pins = Path(argv[argv.index("--requirement") + 1]).read_text()
    assert "torch==2.14.1" in pins and "torchvision==0.29.1" in pins


def test_a_served_wheelhouse_lists_its_wheels_on_localhost(tmp_path):
    import urllib.request

    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(b"wheel")
    with serve_directory(tmp_path, port=0) as url:
        assert url.startswith("http://127.0.0.1:")
        listing = urllib.request.urlopen(url, timeout=5).read().decode()
    assert 'href="demo-1.0-py3-none-any.whl"' in listing


def test_each_accelerators_wheelhouse_has_its_own_fixed_port_so_two_builds_at_once_keep_their_cache():
    """The port is in the pip layer's cache key: one shared port sent a second build running at the same
    time (CI builds cuda's and gaudi2's images beside the cpu image) to a free port, and its layers
    of gigabytes were rebuilt rather than reused."""
    names = list(accelerators.profiles())
    ports = {name: wheelhouse_port(name) for name in names}
    assert len(set(ports.values())) == len(names), ports
    assert ports == {name: wheelhouse_port(name) for name in names}  # the same on every run
    taken = {}
    with contextlib.ExitStack() as stack:
        for name in ("cpu", "cuda"):
            taken[name] = stack.enter_context(serve_directory(Path("."), wheelhouse_port(name)))
    assert taken == {name: f"http://127.0.0.1:{wheelhouse_port(name)}/" for name in ("cpu", "cuda")}


@pytest.mark.parametrize(
    "args",
    [
        ("build", "--accelerator", "cpu"),
        (
            "run",
            "bridgetower",
            "--runtime",
            "docker",
            "--accelerator",
            "cpu",
            "--scale",
            "smoke",
            "--results",
        ),
    ],
    ids=["build", "run"],
)
def test_without_an_engine_build_and_the_docker_runtime_say_so_in_one_line(tmp_path, args):
    result = run_inv(*args, *([str(tmp_path)] if args[-1] == "--results" else []), env=NO_ENGINE)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("reprokit: ")
        and "no Docker engine is running; start dockerd or set DOCKER_HOST" in last
    )
    assert "Traceback" not in result.stderr


def test_the_auto_runtime_says_which_runtime_and_why_in_one_line():
    result = run_inv(
        "run", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--dry-run", env=NO_ENGINE
    )
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "runtime" in line]
    assert len(said) == 1
    assert "with the local runtime" in said[0] and "no Docker engine is running" in said[0]


# ---- with an engine: build once, run inside ------------------------------------------------------


@pytest.fixture(scope="session")
def engine():
    reason = images.engine_status()
    if reason is not None:
        _unavailable(f"no Docker engine: {reason} (.ci/services/docker.sh starts one)")
    client = images.client(timeout=120)
    try:
        client.images.get(BASE_IMAGE)
    except Exception:
        _unavailable(f"no {BASE_IMAGE} image (.ci/make-base-image.sh makes it)")
    return client


@pytest.fixture(scope="module")
def cpu_image(engine, tmp_path_factory):
    """The cpu image, built as CI builds it: from a local wheelhouse, on the local base, a token set. Made
    for this module's tests alone, so that its wheelhouse (3 GB) leaves the disk when they end, not when
    their worker's whole session does."""
    wheels = tmp_path_factory.mktemp("wheelhouse")
    timings: dict[str, float] = {}
    started = time.monotonic()
    filled = run_inv("wheelhouse", "--accelerator", "cpu", "--dest", str(wheels), timeout=1200)
    timings["wheelhouse"] = time.monotonic() - started
    assert filled.returncode == 0, filled.stderr
    command = ("build", "--accelerator", "cpu", "--base-image", BASE_IMAGE, "--wheelhouse", str(wheels))
    started = time.monotonic()
    built = run_inv(*command, env={"HF_TOKEN": SECRET}, timeout=1800)
    timings["build"] = time.monotonic() - started
    assert built.returncode == 0, built.stderr[-3000:]
    tag = built.stdout.strip().splitlines()[-1]
    print(f"\ncpu image {tag}: wheelhouse {timings['wheelhouse']:.0f}s, build {timings['build']:.0f}s")
    yield {"tag": tag, "command": command, "output": built.stderr, "wheels": wheels, "timings": timings}
    shutil.rmtree(wheels, ignore_errors=True)  # gigabytes; the image holds what was installed


@pytest.mark.docker
def test_the_image_is_tagged_by_its_build_context_and_labelled_with_its_provenance(engine, cpu_image):
    profile = accelerators.get("cpu")
    assert cpu_image["tag"] == images.image_tag(profile)
    image = engine.images.get(cpu_image["tag"])
    labels = image.labels
    assert labels["org.opencontainers.image.base.name"] == BASE_IMAGE
    assert labels["org.opencontainers.image.base.digest"] == engine.images.get(BASE_IMAGE).id
    if "up to date" in cpu_image["output"]:
        # Built before this session from the same context, maybe at another commit: the label
        # names the revision that built it.
        assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", labels["org.opencontainers.image.revision"])
    else:
        assert labels["org.opencontainers.image.revision"] == kit_revision()
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["io.reprokit.context-hash"] == cpu_image["tag"].rsplit("-", 1)[1]
    if "up to date" not in cpu_image["output"]:
        # A cache hit keeps the labels of the build that made it (the recipes are not in the image).
        assert json.loads(labels["io.reprokit.plan.recipes"])["bridgetower"] == recipes.recipe_hash(
            "bridgetower"
        )


@pytest.mark.docker
def test_the_packages_were_installed_from_the_wheelhouse_only_with_their_hashes(engine, cpu_image):
    """The pip layers' recorded commands: the served wheelhouse, no index (so no internet), every file
    checked against the lock; the framework (torch's 3 GB) is a layer of its own, below the rest."""
    history = engine.images.get(cpu_image["tag"]).history()
    pip_layers = [h for h in history if "pip install" in h["CreatedBy"]]
    assert len(pip_layers) == 2
    for layer in pip_layers:
        assert f"WHEELHOUSE_URL=http://127.0.0.1:{wheelhouse_port('cpu')}/" in layer["CreatedBy"]
        assert "--no-index" in layer["CreatedBy"] and "--require-hashes" in layer["CreatedBy"]
    rest, framework = pip_layers  # history is newest first
    assert "lock-framework.txt" in framework["CreatedBy"] and "/opt/reprokit/lock.txt" in rest["CreatedBy"]
    big = [h for h in history if h["Size"] > 1_000_000_000]
    assert big == [framework]  # the rest of the lock and the trainers' layer above it stay small


@pytest.mark.docker
def test_the_build_says_which_builder_it_used_and_what_pip_fetched(engine, cpu_image):
    if "up to date" in cpu_image["output"]:
        pytest.skip("the image was built before this session")
    builder = buildkit.choose(engine.version())
    said = "with BuildKit" if builder.buildkit else "with the legacy builder"
    assert f"{said}: {builder.why}" in " ".join(cpu_image["output"].split())
    assert re.search(r"pip fetched \d+ wheels, [\d,.]+ MB, from the wheelhouse", cpu_image["output"])


def test_a_failed_build_is_said_from_pips_own_words():
    """pip's refusals in one line naming the package; else the step's last ERROR line, not the engine's
    'returned a non-zero code'."""
    engine_says = "The command '/bin/bash -o pipefail -c if [ -n ...' returned a non-zero code: 1"
    mismatch = [
        "Collecting idna==3.20",
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated ...",
        "    idna==3.20 from http://127.0.0.1:38741/idna-3.20-py3-none-any.whl (from -r /opt/reprokit/lock.txt (line 23)):",
        "        Expected sha256 " + "0" * 64,
        "             Got        " + "a" * 64,
    ]
    assert failure(mismatch, engine_says).startswith(
        "pip refused idna==3.20: the file fetched does not match the lock's sha256"
    )
    missing = [
        "ERROR: Hashes are required in --require-hashes mode, but they are missing from some requirements. ...",
        "    torch==2.14.1 --hash=sha256:" + "b" * 64,
    ]
    assert failure(missing, engine_says).startswith("pip refused pins without a hash (torch==2.14.1)")
    error = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    # The legacy builder colours a step's stderr.
    assert failure(["Collecting torch==2.14.1", f"\x1b[91m{error}\x1b[0m"], engine_says) == error
    assert failure(["some output"], engine_says) == engine_says[:300]


def _lock_with(tmp_path, monkeypatch, pin: str, hashes: list[str]):
    """The cpu profile with a copy of its lock whose `pin` (name==version) has these hashes."""
    name = pin.split("==")[0]
    profile = accelerators.get("cpu")
    line = f"{pin}" + "".join(f" --hash=sha256:{h}" for h in hashes)
    text = re.sub(rf"^{name}==.*$", line, profile.lock_file.read_text(), flags=re.M)
    # A lock of its own: no layer an earlier test run built from the same lock is reused (the temporary
    # folder's name alone repeats where pytest's numbering starts again).
    text += f"# {tmp_path} {uuid.uuid4().hex}\n"
    folder = shutil.copytree(profile.folder, tmp_path / f"cpu-{pin}")
    (folder / "lock.txt").write_text(text)
    return profile.model_copy(update={"folder": folder})


@pytest.mark.docker
def test_a_tampered_hash_fails_the_image_build_naming_the_package(engine, cpu_image, tmp_path, monkeypatch):
    """A wheel that is not the file the lock hashed (here: the lock says another sha256 for idna) stops
    pip inside the build, and the kit says which package in one line; no image is tagged."""
    profile = _lock_with(tmp_path, monkeypatch, "idna==3.20", ["0" * 64])
    tag = images.image_tag(profile)
    with pytest.raises(ReprokitError) as caught:
        images.build(profile, BASE_IMAGE, cpu_image["wheels"])
    assert str(caught.value).startswith(
        f"building {tag} failed: pip refused idna==3.20: the file fetched does not match the lock's sha256"
    )
    assert "Expected sha256 " + "0" * 64 in (ROOT / BUILD_DIR / "cpu.log").read_text()
    assert images.image_info(tag, engine) is None


@pytest.mark.docker
@pytest.mark.parametrize("builder", ["buildkit", "legacy"])
def test_pip_in_the_image_refuses_a_pin_without_a_hash(engine, cpu_image, builder):
    """The kit refuses such a lock before building (test_pins); a context edited by hand is refused by pip
    itself, whichever builder builds it (the legacy builder builds the Dockerfile without cache mounts)."""
    profile = accelerators.get("cpu")
    chosen = buildkit.choose(engine.version(), builder)
    sizes = {}
    for wheel in cpu_image["wheels"].glob("*.whl"):
        name, version, *_ = parse_wheel_filename(wheel.name)
        sizes[f"{name}=={version}"] = wheel.stat().st_size
    with serve_directory(cpu_image["wheels"], wheelhouse_port("cpu")) as url:
        plan = plan_build(profile, BASE_IMAGE, url, None, None, True, chosen)
        framework = [
            f"{p.name}=={p.version}" for p in locks.parse_lock(plan.sent["lock-framework.txt"].decode())
        ]
        # The framework's slice edited down to its smallest pin, its hash taken off: pip downloads and
        # hashes every file of a lock before it names the pins without one (the whole slice: 3 GB).
        unhashed = min(framework, key=lambda pin: sizes[pin])
        plan.sent["lock-framework.txt"] = f"{unhashed}\n".encode()
        plan.tag = "reprokit/cpu:unhashed-pin"
        with pytest.raises(ReprokitError) as caught:
            stream_build(engine, plan, BUILD_DIR / "cpu-unhashed.log", Console(stderr=True, highlight=False))
    assert f"pip refused pins without a hash ({unhashed}" in str(caught.value)
    assert images.image_info(plan.tag, engine) is None


def _fetch_the_changed_pin(profile, pin: str, wheels: Path) -> None:
    """The kept wheelhouse given the one wheel it lacks, by the wheelhouse's own `pip download` (flags,
    platform, hashes) of the lock's line for `pin`: the folder ends as `inv wheelhouse` of the whole lock
    leaves it (every other wheel is there from the cpu image's), without pip reading the index pages of
    the ~80 projects it has (half a minute of CPU here)."""
    argv = images.wheelhouse_command(profile, wheels)
    (line,) = [line for line in profile.lock_file.read_text().splitlines() if line.startswith(f"{pin} ")]
    one = profile.folder.parent / f"{pin}.txt"  # beside the profile folder: nothing new in the context
    one.write_text(line + "\n")
    subprocess.run([*argv[:-1], str(one)], check=True, capture_output=True, text=True)
    assert (wheels / f"{pin.replace('==', '-')}-py3-none-any.whl").exists()


@pytest.mark.docker
def test_a_changed_pin_outside_the_framework_reuses_its_layer_and_fetches_only_what_changed(
    engine, cpu_image, tmp_path, monkeypatch
):
    """One pin changed (idna): the framework layer (3 GB) is reused as it is, and pip fetches none of its
    wheels. Through BuildKit, pip's cache mount holds what earlier builds fetched: a change fetches the
    one new wheel and nothing else (a second change shows it when the cache was empty before the first)."""
    builder = buildkit.choose(engine.version())
    base = accelerators.get("cpu").base_manifest
    tags = []
    try:
        layers = engine.images.get(cpu_image["tag"]).attrs["RootFS"]["Layers"]
        for version in ("3.10", "3.9"):
            hashes = index_hashes.locked_hashes({"idna": version}, base)["idna"]
            profile = _lock_with(tmp_path, monkeypatch, f"idna=={version}", hashes)
            _fetch_the_changed_pin(profile, f"idna=={version}", cpu_image["wheels"])
            result = images.build(profile, BASE_IMAGE, cpu_image["wheels"])
            tags.append(result.tag)
            wheels = [(path.lstrip("/"), size) for path, size in result.served if path.endswith(".whl")]
            fetched = {wheel for wheel, size in wheels if size > 0}
            assert not {w for w in fetched if locks.FRAMEWORK.match(str(parse_wheel_filename(w)[0]))}
            now = engine.images.get(result.tag).attrs["RootFS"]["Layers"]
            # The base's layers, the frozen base constraints, the framework's slice and its install: shared.
            shared = len(engine.images.get(BASE_IMAGE).attrs["RootFS"]["Layers"]) + 3
            assert now[:shared] == layers[:shared]
            assert now[shared] != layers[shared]  # lock.txt: changed
            if not builder.buildkit:
                break  # no cache mount: every build fetches the rest of the lock
            # Every wheel of the rest of the lock was asked for.
            assert len(wheels) == len(locks.read_lock(profile.lock_file)) - len(
                locks.framework_pins(profile.lock_file.read_text())
            )
            if fetched <= {f"idna-{version}-py3-none-any.whl"}:
                break  # only the new one was fetched (or none: an earlier run had it in the cache)
        else:
            pytest.fail(f"the second change fetched more than its one new wheel: {sorted(fetched)}")
    finally:
        for tag in tags:
            engine.images.remove(tag)


@pytest.mark.docker
def test_no_secret_from_the_build_environment_lands_in_the_image(engine, cpu_image):
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", cpu_image["tag"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "WHEELHOUSE_URL" in history  # the build args are in it: the place a token would show
    assert SECRET not in history and "HF_TOKEN" not in history
    attrs = engine.images.get(cpu_image["tag"]).attrs
    assert SECRET not in json.dumps(attrs)


@pytest.mark.docker
def test_a_second_build_with_nothing_changed_is_a_cache_hit(engine, cpu_image):
    image_id = engine.images.get(cpu_image["tag"]).id
    started = time.monotonic()
    again = run_inv(*cpu_image["command"], env={"HF_TOKEN": SECRET})
    seconds = time.monotonic() - started
    assert again.returncode == 0, again.stderr
    assert "is up to date" in again.stderr and "Building" not in again.stderr
    assert seconds < 20, f"a cache hit took {seconds:.0f}s"
    assert engine.images.get(cpu_image["tag"]).id == image_id


def leftover_containers(engine, run_dir: Path) -> list:
    """Containers of this run directory still there (the runtime removes its container). Sparse: the
    list's own fields, as a full list inspects each container after listing it, and one the warden
    removes in between is a 404."""
    return engine.containers.list(
        all=True, sparse=True, filters={"label": f"io.reprokit.run-dir={run_dir.resolve()}"}
    )


def _probe_cell(run_dir: Path, body: str) -> cells.Cell:
    """A cell whose trainer is a small module in its own run directory: the container runs in its
    mounted run directory, where `python -m probe.run` finds it."""
    cell = smoke_cell()
    (run_dir / "probe").mkdir(parents=True, exist_ok=True)
    (run_dir / "probe" / "run.py").write_text(body)
    cell.trainer = "probe.run"
    return cell


def docker_runtime(image: str | None = None) -> LocalRuntime:
    return LocalRuntime(NoOptions(), docker_platform.Docker(docker_platform.DockerOptions(image=image)))


def run_in_docker(cell: cells.Cell, run_dir: Path, **kwargs) -> dict:
    runtime = docker_runtime()
    runtime.check(accelerators.get("cpu"))
    return supervise.run_cell(runtime, cell, run_dir, accelerators.get("cpu"), **kwargs)


PROBE = """\
import json, os, socket, sys, time
run_dir = sys.argv[sys.argv.index("--output_dir") + 1]
print("hello from the container", flush=True)
keys = ("RUN_DIR", "HF_TOKEN", "REPROKIT_IMAGE_ID", "REPROKIT_IMAGE_TAG", "REPROKIT_IMAGE_LABELS", "REPROKIT_MACHINE")
json.dump({**{k: os.environ.get(k) for k in keys}, "uid": os.getuid(), "hostname": socket.gethostname()},
          open(run_dir + "/env.json", "w"))
{tail}
"""


@pytest.mark.docker
def test_a_cell_runs_in_the_image_with_its_run_dir_mounted_and_the_image_recorded(
    engine, cpu_image, tmp_path, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "runtime-token")
    run_dir = tmp_path / "runs" / "probe-ok"
    tail = 'json.dump({"status": "ok", "samples_per_second": 1.0, "steps": 1}, open(run_dir + "/summary.json", "w"))'
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", tail))
    outcome = run_in_docker(cell, run_dir)
    assert outcome["status"] == "ok", outcome
    seen = json.loads((run_dir / "env.json").read_text())
    image = engine.images.get(cpu_image["tag"])
    assert seen["RUN_DIR"] == "/reprokit/runs/probe-ok"
    assert seen["HF_TOKEN"] == "runtime-token"  # at run time, from the host
    assert (seen["REPROKIT_IMAGE_ID"], seen["REPROKIT_IMAGE_TAG"]) == (image.id, cpu_image["tag"])
    assert json.loads(seen["REPROKIT_IMAGE_LABELS"]) == image.labels
    # The container's hostname is its own: the machine's name is passed for the trainer to record.
    assert seen["REPROKIT_MACHINE"] == socket.gethostname() != seen["hostname"]
    assert seen["uid"] == os.getuid()  # the host user (root here only when the kit runs as root)
    assert "hello from the container" in (run_dir / "stdout.log").read_text()
    assert not leftover_containers(engine, run_dir)


@pytest.mark.docker
def test_a_failing_cell_keeps_its_exit_code_and_log_tail(engine, cpu_image, tmp_path):
    run_dir = tmp_path / "runs" / "probe-fails"
    cell = _probe_cell(
        run_dir, PROBE.replace("{tail}", 'print("boom: the trainer gave up", flush=True); sys.exit(3)')
    )
    outcome = run_in_docker(cell, run_dir)
    assert (outcome["status"], outcome["exit_code"]) == ("failed", 3)
    assert outcome["error"] == "boom: the trainer gave up"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert not leftover_containers(engine, run_dir)


@pytest.mark.docker
def test_a_cell_past_its_timeout_is_stopped_and_recorded(engine, cpu_image, tmp_path):
    run_dir = tmp_path / "runs" / "probe-sleeps"
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", "time.sleep(600)"))
    seen: list[str] = []
    started = time.monotonic()
    outcome = run_in_docker(cell, run_dir, timeout=5, progress=seen.append)
    assert time.monotonic() - started < 60
    assert outcome["status"] == "timeout" and outcome["error"] == "timeout after 5 s"
    assert seen and seen[0].startswith("running ")
    assert not leftover_containers(engine, run_dir)


INTERRUPTED_RUN = """\
import signal, sys
from pathlib import Path
from reprokit.plan import accelerators, cells, recipes
from reprokit.run import supervise
from reprokit.run.containers.docker import Docker, DockerOptions
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes.local import LocalRuntime

signal.signal(signal.SIGINT, signal.default_int_handler)  # a background process starts with it ignored
cell = cells.expand(recipes.load("bridgetower"), "bridgetower", "cpu", "smoke", ["workers0"])[0]
cell.trainer = sys.argv[2]
try:
    runtime = LocalRuntime(NoOptions(), Docker(DockerOptions()))
    supervise.run_cell(runtime, cell, Path(sys.argv[1]), accelerators.get("cpu"))
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.docker
def test_ctrl_c_stops_the_container_and_records_the_interruption(engine, cpu_image, tmp_path):
    run_dir = tmp_path / "runs" / "probe-interrupted"
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", "time.sleep(600)"))
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_RUN, str(run_dir), cell.trainer],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (run_dir / "env.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)  # the trainer is running inside the container
    assert (run_dir / "env.json").exists(), "the container never started the trainer"
    assert len(leftover_containers(engine, run_dir)) == 1  # found by its label while it runs
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "interrupted"
    assert time.monotonic() - started < 8  # SIGTERM reached the trainer; no wait for the SIGKILL
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["exit_code"] == 143
    assert not leftover_containers(engine, run_dir)


@pytest.mark.docker
def test_a_kit_killed_with_sigkill_leaves_no_container_running(engine, cpu_image, tmp_path):
    run_dir = tmp_path / "runs" / "probe-orphaned"
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", "time.sleep(600)"))
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_RUN, str(run_dir), cell.trainer], cwd=ROOT, stdout=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not (run_dir / "env.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (run_dir / "env.json").exists(), "the container never started the trainer"
    supervisor = json.loads((run_dir / "supervisor.json").read_text())
    proc.kill()  # no handler runs: the kernel tells the warden, which stops the container
    proc.wait(10)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and any(
        c.status == "running" for c in leftover_containers(engine, run_dir)
    ):
        time.sleep(0.5)
    assert not [c for c in leftover_containers(engine, run_dir) if c.status == "running"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and leftover_containers(engine, run_dir):
        time.sleep(0.5)
    assert not leftover_containers(engine, run_dir)  # the warden removed it too
    assert supervisor["pid"] != proc.pid


# The same, in the local base image (any image with a Python runs a probe trainer): no build needed.
INTERRUPTED_IN_BASE = INTERRUPTED_RUN.replace(
    "Docker(DockerOptions())", f"Docker(DockerOptions(image={BASE_IMAGE!r}))"
)


def _kit_in_docker(run_dir: Path, tail: str) -> subprocess.Popen:
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", "import signal\n" + tail))
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_IN_BASE, str(run_dir), cell.trainer],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while not (run_dir / "env.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (run_dir / "env.json").exists(), "the container never started the trainer"
    return proc


@pytest.mark.docker
def test_a_second_ctrl_c_while_a_container_stops_waits_and_the_container_is_removed(engine, tmp_path):
    run_dir = tmp_path / "runs" / "probe-stubborn"
    # It ignores SIGTERM: the engine's stop waits its grace, then SIGKILLs it.
    proc = _kit_in_docker(run_dir, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)")
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)  # the impatient user's second Ctrl-C
        out, _ = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert out.strip().splitlines()[-1] == "interrupted"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert not leftover_containers(engine, run_dir)


@pytest.mark.docker
def test_a_kit_killed_with_sigkill_leaves_no_container_at_all(engine, tmp_path):
    run_dir = tmp_path / "runs" / "probe-orphan"
    proc = _kit_in_docker(run_dir, "time.sleep(600)")
    proc.kill()  # no handler runs: the kernel tells the warden, which stops and removes the container
    proc.wait(10)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and leftover_containers(engine, run_dir):
        time.sleep(0.5)
    assert not leftover_containers(engine, run_dir)


@pytest.mark.docker
def test_a_missing_image_says_which_build_makes_it(engine):
    runtime = docker_runtime(image="reprokit/cpu:not-built")
    with pytest.raises(
        ReprokitError,
        match=r"no image reprokit/cpu:not-built here; build it with `inv build --accelerator cpu`",
    ):
        runtime.check(accelerators.get("cpu"))


@pytest.mark.docker
def test_the_bridgetower_smoke_cell_runs_in_the_cpu_image(engine, cpu_image, tmp_path):
    started = time.monotonic()
    result = run_inv(
        "run", "bridgetower", "--runtime", "docker", "--accelerator", "cpu", "--scale", "smoke",
        "--variant", "workers0", "--results", str(tmp_path), timeout=900,
    )  # fmt: skip
    seconds = time.monotonic() - started
    print(f"\nbridgetower smoke cell in the cpu image: {seconds:.0f}s")
    assert result.returncode == 0, result.stderr[-3000:]
    (session,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run_dir = session / "runs" / "bridgetower--workers0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["samples_per_second"] > 0
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    rows = (run_dir / "throughput.csv").read_text().strip().splitlines()
    assert rows[0].startswith("step,") and len(rows) >= 2
    sysinfo = json.loads((run_dir / "sysinfo.json").read_text())
    image = engine.images.get(cpu_image["tag"])
    assert sysinfo["image_id"] == image.id and sysinfo["image_tag"] == cpu_image["tag"]
    assert sysinfo["image_labels"]["org.opencontainers.image.base.name"] == BASE_IMAGE
    assert sysinfo["versions"]["torch"].startswith("2.14.1")
    # Written by the container, owned by whoever ran the kit.
    assert run_dir.joinpath("summary.json").stat().st_uid == os.getuid()


@pytest.mark.docker
def test_real_data_is_mounted_read_only_at_its_own_path(engine, cpu_image, tmp_path):
    from tests.fakes import tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    run_dir = tmp_path / "runs" / "probe-data"
    data = repr(str(root))
    tail = "\n".join(
        [
            "import pathlib",
            f"seen = sorted(str(p) for p in pathlib.Path({data}).rglob('*.JPEG'))",
            "json.dump({'seen': seen}, open(run_dir + '/seen.json', 'w'))",
            "try:",
            f"    open({data} + '/written-by-the-run', 'w')",
            "except OSError as e:",
            "    print('read-only:', e.errno)",
            "json.dump({'status': 'ok', 'samples_per_second': 1.0, 'steps': 1}, open(run_dir + '/summary.json', 'w'))",
        ]
    )
    cell = _probe_cell(run_dir, PROBE.replace("{tail}", tail))
    cell.data = {"imagenet": str(root)}
    outcome = run_in_docker(cell, run_dir)
    assert outcome["status"] == "ok", outcome
    seen = json.loads((run_dir / "seen.json").read_text())["seen"]
    assert str(root / "train" / "n01440764" / "n01440764_1.JPEG") in seen
    assert "read-only: 30" in (run_dir / "stdout.log").read_text()  # EROFS
    assert not (root / "written-by-the-run").exists()


@pytest.mark.docker
def test_a_read_only_dataset_cache_is_trained_on_as_given_in_the_image(engine, cpu_image, tmp_path):
    """--data dataset_cache=P is mounted read-only; datasets 3.6 writes a lock beside the data it loads.
    The BridgeTower cell trains on P's dataset and checkpoint (through the trainer's writable view in the
    container), never on synthetic data or random weights, and P is left as it was."""
    pytest.importorskip("transformers")
    from tests.fakes.newyorker import newyorker_cache
    from tests.test_trainer_bridgetower import TINY

    cache = newyorker_cache(tmp_path / "hf-cache", TINY)
    before = sorted(str(p) for p in cache.rglob("*"))
    result = run_inv(
        "run", "bridgetower", "--runtime", "docker", "--accelerator", "cpu", "--scale", "smoke",
        "--variant", "workers0", "--data", f"dataset_cache={cache}", "--results", str(tmp_path / "out"), timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (session,) = (tmp_path / "out").iterdir()
    summary = json.loads((session / "runs" / "bridgetower--workers0" / "summary.json").read_text())
    assert (summary["data_source"], summary["model_source"], summary["tokenizer_source"]) == (
        "hub",
        "hub",
        "hub",
    )
    assert departures_of_the_run(summary) == []
    assert summary["cache_read_through"].startswith("/tmp/reprokit-scratch/")
    assert sorted(str(p) for p in cache.rglob("*")) == before


@pytest.mark.docker
def test_the_preflight_reads_a_base_back_and_holds_it_to_bases_yaml(engine):
    """What `inv preflight` runs in a base image: its OS, glibc and Python read back and confirmed
    against the manifest the pins were resolved on (here the cpu profile's Debian bookworm base)."""
    from reprokit.preflight import baseimage

    output = engine.containers.run(BASE_IMAGE, ["sh", "-c", baseimage.script("python3")], remove=True)
    facts = baseimage.parse(output.decode())
    assert (
        facts.os.startswith("Debian GNU/Linux 12")
        and facts.glibc == "2.36"
        and facts.python.startswith("3.11.")
    )
    compared = baseimage.compare(accelerators.bases()["python-3.11-slim-bookworm"], facts)
    assert compared.wrong == []
    assert {
        "os Debian 12 (bookworm)",
        "glibc 2.36",
        "python 3.11",
        "compiler absent",
        "numactl absent",
    } <= set(compared.confirmed)
