"""Building an accelerator's image: through the Docker SDK, or as the `docker build` line a user types.

The build context is sent as an in-memory tar (nothing is copied to disk to build); `--dry-run`
writes it to rendered/build/<accelerator>/ so that the printed command can be run by hand.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit import __version__
from reprokit.contract.errors import ReprokitError
from reprokit.contract.gitinfo import checkout, kit_revision, kit_source
from reprokit.images import buildkit, buildlog, engine, vendor
from reprokit.images.buildkit import Builder
from reprokit.images.context import context_files, context_hash, dockerfile, image_tag, write_context
from reprokit.images.wheelhouse import serve_directory, wheelhouse_port
from reprokit.plan import recipes
from reprokit.plan.accelerators import Profile

BUILD_DIR = Path("rendered") / "build"
OCI = "org.opencontainers.image"
# Build arguments are recorded in the image history: none of these may ever be one.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY", re.IGNORECASE)


def labels(
    profile: Profile, files: dict[str, bytes], base_image: str, base_digest: str | None
) -> dict[str, str]:
    """OCI labels: what the image is, which kit revision and recipes made it, and on which base."""
    found = {
        f"{OCI}.title": f"reprokit-{profile.name}",
        f"{OCI}.version": __version__,
        f"{OCI}.revision": kit_revision() or "unknown",
        f"{OCI}.source": kit_source() or str(checkout() or f"reprokit {__version__}"),
        f"{OCI}.base.name": base_image,
        "io.reprokit.accelerator": profile.name,
        "io.reprokit.context-hash": context_hash(files),
        # The files no package ships (vendor.sha256), or absent when built --without-vendor.
        "io.reprokit.vendor": (files.get("vendor.sha256") or b"").decode().strip() or "none",
        # The recipes of this kit, by content hash: a result's recipe_hash can be matched to them.
        "io.reprokit.plan.recipes": json.dumps(
            {name: recipes.recipe_hash(name) for name in recipes.available()}, sort_keys=True
        ),
    }
    if base_digest:
        found[f"{OCI}.base.digest"] = base_digest
    return found


@dataclass
class BuildPlan:
    """One image build, as the SDK runs it and as `docker build` would."""

    profile: Profile
    files: dict[str, bytes]
    tag: str
    base_image: str
    labels: dict[str, str]
    build_args: dict[str, str] = field(default_factory=dict)
    network_mode: str | None = None
    # What the engine is sent: `files` but for BuildKit's Dockerfile, with pip's cache mounts.
    builder: Builder = field(default_factory=lambda: Builder("legacy", "the Dockerfile every builder builds"))
    sent: dict[str, bytes] = field(default_factory=dict)

    def _lines(self, context: Path) -> list[list[str]]:
        lines = [["docker", "build"], ["--tag", self.tag]]
        if self.network_mode:
            lines.append(["--network", self.network_mode])
        lines += [["--build-arg", f"{key}={value}"] for key, value in self.build_args.items()]
        lines += [["--label", f"{key}={value}"] for key, value in self.labels.items()]
        return [*lines, [str(context)]]

    def command_line(self, context: Path) -> str:
        """The command, one flag per line, shell-quoted: it pastes into a shell as it is."""
        return " \\\n  ".join(" ".join(shlex.quote(t) for t in line) for line in self._lines(context))

    def context_tar(self) -> io.BytesIO:
        files = self.sent or self.files
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in sorted(files):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
                tar.addfile(info, io.BytesIO(files[name]))
        buffer.seek(0)
        return buffer


def plan_build(
    profile: Profile,
    base_image: str | None = None,
    wheelhouse_url: str | None = None,
    base_digest: str | None = None,
    vendor_files: dict[str, bytes] | None = None,
    with_vendor: bool = True,
    builder: Builder | None = None,
) -> BuildPlan:
    files = context_files(profile, vendor_files, with_vendor)
    builder = builder or Builder("legacy", "the Dockerfile every builder builds")
    # The cache mounts change how pip downloads, not what the image holds: the tag is the same.
    sent = {**files, "Dockerfile": dockerfile(profile, with_vendor, buildkit=True).encode()}
    base = base_image or profile.pinned_base
    build_args = {"BASE_IMAGE": base}
    network_mode = None
    if wheelhouse_url:
        build_args["WHEELHOUSE_URL"] = wheelhouse_url
        # The build's RUN steps must reach the wheelhouse served on the host's 127.0.0.1.
        network_mode = "host"
    leaked = [name for name in build_args if SECRET_NAME.search(name)]
    if leaked:  # build args are kept in the image history for anyone to read
        raise ReprokitError(f"refusing to pass {', '.join(leaked)} as a build argument")
    return BuildPlan(
        profile=profile,
        files=files,
        tag=image_tag(profile, files),
        base_image=base,
        labels=labels(profile, files, base, base_digest),
        build_args=build_args,
        network_mode=network_mode,
        builder=builder,
        sent=sent if builder.buildkit else files,
    )


def vendor_for(
    profile: Profile, staged: Path | None, with_vendor: bool, console=None
) -> tuple[dict[str, bytes], bool]:
    """(the vendor files, whether the image has them). Where they cannot be had and the build only writes
    a context to read (render, --dry-run), it says so in one line and goes on without them."""
    if profile.vendor is None or not with_vendor:
        return {}, with_vendor
    if console is None:
        return vendor.files(profile, staged), True
    try:
        return vendor.files(profile, staged), True
    except ReprokitError as exc:
        console.print(f"warning: the build context is written without its vendor files: {exc}")
        return {}, False


def dry_run(
    profile: Profile,
    base_image: str | None = None,
    wheelhouse: str | Path | None = None,
    with_vendor: bool = True,
    console=None,
) -> str:
    """The commands `inv build` runs, as a user would type them (the wheelhouse served by hand)."""
    from rich.console import Console

    base = base_image or profile.pinned_base
    url = f"http://127.0.0.1:{wheelhouse_port(profile.name)}/" if wheelhouse else None
    digest = None
    if engine.engine_status() is None:  # the label a real build adds, when the base is here
        digest = base_digest(engine.client(timeout=30), base)
    staged = Path(wheelhouse) if wheelhouse else None
    files, included = vendor_for(profile, staged, with_vendor, console or Console(stderr=True))
    plan = plan_build(profile, base, url, digest, files, included)
    context = write_context(profile, BUILD_DIR / profile.name, plan.files).resolve()
    # The Dockerfile every builder builds: `inv build` adds pip's cache mounts where the engine has BuildKit.
    lines = [f"# the image {plan.tag}, from the build context {context}"]
    if wheelhouse:
        server = ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(wheelhouse)]
        lines.append(" ".join(shlex.quote(t) for t in [*server, str(wheelhouse_port(profile.name))]) + " &")
    return "\n".join([*lines, plan.command_line(context)])


def base_digest(docker_client, base_image: str) -> str | None:
    """The base image's registry digest (RepoDigests), or its local id (an imported base has no digest)."""
    from docker.errors import ImageNotFound

    try:
        image = docker_client.images.get(base_image)
    except ImageNotFound:
        return None
    for repo_digest in image.attrs.get("RepoDigests") or []:
        return repo_digest.split("@", 1)[1]
    return image.id


