"""CI's stand-ins for the vendor base images (NGC PyTorch, Habana's PyTorch installer image), which
cannot be pulled here: each mimics its base as far as this machine can (base.yaml `standin`):

- the base's Python minor version, a CPython build of this machine (pyenv) copied into a Debian
  image, as the vendor images have theirs in /usr;
- the base's framework versions (torch, torchvision, numpy, ...) preinstalled from PyPI, so that
  the profile's pip layer finds them installed, as it would in the real image;
- the base's environment (NGC's TORCH_ALLOW_TF32_CUBLAS_OVERRIDE) and the tools it has (g++ for
  inductor, numactl).

The stand-in itself is built with the network (it plays the vendor's part); the kit's image on top
of it is built offline, from the profile's wheelhouse, as a user's air-gapped build would be.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from reprokit.images.pins import find_python
from reprokit.images.wheelhouse import serve_directory
from reprokit.plan import accelerators
from reprokit.plan.accelerators import Base

LOCAL_BASE = "reprokit/base:bookworm"
CACHE = Path.home() / ".cache" / "reprokit" / "standins"


def dockerfile(base: Base) -> str:
    spec = base.standin
    version = spec.python
    env = "".join(f"ENV {key}={json.dumps(value)}\n" for key, value in base.env.items())
    return f"""# A stand-in for {base.reference} ({base.os}, Python {base.python}), made by reprokit's CI.
FROM {LOCAL_BASE}
COPY python/ /usr/local/
RUN ldconfig \\
 && ln -sf python{version} /usr/local/bin/python \\
 && ln -sf python{version} /usr/local/bin/python3 \\
 && python{version} -m ensurepip --default-pip >/dev/null
RUN apt-get update -qq \\
 && apt-get install -y -qq --no-install-recommends {" ".join(spec.system_packages)} >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
ARG WHEELHOUSE_URL
RUN python{version} -m pip install --quiet --no-cache-dir --no-index --find-links "$WHEELHOUSE_URL" --trusted-host 127.0.0.1 \\
      {" ".join(spec.packages)}
{env}LABEL io.reprokit.standin-for="{base.reference}"
"""


def tag(base: Base) -> str:
    digest = hashlib.sha256((dockerfile(base) + str(find_python(base.standin.python))).encode()).hexdigest()
    return f"reprokit/standin-{base.name}:{digest[:12]}"


def _context(base: Base) -> io.BytesIO:
    """Dockerfile and the interpreter's prefix as it goes into /usr/local (its site-packages left out:
    the stand-in gets a fresh pip)."""
    prefix = find_python(base.standin.python).resolve().parent.parent
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        text = dockerfile(base).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
        site = f"lib/python{base.standin.python}/site-packages/"
        for part in ("bin", "lib", "include"):
            for path in sorted((prefix / part).rglob("*")):
                relative = path.relative_to(prefix).as_posix()
                if (relative + "/").startswith(site) or "__pycache__" in relative or path.is_dir():
                    continue
                tar.add(path, arcname=f"python/{relative}", recursive=False)
    buffer.seek(0)
    return buffer


def wheels(base: Base) -> Path:
    """The stand-in's framework packages and their dependencies, for its Python (kept until the image is
    built: a build that failed retries from them)."""
    folder = CACHE / f"{base.name}-py{base.standin.python}"
    marker = folder / ".complete"
    wanted = "\n".join(base.standin.packages)
    if marker.exists() and marker.read_text() == wanted:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    # With the stand-in's own interpreter: pip evaluates the dependencies' markers for it.
    subprocess.run(
        [str(find_python(base.standin.python)), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--dest", str(folder), "--only-binary=:all:", *base.standin.packages],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    marker.write_text(wanted)
    return folder


def build(base: Base, client) -> str:
    """The stand-in image of `base` (built once; its tag names its content); a stand-in `of` another
    base is that base's, the same image."""
    if base.standin is not None and base.standin.of is not None:
        return build(accelerators.bases()[base.standin.of], client)
    name = tag(base)
    try:
        client.images.get(name)
        return name
    except Exception:
        pass
    folder = wheels(base)
    with serve_directory(folder, port=0) as url:
        stream = client.api.build(
            fileobj=_context(base), custom_context=True, tag=name, buildargs={"WHEELHOUSE_URL": url},
            network_mode="host", rm=True, forcerm=True, decode=True, pull=False,
        )  # fmt: skip
        log = []
        for chunk in stream:
            if "error" in chunk:
                raise RuntimeError(f"stand-in {name}: {chunk['error']} (last lines: {log[-5:]})")
            log.append(chunk.get("stream", "").strip())
    # Gigabytes that the image now holds, installed: CI's disk is shared, and a missing image downloads them again.
    shutil.rmtree(folder, ignore_errors=True)
    return name


def main() -> int:
    """Build every stand-in base the accelerator folders name (CI's service does, as it makes the local
    base: the stand-in plays the vendor's registry, not a test); one line per base, with its time."""
    from reprokit.images.engine import client

    engine = client(timeout=1800)
    for base in accelerators.bases().values():
        if base.standin is None or base.standin.of is not None:
            continue
        started = time.monotonic()
        name = build(base, engine)
        print(
            f"[standins] {name}, the stand-in for {base.image}:{base.tag}: {time.monotonic() - started:.0f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