def image_info(tag: str, docker_client=None) -> dict[str, Any] | None:
    """Id, tag, labels and registry digests of a local image; None when it is not here."""
    from docker.errors import ImageNotFound

    docker_client = docker_client or engine.client(timeout=30)
    try:
        image = docker_client.images.get(tag)
    except ImageNotFound:
        return None
    return {
        "id": image.id,
        "tag": tag,
        "labels": image.labels or {},
        "repo_digests": image.attrs.get("RepoDigests") or [],
        "size": image.attrs.get("Size"),
    }


@dataclass
class BuildResult:
    tag: str
    image_id: str
    cached: bool
    seconds: float
    labels: dict[str, str]
    log: Path | None = None
    # (path, bytes) of each file the build fetched from the wheelhouse (0: revalidated, pip had it)
    served: list[tuple[str, int]] = field(default_factory=list)


def _ensure_base(docker_client, base_image: str, offline: bool, console) -> str | None:
    """The base image's digest, pulling it first when it is not here (unless building offline)."""
    digest = base_digest(docker_client, base_image)
    if digest is not None:
        return digest
    if offline:
        raise ReprokitError(
            f"base image {base_image} is not here and a --wheelhouse build is offline; "
            "load or make it first (.ci/make-base-image.sh makes reprokit/base:bookworm)"
        )
    from docker.errors import DockerException

    console.print(f"Pulling {base_image}")
    try:
        with console.status(f"pulling {base_image}"):
            docker_client.images.pull(base_image)
    except DockerException as exc:
        raise ReprokitError(
            f"cannot pull base image {base_image}: {str(exc).splitlines()[0][:200]}"
        ) from None
    return base_digest(docker_client, base_image)


def _cache_hit(existing: dict[str, Any] | None, plan: BuildPlan) -> bool:
    """The tag is here, built on the same base: nothing to do."""
    if existing is None:
        return False
    have = existing["labels"]
    same_base = have.get(f"{OCI}.base.name") == plan.base_image
    wanted_digest = plan.labels.get(f"{OCI}.base.digest")
    return same_base and (wanted_digest is None or have.get(f"{OCI}.base.digest") == wanted_digest)


def build(
    profile: Profile,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    force: bool = False,
    console=None,
    with_vendor: bool = True,
    builder: str = "auto",
) -> BuildResult:
    """Build the accelerator's image unless the same tag is already here on the same base: through
    BuildKit where the engine has it (`builder`: auto, buildkit or legacy)."""
    from rich.console import Console

    if builder not in buildkit.BUILDERS:
        raise ReprokitError(f"--builder {builder}: give one of {', '.join(buildkit.BUILDERS)}")
    console = console or Console(stderr=True, highlight=False)
    started = time.monotonic()
    docker_client = engine.client()
    base = base_image or profile.pinned_base
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise ReprokitError(
            f"wheelhouse {wheelhouse} is not a folder (`inv wheelhouse --dest DIR` fills one)"
        )
    digest = _ensure_base(docker_client, base, offline=wheelhouse is not None, console=console)
    files, _ = vendor_for(profile, wheelhouse, with_vendor)
    chosen = buildkit.choose(docker_client.version(), builder)
    served: list[tuple[str, int]] = []
    with (
        serve_directory(wheelhouse, wheelhouse_port(profile.name), record=served)
        if wheelhouse is not None
        else nullcontext() as url
    ):
        plan = plan_build(profile, base, url, digest, files, with_vendor, chosen)
        existing = image_info(plan.tag, docker_client)
        if not force and _cache_hit(existing, plan):
            console.print(f"{plan.tag} is up to date ({existing['id'][:19]}); `--force` rebuilds it")
            return BuildResult(plan.tag, existing["id"], True, time.monotonic() - started, existing["labels"])
        console.print(
            f"Building {plan.tag} on {base}" + (f" from the wheelhouse {wheelhouse}" if url else "")
            + f" with {'BuildKit' if chosen.buildkit else 'the legacy builder'}: {chosen.why}"
        )  # fmt: skip
        log_path = BUILD_DIR / f"{profile.name}.log"
        image_id = buildlog.stream_build(docker_client, plan, log_path, console)
    seconds = time.monotonic() - started
    console.print(f"Built {plan.tag} ({image_id[:19]}) in {seconds:.0f}s; log: {log_path}")
    if url:
        console.print(fetched_line(served))
    return BuildResult(plan.tag, image_id, False, seconds, plan.labels, log_path, served)


def fetched_line(served: list[tuple[str, int]]) -> str:
    """What the build's pip fetched from the wheelhouse: the download an index would have served."""
    files = [(path, size) for path, size in served if path.endswith(".whl")]
    fetched = [(path, size) for path, size in files if size > 0]
    line = f"pip fetched {len(fetched)} wheels, {sum(size for _, size in fetched) / 1e6:,.1f} MB, from the wheelhouse"
    kept = len(files) - len(fetched)
    return line + (f"; {kept} more were still in its cache mount" if kept else "")
